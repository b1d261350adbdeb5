"""The input layouts of onnxruntime's quantized contrib kernels (domain ``com.microsoft``), filled
range of rows by range of rows from a weight's affine forms (:func:`.repack.row_forms`):

* :class:`MatMulNBitsLayout`: ``MatMulNBits``' ``B``, ``scales`` and ``zero_points``, exactly as
  onnxruntime's DequantizeLinear + MatMul fusion writes them from the
  :class:`~.repack.DequantizeLayout` (``B [N, K/bs, bs*bits/8]``: unsigned codes, low nibble first);
* :class:`GatherLayout`: ``GatherBlockQuantized`` over the stored ``[V, D]``.

They are the kernels' contract, and they live in lowering/, not runtime/: ``lower(execution=
"quantized")`` writes them into a model any onnxruntime build runs, without importing onnxruntime
(runtime/ sits above lowering/ and is the only onnxruntime importer).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnx_struct.formats.affine import AffineForm, AffineSpec, PairedForm
from onnx_struct.layout.bits import pack_sub_byte
from onnx_struct.lowering.execution.repack import Part


def _pack_pairs(codes: np.ndarray) -> np.ndarray:
    """uint8 ``[..., c]`` -> ``[..., ceil(c / 2)]``: element 2i in the low nibble, 2i+1 in the high
    one, each row's odd last element paired with a zero (layout/bits.py's 4-bit pack, per row)."""
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], 1), np.uint8)], axis=-1)
    return pack_sub_byte(codes, 4).reshape(*codes.shape[:-1], codes.shape[-1] // 2)


def _pairs(form: AffineForm | PairedForm) -> np.ndarray:
    """A 4-bit form's unsigned codes packed two per byte along each row (given so by a PairedForm)."""
    if isinstance(form, PairedForm):
        return form.pairs
    return _pack_pairs(_unsigned(form.codes, 4))


def _unsigned(codes: np.ndarray, bits: int) -> np.ndarray:
    """int8 codes of ``bits`` as the unsigned ``c + 2^(bits-1)`` (uint8 in the low ``bits``);
    uint8 codes as they are."""
    raw = codes.view(np.uint8)
    if codes.dtype != np.int8:
        return raw
    return raw ^ np.uint8(1 << (bits - 1))  # two's complement: c ^ 2^(b-1) is c + 2^(b-1) mod 2^b


class MatMulNBitsLayout:
    """``MatMulNBits(A, B, scales, zero_points)`` of a weight stored ``[N, K]``, with the inputs
    onnxruntime's fusion derives from :class:`DequantizeLayout`'s, byte for byte: unsigned codes
    (a signed code plus ``2^(bits-1)``, the kernel's default zero point, so no zero point input);
    unsigned codes without a zero point get explicit zeros; 4-bit zero points are packed two per
    byte along each row's blocks; scales and zero points are 1-D. The minimum is as above."""

    def __init__(self, spec: AffineSpec, shape: tuple[int, int]) -> None:
        n, k = shape
        self.spec, self.n, self.k = spec, n, k
        self.kb = k // spec.block_size
        self.b = np.empty((n, self.kb, spec.block_size * spec.bits // 8), np.uint8)
        self.scales = np.empty((n, self.kb), np.float32)
        self.zero_points = None
        if spec.zero_point or not spec.signed:
            self.zero_points = np.zeros((n, -(-self.kb // 2) if spec.bits == 4 else self.kb), np.uint8)
        self.minimum = np.empty((self.kb, n), np.float32) if spec.minimum else None
        self.all_eight = spec.bits == 4 and spec.zero_point and not spec.signed

    def write(self, r0: int, r1: int, form: AffineForm | PairedForm) -> None:
        bits = self.spec.bits
        blocks = self.b[r0:r1]
        if bits == 4:
            blocks[...] = _pairs(form).reshape(blocks.shape)
        else:
            blocks[...] = _unsigned(form.codes, bits).reshape(blocks.shape)
        self.scales[r0:r1] = form.scale
        if form.zero_point is not None:
            zero_point = _unsigned(form.zero_point, bits)
            if self.all_eight:
                self.all_eight = bool(np.all(zero_point == 8))
            self.zero_points[r0:r1] = _pack_pairs(zero_point) if bits == 4 else zero_point
        if self.minimum is not None:
            self.minimum[:, r0:r1] = form.minimum.T

    def parts(self) -> tuple[Part, Part, Part | None, Part | None]:
        """(B, scales, zero_points or None, minimum or None)."""
        b = Part(self.b, TensorProto.UINT8, self.b.shape)
        scales = Part(self.scales.reshape(-1), TensorProto.FLOAT, (self.scales.size,))
        zero_points = None
        if self.zero_points is not None and not self.all_eight:
            zero_points = Part(self.zero_points.reshape(-1), TensorProto.UINT8, (self.zero_points.size,))
        minimum = Part(self.minimum, TensorProto.FLOAT, self.minimum.shape) if self.minimum is not None else None
        return b, scales, zero_points, minimum


class GatherLayout:
    """``GatherBlockQuantized(data, indices, scales, zero_points)`` over an embedding stored
    ``[V, D]`` (blocks along D): uint8 data (4-bit codes two per byte along D, low nibble first;
    a signed code plus ``2^(bits-1)``, the operator's default zero point for uint8 data), unsigned
    codes without a zero point get explicit zeros (the default would be ``2^(bits-1)``), zero
    points packed like the data. The minimum is ``[V, D/bs]``, gathered and added per block."""

    def __init__(self, spec: AffineSpec, shape: tuple[int, int]) -> None:
        rows, cols = shape
        self.spec, self.shape = spec, shape
        nb = cols // spec.block_size
        self.data = np.empty((rows, -(-cols // 2) if spec.bits == 4 else cols), np.uint8)
        self.scale = np.empty((rows, nb), np.float32)
        self.zero_point = None
        if spec.zero_point or not spec.signed:
            self.zero_point = np.zeros((rows, -(-nb // 2) if spec.bits == 4 else nb), np.uint8)
        self.minimum = np.empty((rows, nb), np.float32) if spec.minimum else None

    def write(self, r0: int, r1: int, form: AffineForm | PairedForm) -> None:
        bits = self.spec.bits
        self.data[r0:r1] = _pairs(form) if bits == 4 else _unsigned(form.codes, bits)
        self.scale[r0:r1] = form.scale
        if form.zero_point is not None:
            zero_point = _unsigned(form.zero_point, bits)
            self.zero_point[r0:r1] = _pack_pairs(zero_point) if bits == 4 else zero_point
        if self.minimum is not None:
            self.minimum[r0:r1] = form.minimum

    def parts(self) -> tuple[Part, Part, Part | None, Part | None]:
        """(data, scales, zero_points or None, minimum or None)."""

        def part(array, elem):
            return None if array is None else Part(array, elem, array.shape)

        return (
            part(self.data, TensorProto.UINT8),
            part(self.scale, TensorProto.FLOAT),
            part(self.zero_point, TensorProto.UINT8),
            part(self.minimum, TensorProto.FLOAT),
        )


__all__ = ["GatherLayout", "MatMulNBitsLayout"]
