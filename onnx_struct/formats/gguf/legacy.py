"""GGUF's plain and legacy block formats: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.

Decoders reproduce ``gguf.quants.dequantize`` bit for bit; every format here also has an encoder
reproducing ``gguf.quants.quantize`` byte for byte for finite input (see docs/formats.md).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import (
    BFLOAT16,
    BITCAST_OPSET,
    FLOAT16,
    INT8,
    UINT8,
    UINT16,
    UINT32,
    FunctionBuilder,
    field,
)
from onnx_struct.formats.gguf._ops import (
    add_rows,
    byte_lookup,
    dequantize_rows,
    nibbles,
    scaled_down,
)

# Bit j of a byte, times 16 (the fifth bit of a 5-bit quant), for every byte value: [256, 8].
_BIT_X16 = (((np.arange(256, dtype=np.uint8)[:, None] >> np.arange(8, dtype=np.uint8)) & 1) * 16).astype(np.uint8)


# ---------------------------------------------------------------------------------- plain types
def _plain(name: str, elem_type: int, nbytes: int, decode_op: bool, encoder) -> FormatSpec:
    def decode(n: int, shape: tuple[int, ...]):
        b = FunctionBuilder(f"decode_{name}", ["value"])
        return b.finish(b.to_float("value") if decode_op else "value", shape)

    return FormatSpec(
        name,
        1,
        nbytes,
        lambda: [field("value", elem_type)],
        decode,
        encoder,
        f"GGML {name}: one {TensorProto.DataType.Name(elem_type)} per element (a block of one).",
    )


def _encode_f32(n: int, shape: tuple[int, ...]):
    b = FunctionBuilder("encode_F32", ["x"])
    return b.build([b.reshape("x", [n], out="value")])


def _encode_f16(n: int, shape: tuple[int, ...]):
    # gguf-py: data.astype(np.float16): round to nearest even, overflow to infinity (what Cast
    # does), and a NaN becomes sign | 0x7c00 | (mantissa >> 13), at least 1 (numpy's
    # npy_floatbits_to_halfbits). Cast would quiet a signalling NaN (set bit 9), so NaNs are
    # rebuilt from the float's bits with BitCast (opset 26).
    b = FunctionBuilder("encode_F16", ["x"], opset=BITCAST_OPSET)
    x = b.reshape("x", [n])
    bits = b.op("BitCast", x, to=UINT32)
    sign = b.shr(b.band(bits, 0x80000000, np.uint32), 16, np.uint32)
    payload = b.op(
        "Max",
        b.shr(b.band(bits, 0x007FFFFF, np.uint32), 13, np.uint32),
        b.const(1, np.uint32),
    )
    nan_bits = b.op("BitwiseOr", sign, b.op("BitwiseOr", payload, b.const(0x7C00, np.uint32)))
    rounded = b.cast(b.op("BitCast", b.cast(x, FLOAT16), to=UINT16), UINT32)
    half_bits = b.cast(b.op("Where", b.op("IsNaN", x), nan_bits, rounded), UINT16)
    return b.build([b.op("BitCast", half_bits, to=FLOAT16, out="value")])


def _encode_bf16(n: int, shape: tuple[int, ...]):
    # gguf-py (= ggml_compute_fp32_to_bf16) works on the float's bits: a NaN keeps its sign and top
    # mantissa bits and is made quiet; others round to nearest even. Cast(FLOAT->BFLOAT16) would
    # replace every NaN by one canonical NaN, so this reads the bits with BitCast (opset 26).
    b = FunctionBuilder("encode_BF16", ["x"], opset=BITCAST_OPSET)
    bits = b.op("BitCast", b.reshape("x", [n]), to=UINT32)
    quiet = b.op(
        "BitwiseOr",
        b.op("BitwiseAnd", bits, b.const(0xFFFF0000, np.uint32)),
        b.const(64 << 16, np.uint32),
    )
    is_nan = b.op("Greater", b.op("BitwiseAnd", bits, b.const(0x7FFFFFFF, np.uint32)), b.const(0x7F800000, np.uint32))
    bits = b.op("Where", is_nan, quiet, bits)
    # (n + 0x7fff + ((n >> 16) & 1)) >> 16; no uint32 overflow: a non-NaN n is at most 0xff800000.
    odd = b.op("BitwiseAnd", b.shr(bits, 16, np.uint32), b.const(1, np.uint32))
    rounded = b.op("Add", bits, b.op("Add", odd, b.const(0x7FFF, np.uint32)))
    upper = b.cast(b.shr(rounded, 16, np.uint32), UINT16)
    return b.build([b.op("BitCast", upper, to=BFLOAT16, out="value")])


# ---------------------------------------------------------------------------------- legacy quants
def _with_fifth_bit(b: FunctionBuilder, qs: str, qh: str, n: int) -> str:
    """Q5_0/Q5_1 quants ``[n, 32]``: nibble | (bit j of the little-endian uint32 ``qh``) << 4."""
    fifth = b.reshape(byte_lookup(b, qh, _BIT_X16), [n, 32])  # qh [n, 4] -> [n, 4, 8]
    return b.op("Add", nibbles(b, qs, n, 16), fifth)


def _decode_q4_0(n: int, shape):
    b = FunctionBuilder("decode_Q4_0", ["d", "qs"], doc_string="d * (q - 8), q the 32 nibbles of qs")
    # (16q - 128) * (d / 16) == (q - 8) * d exactly; 16q needs no shift (see nibbles).
    y = dequantize_rows(b, nibbles(b, "qs", n, 16, times=16), scaled_down(b, b.to_float("d"), 16), zero_point=128)
    return b.finish(y, shape)


def _decode_q4_1(n: int, shape):
    b = FunctionBuilder("decode_Q4_1", ["d", "m", "qs"], doc_string="(d * q) + m, q the 32 nibbles of qs")
    dq = dequantize_rows(b, nibbles(b, "qs", n, 16, times=16), scaled_down(b, b.to_float("d"), 16))
    y = add_rows(b, dq, b.to_float("m"), n)
    return b.finish(y, shape)


def _decode_q5_0(n: int, shape):
    b = FunctionBuilder("decode_Q5_0", ["d", "qh", "qs"], doc_string="d * (q - 16), q = nibble | qh bit << 4")
    y = dequantize_rows(b, _with_fifth_bit(b, "qs", "qh", n), b.to_float("d"), zero_point=16)
    return b.finish(y, shape)


def _decode_q5_1(n: int, shape):
    b = FunctionBuilder("decode_Q5_1", ["d", "m", "qh", "qs"], doc_string="(d * q) + m, q = nibble | qh bit << 4")
    q = _with_fifth_bit(b, "qs", "qh", n)
    y = add_rows(b, dequantize_rows(b, q, b.to_float("d")), b.to_float("m"), n)
    return b.finish(y, shape)


def _decode_q8_0(n: int, shape):
    b = FunctionBuilder("decode_Q8_0", ["d", "qs"], doc_string="qs * d")
    y = dequantize_rows(b, "qs", b.to_float("d"))
    return b.finish(y, shape)


# Encoders mirror gguf-py's numpy quantize_blocks op for op, in float32: the scale, its reciprocal
# ``id = where(d == 0, 0, 1 / d)`` (a division, not a reciprocal op), ``trunc(x * id + c)``
# (Floor: the argument is never negative), the clip, and the float16 rounding of the scale.
def _absmax_scale(b: FunctionBuilder, x: str, divisor: float) -> tuple[str, str]:
    """Q4_0/Q5_0: ``d = x[argmax |x|] / divisor`` (the first maximum, sign kept) and ``id``."""
    first_max = b.op("ArgMax", b.op("Abs", x), axis=1, keepdims=1)
    d = b.op("Div", b.op("GatherElements", x, first_max, axis=1), b.const(divisor, np.float32))
    return d, _inverse(b, d)


def _min_max_scale(b: FunctionBuilder, x: str, steps: float) -> tuple[str, str, str]:
    """Q4_1/Q5_1: ``d = (max - min) / steps``, ``id`` and ``min`` per block."""
    axes = b.const([1], np.int64)
    low = b.op("ReduceMin", x, axes, keepdims=1)
    d = b.op("Div", b.op("Sub", b.op("ReduceMax", x, axes, keepdims=1), low), b.const(steps, np.float32))
    return d, _inverse(b, d), low


def _inverse(b: FunctionBuilder, d: str) -> str:
    zero = b.const(0.0, np.float32)
    return b.op("Where", b.op("Equal", d, zero), zero, b.op("Div", b.const(1.0, np.float32), d))


def _quantize(b: FunctionBuilder, scaled: str, offset: float, top: float) -> str:
    """``clip(trunc(scaled + offset), 0, top)`` in float32 (values are exact small integers)."""
    q = b.op("Floor", b.op("Add", scaled, b.const(offset, np.float32)))
    return b.op("Clip", q, b.const(0.0, np.float32), b.const(top, np.float32))


def _pack_nibbles(b: FunctionBuilder, q: str, n: int) -> str:
    """``q[:16] | q[16:] << 4`` for float quants in 0..15, exactly, as UINT8 ``[n, 16]``."""
    weights = b.const(np.array([[1.0], [16.0]], np.float32))
    packed = b.op("ReduceSum", b.op("Mul", b.reshape(q, [n, 2, 16]), weights), b.const([1], np.int64), keepdims=0)
    return b.cast(packed, UINT8, out="qs")


def _split_fifth_bit(b: FunctionBuilder, q: str, n: int) -> tuple[str, str]:
    """5-bit float quants -> (low nibbles for ``qs``, ``qh`` = little-endian bits of ``q >> 4``)."""
    high = b.op("Floor", b.op("Mul", q, b.const(1 / 16, np.float32)))
    low = b.op("Sub", q, b.op("Mul", high, b.const(16.0, np.float32)))
    bit_weights = b.const(2.0 ** np.arange(8, dtype=np.float32))
    qh = b.cast(b.op("MatMul", b.reshape(high, [n, 4, 8]), bit_weights), UINT8, out="qh")
    return low, qh


def _scale_out(b: FunctionBuilder, value: str, n: int, name: str) -> str:
    return b.cast(b.reshape(value, [n]), FLOAT16, out=name)


def _encode_q4_0(n: int, shape):
    b = FunctionBuilder("encode_Q4_0", ["x"])
    x = b.reshape("x", [n, 32])
    d, inv = _absmax_scale(b, x, -8.0)
    q = _quantize(b, b.op("Mul", x, inv), 8.5, 15.0)
    return b.build([_scale_out(b, d, n, "d"), _pack_nibbles(b, q, n)])


def _encode_q4_1(n: int, shape):
    b = FunctionBuilder("encode_Q4_1", ["x"])
    x = b.reshape("x", [n, 32])
    d, inv, low = _min_max_scale(b, x, 15.0)
    q = _quantize(b, b.op("Mul", b.op("Sub", x, low), inv), 0.5, 15.0)
    return b.build([_scale_out(b, d, n, "d"), _scale_out(b, low, n, "m"), _pack_nibbles(b, q, n)])


def _encode_q5_0(n: int, shape):
    b = FunctionBuilder("encode_Q5_0", ["x"])
    x = b.reshape("x", [n, 32])
    d, inv = _absmax_scale(b, x, -16.0)
    low, qh = _split_fifth_bit(b, _quantize(b, b.op("Mul", x, inv), 16.5, 31.0), n)
    return b.build([_scale_out(b, d, n, "d"), qh, _pack_nibbles(b, low, n)])


def _encode_q5_1(n: int, shape):
    b = FunctionBuilder("encode_Q5_1", ["x"])
    x = b.reshape("x", [n, 32])
    d, inv, low = _min_max_scale(b, x, 31.0)
    q = _quantize(b, b.op("Mul", b.op("Sub", x, low), inv), 0.5, 31.0)
    low4, qh = _split_fifth_bit(b, q, n)
    return b.build([_scale_out(b, d, n, "d"), _scale_out(b, low, n, "m"), qh, _pack_nibbles(b, low4, n)])


def _encode_q8_0(n: int, shape):
    b = FunctionBuilder("encode_Q8_0", ["x"])
    x = b.reshape("x", [n, 32])
    amax = b.op("ReduceMax", b.op("Abs", x), b.const([1], np.int64), keepdims=1)
    d = b.op("Div", amax, b.const(127.0, np.float32))
    v = b.op("Mul", x, _inverse(b, d))
    # gguf-py's np_roundf (half away from zero): sign(v) * (floor(a) + floor(2 * (a - floor(a)))).
    a = b.op("Abs", v)
    whole = b.op("Floor", a)
    carry = b.op("Floor", b.op("Mul", b.op("Sub", a, whole), b.const(2.0, np.float32)))
    q = b.op("Mul", b.op("Sign", v), b.op("Add", whole, carry))
    return b.build([_scale_out(b, d, n, "d"), b.cast(q, INT8, out="qs")])


# The fields of the legacy blocks, in ggml's names and order.
def _d():
    return field("d", FLOAT16, doc="FLOAT16 scale")


def _m():
    return field("m", FLOAT16, doc="FLOAT16 minimum")


def _qh():
    return field("qh", UINT8, (4,), "fifth bits, little-endian uint32: bit j is element j's")


def _qs(doc: str = "nibbles: low = 0..15, high = 16..31"):
    return field("qs", UINT8, (16,), doc)


_QS5 = "low 4 bits: low nibbles = 0..15, high = 16..31"

# ---------------------------------------------------------------------------------- the table
FORMATS: dict[str, BlockFormat] = register_formats(
    "gguf",
    [
        _plain("F32", TensorProto.FLOAT, 4, False, _encode_f32),
        _plain("F16", TensorProto.FLOAT16, 2, True, _encode_f16),
        _plain("BF16", TensorProto.BFLOAT16, 2, True, _encode_bf16),
        FormatSpec(
            "Q4_0",
            32,
            18,
            lambda: [_d(), _qs()],
            _decode_q4_0,
            _encode_q4_0,
            "GGML Q4_0: 32 weights = d * (nibble - 8).",
        ),
        FormatSpec(
            "Q4_1",
            32,
            20,
            lambda: [_d(), _m(), _qs()],
            _decode_q4_1,
            _encode_q4_1,
            "GGML Q4_1: 32 weights = d * nibble + m.",
        ),
        FormatSpec(
            "Q5_0",
            32,
            22,
            lambda: [_d(), _qh(), _qs(_QS5)],
            _decode_q5_0,
            _encode_q5_0,
            "GGML Q5_0: 32 weights = d * (5-bit q - 16).",
        ),
        FormatSpec(
            "Q5_1",
            32,
            24,
            lambda: [_d(), _m(), _qh(), _qs(_QS5)],
            _decode_q5_1,
            _encode_q5_1,
            "GGML Q5_1: 32 weights = d * (5-bit q) + m.",
        ),
        FormatSpec(
            "Q8_0",
            32,
            34,
            lambda: [_d(), field("qs", INT8, (32,))],
            _decode_q8_0,
            _encode_q8_0,
            "GGML Q8_0: 32 weights = d * int8.",
        ),
    ],
)
