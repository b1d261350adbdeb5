"""The write routes of the bit kernels (:mod:`onnx_struct.layout.bits` describes the routes and
holds the layout arithmetic they share with the reads): :func:`write_leaf` ORs a leaf's elements
into a zero-initialized payload by the same route :func:`onnx_struct.layout.bits.read_leaf` reads
them with."""

from __future__ import annotations

import math

import numpy as np

from onnx_struct.layout.bits import (
    CHUNK,
    bit_positions,
    byte_strided,
    chunks,
    is_zero_copy,
    merged_dims,
    pack_sub_byte,
    phase_columns,
)
from onnx_struct.layout.dtypes import uint_for_bits
from onnx_struct.layout.leaves import Leaf


def write_leaf(out: np.ndarray, leaf: Leaf, array: np.ndarray) -> None:
    """Write ``array`` (leaf dtype and shape) into the zero-initialized payload ``out``."""
    width = leaf.bit_width
    if leaf.count == 0:
        return
    if is_zero_copy(leaf):
        byte_strided(out, leaf.shape, leaf.dtype.newbyteorder("<"), leaf.bit_offset, leaf.strides)[...] = array
        return
    shape, strides = merged_dims(leaf.shape, leaf.strides)
    if (
        width in (1, 2, 4)
        and strides
        and strides[-1] == width
        and leaf.bit_offset % 8 == 0
        and (shape[-1] * width) % 8 == 0
        and all(s % 8 == 0 for s in strides[:-1])
    ):
        # Whole rows of sub-byte elements own their bytes: pack them and assign.
        row_bytes = shape[-1] * width // 8
        rows = byte_strided(out, shape[:-1] + (row_bytes,), np.uint8, leaf.bit_offset, strides[:-1] + (8,))
        rows[...] = pack_sub_byte(array, width).reshape(rows.shape)  # masks as it copies
        return
    columns = phase_columns(leaf.bit_offset, shape, strides)
    if columns is not None and all(offset % 8 + width <= 64 for _, offset, _, _ in columns):
        patterns = _patterns(array, leaf).reshape(shape)
        for selector, offset, column_shape, byte_strides in columns:
            _write_constant_phase(out, offset, column_shape, byte_strides, width, patterns[selector])
        return
    _scatter(out, _raw_bits(array, leaf), leaf.bit_offset, shape, strides, width)


def _patterns(array: np.ndarray, leaf: Leaf) -> np.ndarray:
    """Element bit patterns as the smallest unsigned dtype holding ``bit_width`` (<= 64) bits."""
    if leaf.kind == "component":
        return array.astype(uint_for_bits(leaf.bit_width), copy=False)
    if leaf.bit_width < 8:  # ml_dtypes holds sub-byte values as raw low bits of one byte
        return np.ascontiguousarray(array).view(np.uint8) & np.uint8((1 << leaf.bit_width) - 1)
    return np.ascontiguousarray(array, dtype=leaf.dtype.newbyteorder("<")).view(uint_for_bits(leaf.bit_width))


def _write_constant_phase(out: np.ndarray, bit_offset: int, shape, byte_strides, width: int, values) -> None:
    """OR elements that all start at phase ``bit_offset % 8`` into ``out``: shift once, then per
    byte of an element one strided OR (elements of one column never share a byte index j)."""
    phase, start = bit_offset % 8, bit_offset // 8
    span = (phase + width + 7) // 8
    wide = uint_for_bits(phase + width)
    shifted = values.astype(wide) << wide.type(phase)
    for j in range(span):
        target = np.ndarray(shape, dtype=np.uint8, buffer=out, offset=start + j, strides=byte_strides)
        target |= (shifted >> wide.type(8 * j)).astype(np.uint8)  # astype keeps the low byte


def _raw_bits(array: np.ndarray, leaf: Leaf) -> np.ndarray:
    """Patterns for the general scatter: uint64 for widths <= 64 (flat), ``(count, nbytes)``
    little-endian uint8 rows for whole-byte tensor types (up to COMPLEX128's 16 bytes)."""
    if leaf.kind == "component" or leaf.bit_width < 8:
        return _patterns(array, leaf).astype(np.uint64).reshape(-1)
    little = np.ascontiguousarray(array, dtype=leaf.dtype.newbyteorder("<"))
    return little.view(np.uint8).reshape(leaf.count, leaf.bit_width // 8)


def _scatter(out: np.ndarray, raw: np.ndarray, bit_offset: int, shape, strides, width: int) -> None:
    """OR every element's bits into ``out`` at its bit position (any phase, any width)."""
    count = math.prod(shape)
    last = out.size - 1
    rows = raw.ndim == 2
    nbytes = raw.shape[1] if rows else -(-width // 8)
    byte_steps = np.arange(nbytes, dtype=np.int64)
    for start, stop in chunks(count, max(1, CHUNK // nbytes)):
        positions = bit_positions(bit_offset, shape, strides, start, stop)
        if rows:
            value_bytes = raw[start:stop].astype(np.uint16)
        else:  # little-endian bytes of each uint64 pattern (bits beyond ``width`` are zero)
            value_bytes = raw[start:stop].astype("<u8").view(np.uint8).reshape(-1, 8)[:, :nbytes].astype(np.uint16)
        first = (positions >> 3)[:, None] + byte_steps
        shifted = value_bytes << (positions & 7).astype(np.uint16)[:, None]  # each byte spans 2 output bytes
        np.add.at(out, first.reshape(-1), (shifted & 0xFF).astype(np.uint8).reshape(-1))
        high = (shifted >> 8).astype(np.uint8)
        # The spill of the last byte is zero when the element ends in its own byte; its index may
        # then be one past the payload and is clamped (adding zero changes nothing).
        np.add.at(out, np.minimum(first + 1, last).reshape(-1), high.reshape(-1))
