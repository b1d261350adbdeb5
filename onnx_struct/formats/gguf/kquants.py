"""GGUF's K-quant block formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256 weights).

Each decoder mirrors gguf-py's ``dequantize_blocks``: the sub-block scales are products
``d * scale`` in float32, then every weight is one more product (``dl * q``, via
DequantizeLinear) and, for the formats with minimums, one subtraction (``- ml``), so the result
is bit-identical. gguf-py has no quantizer for these types; their encoders
(:mod:`._kquant_encode`) reproduce llama.cpp's reference quantizers byte for byte instead.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import FLOAT16, INT8, UINT8, FunctionBuilder, field
from onnx_struct.formats.gguf._kquant_encode import (
    encode_q2_k,
    encode_q3_k,
    encode_q4_k,
    encode_q5_k,
    encode_q6_k,
)
from onnx_struct.formats.gguf._ops import (
    add_rows,
    bit_fields,
    bit_planes,
    dequantize_rows,
    nibbles,
    scaled_down,
)

QK_K = 256


def _sub_scales(
    b: FunctionBuilder,
    scale: str,
    values: str,
    shape: tuple[int, int],
    *,
    times: int = 1,
    negate: bool = False,
    zero_point: int | None = None,
) -> str:
    """gguf-py's sub-block scales ``d * sc`` as a flat ``[n * k]`` vector, from ``values`` of ``shape [n, k]``
    and the super-block scale leaf ``scale [n]`` (FLOAT16), in one DequantizeLinear.

    DequantizeLinear rounds ``float(sc - zero_point) * d`` once, as gguf-py's float32 product
    does. ``times`` divides ``d`` first (``d / times * sc`` is ``d * sc / times`` exactly: a power
    of two, and no FLOAT16 scale times a small integer comes near float32's subnormals), the
    partner of quants scaled up by ``times``; ``negate`` gives ``-(d * sc)`` (exact), so a minimum
    is subtracted by an addition. Both act on ``n`` values, not on ``n * k``.
    """
    d = b.to_float(scale)
    if times != 1:
        d = scaled_down(b, d, times)
    if negate:
        d = b.op("Neg", d)
    n, k = shape
    return b.reshape(dequantize_rows(b, b.reshape(values, [n, k]), d, zero_point), [n * k])


def _scale_min_k4(b: FunctionBuilder, n: int) -> tuple[str, str]:
    """Q4_K/Q5_K's 12 ``scales`` bytes -> eight 6-bit scales and eight 6-bit minimums ``[n, 8]``.

    gguf-py's ``Q4_K.get_scale_min``: bytes 0-3 hold scales 0-3 (low 6 bits), bytes 4-7 minimums
    0-3, bytes 8-11 the low nibbles of scales/minimums 4-7, whose top 2 bits are the top bits of
    bytes 0-3 / 4-7. Small tensors, so plain bitwise ops.
    """
    low6, top2, nibble = b.const(0x3F, np.uint8), b.const(0x30, np.uint8), b.const(0x0F, np.uint8)
    d_part, m_part, md_part = (b.slice("scales", start, start + 4, 1) for start in (0, 4, 8))
    scale = b.op(
        "Concat",
        b.op("BitwiseAnd", d_part, low6),
        b.op(
            "BitwiseOr",
            b.op("BitwiseAnd", md_part, nibble),
            b.op("BitwiseAnd", b.shr(d_part, np.uint8(2)), top2),
        ),
        axis=1,
    )
    minimum = b.op(
        "Concat",
        b.op("BitwiseAnd", m_part, low6),
        b.op("BitwiseOr", b.shr(md_part, np.uint8(4)), b.op("BitwiseAnd", b.shr(m_part, np.uint8(2)), top2)),
        axis=1,
    )
    return scale, minimum


def _decode_q2_k(n: int, shape):
    b = FunctionBuilder("decode_Q2_K", ["scales", "qs", "d", "dmin"], doc_string="d*sc * q - dmin*m per 16 weights")
    high = b.shr("scales", np.uint8(4))
    low = b.op("Sub", "scales", b.op("Mul", high, b.const(16, np.uint8)))
    # 64 * q, and dl / 64: the same product of two exact factors (see bit_fields).
    q64 = b.reshape(bit_fields(b, "qs", n * 2, 32, width=2, scaled=True), [n * 16, 16])  # [n, 2, 4, 32]
    y = dequantize_rows(b, q64, _sub_scales(b, "d", low, (n, 16), times=64))
    y = add_rows(b, y, _sub_scales(b, "dmin", high, (n, 16), negate=True), n * 16)
    return b.finish(y, shape)


def _decode_q3_k(n: int, shape):
    b = FunctionBuilder("decode_Q3_K", ["hmask", "qs", "scales", "d"], doc_string="d*(sc-32) * (q - 4*(1-hbit))")
    # 16 six-bit scales: low nibbles in bytes 0-7 (two per byte), top 2 bits in bytes 8-11.
    low = nibbles(b, b.slice("scales", 0, 8, 1), n, 8)
    high = bit_fields(b, b.slice("scales", 8, 12, 1), n, 4, width=2)
    scale = b.op("Add", low, b.op("Mul", high, b.const(16, np.uint8)))
    dl = _sub_scales(b, "d", scale, (n, 16), zero_point=32)  # d * (scale - 32)
    ql = b.reshape(bit_fields(b, "qs", n * 2, 32, width=2), [n, QK_K])
    # gguf-py: ql - 4 * (hbit ^ 1) = (ql + 4 * hbit) - 4, an exact small integer either way.
    q = b.op("Add", ql, bit_planes(b, "hmask", n, 32, value=4))
    y = dequantize_rows(b, b.reshape(q, [n * 16, 16]), dl, zero_point=4)
    return b.finish(y, shape)


def _decode_q4_k(n: int, shape):
    b = FunctionBuilder("decode_Q4_K", ["d", "dmin", "scales", "qs"], doc_string="d*sc * q - dmin*m per 32 weights")
    scale, minimum = _scale_min_k4(b, n)
    q16 = b.reshape(nibbles(b, "qs", n * 4, 32, times=16), [n * 8, 32])  # 16 * q, [n, 4, 2, 32]
    y = dequantize_rows(b, q16, _sub_scales(b, "d", scale, (n, 8), times=16))
    y = add_rows(b, y, _sub_scales(b, "dmin", minimum, (n, 8), negate=True), n * 8)
    return b.finish(y, shape)


def _decode_q5_k(n: int, shape):
    b = FunctionBuilder(
        "decode_Q5_K", ["d", "dmin", "scales", "qh", "qs"], doc_string="d*sc * q - dmin*m per 32 weights"
    )
    scale, minimum = _scale_min_k4(b, n)
    low = b.reshape(nibbles(b, "qs", n * 4, 32), [n, QK_K])
    q = b.op("Add", low, bit_planes(b, "qh", n, 32, value=16))
    y = dequantize_rows(b, b.reshape(q, [n * 8, 32]), _sub_scales(b, "d", scale, (n, 8)))
    y = add_rows(b, y, _sub_scales(b, "dmin", minimum, (n, 8), negate=True), n * 8)
    return b.finish(y, shape)


def _decode_q6_k(n: int, shape):
    b = FunctionBuilder("decode_Q6_K", ["ql", "qh", "scales", "d"], doc_string="d*scale * (q - 32) per 16 weights")
    # 4 * q = 4 * (ql nibble) + 64 * (qh field), with zero point 4 * 32 and scale / 4: the field
    # comes out of bit_fields already times 64 (a mask, no shift).
    low = b.reshape(nibbles(b, "ql", n * 2, 64, times=4), [n, QK_K])
    high = b.reshape(bit_fields(b, "qh", n * 2, 32, width=2, scaled=True), [n, QK_K])
    q4 = b.reshape(b.op("Add", low, high), [n * 16, 16])
    y = dequantize_rows(b, q4, _sub_scales(b, "d", "scales", (n, 16), times=4), zero_point=128)
    return b.finish(y, shape)


_D = "FLOAT16 super-block scale"
_DMIN = "FLOAT16 super-block scale of the minimums"
_K4_SCALES = "8 six-bit scales and 8 six-bit minimums, packed (ggml get_scale_min_k4)"

FORMATS: dict[str, BlockFormat] = register_formats(
    "gguf",
    [
        FormatSpec(
            "Q2_K",
            QK_K,
            2 + 2 + QK_K // 16 + QK_K // 4,
            lambda: [
                field("scales", UINT8, (16,), "per 16 weights: scale (low nibble), minimum (high nibble)"),
                field("qs", UINT8, (64,), "2-bit quants, four per byte"),
                field("d", FLOAT16, doc=_D),
                field("dmin", FLOAT16, doc=_DMIN),
            ],
            _decode_q2_k,
            encode_q2_k,
            description="GGML Q2_K: 256 weights = d*scale * q2 - dmin*min per 16.",
        ),
        FormatSpec(
            "Q3_K",
            QK_K,
            2 + QK_K // 4 + QK_K // 8 + 12,
            lambda: [
                field("hmask", UINT8, (32,), "high bits of the 3-bit quants (set means no -4 offset)"),
                field("qs", UINT8, (64,), "low 2 bits of the quants, four per byte"),
                field("scales", UINT8, (12,), "16 six-bit scales (biased by 32), packed"),
                field("d", FLOAT16, doc=_D),
            ],
            _decode_q3_k,
            encode_q3_k,
            description="GGML Q3_K: 256 weights = d*(scale-32) * q3 per 16.",
        ),
        FormatSpec(
            "Q4_K",
            QK_K,
            2 + 2 + 12 + QK_K // 2,
            lambda: [
                field("d", FLOAT16, doc=_D),
                field("dmin", FLOAT16, doc=_DMIN),
                field("scales", UINT8, (12,), _K4_SCALES),
                field("qs", UINT8, (128,), "4-bit quants: per 32 bytes, low nibbles then high nibbles"),
            ],
            _decode_q4_k,
            encode_q4_k,
            description="GGML Q4_K: 256 weights = d*scale * q4 - dmin*min per 32.",
        ),
        FormatSpec(
            "Q5_K",
            QK_K,
            2 + 2 + 12 + QK_K // 8 + QK_K // 2,
            lambda: [
                field("d", FLOAT16, doc=_D),
                field("dmin", FLOAT16, doc=_DMIN),
                field("scales", UINT8, (12,), _K4_SCALES),
                field("qh", UINT8, (32,), "fifth bits: bit j of byte l belongs to weight 32*j + l"),
                field("qs", UINT8, (128,), "low 4 bits: per 32 bytes, low nibbles then high nibbles"),
            ],
            _decode_q5_k,
            encode_q5_k,
            description="GGML Q5_K: 256 weights = d*scale * q5 - dmin*min per 32.",
        ),
        FormatSpec(
            "Q6_K",
            QK_K,
            2 + QK_K // 2 + QK_K // 4 + QK_K // 16,
            lambda: [
                field("ql", UINT8, (128,), "low 4 bits of the 6-bit quants"),
                field("qh", UINT8, (64,), "high 2 bits of the 6-bit quants, four per byte"),
                field("scales", INT8, (16,), "signed scale per 16 weights"),
                field("d", FLOAT16, doc=_D),
            ],
            _decode_q6_k,
            encode_q6_k,
            description="GGML Q6_K: 256 weights = d*scale * (q6 - 32) per 16.",
        ),
    ],
)
