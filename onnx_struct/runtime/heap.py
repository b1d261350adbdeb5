"""Giving freed memory back to the system before onnxruntime allocates its own.

glibc serves a large allocation with its own mapping, returned on free, until one such mapping of
up to 32 MiB is freed: it then raises its threshold to that size and serves later ones (the
repacked weights) from its heap, which it keeps after they are freed (docs/execution.md, "Memory").
``malloc_trim`` returns the heap's free pages; elsewhere (other C libraries, other systems) this
does nothing.
"""

from __future__ import annotations

import ctypes
import functools

from onnx_struct.payload import buffer_pool


@functools.cache
def _malloc_trim():
    # The process's own symbols (the C library is loaded): ctypes.util.find_library would run
    # ldconfig in a subprocess to find it.
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc; no dlopen(NULL) (Windows)
        return None


def release_free_memory() -> None:
    """Drop the recycled output buffers nobody uses (payload/buffer_pool.py: a repack leaves a
    few MiB there) and return the C heap's free pages to the system (glibc; elsewhere only the
    buffers go)."""
    buffer_pool.clear()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
