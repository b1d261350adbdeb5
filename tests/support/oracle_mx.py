"""OCP Microscaling oracle: ml_dtypes element and E8M0 values, numpy's frexp for the shared
exponent, numpy bit packing for the byte layout (OCP MX v1.0)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

# name -> (element dtype, bits, emax_elem from OCP v1.0 table 1 / microxcaling, onnx type)
SPEC = {
    "OCP_MXFP8_E4M3": (ml_dtypes.float8_e4m3fn, 8, 8, TensorProto.FLOAT8E4M3FN),
    "OCP_MXFP8_E5M2": (ml_dtypes.float8_e5m2, 8, 15, TensorProto.FLOAT8E5M2),
    "OCP_MXFP6_E2M3": (ml_dtypes.float6_e2m3fn, 6, 2, TensorProto.FLOAT6E2M3),
    "OCP_MXFP6_E3M2": (ml_dtypes.float6_e3m2fn, 6, 4, TensorProto.FLOAT6E3M2),
    "OCP_MXFP4": (ml_dtypes.float4_e2m1fn, 4, 2, TensorProto.FLOAT4E2M1),
    "OCP_MXINT8": (np.int8, 8, 0, TensorProto.INT8),
}


def pack_blocks(scales: np.ndarray, codes: np.ndarray, bits: int) -> bytes:
    """The documented layout, by numpy: per block the scale byte, then the 32 element codes
    packed LSB-first, ``bits`` each."""
    code_bits = (codes[..., None].astype(np.uint16) >> np.arange(bits)) & 1  # [n, 32, bits], LSB first
    scale_bits = (scales[:, None].astype(np.uint16) >> np.arange(8)) & 1
    block_bits = np.concatenate([scale_bits, code_bits.reshape(len(codes), -1)], axis=1).astype(np.uint8)
    return np.packbits(block_bits, axis=1, bitorder="little").tobytes()


def unpack_blocks(payload: bytes, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale bytes [n], element codes [n, 32]) of a payload, by numpy."""
    block_bits = np.unpackbits(np.frombuffer(payload, np.uint8).reshape(-1, 1 + 4 * bits), axis=1, bitorder="little")
    weights = 1 << np.arange(bits)
    codes = (block_bits[:, 8:].reshape(len(block_bits), 32, bits) * weights).sum(axis=2)
    return np.packbits(block_bits[:, :8], axis=1, bitorder="little")[:, 0], codes.astype(np.uint8)


def element_values(name: str, codes: np.ndarray) -> np.ndarray:
    dtype = SPEC[name][0]
    if dtype is np.int8:
        return codes.view(np.int8).astype(np.float32) * np.float32(2.0**-6)
    return codes.view(dtype).astype(np.float32)


def oracle_decode(name: str, scales: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """X * P[i] with ml_dtypes values: X = E8M0(scale) (0xFF is NaN)."""
    x_scale = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return element_values(name, codes) * x_scale[:, None]


def oracle_encode(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OCP v1.0 section 6.3 by numpy + ml_dtypes: shared_exp = floor(log2(amax)) - emax, clamped
    to [-127, 127]; elements V / X rounded to nearest even and saturated; non-finite -> NaN scale."""
    dtype, _, emax, _ = SPEC[name]
    blocks = x.reshape(-1, 32).astype(np.float64)
    finite = np.isfinite(blocks)
    bad = ~finite.all(axis=1)
    amax = np.where(finite, np.abs(blocks), 0).max(axis=1)
    _, exponent = np.frexp(amax)  # amax = m * 2**exponent, 0.5 <= m < 1: floor(log2) = exponent - 1
    shared = np.clip(np.where(amax > 0, exponent - 1 - emax, -127), -127, 127)
    scales = np.where(bad, 0xFF, shared + 127).astype(np.uint8)
    ratio = np.where(bad[:, None], 0.0, np.where(finite, blocks, 0) / np.ldexp(1.0, shared)[:, None])
    if dtype is np.int8:
        codes = np.clip(np.rint(ratio * 64), -127, 127).astype(np.int8).view(np.uint8)
    else:
        limit = float(ml_dtypes.finfo(dtype).max)
        codes = np.clip(ratio, -limit, limit).astype(dtype).view(np.uint8)
    return scales, codes
