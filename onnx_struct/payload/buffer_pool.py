"""Recycled output buffers: a big decode result reuses memory that an earlier one gave back.

Fresh pages cost page faults before a byte is written (figures in docs/benchmarks.md), so outputs
onnx_struct allocates itself (:mod:`onnx_struct.runtime.parallel`) come from this pool. Rule: a
buffer returns to the pool only when nothing can read it any more (each array's lease ends its
numpy ``base`` chain); the finalizer never waits for the lock; at most :data:`onnx_struct.limits.MAX_FREE_BUFFER_BYTES` are
kept, least recently returned dropped first; :func:`clear` drops them all.

Notes: docs/modules.md.
"""

from __future__ import annotations

import collections
import math
import os
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from onnx_struct import limits

_returned: collections.deque[np.ndarray] = collections.deque()  # appended by finalizers, lock-free
_free: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()  # id -> buffer, oldest first
_free_bytes = 0
_lock = threading.Lock()


def empty(shape: Sequence[int], dtype) -> np.ndarray:
    """An uninitialized C-contiguous array, backed by a recycled buffer of the same size when one is free."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    storage = _take(nbytes)
    if storage is None:
        storage = np.empty(nbytes, dtype=np.uint8)
    lease = _Lease(storage, shape, dtype)
    finalizer = weakref.finalize(lease, _give_back, storage)
    finalizer.atexit = False  # nothing to give back at interpreter exit
    return np.asarray(lease)


class _Lease:
    """One use of a buffer: the object numpy keeps as the array's ``base`` (it reads the memory
    through ``__array_interface__``), so the lease lives exactly as long as some array can reach
    the memory. (A ``memoryview`` would not do: numpy re-exports it and drops the original.)"""

    __slots__ = ("__array_interface__", "__weakref__", "storage")

    def __init__(self, storage: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.storage = storage
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "descr": dtype.descr,
            "data": (storage.ctypes.data, False),  # writable
            "version": 3,
        }


def _give_back(storage: np.ndarray) -> None:
    """The finalizer: queue the buffer, then file it (trimming to the budget) unless the lock is
    taken. It may run inside the garbage collector while this very thread holds the lock, so it
    never waits for it; a buffer left queued is filed by the next request or release."""
    _returned.append(storage)
    if _lock.acquire(blocking=False):
        try:
            _file_returned()
        finally:
            _lock.release()


def _take(nbytes: int) -> np.ndarray | None:
    global _free_bytes
    with _lock:
        _file_returned()
        for key, storage in reversed(_free.items()):  # the most recently returned first (warm)
            if storage.nbytes == nbytes:
                del _free[key]
                _free_bytes -= nbytes
                return storage
    return None


def _file_returned() -> None:
    """Move returned buffers into the free list, then trim it to the budget (caller holds the lock)."""
    global _free_bytes
    while _returned:
        storage = _returned.popleft()
        _free[id(storage)] = storage
        _free_bytes += storage.nbytes
    while _free_bytes > limits.MAX_FREE_BUFFER_BYTES:
        _, storage = _free.popitem(last=False)
        _free_bytes -= storage.nbytes


def free_bytes() -> int:
    """Bytes held in free buffers (after filing the ones returned since the last request)."""
    with _lock:
        _file_returned()
        return _free_bytes


def _new_lock_after_fork() -> None:
    """A forked child gets the lock in whatever state a parent thread left it: start unlocked."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


def clear() -> None:
    """Drop every free buffer (arrays still in use are not affected)."""
    global _free_bytes
    with _lock:
        _returned.clear()
        _free.clear()
        _free_bytes = 0
