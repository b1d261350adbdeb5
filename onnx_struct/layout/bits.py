"""The bit kernels: one place where affine bit layouts become numpy reads and writes.

A leaf's element ``idx`` starts at bit ``bit_offset + sum(idx * strides)``, ``bit_width`` bits,
LSB-first (the proposal's physical rules). :func:`read_leaf` and
:func:`onnx_struct.layout.bit_writes.write_leaf` take one of four exact routes: a zero-copy strided
view, sub-byte rows (:func:`unpack_sub_byte`, :func:`pack_sub_byte`), phase columns, or a chunked
gather / scatter.

Rules: no route loops per element or per block, and every read stays inside the payload.

Notes: docs/modules.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from onnx_struct.errors import ValidationError
from onnx_struct.layout.dtypes import uint_for_bits
from onnx_struct.layout.leaves import Leaf, read_constant

# Elements handled per vectorized step of the general route and of nibble (un)packing: big enough
# to amortize numpy's per-call cost, small enough that temporaries stay in the CPU cache.
CHUNK = 1 << 16

__all__ = [
    "CHUNK",
    "bit_positions",
    "byte_strided",
    "chunks",
    "is_zero_copy",
    "merged_dims",
    "pack_sub_byte",
    "phase_columns",
    "read_leaf",
    "uint_for_bits",
    "unpack_sub_byte",
]


# ---------------------------------------------------------------------- layout arithmetic
def byte_strided(buffer, shape, dtype, bit_offset: int, bit_strides) -> np.ndarray:
    """The ndarray over ``buffer`` whose element ``idx`` starts at bit
    ``bit_offset + sum(idx * bit_strides)`` (all multiples of 8): the one place where a bit layout
    becomes numpy byte strides, for reading (view), writing (pack) and feeding (runtime)."""
    return np.ndarray(
        shape, dtype=dtype, buffer=buffer, offset=bit_offset // 8, strides=tuple(s // 8 for s in bit_strides)
    )


def is_zero_copy(leaf: Leaf) -> bool:
    """True when the leaf is a plain strided view of bytes (no bit shifting needed)."""
    return (
        leaf.kind != "constant"
        and leaf.bit_offset % 8 == 0
        and all(s % 8 == 0 for s in leaf.strides)
        and leaf.bit_width == leaf.dtype.itemsize * 8
    )


def _as_dtype(raw: np.ndarray, leaf: Leaf) -> np.ndarray:
    """Raw unsigned bit patterns -> the leaf's dtype. ml_dtypes keeps a sub-byte value as the raw
    low bits of one byte (INT4 -1 is 0x0F), so a uint8 view is exact for every sub-byte type."""
    if leaf.kind == "tensor":
        return raw.astype(np.uint8, copy=False).view(leaf.dtype)
    return raw.astype(leaf.dtype, copy=False)


def merged_dims(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Merge adjacent dimensions that are contiguous in bits (and drop size-1 dimensions), so a
    fully contiguous leaf becomes one dimension. Element order is unchanged."""
    out_shape: list[int] = []
    out_strides: list[int] = []
    for size, stride in zip(shape, strides, strict=True):
        if size == 1:
            continue
        if out_shape and out_strides[-1] == stride * size:
            out_shape[-1] *= size
            out_strides[-1] = stride
        else:
            out_shape.append(size)
            out_strides.append(stride)
    return tuple(out_shape), tuple(out_strides)


def bit_positions(
    bit_offset: int, shape: tuple[int, ...], strides: tuple[int, ...], start: int, stop: int
) -> np.ndarray:
    """Start bits (int64) of the elements with C-order flat indices ``start:stop``."""
    flat = np.arange(start, stop, dtype=np.int64)
    positions = np.full(stop - start, bit_offset, dtype=np.int64)
    suffix = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        index = flat // suffix % size if suffix > 1 else flat % size
        positions += index * stride
        suffix *= size
    return positions


def chunks(count: int, size: int = CHUNK) -> Iterator[tuple[int, int]]:
    for start in range(0, count, size):
        yield start, min(start + size, count)


def phase_columns(bit_offset: int, shape: tuple[int, ...], strides: tuple[int, ...]):
    """Split an affine layout into at most 8 sub-layouts ("columns") whose elements all start at
    the same bit within a byte, so each is a strided byte view plus one scalar shift.

    Along the last dimension element ``i`` starts at phase ``(offset + i * stride) % 8``, which
    repeats every ``8 / gcd(stride, 8)`` elements; column ``k`` takes elements ``k::period``.
    Returns ``[(selector, bit_offset, shape, byte_strides)]``, or None when an outer stride is not
    a whole number of bytes (those layouts use the gather route).
    """
    if not shape:
        return [((), bit_offset, (), ())]
    if any(s % 8 for s in strides[:-1]):
        return None
    stride = strides[-1]
    period = 8 // math.gcd(stride, 8)
    outer = tuple(s // 8 for s in strides[:-1])
    columns = []
    for k in range(min(period, shape[-1])):
        count = len(range(k, shape[-1], period))
        selector = (..., slice(k, None, period))
        columns.append((selector, bit_offset + k * stride, shape[:-1] + (count,), outer + (period * stride // 8,)))
    return columns


# ---------------------------------------------------------------------- reading
def read_leaf(data: np.ndarray, leaf: Leaf) -> np.ndarray:
    """The elements of ``leaf`` in the uint8 payload ``data`` as an array of ``leaf.dtype``."""
    if leaf.kind == "constant":
        array = read_constant(leaf.constant, leaf.source)  # dims verified against the data first
        array.flags.writeable = False
        return array
    width = leaf.bit_width
    if leaf.count == 0:
        # No payload bounds an empty leaf's other dimensions: a uint64 one can exceed numpy's.
        try:
            return np.zeros(leaf.shape, dtype=leaf.dtype)
        except ValueError:
            raise ValidationError(
                leaf.source, f"empty leaf of shape {leaf.shape} has no numpy shape", code="limit_exceeded"
            ) from None
    if is_zero_copy(leaf):
        array = byte_strided(data, leaf.shape, leaf.dtype.newbyteorder("<"), leaf.bit_offset, leaf.strides)
        array.flags.writeable = False
        return array
    shape, strides = merged_dims(leaf.shape, leaf.strides)
    if width in (1, 2, 4) and strides and strides[-1] == width and all(s % 8 == 0 for s in strides[:-1]):
        if (leaf.bit_offset % 8) % width == 0:
            raw = _sub_byte_rows(data, leaf.bit_offset, shape, strides, width)
            return _as_dtype(raw, leaf).reshape(leaf.shape)
    columns = phase_columns(leaf.bit_offset, shape, strides)
    if columns is not None and all(offset % 8 + width <= 64 for _, offset, _, _ in columns):
        raw = np.empty(shape, dtype=uint_for_bits(width))
        for selector, offset, column_shape, byte_strides in columns:
            raw[selector] = _read_constant_phase(data, offset, column_shape, byte_strides, width)
        return (raw.view(leaf.dtype) if leaf.kind == "tensor" and width % 8 == 0 else _as_dtype(raw, leaf)).reshape(
            leaf.shape
        )
    if leaf.kind == "tensor" and width % 8 == 0:
        raw = _gather_bytes(data, leaf.bit_offset, shape, strides, width // 8)
        return raw.view(leaf.dtype.newbyteorder("<")).reshape(leaf.shape)
    raw = _gather_bits(data, leaf.bit_offset, shape, strides, width)
    return _as_dtype(raw, leaf).reshape(leaf.shape)


def _read_constant_phase(data: np.ndarray, bit_offset: int, shape, byte_strides, width: int) -> np.ndarray:
    """Elements that all start at phase ``bit_offset % 8`` (``phase + width <= 64``): one unaligned
    little-endian load per element (a strided view, no copy), then one shift and one mask. Elements
    whose wide load would pass the payload's end are assembled from the bytes they span instead."""
    phase, start = bit_offset % 8, bit_offset // 8
    span = (phase + width + 7) // 8  # bytes an element touches: all inside the payload
    load = uint_for_bits(8 * span)
    result = uint_for_bits(width)
    mask = load.type((1 << width) - 1)
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=result)
    last_start = start + sum((n - 1) * b for n, b in zip(shape, byte_strides, strict=True))
    fits = last_start + load.itemsize <= data.size

    def wide(count_shape, first):
        words = np.ndarray(count_shape, dtype=load, buffer=data, offset=first, strides=byte_strides)
        bits = words >> load.type(phase)
        bits &= mask
        return bits.astype(result, copy=False)

    def exact(count_shape, first):
        spanned = np.ndarray(
            count_shape + (span,), dtype=np.uint8, buffer=data, offset=first, strides=byte_strides + (1,)
        )
        bits = spanned[..., 0].astype(load)
        for j in range(1, span):  # per byte of an element, not per element
            bits |= spanned[..., j].astype(load) << load.type(8 * j)
        bits >>= load.type(phase)
        bits &= mask
        return bits.astype(result, copy=False)

    if fits:
        return wide(shape, start)
    if len(shape) == 1:  # only the last few elements need the exact route
        head = max(0, min(shape[0], (data.size - load.itemsize - start) // byte_strides[0] + 1))
        return np.concatenate([wide((head,), start), exact((shape[0] - head,), start + head * byte_strides[0])])
    return exact(shape, start)


def _gather_bits(data: np.ndarray, bit_offset: int, shape, strides, width: int) -> np.ndarray:
    """Elements of ``width`` (1-64) bits at any positions, as uint64 bit patterns."""
    count = math.prod(shape)
    out = np.empty(count, dtype=np.uint64)
    last = data.size - 1
    mask = np.uint64((1 << width) - 1)
    # An element starting at bit s (0-7) of its first byte spans ceil((s + width) / 8) bytes; fetch
    # the worst case; bytes beyond the element are clamped to the payload and masked away.
    span = min((7 + width + 7) // 8, 8)
    for start, stop in chunks(count):
        positions = bit_positions(bit_offset, shape, strides, start, stop)
        first = positions >> 3
        shift = (positions & 7).astype(np.uint64)
        acc = data[first].astype(np.uint64)
        for j in range(1, span):
            acc |= data[np.minimum(first + j, last)].astype(np.uint64) << np.uint64(8 * j)
        acc >>= shift
        if width > 57:  # may need a ninth byte: its low bits land above bit 64 - shift
            ninth = data[np.minimum(first + 8, last)].astype(np.uint64)
            acc |= np.where(shift == 0, np.uint64(0), ninth << (np.uint64(64) - shift))
        out[start:stop] = acc & mask
    return out


def _gather_bytes(data: np.ndarray, bit_offset: int, shape, strides, nbytes: int) -> np.ndarray:
    """Whole-byte-width elements at unaligned bit positions, as ``(count, nbytes)`` uint8 rows in
    little-endian order (any width: FLOAT16 at bit 4, COMPLEX128 at bit 3)."""
    count = math.prod(shape)
    out = np.empty((count, nbytes), dtype=np.uint8)
    last = data.size - 1
    byte_steps = np.arange(nbytes, dtype=np.int64)
    for start, stop in chunks(count, max(1, CHUNK // nbytes)):
        positions = bit_positions(bit_offset, shape, strides, start, stop)
        first = (positions >> 3)[:, None] + byte_steps
        shift = (positions & 7).astype(np.uint16)[:, None]
        low = data[first].astype(np.uint16)
        high = data[np.minimum(first + 1, last)].astype(np.uint16)
        out[start:stop] = ((low | (high << np.uint16(8))) >> shift).astype(np.uint8)
    return out


def _sub_byte_rows(data: np.ndarray, bit_offset: int, shape, strides, width: int) -> np.ndarray:
    """1/2/4-bit elements contiguous along the last dimension, every row starting at the same
    phase within a byte: unpack the rows' bytes and cut each row to its elements."""
    per_byte = 8 // width
    skip = (bit_offset % 8) // width  # elements of the first byte that precede the leaf
    inner = shape[-1]
    row_bytes = -(-(skip + inner) * width // 8)
    rows = byte_strided(data, shape[:-1] + (row_bytes,), np.uint8, bit_offset, strides[:-1] + (8,))
    flat = np.ascontiguousarray(rows).reshape(-1)  # a view when the rows are contiguous
    unpacked = unpack_sub_byte(flat, width).reshape(shape[:-1] + (row_bytes * per_byte,))
    if skip == 0 and row_bytes * per_byte == inner:
        return unpacked
    return np.ascontiguousarray(unpacked[..., skip : skip + inner])


# ---------------------------------------------------------------------- sub-byte packing
def unpack_sub_byte(packed: np.ndarray, width: int, count: int | None = None) -> np.ndarray:
    """Split each byte of ``packed`` into ``8 // width`` elements (1, 2 or 4 bits), LSB first, as
    uint8 values (the first ``count`` when given): a payload's sub-byte rows, ONNX packed tensors."""
    if width == 1:
        out = np.unpackbits(packed, bitorder="little")
    elif width == 4:
        # byte hi:lo -> uint16 (lo | hi << 8) via (b | b << 4) & 0x0F0F, chunked to stay in cache.
        # Widening once with copyto, then same-type ufuncs, is faster than ufuncs that cast uint8
        # operands themselves (numpy buffers those casts).
        wide_out = np.empty(packed.size, dtype=np.uint16)
        scratch = np.empty(min(CHUNK, packed.size), dtype=np.uint16)
        for start, stop in chunks(packed.size):
            wide, dest = scratch[: stop - start], wide_out[start:stop]
            np.copyto(wide, packed[start:stop], casting="unsafe")
            np.multiply(wide, 16, out=dest)  # b << 4, no overflow in 16 bits
            np.bitwise_or(dest, wide, out=dest)
            np.bitwise_and(dest, 0x0F0F, out=dest)
        out = wide_out.view(np.uint8)
    else:
        per_byte = 8 // width
        mask = np.uint8((1 << width) - 1)
        grouped = np.empty((packed.size, per_byte), dtype=np.uint8)
        for k in range(per_byte):  # per position within a byte, not per element
            np.bitwise_and(packed >> np.uint8(k * width), mask, out=grouped[:, k])
        out = grouped.reshape(-1)
    return out if count is None else out[:count]


def pack_sub_byte(values: np.ndarray, width: int) -> np.ndarray:
    """Inverse of :func:`unpack_sub_byte`: ``8 // width`` elements per byte, LSB first.

    ``values`` is any one-byte array (uint8 patterns, or ml_dtypes sub-byte values, which keep
    their bits in the low bits of a byte); only the low ``width`` bits of each are kept, and a
    last partial byte is padded with zero bits (ONNX's packed form of an odd-length INT4 tensor).
    """
    per_byte = 8 // width
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    mask = np.uint8((1 << width) - 1)
    if width == 1:
        return np.packbits(raw & mask, bitorder="little")  # packbits pads the last byte itself
    # Mask and pad in the one pass that copies the values (the pack below never reads them again).
    padded = np.zeros(-(-raw.size // per_byte) * per_byte, dtype=np.uint8)
    np.bitwise_and(raw, mask, out=padded[: raw.size])
    if width == 4:  # pairs (lo, hi) as one little-endian uint16: lo | hi << 8 -> lo | hi << 4
        pairs = padded.view("<u2")
        packed = np.empty(pairs.size, dtype=np.uint8)
        for start, stop in chunks(pairs.size):
            part = pairs[start:stop]
            packed[start:stop] = (part | (part >> 4)) & 0xFF
        return packed
    grouped = padded.reshape(-1, per_byte)
    packed = grouped[:, 0].copy()
    for k in range(1, per_byte):  # per position within a byte, not per element
        packed |= grouped[:, k] << np.uint8(k * width)
    return packed
