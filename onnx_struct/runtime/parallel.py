"""Block-range parallel decode: a big value of a registered block format, decoded in cache-sized
row ranges on every core.

onnxruntime runs several of a block decoder's heaviest steps on one thread (docs/benchmarks.md),
so :func:`decode_block_ranges` decodes ranges of about :data:`RANGE_ELEMENTS` rows in
single-threaded sessions on :func:`thread_count` threads, each writing its rows of one output
array from :mod:`onnx_struct.payload.buffer_pool`.

Rule: a decoder is split only when it is byte-identical to what the registry builds for its
registered format (``block_ranges`` set), found by the decoder's exact (domain, name) at the
shape of its final Reshape; anything else (an edited or foreign decoder, a small value, sub-byte
leaves, ``runtime="reference"``) runs whole. The split changes no bit of the result.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import math
import os
import threading
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from onnx_struct import (
    formats,  # the registry loads its family modules on first use
    limits,
)
from onnx_struct.formats.recognize import final_shape, registered_decoder, registry_decoder
from onnx_struct.functions.models import tensor_type
from onnx_struct.payload import buffer_pool
from onnx_struct.runtime import runners
from onnx_struct.runtime.feeds import Feed
from onnx_struct.schema.model import StructTypeProto

# Values with fewer logical elements decode whole: below this the threads' start-up and the
# second session's bookkeeping cost more than the split saves.
MIN_ELEMENTS = 1 << 20
# Logical elements per range, about. Smaller ranges keep a range's intermediates in cache
# between the decoder's steps; each range also costs one onnxruntime run. 2^20 was the fastest
# or tied among the sizes tried (docs/benchmarks.md, "figures behind design choices").
RANGE_ELEMENTS = 1 << 20

_helpers: concurrent.futures.ThreadPoolExecutor | None = None
_helpers_lock = threading.Lock()


def _forget_helpers() -> None:
    """In a forked child the parent's helper threads do not exist: start new ones on demand."""
    global _helpers, _helpers_lock
    _helpers, _helpers_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def thread_count(wanted: int) -> int:
    """Threads a big decode runs on: ``wanted`` (:data:`runners.INTRA_OP_THREADS`) when set, else
    the cores this process may run on (at most :data:`limits.MAX_DECODE_THREADS`)."""
    if not wanted:
        wanted = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(wanted, limits.MAX_DECODE_THREADS))


def decode_block_ranges(
    declaration: StructTypeProto,
    decoder: onnx.FunctionProto,
    where: str,
    feeds: Mapping,
    constants: Sequence[onnx.TensorProto],
) -> np.ndarray | None:
    """The decoded value, computed over block ranges in parallel; None when the value does not
    qualify (then the caller runs the decoder whole).

    ``feeds`` are :class:`~onnx_struct.runtime.feeds.Feed` objects. The thread setting is read
    from :data:`runners.INTRA_OP_THREADS` at call time, and the sessions come from runners' cache.
    """
    threads = thread_count(runners.INTRA_OP_THREADS)
    blocks = {feed.shape[0] if feed.array is not None and feed.shape else None for feed in feeds.values()}
    if threads < 2 or len(blocks) != 1 or None in blocks:
        return None  # one thread; packed (sub-byte) leaves; leaves not laid out per block
    recognised = _registered_format(declaration, decoder, blocks.pop())
    if recognised is None:
        return None
    fmt, shape = recognised
    ranges = _row_ranges(shape, fmt.block_size, max(threads, -(-math.prod(shape) // RANGE_ELEMENTS)))
    if len(ranges) < 2:
        return None
    jobs = []
    by_shape = {}  # part shape -> (runner, its output shape): ranges share one or two shapes
    for part_shape, first_block, end_block in ranges:
        part_feeds = {
            name: Feed(
                feed.elem_type, (end_block - first_block, *feed.shape[1:]), array=feed.array[first_block:end_block]
            )
            for name, feed in feeds.items()
        }
        if part_shape not in by_shape:
            inputs = [(name, tensor_type(f.elem_type, f.shape)) for name, f in part_feeds.items()]
            runner = runners.cached_runner(
                registry_decoder(fmt.name, part_shape),
                where,
                inputs,
                constants,
                "onnxruntime",
                threads=1,
                fallback=False,
            )
            output_shape = runner.output_shape()
            if output_shape is None or math.prod(output_shape) != math.prod(part_shape):
                return None  # onnxruntime cannot run it (the whole decode falls back), or a run-time shape
            by_shape[part_shape] = runner, output_shape
        runner, output_shape = by_shape[part_shape]
        jobs.append((runner, part_feeds, output_shape, first_block * fmt.block_size))
    dtype = jobs[0][0].output_dtype()
    if dtype is None:
        return None
    out = buffer_pool.empty(shape, dtype)
    _run_all(jobs, out.reshape(-1), min(threads, len(jobs)))
    return out


def _run_all(jobs: list, flat_out: np.ndarray, threads: int) -> None:
    """Run every job on ``threads`` threads (this one included), each taking the next job when it
    finishes one; after all threads stop, raises the first error any job raised."""
    pending = iter(jobs)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                job = next(pending, None)
            if job is None:
                return
            runner, feeds, shape, start = job
            try:
                runner.run_into(feeds, flat_out[start : start + math.prod(shape)].reshape(shape))
            except BaseException as error:  # handed to the calling thread below
                errors.append(error)

    helpers = []
    try:
        for _ in range(threads - 1):
            helpers.append(_executor().submit(work))
    except RuntimeError:  # the interpreter is shutting down: no new threads, this one does the rest
        pass
    work()
    for helper in helpers:
        helper.result()
    if errors:
        raise errors[0]


def _registered_format(declaration: StructTypeProto, decoder: onnx.FunctionProto, n_blocks: int):
    """(format, logical shape) when ``decoder`` is exactly the registry's decoder of a block-wise
    format for a shape of the ``n_blocks`` blocks the leaves hold; else None. Nothing is built for
    a shape the payload does not have."""
    if declaration.WhichOneof("kind") != "array":
        return None
    shape = final_shape(decoder)
    fmt = formats.format_of_decoder(decoder.domain, decoder.name)
    if shape is None or fmt is None or not fmt.block_ranges:
        return None
    count = math.prod(shape)
    if count < MIN_ELEMENTS or shape[-1] % fmt.block_size or count // fmt.block_size != n_blocks:
        return None  # checked before the registry builds a decoder for the shape
    return registered_decoder(decoder)


def _row_ranges(shape: tuple[int, ...], block_size: int, count: int) -> list[tuple[tuple[int, ...], int, int]]:
    """Up to ``count`` (part shape, first block, end block) splitting ``shape`` along its first
    axis (a 1-D shape along its blocks), in order, none empty."""
    if len(shape) == 1:
        units, blocks_per_unit = shape[0] // block_size, 1
    else:
        units, blocks_per_unit = shape[0], math.prod(shape[1:]) // block_size
    bounds = [units * k // count for k in range(count + 1)]
    ranges = []
    for start, end in itertools.pairwise(bounds):
        if end > start:
            part = (end - start) * block_size if len(shape) == 1 else end - start
            ranges.append(((part, *shape[1:]), start * blocks_per_unit, end * blocks_per_unit))
    return ranges


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _helpers
    with _helpers_lock:
        if _helpers is None:
            _helpers = concurrent.futures.ThreadPoolExecutor(
                limits.MAX_DECODE_THREADS - 1, thread_name_prefix="onnx_struct-decode"
            )
        return _helpers
