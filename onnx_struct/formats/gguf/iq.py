"""GGUF's IQ ("importance") block types, and through :mod:`.tq` the ternary TQ types, as data.

Each type is one :class:`BlockFormat`: the payload fields in ggml's order with their real ONNX
types, plus the lookup tables the decoder needs as constant fields (zero payload bytes). Rule: the
decoder reproduces ``gguf.quants.dequantize`` bit for bit (gguf-py's float32 scale operations in
its order, then one exact DequantizeLinear product). Where gguf-py splits a ggml array by
meaning, the declaration follows gguf-py's names.

Notes: docs/modules.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import FLOAT16, INT8, INT32, UINT8, UINT16, UINT32, FunctionBuilder, field
from onnx_struct.formats.gguf import iq_grids
from onnx_struct.formats.gguf._iq_graph import bits, f16_bits_to_float, index_hi_lo, sign_table
from onnx_struct.formats.gguf._ops import dequantize_rows, nibble_lookup
from onnx_struct.schema.builders import make_constant_field

QK_K = 256  # elements per super-block of every IQ type but IQ4_NL
QK4_NL = 32
IQ1S_DELTA = np.float32(0.125)  # ggml's IQ1S_DELTA (also IQ1M_DELTA)


# ---------------------------------------------------------------------- helpers
def table(name: str, doc: str = ""):
    """A lookup table from :mod:`iq_grids` as a constant field of the same name."""
    return make_constant_field(name, np.ascontiguousarray(getattr(iq_grids, name)), doc)


def half_scale(g: FunctionBuilder, d: str, c: float, scale: str, shape: Sequence[int]) -> str:
    """gguf-py's ``d * (0.5 + scale) * c`` in float32, reshaped to ``shape``."""
    inner = g.op("Add", g.const(np.float32(0.5)), g.to_float(scale))
    return g.reshape(g.op("Mul", g.op("Mul", d, inner), g.const(np.float32(c))), shape)


def odd_scale(g: FunctionBuilder, d: str, scale: str, dtype) -> str:
    """gguf-py's ``d * (2 * scale + 1)``: the odd integer in ``scale``'s own unsigned type."""
    odd = g.op("Add", g.op("Mul", scale, g.const(np.array(2, dtype=dtype))), g.const(np.array(1, dtype=dtype)))
    return g.op("Mul", d, g.to_float(odd))


def scaled(g: FunctionBuilder, values: str, scale: str, groups: int, shape: Sequence[int]) -> onnx.FunctionProto:
    """The decoder's output: int8 ``values`` in ``groups`` rows times the per-row float32 ``scale``.

    gguf-py computes ``db * grid * signs`` (or ``d * kvalues[q]``); signs are +-1 and grid values
    small integers, so ``db * (grid * signs)`` with the integer product done in int8 rounds once,
    to the same float32."""
    rows = g.reshape(values, [groups, math.prod(shape) // groups if groups else 0])
    return g.finish(dequantize_rows(g, rows, g.reshape(scale, [groups])), shape)


def signed_grid(g: FunctionBuilder, grid: str, signs: str) -> str:
    """int8 ``[len(signs) * len(grid), 8]``: row ``s * len(grid) + i`` is ``grid[i] * signs[s]``."""
    rows = g.op("Mul", g.op("Unsqueeze", signs, g.const(np.array([1], dtype=np.int64))), g.cast(grid, INT8))
    return g.reshape(rows, [-1, 8])


def shifted_grid(g: FunctionBuilder, grid: str, delta: str) -> str:
    """IQ1's grid as int8 ``[2 * len(grid), 8]``: row ``2 * i + negative`` is ``(grid[i] +- delta) / delta``.

    With delta = 1/8 the rows are the odd integers ``8 * grid +- 1``, and ``(dl * delta) * row``
    equals gguf-py's ``dl * (grid +- delta)`` exactly (scaling by a power of two is exact)."""
    inverse = g.op("Reciprocal", delta)
    base = g.op("Mul", g.to_float(g.op("Unsqueeze", grid, g.const(np.array([1], dtype=np.int64)))), inverse)
    rows = g.op("Add", base, g.const(np.array([1, -1], dtype=np.float32).reshape(2, 1)))
    return g.reshape(g.cast(rows, INT8), [-1, 8])


# ---------------------------------------------------------------------- IQ2_XXS
def iq2_xxs_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT16, (QK_K // 8,)),  # per 32 values: 2 words of 4 grid-index bytes, 1 uint32 of signs+scale
        table("iq2xxs_grid", "256 grid rows of 8 magnitudes (ggml uint64_t iq2xxs_grid[256])"),
        table("ksigns_iq2xs", "7-bit sign index -> 8 sign bits with even parity"),
    ]


def decode_iq2_xxs(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ2_XXS", ["d", "qs", "iq2xxs_grid", "ksigns_iq2xs"])
    words = g.reshape("qs", [n, 8, 4])
    grid_index = bits(g, g.slice(words, 0, 2, 2), np.uint16, [0, 8], 8, [n, 8, 4])  # the 4 index bytes
    # flat [n * 8]: onnxruntime runs element-wise ops on a trailing dimension of 1 far slower (docs/benchmarks.md)
    low, high = (g.cast(g.reshape(g.slice(words, k, k + 1, 2), [n * 8]), UINT32) for k in (2, 3))
    aux = g.op("BitwiseOr", low, g.shl(high, np.uint32(16)))  # [n * 8] uint32
    sign_index = bits(g, aux, np.uint32, [0, 7, 14, 21], 7, [n, 8, 4])
    index = g.op("Add", g.op("Mul", g.index(sign_index), g.const(np.int32(256))), g.index(grid_index))
    values = g.gather(signed_grid(g, "iq2xxs_grid", sign_table(g, "ksigns_iq2xs")), index)  # [n, 8, 4, 8]
    db = half_scale(g, g.to_float("d", [n, 1]), 0.25, g.reshape(g.shr(aux, np.uint32(28)), [n, 8]), [n * 8])
    return scaled(g, values, db, n * 8, shape)


# ---------------------------------------------------------------------- IQ2_XS
def iq2_xs_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT16, (QK_K // 8,)),  # 9-bit grid index | 7-bit sign index << 9, per 8 values
        field("scales", UINT8, (QK_K // 32,)),  # 4-bit scales, one per 16 values
        table("iq2xs_grid", "512 grid rows of 8 magnitudes (ggml uint64_t iq2xs_grid[512])"),
        table("ksigns_iq2xs", "7-bit sign index -> 8 sign bits with even parity"),
    ]


def decode_iq2_xs(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ2_XS", ["d", "qs", "scales", "iq2xs_grid", "ksigns_iq2xs"])
    # the signed grid's row sign * 512 + grid is the qs word itself
    values = g.gather(signed_grid(g, "iq2xs_grid", sign_table(g, "ksigns_iq2xs")), g.index("qs"))  # [n, 32, 8]
    scales = bits(g, "scales", np.uint8, [0, 4], 4, [n, 16])
    db = half_scale(g, g.to_float("d", [n, 1]), 0.25, scales, [n * 16])
    return scaled(g, values, db, n * 16, shape)


# ---------------------------------------------------------------------- IQ2_S
def iq2_s_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT8, (QK_K // 8,)),  # low 8 bits of the 10-bit grid indices (ggml: first half of qs[64])
        field("signs", UINT8, (QK_K // 8,)),  # one sign bit per value (ggml: second half of qs[64])
        field("qh", UINT8, (QK_K // 32,)),  # high 2 bits of the grid indices, 4 per byte
        field("scales", UINT8, (QK_K // 32,)),  # 4-bit scales, one per 16 values
        table("iq2s_grid", "1024 grid rows of 8 magnitudes (ggml uint64_t iq2s_grid[1024])"),
    ]


def decode_iq2_s(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ2_S", ["d", "qs", "signs", "qh", "scales", "iq2s_grid"])
    high = bits(g, "qh", np.uint8, [0, 2, 4, 6], 2, [n, 32])
    grid = g.gather(g.cast("iq2s_grid", INT8), index_hi_lo(g, "qs", high, [n, 32]))  # [n, 32, 8]
    signs = g.gather(sign_table(g, g.const(np.arange(256, dtype=np.uint8))), g.index("signs"))
    scales = bits(g, "scales", np.uint8, [0, 4], 4, [n, 16])
    db = half_scale(g, g.to_float("d", [n, 1]), 0.25, scales, [n * 16])
    return scaled(g, g.op("Mul", grid, signs), db, n * 16, shape)


# ---------------------------------------------------------------------- IQ3_XXS
def iq3_xxs_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT8, (QK_K // 4,)),  # grid indices, one per 4 values
        field("scales", UINT32, (QK_K // 32,)),  # ggml scales_and_signs: 4x7-bit signs | scale << 28
        table("iq3xxs_grid", "256 grid rows of 4 magnitudes (ggml uint32_t iq3xxs_grid[256])"),
        table("ksigns_iq2xs", "7-bit sign index -> 8 sign bits with even parity"),
    ]


def decode_iq3_xxs(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ3_XXS", ["d", "qs", "scales", "iq3xxs_grid", "ksigns_iq2xs"])
    grid = g.gather(g.cast("iq3xxs_grid", INT8), g.index(g.reshape("qs", [n, 8, 8])))  # [n, 8, 8, 4]
    sign_index = bits(g, "scales", np.uint32, [0, 7, 14, 21], 7, [n, 8, 4])
    signs = g.gather(sign_table(g, "ksigns_iq2xs"), g.index(sign_index))  # [n, 8, 4, 8]
    values = g.op("Mul", g.reshape(grid, [n, 8, 4, 8]), signs)
    db = half_scale(g, g.to_float("d", [n, 1]), 0.5, g.shr("scales", np.uint32(28)), [n * 8])
    return scaled(g, values, db, n * 8, shape)


# ---------------------------------------------------------------------- IQ3_S
def iq3_s_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT8, (QK_K // 4,)),  # low 8 bits of the 9-bit grid indices
        field("qh", UINT8, (QK_K // 32,)),  # high bit of the grid indices, 8 per byte
        field("signs", UINT8, (QK_K // 8,)),  # one sign bit per value
        field("scales", UINT8, (QK_K // 64,)),  # 4-bit scales, one per 32 values
        table("iq3s_grid", "512 grid rows of 4 magnitudes (ggml uint32_t iq3s_grid[512])"),
    ]


def decode_iq3_s(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ3_S", ["d", "qs", "qh", "signs", "scales", "iq3s_grid"])
    high = bits(g, "qh", np.uint8, range(8), 1, [n, 64])
    grid = g.gather(g.cast("iq3s_grid", INT8), index_hi_lo(g, "qs", high, [n, 32, 2]))  # [n, 32, 2, 4]
    signs = g.gather(sign_table(g, g.const(np.arange(256, dtype=np.uint8))), g.index("signs"))  # [n, 32, 8]
    values = g.op("Mul", g.reshape(grid, [n, 32, 8]), signs)
    scales = bits(g, "scales", np.uint8, [0, 4], 4, [n, 8])
    db = odd_scale(g, g.to_float("d", [n, 1]), scales, np.uint8)
    return scaled(g, values, db, n * 8, shape)


# ---------------------------------------------------------------------- IQ1_S
def iq1_s_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT8, (QK_K // 8,)),  # low 8 bits of the 11-bit grid indices
        field("qh", UINT16, (QK_K // 32,)),  # 4x3-bit index high bits | 3-bit scale << 12 | delta sign << 15
        table("iq1s_grid", "2048 grid rows of 8 values in {-1, 0, 1} (ggml uint64_t iq1s_grid[2048])"),
        make_constant_field("delta", IQ1S_DELTA, "grid shift IQ1S_DELTA"),
    ]


def decode_iq1_s(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ1_S", ["d", "qs", "qh", "iq1s_grid", "delta"])
    high = bits(g, "qh", np.uint16, [0, 3, 6, 9], 3, [n, 32])
    negative = g.index(bits(g, "qh", np.uint16, [15] * 4, 1, [n, 8, 4]))  # the sub-block's sign, per grid row
    index = g.op("Add", g.op("Mul", index_hi_lo(g, "qs", high, [n, 8, 4]), g.const(np.int32(2))), negative)
    values = g.gather(shifted_grid(g, "iq1s_grid", "delta"), index)  # [n, 8, 4, 8]
    scale = g.band(g.shr("qh", np.uint16(12)), np.uint16(7))
    dl = odd_scale(g, g.to_float("d", [n, 1]), scale, np.uint16)  # [n, 8]
    return scaled(g, values, g.op("Mul", dl, "delta"), n * 8, shape)


# ---------------------------------------------------------------------- IQ1_M
def iq1_m_fields() -> list:
    return [
        field("qs", UINT8, (QK_K // 8,)),  # low 8 bits of the 11-bit grid indices
        field("qh", UINT8, (QK_K // 16,)),  # per 8 values a nibble: 3 index high bits | delta sign << 3
        field("scales", UINT16, (QK_K // 64,)),  # 4x3-bit scales | one nibble of the f16 super-block scale << 12
        table("iq1s_grid", "2048 grid rows of 8 values in {-1, 0, 1} (ggml uint64_t iq1s_grid[2048])"),
        make_constant_field("delta", IQ1S_DELTA, "grid shift IQ1M_DELTA"),
    ]


def decode_iq1_m(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ1_M", ["qs", "qh", "scales", "iq1s_grid", "delta"])
    # d's 16 bits are the top nibbles of the 4 scale words, lowest first; they are disjoint, so
    # the OR of gguf-py is a sum
    nibbles = g.shr(g.band("scales", np.uint16(0xF000)), np.array([12, 8, 4, 0], dtype=np.uint16))
    total = g.op("ReduceSum", g.cast(nibbles, INT32), g.const(np.array([1], dtype=np.int64)), keepdims=0)
    d = g.reshape(f16_bits_to_float(g, g.cast(total, UINT16)), [n, 1])
    nibble = bits(g, "qh", np.uint8, [0, 4], 4, [n, 32])
    index = g.op("Mul", index_hi_lo(g, "qs", g.band(nibble, np.uint8(7)), [n, 32]), g.const(np.int32(2)))
    index = g.op("Add", index, g.index(g.shr(nibble, np.uint8(3))))
    values = g.gather(shifted_grid(g, "iq1s_grid", "delta"), index)  # [n, 32, 8]
    dl = odd_scale(g, d, bits(g, "scales", np.uint16, [0, 3, 6, 9], 3, [n, 16]), np.uint16)  # [n, 16]
    return scaled(g, values, g.op("Mul", dl, "delta"), n * 16, shape)


# ---------------------------------------------------------------------- IQ4_NL, IQ4_XS
def iq4_nl_fields() -> list:
    return [
        field("d", FLOAT16),
        field("qs", UINT8, (QK4_NL // 2,)),  # 4-bit codes: values 0..15 in the low nibbles, 16..31 in the high
        table("kvalues_iq4nl", "the 16 non-linear levels"),
    ]


def decode_iq4_nl(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ4_NL", ["d", "qs", "kvalues_iq4nl"])
    return scaled(g, nibble_lookup(g, "qs", "kvalues_iq4nl", n, QK4_NL // 2), g.to_float("d"), n, shape)


def iq4_xs_fields() -> list:
    return [
        field("d", FLOAT16),
        field("scales_h", UINT16),  # high 2 bits of the 8 6-bit scales
        field("scales_l", UINT8, (QK_K // 64,)),  # low 4 bits of the 8 6-bit scales
        field("qs", UINT8, (QK_K // 2,)),  # 4-bit codes; per 32 values low nibbles then high nibbles
        table("kvalues_iq4nl", "the 16 non-linear levels"),
    ]


def decode_iq4_xs(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
    g = FunctionBuilder("decode_IQ4_XS", ["d", "scales_h", "scales_l", "qs", "kvalues_iq4nl"])
    values = nibble_lookup(g, "qs", "kvalues_iq4nl", n * 8, 16)  # int8 [n * 8, 32]
    low = bits(g, "scales_l", np.uint8, [0, 4], 4, [n, 8])
    high = g.cast(bits(g, "scales_h", np.uint16, range(0, 16, 2), 2, [n, 8]), UINT8)
    scale = g.op("Sub", g.to_float(g.op("BitwiseOr", low, g.shl(high, np.uint8(4)))), g.const(np.float32(32)))
    dl = g.op("Mul", g.to_float("d", [n, 1]), scale)  # [n, 8]
    return scaled(g, values, dl, n * 8, shape)


# ---------------------------------------------------------------------- the table
FORMATS: dict[str, BlockFormat] = register_formats(
    "gguf",
    [
        FormatSpec(
            "IQ2_XXS",
            QK_K,
            66,
            iq2_xxs_fields,
            decode_iq2_xxs,
            description="GGUF IQ2_XXS (2.0625 bpw: 8-value rows of a 256-entry grid, ksigns)",
        ),
        FormatSpec(
            "IQ2_XS",
            QK_K,
            74,
            iq2_xs_fields,
            decode_iq2_xs,
            description="GGUF IQ2_XS (2.3125 bpw: 512-entry grid, 4-bit scales per 16 values)",
        ),
        FormatSpec(
            "IQ3_XXS",
            QK_K,
            98,
            iq3_xxs_fields,
            decode_iq3_xxs,
            description="GGUF IQ3_XXS (3.0625 bpw: 4-value rows of a 256-entry grid)",
        ),
        FormatSpec(
            "IQ1_S",
            QK_K,
            50,
            iq1_s_fields,
            decode_iq1_s,
            description="GGUF IQ1_S (1.5625 bpw: ternary 2048-entry grid shifted by +-delta)",
        ),
        FormatSpec(
            "IQ4_NL",
            QK4_NL,
            18,
            iq4_nl_fields,
            decode_iq4_nl,
            description="GGUF IQ4_NL (4.5 bpw: 32 4-bit codes into 16 non-linear levels)",
        ),
        FormatSpec(
            "IQ3_S",
            QK_K,
            110,
            iq3_s_fields,
            decode_iq3_s,
            description="GGUF IQ3_S (3.4375 bpw: 512-entry grid, explicit sign bits)",
        ),
        FormatSpec(
            "IQ2_S",
            QK_K,
            82,
            iq2_s_fields,
            decode_iq2_s,
            description="GGUF IQ2_S (2.5625 bpw: 1024-entry grid, explicit sign bits)",
        ),
        FormatSpec(
            "IQ4_XS",
            QK_K,
            136,
            iq4_xs_fields,
            decode_iq4_xs,
            description="GGUF IQ4_XS (4.25 bpw: IQ4_NL levels with 6-bit scales per 32)",
        ),
        FormatSpec(
            "IQ1_M",
            QK_K,
            56,
            iq1_m_fields,
            decode_iq1_m,
            description="GGUF IQ1_M (1.75 bpw: IQ1 grid, f16 scale split over 4 nibbles)",
        ),
    ],
)

# The TQ types live in their own module; importing this one registers them too.
from onnx_struct.formats.gguf import tq as _tq  # noqa: E402

FORMATS.update(_tq.FORMATS)
