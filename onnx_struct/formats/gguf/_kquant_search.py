"""The scale searches of ggml's K-quant reference quantizers, as ONNX graph recipes.

Rule: the chosen scales match ``quantize_row_q{2..6}_K_ref`` bit for bit. So every float32
operation is one ONNX op in C's evaluation order (sums as chains of Adds, no FMA contraction),
candidates are unrolled in ggml's order and kept with ``Where`` under ggml's own comparison, and
``nearest_int`` is ggml's add-1.5*2^23 trick, not ``Round``.

Notes: docs/modules.md.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.function_builder import FLOAT, INT32, FunctionBuilder

# ggml's GROUP_MAX_EPS: a sub-block (or a Q6_K block) whose largest magnitude is below it is zero.
GROUP_MAX_EPS = np.float32(1e-15)


def f32(value: float) -> np.float32:
    return np.float32(value)


def row_sum(b: FunctionBuilder, terms: str, k: int, *, from_zero: bool = True) -> str:
    """``[1, S]``: ``terms[0, :] + terms[1, :] + ...`` added left to right in float32.

    ``from_zero`` starts from ``0.0`` as ggml's ``float sum = 0; sum += ...`` does (``0 + -0`` is
    ``+0``); without it the first term is the start, as for ggml's ``sum_w = weights[0]``.
    """
    rows = b.ops("Split", terms, count=k, axis=0, num_outputs=k)
    total = b.op("Add", b.const(f32(0)), rows[0]) if from_zero else rows[0]
    for row in rows[1:]:
        total = b.op("Add", total, row)
    return total


def nearest_int(b: FunctionBuilder, value: str) -> str:
    """ggml's ``nearest_int`` for any float32, as INT32: the low 23 bits of ``value + 1.5*2^23``
    minus ``2^22``. Round half to even up to ``2^22``; past it (and for inf, NaN) the bits the
    trick leaves (inf gives ``-2^22``, NaN 0), which ggml then clamps. Needs BitCast (opset 26)."""
    bits = b.op("BitCast", b.op("Add", value, b.const(f32(12582912))), to=INT32)
    return b.op("Sub", b.op("BitwiseAnd", bits, b.const(0x7FFFFF, np.int32)), b.const(0x400000, np.int32))


def rounded(b: FunctionBuilder, value: str, low: int, high: int) -> str:
    """``MAX(low, MIN(high, nearest_int(value)))`` as float32, for any float32 ``value`` (a
    scale that overflowed to inf or a subnormal range gives inf and NaN quotients)."""
    clamped = b.op("Clip", nearest_int(b, value), b.const(low, np.int32), b.const(high, np.int32))
    return b.cast(clamped, FLOAT)


def first_largest_magnitude(b: FunctionBuilder, x: str, axis: int) -> tuple[str, str]:
    """``(amax, max)`` along ``axis`` (kept): the largest ``|x|`` and the signed value of its first
    occurrence, as ggml's ``amax = max = 0; if (ax > amax) { amax = ax; max = x[i]; }`` finds
    them: a NaN never wins (a sub-block scale is NaN when its sums overflowed) and without a
    positive magnitude both stay 0."""
    zero = b.const(f32(0))
    magnitude = b.op("Abs", x)
    magnitude = b.op("Where", b.op("IsNaN", magnitude), zero, magnitude)
    first = b.op("ArgMax", magnitude, axis=axis, keepdims=1, select_last_index=0)
    amax = b.op("ReduceMax", magnitude, b.axes(axis), keepdims=1)
    signed = b.op("Where", b.op("Greater", amax, zero), b.op("GatherElements", x, first, axis=axis), zero)
    return amax, signed


def update(b: FunctionBuilder, take: str, pairs: list[tuple[str, str]]) -> list[str]:
    """``new if take else old`` for each ``(new, old)`` pair (a candidate replacing the best)."""
    return [b.op("Where", take, new, old) for new, old in pairs]


def make_qx_quants(b: FunctionBuilder, x: str, k: int, nmax: int) -> tuple[str, str]:
    """ggml's ``make_qx_quants(k, nmax, x, L, rmse_type=1, NULL)`` on ``x [k, S]``.

    Returns ``(L, scale)``: the quants ``[k, S]`` in ``0 .. 2*nmax - 1`` (float32; 0 for a zero
    sub-block, ggml's all-zero early return) and the scale ``[1, S]``. Weights are ``x*x``; the
    first candidate scale is ``-nmax / max`` (``max`` the signed value of largest magnitude),
    then ``-(nmax + 0.1*is) / max`` for ``is`` in ``-9..9`` except 0, each kept when
    ``suml2 > 0 && sumlx*sumlx > best*suml2``.
    """
    amax, big = first_largest_magnitude(b, x, 0)
    w = b.op("Mul", x, x)
    wx = b.op("Mul", w, x)

    def candidate(numerator: np.float32) -> tuple[str, str, str]:
        level = rounded(b, b.op("Mul", b.op("Div", b.const(numerator), big), x), -nmax, nmax - 1)
        sumlx = row_sum(b, b.op("Mul", wx, level), k)
        suml2 = row_sum(b, b.op("Mul", b.op("Mul", w, level), level), k)
        return level, sumlx, suml2

    zero = b.const(f32(0))
    level, sumlx, suml2 = candidate(f32(-nmax))
    # ggml: scale = suml2 ? sumlx/suml2 : 0 (a NaN suml2 is true)
    scale = b.op("Where", b.op("Equal", suml2, zero), zero, b.op("Div", sumlx, suml2))
    best = b.op("Mul", scale, sumlx)
    for step in [s for s in range(-9, 10) if s]:
        numerator = -(f32(nmax) + f32(0.1) * f32(step))
        new_level, new_lx, new_l2 = candidate(numerator)
        take = b.op(
            "And",
            b.op("Greater", new_l2, zero),
            b.op("Greater", b.op("Mul", new_lx, new_lx), b.op("Mul", best, new_l2)),
        )
        new_scale = b.op("Div", new_lx, new_l2)
        level, scale, best = update(
            b, take, [(new_level, level), (new_scale, scale), (b.op("Mul", new_scale, new_lx), best)]
        )
    is_zero = b.op("Less", amax, b.const(GROUP_MAX_EPS))
    quants = b.op("Where", is_zero, zero, b.op("Add", level, b.const(f32(nmax))))
    return quants, b.op("Where", is_zero, zero, scale)


def make_qkx2_quants(
    b: FunctionBuilder,
    x: str,
    w: str,
    k: int,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[str, str, str]:
    """ggml's ``make_qkx2_quants`` on ``x [k, S]`` with weights ``w [k, S]``.

    Returns ``(L, scale, the_min)``: quants ``[k, S]`` in ``0..nmax`` (float32), the scale and
    ggml's ``the_min`` (the negated minimum, ``>= 0``), each ``[1, S]``. The minimum is
    ``min(x)`` clamped to at most 0; the first try is ``nmax / (max - min)``, then
    ``(rmin + rdelta*is + nmax) / (max - min)`` for ``is`` in ``0..nstep``, each fitted by weighted
    least squares and kept when its weighted error (squared, or absolute with ``use_mad``) is
    strictly below the best; as in ggml, ``min`` in a try is the best candidate's fitted minimum. A constant sub-block (``max == min``) gets quants 0 and scale 0.
    """
    zero = b.const(f32(0))
    low = b.op("ReduceMin", x, b.axes(0), keepdims=1)
    high = b.op("ReduceMax", x, b.axes(0), keepdims=1)
    sum_w = row_sum(b, w, k, from_zero=False)
    sum_x = row_sum(b, b.op("Mul", w, x), k, from_zero=False)
    low = b.op("Where", b.op("Greater", low, zero), zero, low)
    flat = b.op("Equal", high, low)

    def levels(numerator: np.float32, minimum: str) -> str:
        # ggml divides by ``max - min`` and shifts by ``min`` where ``min`` is the best
        # candidate's minimum so far (the first minimum until a candidate replaces it)
        spread = b.op("Sub", high, minimum)
        return rounded(b, b.op("Mul", b.op("Div", b.const(numerator), spread), b.op("Sub", x, minimum)), 0, nmax)

    def error(scale: str, minimum: str, level: str) -> str:
        diff = b.op("Sub", b.op("Add", b.op("Mul", scale, level), minimum), x)
        diff = b.op("Abs", diff) if use_mad else b.op("Mul", diff, diff)
        return row_sum(b, b.op("Mul", w, diff), k)

    minimum = low
    level = levels(f32(nmax), minimum)
    scale = b.op("Div", b.const(f32(1)), b.op("Div", b.const(f32(nmax)), b.op("Sub", high, low)))
    best = error(scale, minimum, level)
    for step in range(nstep + 1):
        numerator = f32(rmin) + f32(rdelta) * f32(step) + f32(nmax)
        new_level = levels(numerator, minimum)
        wl = b.op("Mul", w, new_level)
        sum_l = row_sum(b, wl, k)
        sum_l2 = row_sum(b, b.op("Mul", wl, new_level), k)
        sum_xl = row_sum(b, b.op("Mul", wl, x), k)
        det = b.op("Sub", b.op("Mul", sum_w, sum_l2), b.op("Mul", sum_l, sum_l))
        new_scale = b.op("Div", b.op("Sub", b.op("Mul", sum_w, sum_xl), b.op("Mul", sum_x, sum_l)), det)
        new_min = b.op("Div", b.op("Sub", b.op("Mul", sum_l2, sum_x), b.op("Mul", sum_l, sum_xl)), det)
        # a positive minimum is clamped to 0 and the scale refitted through the origin
        positive = b.op("Greater", new_min, zero)
        new_min = b.op("Where", positive, zero, new_min)
        new_scale = b.op("Where", positive, b.op("Div", sum_xl, sum_l2), new_scale)
        current = error(new_scale, new_min, new_level)
        take = b.op("And", b.op("Greater", det, zero), b.op("Less", current, best))
        level, scale, minimum, best = update(
            b, take, [(new_level, level), (new_scale, scale), (new_min, minimum), (current, best)]
        )
    level = b.op("Where", flat, zero, level)
    scale = b.op("Where", flat, zero, scale)
    the_min = b.op("Neg", b.op("Where", flat, low, minimum))
    return level, scale, the_min


def make_q3_quants(b: FunctionBuilder, x: str, k: int, nmax: int, tries: int = 5) -> tuple[str, str]:
    """ggml's ``make_q3_quants(k, nmax, x, L, do_rmse=true)`` on ``x [k, S]``.

    Returns ``(L [k, S], scale [1, S])``, quants in ``0 .. 2*nmax - 1`` (0 for a zero sub-block).
    Starting from ``nearest_int(-nmax / max * x)``, ggml revisits the weights one at a time, in
    order, ``tries`` times: weight ``i`` moves to ``nearest_int(x*sl2/slx)`` (the sums without
    it) when that raises ``sumlx^2 / suml2``; each step depends on the previous one, so the
    ``tries * k`` steps are unrolled on rows ``[1, S]``. (ggml stops early after a pass that
    changes nothing; the passes after it would change nothing either.)
    """
    amax, big = first_largest_magnitude(b, x, 0)
    zero = b.const(f32(0))
    level = rounded(b, b.op("Mul", b.op("Div", b.const(f32(-nmax)), big), x), -nmax, nmax - 1)
    xs = b.ops("Split", x, count=k, axis=0, num_outputs=k)
    levels = b.ops("Split", level, count=k, axis=0, num_outputs=k)
    w = [b.op("Mul", row, row) for row in xs]
    wx = [b.op("Mul", weight, row) for weight, row in zip(w, xs, strict=True)]
    sumlx, suml2 = zero, zero
    for i in range(k):
        sumlx = b.op("Add", sumlx, b.op("Mul", wx[i], levels[i]))
        suml2 = b.op("Add", suml2, b.op("Mul", b.op("Mul", w[i], levels[i]), levels[i]))
    for _ in range(tries):
        for i in range(k):
            without = b.op("Sub", sumlx, b.op("Mul", wx[i], levels[i]))
            sl2 = b.op("Sub", suml2, b.op("Mul", b.op("Mul", w[i], levels[i]), levels[i]))
            new = rounded(b, b.op("Div", b.op("Mul", xs[i], sl2), without), -nmax, nmax - 1)
            slx = b.op("Add", without, b.op("Mul", wx[i], new))
            sl2 = b.op("Add", sl2, b.op("Mul", b.op("Mul", w[i], new), new))
            better = b.op(
                "Greater",
                b.op("Mul", b.op("Mul", slx, slx), suml2),
                b.op("Mul", b.op("Mul", sumlx, sumlx), sl2),
            )
            # ggml: slx > 0 (before the move), new != L[i], sl2 > 0 and the ratio grows
            take = b.op(
                "And",
                b.op("And", b.op("Greater", without, zero), better),
                b.op("And", b.op("Not", b.op("Equal", new, levels[i])), b.op("Greater", sl2, zero)),
            )
            levels[i], sumlx, suml2 = update(b, take, [(new, levels[i]), (slx, sumlx), (sl2, suml2)])
    is_zero = b.op("Less", amax, b.const(GROUP_MAX_EPS))
    level = b.op("Add", b.op("Concat", *levels, axis=0), b.const(f32(nmax)))
    scale = b.op("Where", b.op("Greater", suml2, zero), b.op("Div", sumlx, suml2), zero)
    return b.op("Where", is_zero, zero, level), b.op("Where", is_zero, zero, scale)
