"""GGUF recipes: the unpacking steps of GGUF decoders, written with the shared FunctionBuilder.

A format module reads like gguf-py's numpy code, one recipe call per numpy step (:func:`nibbles`,
:func:`bit_fields`, :func:`bit_planes`, :func:`spread`, :func:`byte_lookup`,
:func:`nibble_lookup`, :func:`dequantize_rows`, :func:`scaled_down`, :func:`add_rows`); the
builder, :func:`field` and the opset constants are in :mod:`onnx_struct.formats._graph`.

Rule: each recipe uses the cheapest onnxruntime steps that give gguf-py's exact result (scalar
shifts and uint8 arithmetic, few Gathers, no Transpose of small blocks, one DequantizeLinear
product); the per-op costs behind each choice are in docs/benchmarks.md.

Notes: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnx_struct.formats.function_builder import UINT8, UINT16, FunctionBuilder


def nibbles(b: FunctionBuilder, x: str, rows: int, run: int, times: int = 1) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, 2 * run]``: the low nibbles of the run, then its high
    nibbles, each multiplied by ``times`` (1, 2, 4, 8 or 16).

    This is ggml's 4-bit layout (``qs``: element ``j`` is the low nibble of byte ``j``, element
    ``j + run`` its high nibble). ``times * low`` is ``times * x - 16 * times * high`` in wrapping
    uint8 arithmetic; ``16 * high`` is one mask (``times=16`` needs no shift at all, the fastest
    form). Scaled values go to :func:`dequantize_rows` with ``scale / times`` (see there).
    """
    if times not in (1, 2, 4, 8, 16):
        raise ValueError(f"nibbles can be scaled by 1, 2, 4, 8 or 16, not {times}")
    x = b.reshape(x, [rows, run])
    if times == 16:
        return b.op(
            "Concat", b.op("Mul", x, b.const(16, np.uint8)), b.op("BitwiseAnd", x, b.const(0xF0, np.uint8)), axis=1
        )
    high = b.shr(x, np.uint8(4))
    scaled_x = x if times == 1 else b.op("Mul", x, b.const(times, np.uint8))
    low = b.op("Sub", scaled_x, b.op("Mul", high, b.const(16 * times, np.uint8)))
    return b.op("Concat", low, high if times == 1 else b.op("Mul", high, b.const(times, np.uint8)), axis=1)


def scaled_copies(b: FunctionBuilder, x: str, rows: int, run: int, multipliers: Sequence[int]) -> list[str]:
    """The copies ``x * multipliers[k]`` (mod 256) of bytes ``x [rows, run]``, each ``[rows, run]``.

    One *scalar* multiply per copy: a multiply by a constant row (``Tile`` then ``[rows, k * run]
    * [k * run]``) costs more in onnxruntime, and an ``Expand``-style broadcast more still."""
    x = b.reshape(x, [rows, run])
    return [x if m == 1 else b.op("Mul", x, b.const(m, np.uint8)) for m in multipliers]


def spread(b: FunctionBuilder, x: str, rows: int, run: int, multipliers: Sequence[int]) -> str:
    """``[rows, len(multipliers) * run]``: copy ``k`` of the run times ``multipliers[k]`` (mod 256).

    ``Tile`` then one multiply by a constant row: for 8 short copies (bit planes) this beats 8
    scalar multiplies and a ``Concat`` (docs/benchmarks.md), whose per-row copies of
    short runs are onnxruntime's slowest step here."""
    tiled = b.op("Tile", b.reshape(x, [rows, run]), b.const([1, len(multipliers)], np.int64))
    return b.op("Mul", tiled, b.const(np.repeat(np.asarray(multipliers, np.uint8), run)))


def bit_fields(b: FunctionBuilder, x: str, rows: int, run: int, width: int, *, scaled: bool = False) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, (8 // width) * run]``: field ``k`` (bits ``[k*width, (k+1)*width)``)
    of byte ``l`` at ``[r, k * run + l]``.

    gguf-py's ``(x.reshape(n, 1, run) >> shifts.reshape(1, -1, 1)) & mask``. Written per field on
    the ``run`` bytes, then one Concat: ``x * 2**(8 - (k+1)*width)`` (a wrapping uint8 multiply)
    moves field ``k`` to the top bits and drops the bits above it, then one scalar shift right by
    ``8 - width`` (field 0 is a mask instead, the top field needs no multiply). With ``scaled`` the
    shift is replaced by a mask, which field 0 does not need (nothing is below it), and the result
    is ``field << (8 - width)``: feed it to :func:`dequantize_rows` with ``scale / 2**(8 - width)``,
    a product of the same two exact factors, so the same float32.
    """
    count = 8 // width
    tops = scaled_copies(b, x, rows, run, [1 << (8 - (k + 1) * width) for k in range(count)])
    if scaled:
        top_bits = (0xFF << (8 - width)) & 0xFF
        fields = [top if k == 0 else b.band(top, np.uint8(top_bits)) for k, top in enumerate(tops)]
    else:
        x = tops[-1]  # the top field's multiplier is 1: the bytes themselves, as [rows, run]
        fields = [b.band(x, np.uint8((1 << width) - 1))] + [b.shr(top, np.uint8(8 - width)) for top in tops[1:]]
    return b.op("Concat", *fields, axis=1)


def bit_planes(b: FunctionBuilder, x: str, rows: int, run: int, value: int = 1) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, 8 * run]`` with ``value * bit_j(x[r, l])`` at ``[r, j * run + l]``.

    :func:`bit_fields` for width 1, with the top bit tested by a compare (cheaper than a shift)
    and the result multiplied by ``value`` (e.g. 16 for the fifth bit of a 5-bit quant).
    """
    top = spread(b, x, rows, run, [1 << (7 - j) for j in range(8)])
    bits = b.cast(b.op("GreaterOrEqual", top, b.const(128, np.uint8)), UINT8)
    return bits if value == 1 else b.op("Mul", bits, b.const(value, np.uint8))


def scaled_down(b: FunctionBuilder, scale: str, times: int) -> str:
    """``scale / times`` for a power of two ``times`` (exact), the partner of scaled quants."""
    return b.op("Mul", scale, b.const(1.0 / times, np.float32))


def byte_lookup(b: FunctionBuilder, x: str, table: np.ndarray) -> str:
    """``table[x]``: each uint8 of ``x`` replaced by the row ``table[x]`` (shape ``x.shape + table.shape[1:]``).

    The fast way to expand a byte into short runs (e.g. its 8 bits as 8 values): one Gather
    copies a row per byte, where an equivalent broadcast shift would loop per run.
    """
    if table.shape[0] != 256:
        raise ValueError(f"a byte lookup table has 256 rows, not {table.shape[0]}")
    return b.gather(table, b.index(x))


def dequantize_rows(b: FunctionBuilder, q: str, scale: str, zero_point: int | None = None, dtype=np.uint8) -> str:
    """``float(q[r, :] - zero_point) * scale[r]`` for integer ``q [rows, k]`` and float32 ``scale [rows]``.

    One DequantizeLinear (per-axis, axis 0): the difference is an exact small integer and the
    product is rounded once, so this equals gguf-py's ``d * (q - zp).astype(float32)`` bit for bit
    (NaN and infinity included). ``zero_point`` has the integer type ``dtype`` of ``q``.

    Scaled quants: ``(2**k * q - 2**k * zp) * (scale / 2**k)`` is the same float32 as
    ``(q - zp) * scale``, because both factors are exact (``scale / 2**k`` cannot underflow: GGUF
    scales are FLOAT16, at least 2**-24, times small integers; k <= 6) and their real product is
    the same, so the one rounding gives the same result. :func:`scaled_down` divides the scale.
    """
    if zero_point is None:
        return b.op("DequantizeLinear", q, scale, axis=0)
    zero = b.op("Expand", b.const(zero_point, dtype), b.op("Shape", scale))
    return b.op("DequantizeLinear", q, scale, zero, axis=0)


def nibble_lookup(b: FunctionBuilder, qs: str, levels, groups: int, run: int) -> str:
    """``levels[nibble]`` of every nibble of bytes ``qs [groups, run]``, as ``[groups, 2 * run]`` in
    ggml's 4-bit order (the run's low nibbles, then its high nibbles); ``levels`` is a 16-entry
    value name or array (e.g. an INT8 codebook), the result has its type. ``run`` is a multiple of 4.

    onnxruntime's Gather costs far more per index, whatever the row (up to tens of bytes), than
    uint8/uint16 Add/Sub/Mul per element (docs/benchmarks.md), so this gathers a row of 4 values per
    index: the low (or high) nibbles ``n0..n3`` of 4 adjacent bytes form the index
    ``n0 | n1 << 4 | n2 << 8 | n3 << 12`` of a ``[65536, 4]`` table of ``levels`` (derived from
    ``levels`` in the graph, so constant-folded when the session is built). Each gathered row is 4
    consecutive output values, so nothing is reordered afterwards (onnxruntime's threaded
    Transpose of such small blocks is much slower than on one thread).
    """
    if run % 4:
        raise ValueError(f"nibble_lookup reads whole groups of 4 bytes, not runs of {run}")
    quads = b.reshape(qs, [groups * run // 4, 4])
    count = groups * run // 4
    # flat [count] operands: onnxruntime runs element-wise ops on a trailing dimension of 1 slowly
    b0, b1, b2, b3 = (b.reshape(x, [count]) for x in b.ops("Split", quads, count=4, axis=1, num_outputs=4))
    low01, high01 = _nibble_pair_codes(b, b0, b1)
    low23, high23 = _nibble_pair_codes(b, b2, b3)
    indices = []
    for first, second in ((low01, low23), (high01, high23)):
        code = b.op("Add", b.cast(first, UINT16), b.op("Mul", b.cast(second, UINT16), b.const(256, np.uint16)))
        indices.append(b.reshape(code, [groups, 1, run // 4]))
    index = b.index(b.op("Concat", *indices, axis=1))  # [groups, 2 (low, high), run / 4]
    return b.reshape(b.gather(_quad_table(b, levels), index), [groups, 2 * run])


def _nibble_pair_codes(b: FunctionBuilder, first: str, second: str) -> tuple[str, str]:
    """uint8 ``(lo(first) | lo(second) << 4, hi(first) | hi(second) << 4)`` of two byte tensors.

    ``lo(second) << 4`` is a wrapping multiply by 16 and ``hi(second) << 4`` one mask; only the
    first byte's high nibble needs a shift."""
    high = b.shr(first, np.uint8(4))
    low = b.op("Sub", first, b.op("Mul", high, b.const(16, np.uint8)))
    low_code = b.op("Add", low, b.op("Mul", second, b.const(16, np.uint8)))
    high_code = b.op("Add", high, b.band(second, np.uint8(0xF0)))
    return low_code, high_code


def _quad_table(b: FunctionBuilder, levels) -> str:
    """``[65536, 4]``: row ``n0 | n1 << 4 | n2 << 8 | n3 << 12`` is ``levels[[n0, n1, n2, n3]]``."""
    levels = levels if isinstance(levels, str) else b.const(levels)
    grid = b.const([16, 16, 16, 16, 1], np.int64)
    columns = []
    for k in range(4):  # n_k varies along grid axis 3 - k (n0 fastest)
        shape = [1, 1, 1, 1, 1]
        shape[3 - k] = 16
        columns.append(b.op("Expand", b.reshape(levels, shape), grid))
    return b.reshape(b.op("Concat", *columns, axis=4), [1 << 16, 4])


def add_rows(b: FunctionBuilder, y: str, offset: str, rows: int) -> str:
    """``y[r, :] + offset[r]`` for float32 ``y [rows, k]``, ``offset [rows]``: the separate float
    pass of the formats with a minimum (gguf-py rounds ``d * q`` and ``+ m`` separately, so it
    cannot be fused into the DequantizeLinear product). A minimum that gguf-py subtracts comes
    negated (exact), since ``x - m`` and ``x + (-m)`` are the same IEEE result.

    A broadcast ``Add`` of ``[rows, 1]``. A ``BatchNormalization`` with unit scale and variance
    and zero epsilon computes the same sums on onnxruntime's CPU provider and is faster on
    one thread (docs/benchmarks.md) (the block-range sessions, :mod:`onnx_struct.runtime.parallel`), but it is not portable:
    onnxruntime's CUDA provider raises epsilon to cuDNN's minimum 1e-5, which would make a lowered
    model's decoder divide by ``sqrt(1 + 1e-5)``. Decoders must give the same bits on any provider.
    """
    return b.op("Add", y, b.reshape(offset, [rows, 1]))
