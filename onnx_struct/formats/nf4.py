"""NF4: the 4-bit NormalFloat of QLoRA / bitsandbytes, in blocks of 64 with a float32 absmax.

A 36-byte block interleaves bitsandbytes' two buffers: ``absmax`` (FLOAT), ``qs`` (UINT8[32], the
first value in the high nibble, as bitsandbytes packs) and the constant codebook ``code``. The
decoder is ``code[q] * absmax``, as bitsandbytes' ``dequantize_4bit``; the encoder follows its
pure-torch ``quantize_4bit``, with three departures where bitsandbytes computes ``x * inf`` (an
all-zero block, an absmax below 2**-128, NaN values).

Notes: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import UINT8, FunctionBuilder, field
from onnx_struct.schema.builders import make_constant_field

BLOCK_SIZE = 64
ZERO_CODE = 7

# The NF4 codebook, exactly as float32: Dettmers et al., "QLoRA" (2023), appendix E, and
# bitsandbytes' _NF4_QUANT_TABLE (bitsandbytes/backends/utils.py) / get_4bit_type("nf4").
CODE = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)


def nf4_fields() -> list:
    return [
        field("absmax", TensorProto.FLOAT, doc="absolute maximum of the block: its scale"),
        field(
            "qs",
            UINT8,
            (BLOCK_SIZE // 2,),
            "codes, two per byte, value 2i in the HIGH nibble of byte i (bitsandbytes' order)",
        ),
        make_constant_field("code", CODE, "the NF4 codebook (QLoRA appendix E); value = code[q] * absmax"),
    ]


def decode_nf4(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_NF4", ["absmax", "qs", "code"])
    first, second = g.shr("qs", np.uint8(4)), g.band("qs", np.uint8(0x0F))
    pairs = g.op("Concat", *(g.op("Unsqueeze", v, g.axes(2)) for v in (first, second)), axis=2)  # [n, 32, 2]
    values = g.gather("code", g.index(g.reshape(pairs, [n, BLOCK_SIZE])))
    return g.finish(g.op("Mul", values, g.reshape("absmax", [n, 1])), shape)


def encode_nf4(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("encode_NF4", ["x"])
    x = g.reshape("x", [n, BLOCK_SIZE])
    is_nan = g.op("IsNaN", x)
    x = g.where(is_nan, np.float32(0), x)
    absmax = g.op("ReduceMax", g.op("Abs", x), g.axes(1), keepdims=1)  # [n, 1]
    # bitsandbytes multiplies by the float32 reciprocal; a zero block divides by 1 instead of 0,
    # and below 2**-128, where the reciprocal overflows, x / absmax is used instead of x * inf
    safe = g.where(g.op("Equal", absmax, g.const(np.float32(0))), np.float32(1), absmax)
    reciprocal = g.op("Div", g.const(np.float32(1)), safe)
    ratio = g.where(g.op("IsInf", reciprocal), g.op("Div", x, safe), g.op("Mul", x, reciprocal))
    scaled = g.op("Clip", ratio, g.const(np.float32(-1)), g.const(np.float32(1)))
    errors = g.op("Abs", g.op("Sub", g.op("Unsqueeze", scaled, g.axes(2)), g.const(CODE)))  # [n, 64, 16]
    codes = g.cast(g.op("ArgMin", errors, axis=2, keepdims=0, select_last_index=0), UINT8)
    pairs = g.reshape(codes, [n, BLOCK_SIZE // 2, 2])
    first = g.shl(g.slice(pairs, 0, 1, 2), np.uint8(4))
    packed = g.op("BitwiseOr", first, g.slice(pairs, 1, 2, 2))
    g.reshape(packed, [n, BLOCK_SIZE // 2], out="qs")
    g.reshape(absmax, [n], out="absmax")
    return g.build(["absmax", "qs"])


FORMATS: dict[str, BlockFormat] = register_formats(
    "nf4",
    [
        FormatSpec(
            "NF4",
            BLOCK_SIZE,
            4 + BLOCK_SIZE // 2,
            nf4_fields,
            decode_nf4,
            encode_nf4,
            "NF4 (QLoRA / bitsandbytes): 64 codes into the NormalFloat codebook, times the float32 absmax",
        ),
    ],
)
NF4 = FORMATS["NF4"]
