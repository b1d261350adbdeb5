"""GGUF recipes: the unpacking steps of GGUF decoders, written with the shared FunctionBuilder.

A format module reads like gguf-py's numpy code, one helper call per numpy step::

    b = FunctionBuilder("decode_Q4_0", ["d", "qs"])
    q = nibbles(b, "qs", n, 16)  # [n, 32]: low nibbles, then high nibbles
    y = dequantize_rows(b, q, b.to_float("d"), zero_point=8)
    decoder = b.finish(y, shape)

Stable interface for any GGUF format module: the recipes :func:`nibbles`, :func:`bit_fields`,
:func:`bit_planes`, :func:`byte_lookup`, :func:`dequantize_rows`, :func:`scaled_down`, and
:func:`gguf_format` (registration). The builder, :func:`field` and the opset constants are in
:mod:`onnx_struct.formats._graph`.

Why the recipes look the way they do (measured on onnxruntime 1.32's CPU provider): uint8
``Add``/``Sub``/``Mul`` are vectorized and 5-10x faster than ``BitwiseAnd``/``BitShift``; uint8
``Where``, Gathers of single bytes and any broadcast whose innermost run is short (a
``[n, 1, 32] >> [1, 8, 1]`` shift, say) are slower still (per-element or per-run loops). So nibbles are cut with one *scalar* shift plus uint8
arithmetic, narrower fields over long runs (Tile, then one wrapping multiply that moves each
field to the top bits, then one shift, mask or compare), and bit expansions with short runs use
a 256-entry ``Gather`` table (one row copy per byte).
``DequantizeLinear`` (per-axis) turns bytes into floats in one pass and computes
``float(q - zero_point) * scale`` with a single rounding, exactly gguf-py's ``d * q``. The
remaining float pass of formats with a minimum (``d * q + m``) is a broadcast Add/Sub, kept as a
separate op because gguf-py rounds twice.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from onnx_struct.formats._graph import UINT8, UINT16, FunctionBuilder, block_format

#: ``gguf_format(name, block_size, bytes_per_block, fields, decoder, encoder=None, description="")``
#: registers the GGUF format ``name`` (the GGML type name); see :func:`block_format`.
gguf_format = functools.partial(block_format, "gguf")


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


def _spread(b: FunctionBuilder, x: str, rows: int, run: int, multipliers: Sequence[int]) -> str:
    """``[rows, len(multipliers) * run]``: copy ``k`` of the run times ``multipliers[k]`` (mod 256).

    Tile then one multiply by a constant row: every op sees runs of ``len * run`` elements."""
    tiled = b.op("Tile", b.reshape(x, [rows, run]), b.const([1, len(multipliers)], np.int64))
    return b.op("Mul", tiled, b.const(np.repeat(np.asarray(multipliers, np.uint8), run)))


def bit_fields(b: FunctionBuilder, x: str, rows: int, run: int, width: int, *, scaled: bool = False) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, (8 // width) * run]``: field ``k`` (bits ``[k*width, (k+1)*width)``)
    of byte ``l`` at ``[r, k * run + l]``.

    gguf-py's ``(x.reshape(n, 1, run) >> shifts.reshape(1, -1, 1)) & mask``. Written as: copy ``k``
    multiplied by ``2**(8 - (k+1)*width)`` (a wrapping uint8 multiply moves field ``k`` to the top
    bits and drops the bits above it), then one scalar shift right by ``8 - width``. With
    ``scaled`` the shift is replaced by a mask and the result is ``field << (8 - width)``: feed it
    to :func:`dequantize_rows` with ``scale / 2**(8 - width)``, a product of the same two exact
    factors, so the same float32.
    """
    count = 8 // width
    top = _spread(b, x, rows, run, [1 << (8 - (k + 1) * width) for k in range(count)])
    if scaled:
        return b.op("BitwiseAnd", top, b.const((0xFF << (8 - width)) & 0xFF, np.uint8))
    return b.shr(top, np.uint8(8 - width))


def bit_planes(b: FunctionBuilder, x: str, rows: int, run: int, value: int = 1) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, 8 * run]`` with ``value * bit_j(x[r, l])`` at ``[r, j * run + l]``.

    :func:`bit_fields` for width 1, with the top bit tested by a compare (cheaper than a shift)
    and the result multiplied by ``value`` (e.g. 16 for the fifth bit of a 5-bit quant).
    """
    top = _spread(b, x, rows, run, [1 << (7 - j) for j in range(8)])
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


def dequantize_rows(b: FunctionBuilder, q: str, scale: str, zero_point: int | str | None = None, dtype=np.uint8) -> str:
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
    value name or array (e.g. INT8 codebook levels), the result has its type.

    onnxruntime's Gather costs ~6-9 ns per index whatever the row (up to tens of bytes), while
    uint8/uint16 arithmetic costs ~0.1 ns per element, so this gathers one row of 4 values per
    *pair* of bytes: the index ``b0 | b1 << 8`` of two adjacent bytes (built in uint16) selects
    ``(levels[lo b0], levels[lo b1], levels[hi b0], levels[hi b1])`` in a ``[65536, 4]`` table
    (derived from ``levels`` in the graph, so constant-folded when the session is built), and one
    Transpose moves the high-nibble pairs after the low ones. A quarter of the Gather indices of
    one lookup per nibble, with only exact integer work.
    """
    pairs = b.reshape(qs, [groups * run // 2, 2])
    count = groups * run // 2
    # flat [count] operands: onnxruntime runs element-wise ops on a trailing dimension of 1 slowly
    even, odd = (
        b.cast(b.reshape(half, [count]), UINT16) for half in b.ops("Split", pairs, count=2, axis=1, num_outputs=2)
    )
    index = b.index(b.op("Add", even, b.op("Mul", odd, b.const(256, np.uint16))))
    values = b.gather(_pair_table(b, levels), index)  # [count, 4]
    halves = b.op("Transpose", b.reshape(values, [groups, run // 2, 2, 2]), perm=[0, 2, 1, 3])
    return b.reshape(halves, [groups, 2 * run])


def _pair_table(b: FunctionBuilder, levels) -> str:
    """``[65536, 4]``: row ``b0 | b1 << 8`` is ``(levels[lo b0], levels[lo b1], levels[hi b0], levels[hi b1])``."""
    byte = np.arange(256)
    low, high = (b.gather(levels, b.const(nibble.astype(np.int32))) for nibble in (byte & 15, byte >> 4))
    columns = []
    for per_byte in (low, high):
        for shape in ([1, 256, 1], [256, 1, 1]):  # b0 varies along axis 1, b1 along axis 0
            columns.append(b.op("Expand", b.reshape(per_byte, shape), b.const([256, 256, 1], np.int64)))
    return b.reshape(b.op("Concat", *columns, axis=2), [1 << 16, 4])
