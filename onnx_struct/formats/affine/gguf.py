"""Affine forms of GGUF's legacy, K-quant and ternary formats.

Rule: scale and minimum are computed as gguf-py's ``dequantize_blocks`` computes them (the same
float32 operations in the same order), so ``(code - zero_point) * scale + minimum`` rounds like
the reference. 4-bit and narrower codes keep the stored value with the format's offset as zero
point; 5- and 6-bit codes are widened to 8 bits.

Notes: docs/modules.md.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.affine.form import AffineSpec, half_to_float, nibbles, planes, rule

EXACT = "bit-exact"
_FIFTH_BIT = np.uint8(16)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: bit j of the 4 little-endian ``qh`` bytes belongs to value j: [n, 4] -> [n, 32]."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=-1, bitorder="little")


def _full(like: np.ndarray, value: int, dtype) -> np.ndarray:
    return np.full(like.shape, value, dtype=dtype)


def _q4_0_parts(leaves):
    d = half_to_float(leaves["d"])[:, None]
    return d, _full(d, 8, np.uint8), None


def _q4_1_parts(leaves):
    return half_to_float(leaves["d"])[:, None], None, half_to_float(leaves["m"])[:, None]


# Formats whose 4-bit codes are 16-byte runs of nibbles (low: values 0-15, high: 16-31): their
# scale, zero point and minimum per block, the codes aside (paired_form reads them packed).
NIBBLE_RUN_PARTS = {"Q4_0": _q4_0_parts, "Q4_1": _q4_1_parts}


@rule("Q4_0", AffineSpec(4, False, 32, True, False, EXACT, "(q - 8) * d"))
def _q4_0(leaves, n):
    return nibbles(leaves["qs"], 16), *_q4_0_parts(leaves)


@rule("Q4_1", AffineSpec(4, False, 32, False, True, EXACT, "q * d + m"))
def _q4_1(leaves, n):
    return nibbles(leaves["qs"], 16), *_q4_1_parts(leaves)


@rule("Q5_0", AffineSpec(8, True, 32, False, False, EXACT, "(q - 16) * d, q - 16 in int8"))
def _q5_0(leaves, n):
    q = nibbles(leaves["qs"], 16) | (_fifth_bits(leaves["qh"]) * _FIFTH_BIT)
    return q.astype(np.int8) - np.int8(16), half_to_float(leaves["d"])[:, None], None, None


@rule("Q5_1", AffineSpec(8, False, 32, False, True, EXACT, "q * d + m, 5-bit q in uint8"))
def _q5_1(leaves, n):
    q = nibbles(leaves["qs"], 16) | (_fifth_bits(leaves["qh"]) * _FIFTH_BIT)
    return q, half_to_float(leaves["d"])[:, None], None, half_to_float(leaves["m"])[:, None]


@rule("Q8_0", AffineSpec(8, True, 32, False, False, EXACT, "q * d"))
def _q8_0(leaves, n):
    return np.asarray(leaves["qs"], dtype=np.int8), half_to_float(leaves["d"])[:, None], None, None


@rule("Q2_K", AffineSpec(4, False, 16, False, True, EXACT, "per 16: scale d*sc, minimum -(dmin*m); 2-bit q"))
def _q2_k(leaves, n):
    scales = np.asarray(leaves["scales"])
    d = half_to_float(leaves["d"])[:, None]
    dmin = half_to_float(leaves["dmin"])[:, None]
    scale = d * (scales & 0xF).astype(np.float32)
    minimum = -(dmin * (scales >> 4).astype(np.float32))
    return planes(leaves["qs"], 32, (0, 2, 4, 6), 3), scale, None, minimum


def _q3_k_scales(scales: np.ndarray) -> np.ndarray:
    """The 16 6-bit sub-scales (minus 32) of Q3_K's 12 scale bytes, as gguf-py unpacks them."""
    n = scales.shape[0]
    low = nibbles(scales[:, :8], 8)  # bytes 0-7: low nibbles = scales 0-7, high nibbles = 8-15
    high = planes(scales[:, 8:], 4, (0, 2, 4, 6), 3)  # bytes 8-11: 2 high bits, 4 per byte
    return ((low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)).reshape(n, 16)


@rule("Q3_K", AffineSpec(4, False, 16, True, False, EXACT, "per 16: (c - 4) * d*sc, c = 2-bit q | hmask bit << 2"))
def _q3_k(leaves, n):
    d = half_to_float(leaves["d"])[:, None]
    scale = d * _q3_k_scales(np.asarray(leaves["scales"])).astype(np.float32)
    low = planes(leaves["qs"], 32, (0, 2, 4, 6), 3)
    high = planes(leaves["hmask"], 32, tuple(range(8)), 1)  # set bit: no -4 offset
    return low | (high << np.uint8(2)), scale, _full(scale, 4, np.uint8), None


def k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: the 8 6-bit scales and 8 6-bit minimums packed in 12 bytes (ggml's
    get_scale_min_k4): bytes 0-3 scales 0-3, 4-7 mins 0-3, 8-11 low nibbles of scales 4-7 and high
    nibbles of mins 4-7, with their top 2 bits in the top bits of bytes 0-7."""
    s = np.asarray(scales).reshape(-1, 3, 4)
    d, m, md = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc, mn


def _k_scale_and_minimum(leaves) -> tuple[np.ndarray, np.ndarray]:
    sc, mn = k_scale_min(leaves["scales"])
    scale = half_to_float(leaves["d"])[:, None] * sc.astype(np.float32)
    minimum = -(half_to_float(leaves["dmin"])[:, None] * mn.astype(np.float32))
    return scale, minimum


@rule("Q4_K", AffineSpec(4, False, 32, False, True, EXACT, "per 32: scale d*sc, minimum -(dmin*m)"))
def _q4_k(leaves, n):
    scale, minimum = _k_scale_and_minimum(leaves)
    return nibbles(leaves["qs"], 32), scale, None, minimum


@rule("Q5_K", AffineSpec(8, False, 32, False, True, EXACT, "per 32: scale d*sc, minimum -(dmin*m); 5-bit q"))
def _q5_k(leaves, n):
    scale, minimum = _k_scale_and_minimum(leaves)
    high = planes(leaves["qh"], 32, tuple(range(8)), 1)
    return nibbles(leaves["qs"], 32) | (high << np.uint8(4)), scale, None, minimum


@rule("Q6_K", AffineSpec(8, True, 16, False, False, EXACT, "per 16: (q - 32) * d*sc, q - 32 in int8"))
def _q6_k(leaves, n):
    d = half_to_float(leaves["d"])[:, None]
    scale = d * np.asarray(leaves["scales"], dtype=np.int8).astype(np.float32)
    low = nibbles(leaves["ql"], 64)
    high = planes(leaves["qh"], 32, (0, 2, 4, 6), 3)
    return (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32), scale, None, None


@rule("TQ2_0", AffineSpec(4, False, 256, True, False, EXACT, "(t - 1) * d, t a 2-bit trit"))
def _tq2_0(leaves, n):
    d = half_to_float(leaves["d"])[:, None]
    return planes(leaves["qs"], 32, (0, 2, 4, 6), 3), d, _full(d, 1, np.uint8), None


_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)


def _trits(packed: np.ndarray, width: int, digits: int) -> np.ndarray:
    """TQ1_0: byte b holds trits as ``b * 3**k`` (mod 256), trit = (that * 3) >> 8; runs of
    ``width`` bytes give ``digits`` runs of ``width`` trits."""
    n = packed.shape[0]
    scaled = packed.reshape(n, -1, 1, width) * _POW3[:digits].reshape(1, 1, -1, 1)  # uint8: wraps mod 256
    return ((scaled.astype(np.uint16) * 3) >> 8).astype(np.uint8).reshape(n, -1)


@rule("TQ1_0", AffineSpec(4, False, 256, True, False, EXACT, "(t - 1) * d, t a base-3 digit"))
def _tq1_0(leaves, n):
    qs = np.asarray(leaves["qs"])
    t = np.concatenate([_trits(qs[:, :32], 32, 5), _trits(qs[:, 32:], 16, 5), _trits(leaves["qh"], 4, 4)], axis=-1)
    d = half_to_float(leaves["d"])[:, None]
    return t, d, _full(d, 1, np.uint8), None
