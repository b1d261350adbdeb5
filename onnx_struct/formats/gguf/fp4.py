"""GGUF's FP4 block types MXFP4 and NVFP4, as gguf-py (``gguf.quants``) and ggml define them.

MXFP4: 32 values in 17 bytes (an E8M0 exponent, then 16 bytes of nibbles); NVFP4: 64 values in
36 bytes (four unsigned E4M3 scales, then 32 bytes of nibbles). Both store E2M1 codes through
ggml's ``kvalues_mxfp4`` table of doubled E2M1 values. Decoders are exact and run in onnxruntime;
the MXFP4 encoder reproduces ``gguf.quants.quantize`` byte for byte, the NVFP4 encoder ggml's
``quantize_row_nvfp4_ref`` (gguf-py has none).

Notes: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import INT8, UINT8, FunctionBuilder, field
from onnx_struct.formats.gguf._ops import dequantize_rows, nibbles
from onnx_struct.schema.builders import make_constant_field

QK_MXFP4 = 32
QK_NVFP4 = 64
QK_NVFP4_SUB = 16

# ggml's kvalues_mxfp4 (gguf-py MXFP4.kvalues): E2M1 values times 2, indexed by the 4-bit code.
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)

# ggml_e8m0_to_fp32_half: 2**(e - 128) for every byte (e = 255 is 2**127, not NaN).
E8M0_HALF = np.ldexp(np.float32(1), np.arange(256) - 128).astype(np.float32)


def _ue4m3_half() -> np.ndarray:
    """ggml_ue4m3_to_fp32 for every byte: bit 7 ignored, bias 7, 0x00 and 0x7F -> 0, times 1/2."""
    byte = np.arange(256)
    exponent, mantissa = (byte >> 3) & 0xF, byte & 0x7
    value = np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8) * np.exp2(exponent - 7.0))
    return np.where((byte == 0) | (byte == 0x7F), 0.0, value * 0.5).astype(np.float32)


UE4M3_HALF = _ue4m3_half()


def _log2_floor_thresholds() -> np.ndarray:
    """``T[i]`` = the smallest float32 whose float32 ``log2`` is >= ``k = i - 148`` (k = -148..128).

    A correctly rounded float32 ``log2(x)`` reaches the integer k as soon as the exact value
    passes the midpoint between k and the float32 below it, so ``floor(log2f(x))`` (what gguf-py
    and ggml compute) is ``count(T <= x) - 149`` for every float32 x >= 2**-149. The midpoint is
    exact in float64 and no float32 but a power of two (whose log2 is exact) has a log2 within
    1e-12 of it (checked below), so float64 ``log2`` decides every candidate.
    """
    k = np.arange(-148, 129, dtype=np.float64)
    below = np.nextafter(k.astype(np.float32), np.float32(-np.inf)).astype(np.float64)
    midpoint = (k + below) / 2
    guess = np.exp2(midpoint).astype(np.float32)
    previous = np.nextafter(guess, np.float32(0))
    following = np.nextafter(guess, np.float32(np.inf))
    candidates = np.stack([previous, guess, following])  # the threshold is one of these
    log2 = np.log2(candidates.astype(np.float64))
    exact = log2 == np.round(log2)  # powers of two: log2 is an exact integer in float64 too
    if np.min(np.abs(log2 - midpoint)[~exact]) < 1e-12:  # pragma: no cover - would need more precision
        raise AssertionError("float64 cannot decide a log2 threshold")
    first = np.argmax(log2 > midpoint, axis=0)
    return candidates[first, np.arange(k.size)]


LOG2_THRESHOLDS = _log2_floor_thresholds()


def _fp32_to_ue4m3(x: np.ndarray) -> np.ndarray:
    """ggml_fp32_to_ue4m3 on float32 ``x`` (vectorized): round half up on the 4th mantissa bit,
    subnormals via ``(int)(x * 512 + 0.5)``, saturating at 0x7E (448); ``!(x > 0)`` -> 0."""
    x = np.minimum(np.asarray(x, dtype=np.float32), np.float32(448))
    bits = x.view(np.uint32).astype(np.int64)
    exponent = ((bits >> 23) & 0xFF) - 127 + 7
    mantissa = ((bits >> 20) & 0x7) + ((bits >> 19) & 1)
    exponent, mantissa = np.where(mantissa > 7, exponent + 1, exponent), np.where(mantissa > 7, 0, mantissa)
    normal = np.where(exponent >= 15, 0x7E, (np.clip(exponent, 0, 15) << 3) | mantissa)
    subnormal = np.clip((x * np.float32(512) + np.float32(0.5)).astype(np.int64), 0, 7)
    code = np.where(((bits >> 23) & 0xFF) - 127 + 7 <= 0, subnormal, normal)
    return np.where(x > 0, code, 0).astype(np.uint8)


def _ue4m3_thresholds() -> tuple[np.ndarray, np.ndarray]:
    """(codes, thresholds): ``fp32_to_ue4m3(x) = codes[count(thresholds <= x)]`` for float32 x.

    The conversion is monotone, so each code it produces starts at one float32; a vectorized
    bisection over the float32 bit patterns of [0, 448] finds where."""
    # every code spans >= 2**20 float32s, so a scan in steps of 2**16 bit patterns meets them all
    grid = np.arange(0, 0x43E00001, 1 << 16, dtype=np.uint32).view(np.float32)
    codes = np.unique(_fp32_to_ue4m3(grid))[1:]  # every positive code produced, ascending
    low = np.zeros(codes.size, dtype=np.int64)  # bit pattern whose code is < target
    high = np.full(codes.size, 0x43E00000, dtype=np.int64)  # bit pattern whose code is >= target
    while np.any(high - low > 1):
        middle = (low + high) // 2
        reached = _fp32_to_ue4m3(middle.astype(np.uint32).view(np.float32)) >= codes
        low, high = np.where(reached, low, middle), np.where(reached, middle, high)
    return np.concatenate([[0], codes]).astype(np.uint8), high.astype(np.uint32).view(np.float32)


UE4M3_CODES, UE4M3_THRESHOLDS = _ue4m3_thresholds()


# ---------------------------------------------------------------------- declarations
def _kvalues_field():
    return make_constant_field("kvalues", KVALUES, "ggml kvalues_mxfp4: the E2M1 value of each 4-bit code, doubled")


def mxfp4_fields() -> list:
    return [
        field("e", UINT8, doc="E8M0 exponent; the block scale is 2**(e - 128) (the doubled kvalues make up the 1/2)"),
        field(
            "qs", UINT8, (QK_MXFP4 // 2,), "value j < 16 in the low nibble of byte j, value j + 16 in its high nibble"
        ),
        _kvalues_field(),
    ]


def nvfp4_fields() -> list:
    return [
        field(
            "d",
            UINT8,
            (QK_NVFP4 // QK_NVFP4_SUB,),
            "unsigned E4M3 scale (bias 7, 0x00/0x7F = 0) of each 16 values, halved",
        ),
        field(
            "qs",
            UINT8,
            (QK_NVFP4 // 2,),
            "per 16 values 8 bytes: value j < 8 in the low nibble of byte j, j + 8 in the high",
        ),
        _kvalues_field(),
    ]


# ---------------------------------------------------------------------- decoders
def _kvalues(g: FunctionBuilder, codes: str) -> str:
    """INT8 ``KVALUES[codes]`` of uint8 4-bit ``codes``, by uint8 arithmetic.

    onnxruntime's Gather costs far more per index than uint8 Add/Mul/Min/Max/compare per element
    (docs/benchmarks.md), so a dozen element-wise passes are cheaper than one lookup per value.
    Code ``c = 8 s + m``: ``K[m] = (0, 1, 2, 3, 4, 6, 8, 12)[m] = max(m + 4, 2 m) + max(2 m, 12) - 16``
    and the value is ``K[m]`` times ``1 - 2 s``, all exact in wrapping uint8 (the product is
    reinterpreted as int8)."""
    m = g.op("Min", codes, g.op("Add", codes, g.const(np.uint8(248))))  # c - 8 wraps above 247 for c < 8
    twice = g.op("Add", m, m)
    k = g.op("Add", g.op("Max", g.op("Add", m, g.const(np.uint8(4))), twice), g.op("Max", twice, g.const(np.uint8(12))))
    k = g.op("Sub", k, g.const(np.uint8(16)))
    negative = g.cast(g.op("GreaterOrEqual", codes, g.const(np.uint8(8))), UINT8)
    sign = g.op("Add", g.op("Mul", negative, g.const(np.uint8(254))), g.const(np.uint8(1)))  # 1 or 255 (= -1)
    return g.cast(g.op("Mul", k, sign), INT8)


def decode_mxfp4(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_MXFP4", ["e", "qs"])
    values = _kvalues(g, nibbles(g, "qs", n, QK_MXFP4 // 2))  # int8 [n, 32]
    # d * kvalue: a power of two times a small integer, one rounding as gguf-py's float32 product
    return g.finish(dequantize_rows(g, values, g.gather(E8M0_HALF, g.index("e"))), shape)


def decode_nvfp4(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_NVFP4", ["d", "qs"])
    values = _kvalues(g, nibbles(g, "qs", n * 4, QK_NVFP4_SUB // 2))  # int8 [n * 4, 16]
    d = g.reshape(g.gather(UE4M3_HALF, g.index("d")), [n * 4])
    return g.finish(dequantize_rows(g, values, d), shape)


# ---------------------------------------------------------------------- encoders
def _best_index(g: FunctionBuilder, x: str, d: str) -> str:
    """UINT8 code minimizing ``|kvalues * d - x|`` (float32, first index on ties; NaN and ±inf,
    whose errors are all NaN or all inf, get code 0 as in gguf-py and ggml)."""
    candidates = g.op("Mul", g.op("Unsqueeze", d, g.axes(-1)), g.const(KVALUES.astype(np.float32)))
    errors = g.op("Abs", g.op("Sub", candidates, g.op("Unsqueeze", x, g.axes(-1))))
    best = g.op("ArgMin", errors, axis=-1, keepdims=0, select_last_index=0)
    return g.cast(g.where(g.not_finite(x), np.int64(0), best), UINT8)


def _pack_halves(g: FunctionBuilder, codes: str, half: int, axis: int) -> str:
    """``codes[..., :half] | codes[..., half:] << 4`` along ``axis`` (uint8)."""
    low = g.slice(codes, 0, half, axis)
    high = g.shl(g.slice(codes, half, 2 * half, axis), np.uint8(4))
    return g.op("BitwiseOr", low, high)


def encode_mxfp4(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("encode_MXFP4", ["x"])
    x = g.reshape("x", [n, QK_MXFP4])
    amax = g.op("ReduceMax", g.op("Abs", x), g.axes(1), keepdims=1)  # [n, 1]
    # e = floor(log2f(amax)) - 2 + 127, wrapped to uint8 like gguf-py's astype(np.uint8) on x86
    floor_log2 = g.op("Add", g.count_at_least(amax, LOG2_THRESHOLDS), g.const(np.int32(-149)))
    e = g.op("BitwiseAnd", g.op("Add", floor_log2, g.const(np.int32(125))), g.const(np.int32(0xFF)))
    # amax == 0 gives e = 0 (np.where(d > 0, ...)); NaN anywhere makes gguf-py's amax NaN -> 0 too;
    # inf gives floor(log2) = inf, whose uint8 cast is 0 on x86. (ReduceMax may skip NaN: test it.)
    zero = g.op("Or", g.op("Not", g.op("Greater", amax, g.const(np.float32(0)))), g.block_any(g.not_finite(x)))
    e = g.cast(g.where(zero, np.int32(0), e), UINT8)
    d = g.gather(E8M0_HALF, g.index(e))  # [n, 1]
    codes = _best_index(g, x, d)  # [n, 32]
    g.reshape(e, [n], out="e")
    g.op("Identity", _pack_halves(g, codes, QK_MXFP4 // 2, axis=1), out="qs")
    return g.build(["e", "qs"])


def encode_nvfp4(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("encode_NVFP4", ["x"])
    x = g.reshape("x", [n, 4, QK_NVFP4_SUB])
    # ggml's amax loop (`if (amax < fabsf(v))`) skips NaN: take |x| with NaN as 0
    magnitude = g.where(g.op("IsNaN", x), np.float32(0), g.op("Abs", x))
    amax = g.op("ReduceMax", magnitude, g.axes(2), keepdims=1)  # [n, 4, 1]
    scaled = g.op("Div", amax, g.const(np.float32(6)))
    ue = g.gather(UE4M3_CODES, g.count_at_least(scaled, UE4M3_THRESHOLDS))  # uint8 [n, 4, 1]
    codes = _best_index(g, x, g.gather(UE4M3_HALF, g.index(ue)))  # [n, 4, 16]
    g.reshape(ue, [n, 4], out="d")
    g.reshape(_pack_halves(g, codes, QK_NVFP4_SUB // 2, axis=2), [n, QK_NVFP4 // 2], out="qs")
    return g.build(["d", "qs"])


FORMATS: dict[str, BlockFormat] = register_formats(
    "gguf",
    [
        FormatSpec(
            "MXFP4",
            QK_MXFP4,
            1 + QK_MXFP4 // 2,
            mxfp4_fields,
            decode_mxfp4,
            encode_mxfp4,
            "GGUF MXFP4: 32 E2M1 values (ggml kvalues_mxfp4, doubled) times 2**(e - 128)",
        ),
        FormatSpec(
            "NVFP4",
            QK_NVFP4,
            QK_NVFP4 // QK_NVFP4_SUB + QK_NVFP4 // 2,
            nvfp4_fields,
            decode_nvfp4,
            encode_nvfp4,
            "GGUF NVFP4: 64 E2M1 values (kvalues_mxfp4, doubled) in 4 groups of 16, each times a halved UE4M3 scale",
        ),
    ],
)
MXFP4, NVFP4 = FORMATS["MXFP4"], FORMATS["NVFP4"]
