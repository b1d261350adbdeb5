"""Independent numpy oracles for the models in support/models.py.

Every oracle reads the payload bytes with plain numpy (structured dtypes, shifts and masks written
out per format), never through onnx_struct's views, so a wrong layout or feeding shows up.
"""

from __future__ import annotations

import numpy as np

# 18-byte blocks {d: FLOAT16, qs: UINT4[32]} (support.models.q4_block_model)
BLOCK_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


def int4_oracle(payload: bytes) -> np.ndarray:
    """Signed nibbles, LSB first (element 2k is byte k's low nibble), as int64."""
    data = np.frombuffer(payload, dtype=np.uint8)
    nibbles = np.stack([data & 0x0F, data >> 4], axis=-1).reshape(-1).astype(np.int64)
    return np.where(nibbles >= 8, nibbles - 16, nibbles)


def q4_payload(rng: np.random.Generator, n: int) -> bytes:
    blocks = np.zeros(n, dtype=BLOCK_DTYPE)
    blocks["d"] = rng.uniform(-2, 2, n).astype(np.float16)
    blocks["qs"] = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    return blocks.tobytes()


def q4_oracle(payload: bytes) -> np.ndarray:
    blocks = np.frombuffer(payload, dtype=BLOCK_DTYPE)
    qs = blocks["qs"]
    q = np.stack([qs & 0x0F, qs >> 4], axis=-1).reshape(len(blocks), 32).astype(np.float32)
    return (q - 8) * blocks["d"].astype(np.float32)[:, None]


def bitpack_oracle(payload: bytes) -> np.ndarray:
    return np.frombuffer(payload, dtype="<u2").astype(np.int64)
