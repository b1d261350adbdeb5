"""GGUF's ternary types TQ1_0 and TQ2_0: declarations, decoders and encoders.

256 values in {-1, 0, 1} times one FLOAT16 scale ``d``, stored last. TQ2_0 packs 2-bit codes
``q + 1``; TQ1_0 packs 5 trits per byte as a fixed-point fraction of 243. The encoders reproduce
``gguf.quants.quantize`` byte for byte for finite input, the decoders ``gguf.quants.dequantize``
bit for bit; blocks holding NaN or infinity have no defined encoding.

Notes: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import FLOAT, FLOAT16, UINT8, FunctionBuilder, field
from onnx_struct.formats.gguf._ops import bit_fields, dequantize_rows, scaled_copies, scaled_down

QK_K = 256
POWERS_5 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)  # digit k of a TQ1_0 byte is scaled by 3**k


# ---------------------------------------------------------------------- TQ1_0
def tq1_0_fields() -> list:
    return [
        field("qs", UINT8, ((QK_K - 4 * QK_K // 64) // 5,)),  # 240 values, 5 per byte
        field("qh", UINT8, (QK_K // 64,)),  # the last 16 values, 4 per byte
        field("d", FLOAT16),
    ]


def decode_tq1_0(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_TQ1_0", ["qs", "qh", "d"])
    parts = []
    # byte j of a group of `width` bytes holds values k * width + j, k = 0..digits-1: copy k of
    # the group times 3**k, wrapping mod 256 (one scalar multiply per copy, one Concat for all)
    for source, start, width, digits in (("qs", 0, 32, 5), ("qs", 32, 16, 5), ("qh", 0, 4, 4)):
        parts += scaled_copies(g, g.slice(source, start, start + width, 1), n, width, POWERS_5[:digits])
    fraction = g.op("Concat", *parts, axis=1)  # [n, 256] uint8
    # gguf-py's digit (uint16(q) * 3) >> 8 is 0, 1 or 2: it is [q >= 86] + [q >= 171] (3q >= 256, 3q >= 512),
    # which onnxruntime computes far faster than a 16-bit multiply and shift
    digit = g.op(
        "Add",
        *(g.cast(g.op("GreaterOrEqual", fraction, g.const(np.uint8(t))), UINT8) for t in (86, 171)),
    )
    return g.finish(dequantize_rows(g, digit, g.to_float("d"), zero_point=1), shape)  # d * (digit - 1)


def encode_tq1_0(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("encode_TQ1_0", ["x"])
    d, codes = ternary_codes(g, n)
    numbers = []  # per byte the base-3 number of its codes, most significant first (<= 242: uint8)
    for start, width, digits in ((0, 32, 5), (160, 16, 5), (240, 4, 4)):
        group = g.reshape(g.slice(codes, start, start + digits * width, 1), [n, digits, width])
        weights = np.repeat(np.array([81, 27, 9, 3, 1][:digits], dtype=np.uint8).reshape(digits, 1), width, axis=1)
        parts = g.ops("Split", g.op("Mul", group, g.const(weights)), count=digits, axis=1, num_outputs=digits)
        total = parts[0]
        for part in parts[1:]:
            total = g.op("Add", total, part)
        numbers.append(g.reshape(total, [n, width]))
    # gguf-py's (v * 256 + 242) // 243 = ceil(256 v / 243): for 0 < v <= 242 that quotient is at least
    # 1/243 away from an integer, far beyond float32 rounding, so Ceil in float32 is exact
    number = g.to_float(g.op("Concat", *numbers, axis=1))  # [n, 52]
    packed = g.cast(g.op("Ceil", g.op("Mul", number, g.const(np.float32(256 / 243)))), UINT8)
    g.slice(packed, 0, 48, 1, out="qs")
    g.slice(packed, 48, 52, 1, out="qh")
    g.op("Identity", d, out="d")
    return g.build(["qs", "qh", "d"])


# ---------------------------------------------------------------------- TQ2_0
def tq2_0_fields() -> list:
    return [
        field("qs", UINT8, (QK_K // 4,)),  # 2-bit codes q + 1; per 128 values byte j holds values j, j+32, j+64, j+96
        field("d", FLOAT16),
    ]


def decode_tq2_0(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_TQ2_0", ["qs", "d"])
    # 64 * q_k, code k of byte l of each 32 at 32 k + l (the uint8 recipe: a wrapping multiply moves
    # the code to the top bits, one scalar mask clears the rest), then (64 q - 64) * (d / 64), which
    # is exactly gguf-py's d * (q - 1): the integer part is exact and scaling d by a power of two is
    # exact (d is an f16 value, far from float32's subnormals), so the one rounding is the same.
    q64 = g.reshape(bit_fields(g, "qs", n * 2, 32, width=2, scaled=True), [n, QK_K])
    return g.finish(dequantize_rows(g, q64, scaled_down(g, g.to_float("d"), 64), zero_point=64), shape)


def encode_tq2_0(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("encode_TQ2_0", ["x"])
    d, codes = ternary_codes(g, n)
    # code k of each byte goes to bits 2k: a multiply (uint8 Mul is far faster than BitShift in
    # onnxruntime; a [4, 32] factor keeps the broadcast span long), and the disjoint parts are summed
    weights = np.repeat(np.array([[1], [4], [16], [64]], dtype=np.uint8), 32, axis=1)
    shifted = g.op("Mul", g.reshape(codes, [n, 2, 4, 32]), g.const(weights))
    parts = [g.slice(shifted, k, k + 1, 2) for k in range(4)]
    packed = g.op("Add", g.op("Add", parts[0], parts[1]), g.op("Add", parts[2], parts[3]))
    g.reshape(packed, [n, QK_K // 4], out="qs")
    g.op("Identity", d, out="d")
    return g.build(["qs", "d"])


# ---------------------------------------------------------------------- shared encoder front
def ternary_codes(g: FunctionBuilder, n: int) -> tuple[str, str]:
    """gguf-py's ternary quantization of input ``x``: (``d`` as FLOAT16 ``[n]``, codes ``q + 1``
    as UINT8 ``[n, 256]``).

    gguf-py: ``d = max|x|``, ``id = 0 if d == 0 else 1 / d``, ``q = np_roundf(x * id)`` (round
    half away from zero, ``sign(v) * (floor(|v|) + floor(2 * (|v| - floor(|v|))))``), then
    ``int8(q) + 1``. For finite x, ``|x| <= d`` so ``|x * id| <= 1 + 2**-23``, where np_roundf is
    exactly ``sign(v) * [|v| >= 0.5]``: two comparisons instead of eight float passes.

    One case needs care: if ``d`` is a float32 subnormal below 2**-128, ``1 / d`` overflows and
    gguf-py rounds inf/NaN, whose cast to int8 gives 0 on x86-64 (every code 1; ``d`` itself
    rounds to 0 in f16). Using ``id = 0`` there gives the same bytes.
    """
    x = g.reshape(g.cast("x", FLOAT), [n, QK_K])
    d = g.op("ReduceMax", g.op("Abs", x), g.const(np.array([1], dtype=np.int64)), keepdims=1)  # [n, 1]
    inverse = g.op("Div", g.const(np.float32(1)), d)
    unusable = g.op("Or", g.op("Equal", d, g.const(np.float32(0))), g.op("IsInf", inverse))
    inverse = g.op("Where", unusable, g.const(np.float32(0)), inverse)
    v = g.op("Mul", x, inverse)
    up, down = (
        g.cast(g.op(op, v, g.const(np.float32(t))), UINT8) for op, t in (("GreaterOrEqual", 0.5), ("LessOrEqual", -0.5))
    )
    codes = g.op("Sub", g.op("Add", up, g.const(np.uint8(1))), down)
    return g.reshape(g.cast(d, FLOAT16), [n]), codes


# ---------------------------------------------------------------------- the table
FORMATS: dict[str, BlockFormat] = register_formats(
    "gguf",
    [
        FormatSpec(
            "TQ1_0",
            QK_K,
            54,
            tq1_0_fields,
            decode_tq1_0,
            encode_tq1_0,
            "GGUF TQ1_0 (1.6875 bpw ternary: 5 trits per byte, f16 scale last)",
        ),
        FormatSpec(
            "TQ2_0",
            QK_K,
            66,
            tq2_0_fields,
            decode_tq2_0,
            encode_tq2_0,
            "GGUF TQ2_0 (2.0625 bpw ternary: 2-bit codes, f16 scale last)",
        ),
    ],
)
