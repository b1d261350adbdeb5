"""The one diagnostic type: a path-bearing, attribute-carrying ValidationError.

It subclasses ``onnx.checker.ValidationError`` so converters that already catch onnx's error catch
ours. ``check_model`` raises the first, ``validate`` returns all of them, the CLI prints them (or
their ``to_dict()`` with ``--json``).

Where stock onnx raises another class for the same fault (``InferenceError`` from shape
inference, ``ValueError`` for bytes it cannot parse, ``onnx.checker.ValidationError`` where we
would raise ``FileNotFoundError``), the error is both: a subclass of ValidationError *and* of
that class, as Kaitai's ``EndOfStreamError(KaitaiStructError, EOFError)``, so that a caller's
``except`` clause written for stock onnx keeps catching it (docs/errors.md, "Exception classes").
"""

from __future__ import annotations

import errno
import os
from typing import Any

import onnx.checker
import onnx.shape_inference


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


class NotRegularFileError(ValidationError, OSError, RuntimeError):
    """A path named by the caller is a FIFO, a device or a directory: refused unopened. Also an
    ``OSError``, as a missing file is, so the CLI reports it as an I/O error (exit 2), and a
    ``RuntimeError``, which stock ``check_model`` raises for a directory."""

    DEFAULT_CODE = "not_regular_file"


class ModelFileNotFoundError(ValidationError, FileNotFoundError):
    """A model file named by the caller does not exist. Stock ``check_model`` raises
    ``onnx.checker.ValidationError`` there, ``open`` a ``FileNotFoundError``: this is both (with
    ``errno`` ENOENT and ``filename``, the detail ``file``), and the CLI reports it as an I/O
    error (exit 2)."""

    DEFAULT_CODE = "file_not_found"

    def __init__(self, path: str, reason: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(path, reason, code=code, **details)
        self.errno, self.strerror, self.filename = errno.ENOENT, os.strerror(errno.ENOENT), details.get("file")


class InferenceError(ValidationError, onnx.shape_inference.InferenceError):
    """onnx's shape inference rejects the model: stock ``infer_shapes`` and
    ``check_model(full_check=True)`` raise ``onnx.shape_inference.InferenceError`` there."""

    DEFAULT_CODE = "onnx_checker"


class ModelValueError(ValidationError, ValueError):
    """Where stock onnx raises ``ValueError``: bytes it cannot parse, a model over protobuf's
    2 GiB given in memory, an element type it does not know."""

    DEFAULT_CODE = "not_parsable"


class ModelRuntimeError(ValidationError, RuntimeError):
    """Where stock onnx raises ``RuntimeError`` (its C++ file system errors, e.g. a name too long)."""

    DEFAULT_CODE = "onnx_checker"


def from_stock(error: Exception, prefix: str = "", text: str | None = None) -> ValidationError:
    """What stock onnx's ``error`` becomes: a ValidationError that is also every class of
    ``error`` a caller of stock onnx can catch (see the classes above); ``prefix`` starts the
    message, followed by stock's message unchanged (or ``text``, e.g. its first line). A
    ValidationError of ours is returned as is.
    """
    if isinstance(error, ValidationError):
        return error
    message = f"{prefix}{error if text is None else text}"
    if isinstance(error, onnx.shape_inference.InferenceError):
        return InferenceError("", message, code="onnx_checker")
    if isinstance(error, onnx.checker.ValidationError):
        return ValidationError("", message, code="onnx_checker")
    if isinstance(error, ValueError):  # UnicodeDecodeError included: a ValueError, not rebuilt as one
        return ModelValueError("", message, code="onnx_checker")
    if isinstance(error, RuntimeError):
        return ModelRuntimeError("", message, code="onnx_checker")
    return ValidationError("", message, code="onnx_checker")
