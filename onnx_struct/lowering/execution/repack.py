"""A quantized weight's codes repacked range of rows by range of rows, never whole, never as float.

:func:`row_forms` yields the affine form of each range of whole rows of a payload; a *layout*
(:class:`DequantizeLayout` here; onnxruntime's contrib kernels' layouts in :mod:`.contrib_layouts`) writes them into
the arrays one emitted node reads, allocated once at their final size. Rule: a weight costs its
repacked arrays plus one range's temporaries (about :data:`ROW_RANGE_BYTES` of payload), never
its whole payload's codes and copies at once.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
from onnx import TensorProto

from onnx_struct.formats.affine import AffineForm, AffineSpec
from onnx_struct.formats.base import BlockFormat
from onnx_struct.layout.bits import pack_sub_byte
from onnx_struct.payload import external
from onnx_struct.payload.affine import packed_form
from onnx_struct.payload.values import ExternalPayload

# Payload bytes per range of rows: small enough that a range's temporaries stay a few MiB, large
# enough that the per-range work (a view, numpy calls) is noise next to the arithmetic.
ROW_RANGE_BYTES = 1 << 20

_NIBBLE = np.uint8(0x0F)
_FOUR = np.uint8(4)


@dataclasses.dataclass(frozen=True)
class Part:
    """One initializer's data: ``array``'s bytes (C order) are the tensor's raw_data."""

    array: np.ndarray
    data_type: int
    dims: tuple[int, ...]


def row_forms(
    fmt: BlockFormat, shape: tuple[int, int], payload, where: str, *, whole: bool = False
) -> Iterator[tuple[int, int, AffineForm]]:
    """``(r0, r1, affine form of rows [r0, r1))`` over a ``[rows, cols]`` value's payload (inline
    bytes, or an :class:`ExternalPayload` read one range at a time). Ranges hold an even number
    of rows (but the last); ``whole``: one range."""
    rows, cols = shape
    row_bytes = cols // fmt.block_size * fmt.bytes_per_block
    step = rows if whole else max(2, ROW_RANGE_BYTES // max(row_bytes, 1) // 2 * 2)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        data = _read(payload, r0 * row_bytes, (r1 - r0) * row_bytes, where)
        yield r0, r1, packed_form(fmt, data, (r1 - r0, cols))


def _read(payload, offset: int, length: int, where: str):
    if isinstance(payload, ExternalPayload):
        return external.read_range(payload.file, payload.offset + offset, length, f"{where}.external_data")
    return memoryview(payload).cast("B")[offset : offset + length]


def _pack_rows(codes: np.ndarray) -> np.ndarray:
    """uint8 ``[2m, c]`` -> ``[m, c]``: row 2i in the low nibbles, row 2i+1 in the high ones."""
    packed = codes[0::2] & _NIBBLE
    packed |= codes[1::2] << _FOUR  # uint8 arithmetic drops the upper nibble
    return packed


class DequantizeLayout:
    """``DequantizeLinear(codes [K, N], scale [K/bs, N], zero_point, axis=0, block_size=bs)`` and
    the minimum ``[K/bs, N]`` of a weight stored ``[N, K]``. Unsigned 4-bit codes whose zero point
    is 8 everywhere (Q4_0) become INT4 without a zero point (``q ^ 8`` is ``q - 8`` as a nibble):
    onnxruntime's symmetric MatMulNBits, faster than its zero-point variant (docs/execution.md)."""

    def __init__(self, spec: AffineSpec, shape: tuple[int, int]) -> None:
        n, k = shape
        self.spec, self.n, self.k = spec, n, k
        kb = k // spec.block_size
        # 4-bit codes pack along N: an odd N packs pairs across rows of [K, N], one range only.
        self.whole = spec.bits == 4 and n % 2 == 1
        columns = n // 2 if spec.bits == 4 and not self.whole else n
        self.codes = np.empty((k, columns), np.uint8) if not self.whole else None
        self.scale = np.empty((kb, n), np.float32)
        self.zero_point = np.empty((kb, columns), np.uint8) if spec.zero_point else None
        self.minimum = np.empty((kb, n), np.float32) if spec.minimum else None
        self.all_eight = spec.bits == 4 and spec.zero_point and not spec.signed
        self.flipped = False

    def write(self, r0: int, r1: int, form: AffineForm) -> None:
        raw = form.codes.view(np.uint8)
        zero_point = form.zero_point.view(np.uint8) if form.zero_point is not None else None
        if zero_point is not None and self.all_eight:
            self.all_eight = bool(np.all(zero_point == 8))
        if self.whole:  # the whole tensor: flattened [K, N] nibble pairs
            self.codes = pack_sub_byte(raw.T, 4)
            if zero_point is not None:
                self.zero_point = pack_sub_byte(zero_point.T, 4)
        elif self.spec.bits == 4:  # rows 2j, 2j+1 of [N, K] are byte column j of [K, N / 2]
            self.codes[:, r0 // 2 : r1 // 2] = _pack_rows(raw).T
            if zero_point is not None:
                self.zero_point[:, r0 // 2 : r1 // 2] = _pack_rows(zero_point).T
        else:
            self.codes[:, r0:r1] = raw.T
            if zero_point is not None:
                self.zero_point[:, r0:r1] = zero_point.T
        self.scale[:, r0:r1] = form.scale.T
        if self.minimum is not None:
            self.minimum[:, r0:r1] = form.minimum.T

    def parts(self) -> tuple[Part, Part, Part | None, Part | None]:
        """(codes, scale, zero point or None, minimum or None)."""
        spec, dims = self.spec, (self.k, self.n)
        signed = spec.signed or self.all_eight
        if self.all_eight and not self.flipped:  # once, however many consumers read the parts
            self.codes ^= np.uint8(0x88)
            self.flipped = True
        if spec.bits == 4:
            elem = TensorProto.INT4 if signed else TensorProto.UINT4
        else:
            elem = TensorProto.INT8 if signed else TensorProto.UINT8
        codes = Part(self.codes, elem, dims)
        scale = Part(self.scale, TensorProto.FLOAT, self.scale.shape)
        zero_point = None
        if self.zero_point is not None and not self.all_eight:
            zero_point = Part(self.zero_point, elem, (self.k // spec.block_size, self.n))
        minimum = Part(self.minimum, TensorProto.FLOAT, self.minimum.shape) if self.minimum is not None else None
        return codes, scale, zero_point, minimum


__all__ = ["DequantizeLayout", "Part", "ROW_RANGE_BYTES", "row_forms"]
