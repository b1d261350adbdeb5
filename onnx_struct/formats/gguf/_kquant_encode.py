"""Encoders of the K-quants, bit-identical to ggml's ``quantize_row_q{4,5,6}_K_ref``.

Each encoder reshapes ``x`` into sub-block columns ``[k, S]``, runs ggml's scale search
(:mod:`._kquant_search`), quantizes the sub-block scales against the block's largest one (6 or 8
bits, the super-block scale stored as FLOAT16), requantizes every weight with the stored
(FLOAT16-rounded) scales where the sub-block's scale is non-zero (ggml keeps the search's quants
where it is zero), and packs the fields in ggml's layout. Small integers (quants, 6-bit scales)
are carried as exact float32 values until the final Cast.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.function_builder import BITCAST_OPSET, FLOAT, FLOAT16, INT8, UINT8, FunctionBuilder
from onnx_struct.formats.gguf._kquant_search import (
    GROUP_MAX_EPS,
    f32,
    first_largest_magnitude,
    make_q3_quants,
    make_qkx2_quants,
    make_qx_quants,
    nearest_int,
    rounded,
    row_sum,
)

QK_K = 256


def _columns(b: FunctionBuilder, x: str, n: int, k: int) -> str:
    """``x`` (n blocks of 256) as sub-block columns ``[k, 256 // k * n]``."""
    return b.op("Transpose", b.reshape(x, [n * QK_K // k, k]), perm=[1, 0])


def _blocks(b: FunctionBuilder, columns: str, n: int, dims: list[int]) -> str:
    """Sub-block columns ``[k, S]`` back in weight order, reshaped to ``[n, *dims]``."""
    return b.reshape(b.op("Transpose", columns, perm=[1, 0]), [n, *dims])


def _fp16_round_trip(b: FunctionBuilder, value: str) -> tuple[str, str]:
    """``(half, float(half))``: ggml's GGML_FP32_TO_FP16 (round to nearest even, which Cast does)
    and the float32 its dequantizer reads back."""
    half = b.cast(value, FLOAT16)
    return half, b.cast(half, FLOAT)


def _requantize(b: FunctionBuilder, x: str, kept: str, scale: str, offset: str | None, low: int, high: int) -> str:
    """ggml's final pass: ``clamp(nearest_int((x + offset) / scale))`` per sub-block column, the
    search's quants ``kept`` where the stored ``scale [1, S]`` is 0 (ggml's ``if (!d) continue``)."""
    numerator = x if offset is None else b.op("Add", x, offset)
    fresh = rounded(b, b.op("Div", numerator, scale), low, high)
    if low:
        fresh = b.op("Add", fresh, b.const(f32(-low)))
    return b.op("Where", b.op("Equal", scale, b.const(f32(0))), kept, fresh)


def _positive_max(b: FunctionBuilder, values: str) -> str:
    """ggml's ``max = 0; if (v > max) max = v`` per row of ``values [n, m]``: ``[n, 1]``."""
    top = b.op("ReduceMax", values, b.axes(1), keepdims=1)
    zero = b.const(f32(0))
    return b.op("Where", b.op("Greater", top, zero), top, zero)


def _six_bit(b: FunctionBuilder, values: str, top: str) -> str:
    """``MIN(63, (uint8_t) nearest_int(63/top * v))`` (``0`` factor when ``top`` is 0) as UINT8;
    the uint8 store wraps a negative value first, as C does."""
    return b.cast(b.op("Min", _codes(b, values, top, 63), b.const(63, np.int32)), UINT8)


def _k4_scales(b: FunctionBuilder, scale: str, minimum: str) -> str:
    """ggml's 12-byte packing of eight 6-bit scales and minimums (UINT8 ``[n, 8]`` each): bytes
    0-3 scales 0-3 | top bits of scales 4-7 << 6, bytes 4-7 the same for minimums, bytes 8-11
    the low nibbles of scales 4-7 | those of minimums 4-7 << 4."""
    parts = []
    for values in (scale, minimum):
        low, high = b.slice(values, 0, 4, 1), b.slice(values, 4, 8, 1)
        parts.append(b.op("Add", low, b.op("Mul", b.shr(high, np.uint8(4)), b.const(64, np.uint8))))
    nibble = b.const(15, np.uint8)
    high_scale = b.op("BitwiseAnd", b.slice(scale, 4, 8, 1), nibble)
    high_min = b.op("BitwiseAnd", b.slice(minimum, 4, 8, 1), nibble)
    parts.append(b.op("Add", high_scale, b.op("Mul", high_min, b.const(16, np.uint8))))
    return b.op("Concat", *parts, axis=1, out="scales")


def _pack_pairs(b: FunctionBuilder, quants: str, n: int, out: str) -> str:
    """4-bit quants ``[n, 4, 2, 32]`` (exact floats 0..15) -> ``qs [n, 128]``: per 64 weights,
    byte ``l`` is weight ``l`` | weight ``32 + l`` << 4."""
    first = b.reshape(b.slice(quants, 0, 1, 2), [n, 4, 32])
    second = b.reshape(b.slice(quants, 1, 2, 2), [n, 4, 32])
    packed = b.op("Add", first, b.op("Mul", second, b.const(f32(16))))
    return b.cast(b.reshape(packed, [n, 128]), UINT8, out=out)


def _weighted_fit(b: FunctionBuilder, x: str, n: int, nmax: int, rmin: float, nstep: int):
    """Q4_K/Q5_K's common part: per 32 weights, weights ``sqrt(sum(x^2) / 32) + |x|`` and
    make_qkx2_quants; then the 6-bit scales and minimums and the two FLOAT16 super-block scales.
    Returns ``(xt, quants [32, S], d, dmin, scales UINT8 [n, 12])``."""
    xt = _columns(b, x, n, 32)
    sum_x2 = row_sum(b, b.op("Mul", xt, xt), 32)
    spread = b.op("Sqrt", b.op("Div", sum_x2, b.const(f32(32))))
    w = b.op("Add", spread, b.op("Abs", xt))
    quants, scale, the_min = make_qkx2_quants(b, xt, w, 32, nmax, rmin, 0.1, nstep, use_mad=False)
    scale, the_min = b.reshape(scale, [n, 8]), b.reshape(the_min, [n, 8])
    max_scale, max_min = _positive_max(b, scale), _positive_max(b, the_min)
    ls, lm = _six_bit(b, scale, max_scale), _six_bit(b, the_min, max_min)
    d, d_value = _fp16_round_trip(b, b.op("Div", max_scale, b.const(f32(63))))
    dmin, dmin_value = _fp16_round_trip(b, b.op("Div", max_min, b.const(f32(63))))
    sub_scale = b.reshape(b.op("Mul", d_value, b.cast(ls, FLOAT)), [1, n * 8])
    sub_min = b.reshape(b.op("Mul", dmin_value, b.cast(lm, FLOAT)), [1, n * 8])
    quants = _requantize(b, xt, quants, sub_scale, sub_min, 0, nmax)
    return quants, b.reshape(d, [n], out="d"), b.reshape(dmin, [n], out="dmin"), _k4_scales(b, ls, lm)


def _signed_fit(b: FunctionBuilder, n: int, search) -> tuple[str, str, str, str, str]:
    """Q6_K/Q3_K's common start: per 16 weights, the signed scale ``search(xt)`` returns with the
    quants; then the block's largest scale magnitude and that scale, signed (ggml's first
    ``fabsf(scale) > amax``). Returns ``(xt, quants, scale [n, 16], amax, max_scale)``."""
    xt = _columns(b, "x", n, 16)
    quants, scale = search(xt)
    scale = b.reshape(scale, [n, 16])
    top, signed_top = first_largest_magnitude(b, scale, 1)
    return xt, quants, scale, top, signed_top


def encode_q4_k(n: int, shape: tuple[int, ...]):
    b = FunctionBuilder("encode_Q4_K", ["x"], BITCAST_OPSET, doc_string="ggml quantize_row_q4_K_ref")
    quants, d, dmin, scales = _weighted_fit(b, "x", n, 15, -1.0, 20)
    qs = _pack_pairs(b, _blocks(b, quants, n, [4, 2, 32]), n, "qs")
    return b.build([d, dmin, scales, qs])


def encode_q5_k(n: int, shape: tuple[int, ...]):
    b = FunctionBuilder("encode_Q5_K", ["x"], BITCAST_OPSET, doc_string="ggml quantize_row_q5_K_ref")
    quants, d, dmin, scales = _weighted_fit(b, "x", n, 31, -0.5, 15)
    quants = _blocks(b, quants, n, [8, 32])  # row 2*j + t: the t-th 32 weights of the j-th 64
    fifth = b.op("Floor", b.op("Mul", quants, b.const(f32(1 / 16))))
    low = b.op("Sub", quants, b.op("Mul", fifth, b.const(f32(16))))
    # qh byte l: bit 2*j + t is the fifth bit of row 2*j + t's weight l (exact small sums)
    bits = b.const((2.0 ** np.arange(8, dtype=np.float32)).reshape(1, 8, 1))
    qh = b.cast(b.op("ReduceSum", b.op("Mul", fifth, bits), b.axes(1), keepdims=0), UINT8, out="qh")
    qs = _pack_pairs(b, b.reshape(low, [n, 4, 2, 32]), n, "qs")
    return b.build([d, dmin, scales, qh, qs])


def encode_q6_k(n: int, shape: tuple[int, ...]):
    b = FunctionBuilder("encode_Q6_K", ["x"], BITCAST_OPSET, doc_string="ggml quantize_row_q6_K_ref")
    xt, quants, scale, top, signed_top = _signed_fit(b, n, lambda xt: make_qx_quants(b, xt, 16, 32))
    zero_block = b.op("Less", top, b.const(GROUP_MAX_EPS))  # [n, 1]: ggml writes a zero block
    inverse = b.op("Div", b.const(f32(-128)), signed_top)
    d, d_value = _fp16_round_trip(b, b.op("Div", b.const(f32(1)), inverse))
    sub = b.cast(_int8(b, b.op("Min", nearest_int(b, b.op("Mul", inverse, scale)), b.const(127, np.int32))), FLOAT)
    sub = b.op("Where", zero_block, b.const(f32(0)), sub)
    sub_scale = b.reshape(b.op("Mul", d_value, sub), [1, n * 16])
    quants = _requantize(b, xt, quants, sub_scale, None, -32, 31)
    quants = _blocks(b, quants, n, [2, 4, 32])  # [n, half, k, l]: weight 128*half + 32*k + l
    quants = b.op("Where", b.reshape(zero_block, [n, 1, 1, 1]), b.const(f32(0)), quants)
    high = b.op("Floor", b.op("Mul", quants, b.const(f32(1 / 16))))
    low = b.op("Sub", quants, b.op("Mul", high, b.const(f32(16))))
    # ql: per half, bytes l and 32 + l hold k = 0 and 1 in the low nibble, k = 2 and 3 in the high
    ql = b.op("Add", b.slice(low, 0, 2, 2), b.op("Mul", b.slice(low, 2, 4, 2), b.const(f32(16))))
    ql = b.cast(b.reshape(ql, [n, 128]), UINT8, out="ql")
    # qh byte l of a half: bits 2k..2k+1 hold the top two bits of k's weight l
    shifts = b.const((4.0 ** np.arange(4, dtype=np.float32)).reshape(1, 1, 4, 1))
    qh = b.op("ReduceSum", b.op("Mul", high, shifts), b.axes(2), keepdims=0)
    qh = b.cast(b.reshape(qh, [n, 64]), UINT8, out="qh")
    scales = b.cast(sub, INT8, out="scales")
    d = b.reshape(b.op("Where", b.reshape(zero_block, [n]), b.const(np.float16(0)), b.reshape(d, [n])), [n], out="d")
    return b.build([ql, qh, scales, d])


def _pack_crumbs(b: FunctionBuilder, quants: str, n: int, out: str) -> str:
    """2-bit quants ``[n, 2, 4, 32]`` (exact floats 0..3) -> ``qs [n, 64]``: per 128 weights,
    byte ``l`` holds weight ``32*k + l`` in bits ``2k..2k+1``."""
    shifts = b.const((4.0 ** np.arange(4, dtype=np.float32)).reshape(1, 1, 4, 1))
    packed = b.op("ReduceSum", b.op("Mul", quants, shifts), b.axes(2), keepdims=0)
    return b.cast(b.reshape(packed, [n, 64]), UINT8, out=out)


def _int8(b: FunctionBuilder, value: str) -> str:
    """An INT32 ``value`` as C's store into an ``int8_t`` leaves it (modulo 256, signed)."""
    wrapped = b.op("BitwiseAnd", b.op("Add", value, b.const(128, np.int32)), b.const(255, np.int32))
    return b.op("Sub", wrapped, b.const(128, np.int32))


def _codes(b: FunctionBuilder, values: str, top: str, levels: int) -> str:
    """``(uint8_t) nearest_int(levels/top * v)`` as INT32 0..255, for ``top > 0`` (else 0)."""
    zero = b.const(f32(0))
    factor = b.op("Where", b.op("Greater", top, zero), b.op("Div", b.const(f32(levels)), top), zero)
    return b.op("BitwiseAnd", nearest_int(b, b.op("Mul", factor, values)), b.const(255, np.int32))


def encode_q2_k(n: int, shape: tuple[int, ...]):
    b = FunctionBuilder("encode_Q2_K", ["x"], BITCAST_OPSET, doc_string="ggml quantize_row_q2_K_ref")
    xt = _columns(b, "x", n, 16)
    quants, scale, the_min = make_qkx2_quants(b, xt, b.op("Abs", xt), 16, 3, -0.5, 0.1, 15, use_mad=True)
    scale, the_min = b.reshape(scale, [n, 16]), b.reshape(the_min, [n, 16])
    max_scale, max_min = _positive_max(b, scale), _positive_max(b, the_min)
    # byte j: the 4-bit scale code | the minimum's code << 4 (C's uint8 stores wrap)
    low = b.cast(_codes(b, scale, max_scale, 15), UINT8)
    high = b.op(
        "BitwiseAnd", b.op("Mul", _codes(b, the_min, max_min, 15), b.const(16, np.int32)), b.const(255, np.int32)
    )
    scales = b.op("BitwiseOr", low, b.cast(high, UINT8), out="scales")
    d, d_value = _fp16_round_trip(b, b.op("Div", max_scale, b.const(f32(15))))
    dmin, dmin_value = _fp16_round_trip(b, b.op("Div", max_min, b.const(f32(15))))
    # the final pass reads the codes back from the stored bytes
    sc = b.cast(b.op("BitwiseAnd", scales, b.const(15, np.uint8)), FLOAT)
    m = b.cast(b.shr(scales, np.uint8(4)), FLOAT)
    sub_scale = b.reshape(b.op("Mul", d_value, sc), [1, n * 16])
    sub_min = b.reshape(b.op("Mul", dmin_value, m), [1, n * 16])
    quants = _requantize(b, xt, quants, sub_scale, sub_min, 0, 3)
    qs = _pack_crumbs(b, _blocks(b, quants, n, [2, 4, 32]), n, "qs")
    return b.build([scales, qs, b.reshape(d, [n], out="d"), b.reshape(dmin, [n], out="dmin")])


def encode_q3_k(n: int, shape: tuple[int, ...]):
    b = FunctionBuilder("encode_Q3_K", ["x"], BITCAST_OPSET, doc_string="ggml quantize_row_q3_K_ref")
    xt, quants, scale, _, signed_top = _signed_fit(b, n, lambda xt: make_q3_quants(b, xt, 16, 4))
    zero = b.const(f32(0))
    nonzero = b.op("Not", b.op("Equal", signed_top, zero))  # ggml: if (max_scale)
    inverse = b.op("Div", b.const(f32(-32)), signed_top)
    code = _int8(b, nearest_int(b, b.op("Mul", inverse, scale)))  # ggml stores it in an int8_t first
    codes = b.cast(
        b.op("Add", b.op("Clip", code, b.const(-32, np.int32), b.const(31, np.int32)), b.const(32, np.int32)), FLOAT
    )
    codes = b.op("Where", nonzero, codes, zero)  # [n, 16] in 0..63 (bytes stay 0 without a scale)
    d, d_value = _fp16_round_trip(b, b.op("Where", nonzero, b.op("Div", b.const(f32(1)), inverse), zero))
    sub_scale = b.reshape(b.op("Mul", d_value, b.op("Add", codes, b.const(f32(-32)))), [1, n * 16])
    quants = _requantize(b, xt, quants, sub_scale, None, -4, 3)
    # hmask byte l: bit r is the high bit of weight 32*r + l; qs the low two bits
    quants = _blocks(b, quants, n, [8, 32])
    high = b.cast(b.op("GreaterOrEqual", quants, b.const(f32(4))), FLOAT)
    low = b.op("Sub", quants, b.op("Mul", high, b.const(f32(4))))
    bits = b.const((2.0 ** np.arange(8, dtype=np.float32)).reshape(1, 8, 1))
    hmask = b.cast(b.op("ReduceSum", b.op("Mul", high, bits), b.axes(1), keepdims=0), UINT8, out="hmask")
    qs = _pack_crumbs(b, b.reshape(low, [n, 2, 4, 32]), n, "qs")
    # scales: bytes 0-7 low nibbles of codes j and j + 8; byte 8 + m the top two bits of codes
    # m, m + 4, m + 8, m + 12 at bits 0, 2, 4, 6
    top = b.op("Floor", b.op("Mul", codes, b.const(f32(1 / 16))))
    nibble = b.op("Sub", codes, b.op("Mul", top, b.const(f32(16))))
    nibbles = b.op("Add", b.slice(nibble, 0, 8, 1), b.op("Mul", b.slice(nibble, 8, 16, 1), b.const(f32(16))))
    shifts = b.const((4.0 ** np.arange(4, dtype=np.float32)).reshape(1, 4, 1))
    tops = b.op("ReduceSum", b.op("Mul", b.reshape(top, [n, 4, 4]), shifts), b.axes(1), keepdims=0)
    scales = b.cast(b.op("Concat", nibbles, tops, axis=1), UINT8, out="scales")
    return b.build([hmask, qs, scales, b.reshape(d, [n], out="d")])
