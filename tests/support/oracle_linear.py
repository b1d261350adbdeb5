"""Linear-family oracle: a numpy block splitter (ONNX's LSB-first INT4 nibbles) and a numpy
transcription of the documented encoder (symmetric absmax, or ONNX DynamicQuantizeLinear's
asymmetric range) in float32 with round-half-to-even (``np.rint``)."""

from __future__ import annotations

import numpy as np

RANGES = {"INT4": (-8, 7), "UINT4": (0, 15), "INT8": (-128, 127), "UINT8": (0, 255)}


SCALE_DTYPES = {"FLOAT16": np.dtype("<f2"), "FLOAT": np.dtype("<f4")}


def spec_of(fmt_name: str):
    parts = fmt_name.split("_")
    return parts[0], int(parts[1][1:]), {"F16": "FLOAT16", "F32": "FLOAT"}[parts[2]], parts[-1] == "ZP"


def block_dtype(element, block_size, scale, zero_point) -> np.dtype:
    """Our block as a numpy structured dtype: 4-bit values as raw bytes (split by ``nibbles``)."""
    values = (
        ("values", "u1", (block_size // 2,)) if element.endswith("4") else ("values", element.lower(), (block_size,))
    )
    zero = [("zero_point", "u1")] if zero_point else []
    return np.dtype([("scale", SCALE_DTYPES[scale]), *zero, values])


def nibbles(packed: np.ndarray, signed: bool) -> np.ndarray:
    """ONNX INT4/UINT4 order: value 2i in the low nibble of byte i."""
    out = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1).astype(np.int16)
    return np.where(out > 7, out - 16, out) if signed else out


def split(payload: bytes, spec) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(scale as float32, zero point or None, values) of every block, by numpy."""
    element, block_size, scale, zero_point = spec
    blocks = np.frombuffer(payload, block_dtype(*spec))
    signed = element.startswith("INT")
    if element.endswith("4"):
        values = nibbles(blocks["values"], signed)
        zero = nibbles(blocks["zero_point"][:, None], signed)[:, 0] if zero_point else None
        if zero_point:  # the padding nibble is zero
            assert np.all(blocks["zero_point"] >> 4 == 0)
    else:
        values = blocks["values"].astype(np.int16)
        zero = blocks["zero_point"].view(element.lower()).astype(np.int16) if zero_point else None
    return blocks["scale"].astype(np.float32), zero, values


def oracle_decode(payload: bytes, spec) -> np.ndarray:
    scale, zero, values = split(payload, spec)
    q = values.astype(np.float32)
    if zero is not None:
        q = q - zero.astype(np.float32)[:, None]
    with np.errstate(all="ignore"):
        return q * scale[:, None]


def oracle_encode(x: np.ndarray, spec) -> bytes:
    element, block_size, scale_type, zero_point = spec
    qmin, qmax = (np.float32(v) for v in RANGES[element])
    blocks = x.reshape(-1, block_size).astype(np.float32)
    zero = np.float32(0)
    if zero_point:  # ONNX DynamicQuantizeLinear: the range extended to include 0
        low = np.minimum(blocks.min(axis=1, keepdims=True), zero)
        high = np.maximum(blocks.max(axis=1, keepdims=True), zero)
        scale = (high - low) / (qmax - qmin)
    elif qmin < 0:
        scale = np.abs(blocks).max(axis=1, keepdims=True) / qmax
    else:
        scale = np.maximum(blocks.max(axis=1, keepdims=True), zero) / qmax
    stored = np.minimum(scale, np.float32(65504)).astype(np.float16) if scale_type == "FLOAT16" else scale
    divisor = stored.astype(np.float32)
    divisor = np.where(divisor == 0, np.float32(1), divisor)
    steps = np.rint(blocks / divisor)
    out = np.zeros(len(blocks), block_dtype(*spec))
    out["scale"] = stored[:, 0]
    if zero_point:
        point = np.clip(np.rint(qmin - low / divisor), qmin, qmax)
        steps = steps + point
        out["zero_point"] = point[:, 0].astype(np.int8 if qmin < 0 else np.uint8).view(np.uint8) & (
            0x0F if element.endswith("4") else 0xFF
        )
    q = np.clip(steps, qmin, qmax).astype(np.int16)
    if element.endswith("4"):
        q = (q & 0xF).astype(np.uint8)
        out["values"] = q[:, 0::2] | (q[:, 1::2] << 4)
    else:
        out["values"] = q.astype(element.lower())
    return out.tobytes()
