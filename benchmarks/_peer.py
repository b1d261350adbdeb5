"""A peer library timed in a process of its own, in turns with onnx_struct in this one.

Timing gguf-py in onnx_struct's process couples the two through the process's allocator: glibc
raises its mmap threshold to the size of each freed block (up to 32 MB), so whether gguf-py's
temporaries are fresh mappings (a page fault per 4 KiB) or reused heap depends on what onnx_struct
happened to allocate and free before. Measured: gguf-py's Q8_0 dequantize of the same bytes took
53 ms after whole-tensor decodes and 75 ms after block-range decodes in the same process. A
:class:`PeerProcess` runs the peer's calls in a child that runs nothing else; the parent still
alternates them with its own calls, so a load phase of the machine hits both sides alike.
"""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing
import pickle
import time
import warnings
from typing import Any, NamedTuple

import numpy as np

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


class Timing(NamedTuple):
    """Seconds one call took, measured in the peer's process."""

    wall: float
    cpu: float


class PeerProcess:
    """A child process holding named arrays and timing one call of a peer's function on them."""

    def __init__(self, *, reuse_memory: bool = False) -> None:
        """``reuse_memory``: have glibc serve every allocation from its heap and keep freed memory
        (``mallopt``), so the peer's temporaries never fault fresh pages in: the peer at its
        fastest, a setting no user has by default (glibc only)."""
        context = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited heap
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, reuse_memory), daemon=True)
        self._process.start()
        child.close()

    def load(self, key: str, path: str, dtype: str, shape: tuple[int, ...]) -> None:
        """Read ``path`` (raw bytes, as ``ndarray.tofile`` writes them) into the child as ``key``."""
        self._ask(("load", key, path, dtype, shape))

    def time(self, function: str, key: str, *args: Any) -> Timing:
        """Wall and CPU seconds of one call ``module:function(array key, *args)`` in the child;
        an exception it raises is raised here."""
        return Timing(*self._ask(("time", function, key, args)))

    def close(self) -> None:
        try:
            self._conn.send(("stop",))
        except OSError:  # the child is gone already
            pass
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _ask(self, message: tuple) -> Any:
        try:
            self._conn.send(message)
            ok, result = self._conn.recv()
        except (EOFError, OSError):
            raise RuntimeError(f"the peer process died (exit code {self._process.exitcode})") from None
        if not ok:
            raise result
        return result


def _serve(conn, reuse_memory: bool) -> None:
    if reuse_memory:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)  # no allocation below 1 GiB gets its own mapping
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)  # freed heap memory is kept, not returned
    warnings.simplefilter("ignore", RuntimeWarning)  # NaN/inf scales in random blocks
    np.seterr(all="ignore")
    arrays: dict[str, np.ndarray] = {}
    while True:
        message = conn.recv()
        if message[0] == "stop":
            return
        try:
            if message[0] == "load":
                _, key, path, dtype, shape = message
                arrays[key] = np.fromfile(path, dtype=dtype).reshape(shape)
                conn.send((True, None))
            else:
                _, function, key, args = message
                module, name = function.split(":")
                call = getattr(importlib.import_module(module), name)
                wall, cpu = time.perf_counter(), time.process_time()
                call(arrays[key], *args)
                conn.send((True, (time.perf_counter() - wall, time.process_time() - cpu)))
        except BaseException as error:  # sent back and raised in the parent (SystemExit too)
            try:
                pickle.loads(pickle.dumps(error))  # the parent must be able to rebuild it
            except Exception:
                error = RuntimeError(f"{type(error).__name__}: {error}")
            conn.send((False, error))
