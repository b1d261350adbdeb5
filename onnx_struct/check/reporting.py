"""The checker's collecting of diagnostics, shared by its rule sets: a rule reports a
ValidationError and the check goes on, so ``validate`` returns every finding."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from onnx_struct.errors import ValidationError

# Test-only: codes whose diagnostics the checker drops, as if their rule were not written. The
# conformance suite's mutation check (tests/test_conformance_mutation.py) switches off one at a time.
DISABLED_CODES: set[str] = set()


@contextlib.contextmanager
def rule_disabled(code: str) -> Iterator[None]:
    """Within the block, the checker reports nothing of ``code`` (a test-only switch)."""
    DISABLED_CODES.add(code)
    try:
        yield
    finally:
        DISABLED_CODES.discard(code)


# Problems of a file, not of the value naming it: the reason names the file, so one file's problem
# is one diagnostic (at the first reference), however many values point into it.
FILE_CODES = frozenset({
    "file_outside_model_dir", "hard_link", "file_unreadable", "file_changed", "not_regular_file", "file_not_found",
})  # fmt: skip


class FirstFound(Exception):
    """Ends a check that wants only its first diagnostic (``Reporter.first_only``)."""


class Reporter:
    """Collects diagnostics: each distinct message once, in the order found, and each problem of
    a referenced file once (``FILE_CODES``: the same reason at another path is the same cause). With ``first_only``
    the first one ends the check (check_model raises only it; the rules after it would cost time
    on a hostile model and change nothing)."""

    def __init__(self) -> None:
        self.diagnostics: list[ValidationError] = []
        self._messages: set[str] = set()
        self.first_only = False

    def report(self, error: ValidationError) -> None:
        if error.code in DISABLED_CODES:
            return
        key = f"{error.code}: {error.reason}" if getattr(error, "code", None) in FILE_CODES else str(error)
        if key not in self._messages:  # one cause reached from several places, once
            self._messages.add(key)
            self.diagnostics.append(error)
            if self.first_only:
                raise FirstFound

    def attempt(self, function, *args):
        try:
            return function(*args)
        except ValidationError as error:
            self.report(error)
        except RecursionError:
            self.report(ValidationError(str(args[-1]), "nesting is too deep", code="nesting_too_deep"))
        return None
