"""GGUF oracle: gguf-py (``gguf.quants.dequantize`` / ``quantize``, ``GGML_QUANT_SIZES``) and a
numpy port of ggml's ``quantize_row_nvfp4_ref`` built on gguf-py's own UE4M3 helpers (gguf-py has
no NVFP4 quantizer). Importing this module needs gguf; callers importorskip it first."""

from __future__ import annotations

import warnings

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gq


def block_bytes(name: str) -> int:
    return GGML_QUANT_SIZES[GGMLQuantizationType[name]][1]


def dequantize(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """gguf-py's float32 values of ``payload`` read as ``shape`` (numpy's NaN/inf warnings off)."""
    data = np.frombuffer(payload, np.uint8).reshape(*shape[:-1], -1)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return gq.dequantize(data, GGMLQuantizationType[name])


def quantize(name: str, x: np.ndarray) -> bytes:
    """gguf-py's bytes for ``x`` (ggml's NVFP4 reference for NVFP4); NotImplementedError where
    gguf-py has no quantizer (the IQ types need an importance matrix)."""
    if name == "NVFP4":
        return ggml_nvfp4_reference(x)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # gguf-py's float -> uint8 casts of tiny/inf amax
        return gq.quantize(x, GGMLQuantizationType[name]).tobytes()


def ggml_nvfp4_reference(x: np.ndarray) -> bytes:
    """quantize_row_nvfp4_ref in numpy, on gguf-py's UE4M3 helpers: per 16 values (NaN skipped by
    the amax loop) ``ue = fp32_to_ue4m3(amax / 6)``, then best_index_mxfp4 (first minimum)."""
    sub = x.reshape(-1, 4, 16).astype(np.float32)
    amax = np.where(np.isnan(sub), np.float32(0), np.abs(sub)).max(axis=2)
    ue = gq.NVFP4.fp32_to_ue4m3(amax / np.float32(6)).astype(np.uint8)
    d = gq.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)
    kvalues = np.array(gq.NVFP4.kvalues, np.float32)
    with np.errstate(invalid="ignore"):
        errors = np.abs(d[..., None, None] * kvalues - sub[..., None])
    codes = np.argmin(errors, axis=-1).astype(np.uint8)  # NaN rows: first NaN -> 0, like ggml
    qs = codes[..., :8] | (codes[..., 8:] << 4)
    return np.concatenate([ue, qs.reshape(-1, 32)], axis=1).tobytes()
