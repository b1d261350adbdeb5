"""Affine forms of GGUF's IQ formats and its FP4 formats (MXFP4, NVFP4).

Every code book of these formats is integers times a per-block scale, so the code is the table
entry (times its sign) and the scale gguf-py's float32 block scale; both products are exact. The
tables are the format's own constant leaves, not copies.

Notes: docs/modules.md.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.affine.form import AffineSpec, half_to_float, nibbles, planes, rule

EXACT = "bit-exact"


def _signed(grid_rows: np.ndarray, sign_bits: np.ndarray) -> np.ndarray:
    """``grid * (-1 if sign bit else 1)`` as int8 (grid bytes are below 128)."""
    g = grid_rows.astype(np.int8)
    return np.where(sign_bits.astype(bool), -g, g)


def _ksign_bits(ksigns: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The 8 sign bits of the 7-bit sign indices ``index``: [...] -> [..., 8]."""
    return (ksigns[index][..., None] >> np.arange(8, dtype=np.uint8)) & 1


def _half_step_scale(d: np.ndarray, sub: np.ndarray, factor: float) -> np.ndarray:
    """gguf-py's ``d * (0.5 + sub) * factor`` in float32, in that order."""
    return d[:, None] * (np.float32(0.5) + sub.astype(np.float32)) * np.float32(factor)


def _words32(pairs: np.ndarray) -> np.ndarray:
    """uint16 [n, 2k] -> uint32 [n, k], little-endian pairs (as ggml reads them)."""
    w = np.asarray(pairs).astype(np.uint32)
    return w[:, 0::2] | (w[:, 1::2] << np.uint32(16))


@rule("IQ4_NL", AffineSpec(8, True, 32, False, False, EXACT, "kvalues_iq4nl[q] * d"))
def _iq4_nl(leaves, n):
    codes = np.asarray(leaves["kvalues_iq4nl"])[nibbles(leaves["qs"], 16)]
    return codes, half_to_float(leaves["d"])[:, None], None, None


@rule("IQ4_XS", AffineSpec(8, True, 32, False, False, EXACT, "per 32: kvalues_iq4nl[q] * d*(ls - 32)"))
def _iq4_xs(leaves, n):
    low = _nibble_scales(leaves["scales_l"])  # 6-bit scale j: low 4 bits in nibble j (low first)
    high = (np.asarray(leaves["scales_h"])[:, None] >> np.arange(0, 16, 2, dtype=np.uint16)) & 3
    ls = (low | (high.astype(np.uint8) << np.uint8(4))).astype(np.int8) - np.int8(32)
    scale = half_to_float(leaves["d"])[:, None] * ls.astype(np.float32)
    codes = np.asarray(leaves["kvalues_iq4nl"])[nibbles(leaves["qs"], 16)]
    return codes, scale, None, None


@rule("IQ2_XXS", AffineSpec(8, True, 32, False, False, EXACT, "per 32: (grid * signs) * d*(0.5+s)/4"))
def _iq2_xxs(leaves, n):
    aux = _words32(leaves["qs"]).reshape(n, 8, 2)  # per 32 values: 4 grid indices, 4x7 sign bits | scale
    index = (aux[..., :1] >> np.array([0, 8, 16, 24], dtype=np.uint32)) & 0xFF  # [n, 8, 4]
    sign_index = (aux[..., 1:] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 0x7F
    grid = np.asarray(leaves["iq2xxs_grid"])[index]  # [n, 8, 4, 8]
    codes = _signed(grid, _ksign_bits(np.asarray(leaves["ksigns_iq2xs"]), sign_index))
    return codes.reshape(n, 256), _half_step_scale(half_to_float(leaves["d"]), aux[..., 1] >> 28, 0.25), None, None


def _nibble_scales(scales: np.ndarray) -> np.ndarray:
    """4-bit sub-scales, low nibble first: [n, k] -> [n, 2k]."""
    s = np.asarray(scales)
    return ((s[:, :, None] >> np.array([0, 4], dtype=np.uint8)) & 0x0F).reshape(s.shape[0], -1)


@rule("IQ2_XS", AffineSpec(8, True, 16, False, False, EXACT, "per 16: (grid * signs) * d*(0.5+s)/4"))
def _iq2_xs(leaves, n):
    qs = np.asarray(leaves["qs"])  # 9-bit grid index | 7-bit sign index << 9, per 8 values
    grid = np.asarray(leaves["iq2xs_grid"])[qs & 511]
    codes = _signed(grid, _ksign_bits(np.asarray(leaves["ksigns_iq2xs"]), qs >> 9))
    scale = _half_step_scale(half_to_float(leaves["d"]), _nibble_scales(leaves["scales"]), 0.25)
    return codes.reshape(n, 256), scale, None, None


def _sign_bits(signs: np.ndarray) -> np.ndarray:
    """One sign bit per value, LSB first: [n, k] bytes -> [n, 8k]."""
    return np.unpackbits(np.ascontiguousarray(signs), axis=-1, bitorder="little")


@rule("IQ2_S", AffineSpec(8, True, 16, False, False, EXACT, "per 16: (grid * signs) * d*(0.5+s)/4"))
def _iq2_s(leaves, n):
    index = np.asarray(leaves["qs"]).astype(np.uint16) | (
        planes(leaves["qh"], 1, (0, 2, 4, 6), 3).astype(np.uint16) << 8
    )
    grid = np.asarray(leaves["iq2s_grid"])[index].reshape(n, 256)
    codes = _signed(grid, _sign_bits(leaves["signs"]))
    scale = _half_step_scale(half_to_float(leaves["d"]), _nibble_scales(leaves["scales"]), 0.25)
    return codes, scale, None, None


@rule("IQ3_XXS", AffineSpec(8, True, 32, False, False, EXACT, "per 32: (grid * signs) * d*(0.5+s)/2"))
def _iq3_xxs(leaves, n):
    aux = np.asarray(leaves["scales"])  # uint32 per 32 values: 4x7 sign bits | scale << 28
    sign_index = (aux[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 0x7F  # [n, 8, 4]
    grid = np.asarray(leaves["iq3xxs_grid"])[np.asarray(leaves["qs"])].reshape(n, 8, 4, 8)
    codes = _signed(grid, _ksign_bits(np.asarray(leaves["ksigns_iq2xs"]), sign_index))
    return codes.reshape(n, 256), _half_step_scale(half_to_float(leaves["d"]), aux >> 28, 0.5), None, None


@rule("IQ3_S", AffineSpec(8, True, 32, False, False, EXACT, "per 32: (grid * signs) * d*(1+2s)"))
def _iq3_s(leaves, n):
    high = planes(leaves["qh"], 1, tuple(range(8)), 1).astype(np.uint16)
    index = np.asarray(leaves["qs"]).astype(np.uint16) | (high << 8)
    grid = np.asarray(leaves["iq3s_grid"])[index].reshape(n, 256)
    codes = _signed(grid, _sign_bits(leaves["signs"]))
    odd = (1 + 2 * _nibble_scales(leaves["scales"])).astype(np.float32)  # 1..31, exact
    return codes, half_to_float(leaves["d"])[:, None] * odd, None, None


def _iq1_codes(grid: np.ndarray, index: np.ndarray, negative: np.ndarray, delta: np.ndarray) -> tuple:
    """(grid + -delta) / delta as int8 and delta as float32; 1/delta must be an integer (8)."""
    step = np.float32(delta)
    k = int(round(1 / float(step)))
    if k * float(step) != 1.0 or k > 14:  # -9..9 for k = 8; wider would not fit int8 with the grid
        raise ValueError(f"IQ1 delta {float(step)} is not 1/k for a small integer k")
    rows = grid[index].astype(np.int8) * np.int8(k)  # [..., 8]
    return rows + np.where(negative, np.int8(-1), np.int8(1))[..., None], step


@rule("IQ1_S", AffineSpec(8, True, 32, False, False, EXACT, "per 32: (8g +- 1) * (d*(2s+1) / 8)"))
def _iq1_s(leaves, n):
    qh = np.asarray(leaves["qh"])  # per 32 values: 4x3 index high bits | 3-bit scale << 12 | delta sign << 15
    index = np.asarray(leaves["qs"]).astype(np.uint16).reshape(n, 8, 4) | (
        ((qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7) << 8
    )
    negative = np.broadcast_to(((qh & 0x8000) != 0)[:, :, None], index.shape)
    codes, step = _iq1_codes(np.asarray(leaves["iq1s_grid"]), index, negative, leaves["delta"])
    dl = half_to_float(leaves["d"])[:, None] * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)
    return codes.reshape(n, 256), dl * step, None, None


@rule("IQ1_M", AffineSpec(8, True, 16, False, False, EXACT, "per 16: (8g +- 1) * (d*(2s+1) / 8)"))
def _iq1_m(leaves, n):
    scales = np.asarray(leaves["scales"])  # 4x3-bit scales | one nibble of the f16 scale << 12
    nib = (scales & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], dtype=np.uint16)
    d = np.bitwise_or.reduce(nib, axis=-1).astype(np.uint16).view(np.float16).astype(np.float32)
    sub = ((scales[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7).reshape(n, 16)
    dl = d[:, None] * (2 * sub + 1).astype(np.float32)
    qh = planes(leaves["qh"], 1, (0, 4), 0x0F)  # per 8 values: 3 index high bits | delta sign << 3
    index = np.asarray(leaves["qs"]).astype(np.uint16) | ((qh & 7).astype(np.uint16) << 8)
    codes, step = _iq1_codes(np.asarray(leaves["iq1s_grid"]), index, (qh & 8) != 0, leaves["delta"])
    return codes.reshape(n, 256), dl * step, None, None


@rule("MXFP4", AffineSpec(8, True, 32, False, False, EXACT, "kvalues[q] (2 x E2M1) * 2^(e-128)"))
def _mxfp4(leaves, n):
    codes = np.asarray(leaves["kvalues"])[nibbles(leaves["qs"], 16)]
    # ggml_e8m0_to_fp32_half: 2^(e - 127) / 2; exact in float32 for every byte (0 -> 2^-128).
    scale = np.ldexp(np.float32(1), np.asarray(leaves["e"]).astype(np.int32) - 128).astype(np.float32)
    return codes, scale[:, None], None, None


@rule("NVFP4", AffineSpec(8, True, 16, False, False, EXACT, "kvalues[q] (2 x E2M1) * UE4M3(d)/2 per 16"))
def _nvfp4(leaves, n):
    d = np.asarray(leaves["d"])  # 4 UE4M3 scales; gguf-py ignores bit 7 and maps 0 and 0x7F to 0
    exponent = ((d >> 3) & 0xF).astype(np.int32)
    mantissa = (d & 7).astype(np.int32)
    normal = exponent > 0
    significand = np.where(normal, mantissa + 8, mantissa).astype(np.float32)
    scale = np.ldexp(significand, np.where(normal, exponent - 11, -10))  # value * 0.5, exact
    scale = np.where((d == 0) | (d == 0x7F), np.float32(0), scale).astype(np.float32)
    codes = np.asarray(leaves["kvalues"])[nibbles(leaves["qs"], 8)]
    return codes, scale, None, None
