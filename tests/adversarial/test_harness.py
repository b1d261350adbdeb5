"""The harness itself can fail: a child that hangs, allocates or escapes is caught."""

from __future__ import annotations

import pytest

from adversarial.bounded import run_bounded

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow


def test_refusal_is_reported():
    out = run_bounded("raise S.ValidationError('struct_types[0]', 'bad')")
    out.assert_validation_error("struct_types[0]", contains="bad")


def test_escape_is_caught():
    out = run_bounded("raise IndexError('x')")
    with pytest.raises(AssertionError, match="escaped as builtins.IndexError"):
        out.assert_validation_error()


def test_cpu_limit_kills_a_hang():
    with pytest.raises(AssertionError, match="the child died"):
        run_bounded("while True: pass", cpu_seconds=1)


def test_memory_bound_is_asserted():
    with pytest.raises(AssertionError, match="peak RSS|the child died"):
        run_bounded("b = bytearray(400 << 20); b[::4096] = b'x' * len(b[::4096])", memory_mib=100)
