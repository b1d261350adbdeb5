"""The one diagnostic type: a path-bearing, attribute-carrying ValidationError.

It subclasses ``onnx.checker.ValidationError`` so converters that already catch onnx's error catch
ours. ``check_model`` raises the first, ``validate`` returns all of them, the CLI prints them (or
their ``to_dict()`` with ``--json``).
"""

from __future__ import annotations

from typing import Any

import onnx.checker


class ValidationError(onnx.checker.ValidationError):
    """A rule of the proposal (or of this package) is violated at ``path``.

    Attributes:
        path: where, e.g. ``struct_types[3].structure.field[1] ('scale')``; "" for the whole model.
        reason: what is wrong, without the path.
        code: what kind of fault, a stable snake_case string for tools (``size_mismatch``,
            ``duplicate_name``, ...); every code and its ``details`` keys are listed in
            docs/errors.md. Subclasses may set their own default (``DEFAULT_CODE``).
        details: structured facts (``expected``, ``actual``, ...) for tools; the keys of each code
            are fixed (docs/errors.md).
    """

    DEFAULT_CODE = "invalid"

    def __init__(self, path: str, reason: str, *, code: str | None = None, **details: Any) -> None:
        self.path = path
        self.reason = reason
        self.code = code or self.DEFAULT_CODE
        self.details = details
        super().__init__(f"{path}: {reason}" if path else reason)

    def __str__(self) -> str:  # KeyError's str() would add quotes; keep one message format
        return f"{self.path}: {self.reason}" if self.path else self.reason

    def __reduce__(self):  # picklable despite the keyword-only details
        return (_rebuild, (type(self), self.path, self.reason, self.details, self.code))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"path", "reason", "message", "code", "details", **details}``
        (the details also flattened at the top level, as before ``details`` existed; only
        JSON scalars are kept)."""
        scalars = {k: v for k, v in self.details.items() if isinstance(v, (int, str, float, bool, type(None)))}
        out: dict[str, Any] = {"path": self.path, "reason": self.reason, "message": str(self)}
        out.update(scalars)
        out.update({"code": self.code, "details": scalars})  # after: a detail never hides them
        return out


def limit_exceeded(path: str, reason: str, actual: int, limit: int) -> ValidationError:
    """The one form of a refusal by a documented limit (onnx_struct/limits.py, docs/security.md)."""
    return ValidationError(path, reason, code="limit_exceeded", actual=actual, limit=limit)


def _rebuild(
    cls: type[ValidationError], path: str, reason: str, details: dict, code: str | None = None
) -> ValidationError:
    return cls(path, reason, code=code, **details)


class LeafNotFoundError(ValidationError, KeyError):
    """A view was asked for a leaf path it does not have (also a ``KeyError``)."""

    DEFAULT_CODE = "unknown_leaf"


class NotRegularFileError(ValidationError, OSError):
    """A path named by the caller is a FIFO, a device or a directory: refused unopened. Also an
    ``OSError``, as a missing file is, so the CLI reports it as an I/O error (exit 2)."""

    DEFAULT_CODE = "not_regular_file"
