"""onnxruntime's intra-op thread count, checked before a session starts its pool.

Rule: a count is None (onnxruntime's default) or an integer from 1 to ``MAX_INTRA_OP_THREADS``
whose thread stacks fit in half the process's address-space limit (RLIMIT_AS): onnxruntime starts
the whole pool when the session is created, and a thread it cannot create left it waiting forever
(1,000 threads under a 4 GB limit hung) instead of failing.
"""

from __future__ import annotations

import numpy as np

from onnx_struct import limits
from onnx_struct.errors import ValidationError

THREAD_STACK_DEFAULT = 8 << 20  # glibc's thread stack without a RLIMIT_STACK


def checked_threads(threads: object, where: str) -> int | None:
    """``threads`` as an int (None stays None), or a ValidationError (``bad_argument``) at ``where``."""
    if threads is None:
        return None
    if (
        isinstance(threads, bool)
        or not isinstance(threads, (int, np.integer))
        or not 1 <= threads <= limits.MAX_INTRA_OP_THREADS  # onnxruntime starts the whole pool at once
    ):
        raise ValidationError(
            where,
            f"{threads!r} is not None or an integer from 1 to {limits.MAX_INTRA_OP_THREADS}",
            code="bad_argument",
        )
    _check_thread_room(int(threads), where)
    return int(threads)


def _check_thread_room(threads: int, where: str) -> None:
    try:
        import resource  # noqa: PLC0415 - POSIX only
    except ImportError:  # pragma: no cover - Windows: no such limit
        return
    space = resource.getrlimit(resource.RLIMIT_AS)[0]
    if space == resource.RLIM_INFINITY:
        return
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    if stack in (resource.RLIM_INFINITY, 0):
        stack = THREAD_STACK_DEFAULT
    # Half the address space for the stacks: the weights, onnxruntime's arenas and Python need the rest.
    if threads * stack > space // 2:
        raise ValidationError(
            where,
            f"{threads} threads of {stack >> 20} MiB stacks do not fit in half the process's "
            f"{space >> 20} MiB address-space limit (RLIMIT_AS)",
            code="bad_argument",
        )
