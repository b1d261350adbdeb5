"""Recipes of the IQ/TQ decoders (private to iq.py and tq.py), on the shared FunctionBuilder.

They cover what several IQ decoders do: unpack bit fields with BitShift/BitwiseAnd on the leaf's
own unsigned type (uint16/uint32 leaves, which the uint8 recipes of :mod:`._ops` do not take),
build int32 Gather indices from a low byte and high bits, build the ±1 sign table from a byte
table, and decode raw FLOAT16 bits without BitCast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from onnx_struct.formats.function_builder import INT8, UINT16, FunctionBuilder


def bits(g: FunctionBuilder, x: str, dtype, shifts: Sequence[int], width: int, shape: Sequence[int], axis=-1) -> str:
    """Packed ``width``-bit fields of ``x`` (unsigned ``dtype``), reshaped to ``shape``.

    ``axis=-1``: ``(x[..., None] >> shifts) & mask``, the fields of one element adjacent;
    ``axis=-2``: ``(x[..., None, :] >> shifts[:, None]) & mask``, all elements' field 0
    first, then all field 1, ... (ggml's "low nibbles, then high nibbles" order).

    For ``axis=-1`` the shifts run along a new *leading* axis, ``[k, count]``, and a 2-D
    Transpose makes the fields adjacent: onnxruntime broadcasts ``[count, 1] >> [k]`` one tiny
    span at a time, several times slower than the two passes."""
    shifts = list(shifts)
    mask = np.array((1 << width) - 1, dtype=dtype)
    if axis == -1:
        count = math.prod(shape) // len(shifts)
        flat = g.reshape(x, [1, count])
        fields = g.band(g.shr(flat, np.array(shifts, dtype=dtype).reshape(-1, 1)), mask)  # [k, count]
        return g.reshape(g.op("Transpose", fields, perm=[1, 0]), shape)
    shifts = np.array(shifts, dtype=dtype).reshape([-1] + [1] * (-axis - 1))
    unsqueezed = g.op("Unsqueeze", x, g.axes(axis))
    return g.reshape(g.band(g.shr(unsqueezed, shifts), mask), shape)


def index_hi_lo(g: FunctionBuilder, low: str, high: str, shape: Sequence[int]) -> str:
    """Gather index ``low | high << 8`` as int32 of ``shape``: a grid index whose low 8 bits
    are a uint8 leaf and whose high bits come from a packed field."""
    high = g.op("Mul", g.index(high), g.const(np.int32(256)))
    return g.reshape(g.op("Add", g.index(low), high), shape)


def sign_table(g: FunctionBuilder, sign_bytes: str) -> str:
    """int8 ``[len, 8]``: entry ``[i, k]`` is -1 if bit k of ``sign_bytes[i]`` is set, else 1.

    Gathering whole rows of 8 signs replaces per-element shift/mask/select work on the large
    tensor by one Gather; the table itself is a few hundred elements."""
    bit = g.cast(bits(g, sign_bytes, np.uint8, range(8), 1, [-1, 8]), INT8)
    return g.op("Sub", g.const(np.int8(1)), g.op("Mul", bit, g.const(np.int8(2))))


def f16_bits_to_float(g: FunctionBuilder, half_bits: str) -> str:
    """uint16 IEEE half-precision bit patterns -> float32 values, exactly (opset 21 has no
    BitCast): subnormals, infinities and NaN included, -0.0 kept."""
    exponent = g.band(g.shr(half_bits, np.uint16(10)), np.uint16(31))
    mantissa = g.band(half_bits, np.uint16(1023))
    # the implicit leading 1 of normal numbers: (exponent != 0) << 10
    normal = g.cast(g.cast(exponent, TensorProto.BOOL), UINT16)
    significand = g.to_float(g.op("BitwiseOr", mantissa, g.shl(normal, np.uint16(10))))
    # 2**(max(e, 1) - 25) for e < 31; e == 31 gives inf (and NaN below when the mantissa is set)
    powers = np.array([2.0 ** (max(e, 1) - 25) for e in range(31)] + [np.inf], dtype=np.float32)
    magnitude = g.op("Mul", significand, g.gather(powers, g.index(exponent)))
    is_nan = g.op("Greater", g.band(half_bits, np.uint16(0x7FFF)), g.const(np.uint16(0x7C00)))
    magnitude = g.where(is_nan, np.float32(np.nan), magnitude)
    # times +-1 rather than Where(sign, Neg(m), m): onnxruntime's Neg turns 0.0 into +0.0
    sign = g.to_float(g.shr(half_bits, np.uint16(15)))
    factor = g.op("Sub", g.const(np.float32(1)), g.op("Mul", sign, g.const(np.float32(2))))
    return g.op("Mul", magnitude, factor)
