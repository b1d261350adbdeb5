"""NF4 oracle: the published codebook (QLoRA appendix E / bitsandbytes ``_NF4_QUANT_TABLE``) typed
in as decimal strings and a numpy transcription of bitsandbytes' pure-torch ``quantize_4bit`` /
``dequantize_4bit`` (bitsandbytes/backends/default/ops.py)."""

from __future__ import annotations

import numpy as np

PUBLISHED = (
    "-1.0 -0.6961928009986877 -0.5250730514526367 -0.39491748809814453 -0.28444138169288635 "
    "-0.18477343022823334 -0.09105003625154495 0.0 0.07958029955625534 0.16093020141124725 "
    "0.24611230194568634 0.33791524171829224 0.44070982933044434 0.5626170039176941 "
    "0.7229568362236023 1.0"
).split()


CODE = np.array([float(v) for v in PUBLISHED], dtype=np.float32)


BLOCK = np.dtype([("absmax", "<f4"), ("qs", "u1", (32,))])  # our interleaved block, by hand


def bnb_dequantize(payload: bytes) -> np.ndarray:
    blocks = np.frombuffer(payload, BLOCK)
    codes = np.empty((len(blocks), 64), np.int64)
    codes[:, ::2] = blocks["qs"] >> 4  # bitsandbytes: out_dq[::2] = A >> 4
    codes[:, 1::2] = blocks["qs"] & 0xF
    with np.errstate(all="ignore"):
        return CODE[codes] * blocks["absmax"][:, None]


def bnb_quantize(x: np.ndarray) -> bytes:
    """bitsandbytes' pure-torch quantize_4bit in numpy float32, with the documented departures:
    NaN is left out (code 7), an all-zero block encodes as code 7, and absmax < 2**-128 divides."""
    blocks = x.reshape(-1, 64).astype(np.float32)
    blocks = np.where(np.isnan(blocks), np.float32(0), blocks)
    absmax = np.abs(blocks).max(axis=1)
    safe = np.where(absmax == 0, np.float32(1), absmax)[:, None]
    # np.where evaluates both branches: the discarded one may overflow or multiply 0 by inf.
    with np.errstate(over="ignore", invalid="ignore"):
        reciprocal = np.float32(1) / safe
        ratio = np.where(np.isinf(reciprocal), blocks / safe, blocks * reciprocal)  # absmax < 2**-128
    scaled = np.clip(ratio, np.float32(-1), np.float32(1))
    codes = np.argmin(np.abs(scaled[..., None] - CODE), axis=-1).astype(np.uint8)
    out = np.empty(len(blocks), BLOCK)
    out["absmax"] = absmax
    out["qs"] = (codes[:, ::2] << 4) | codes[:, 1::2]
    return out.tobytes()
