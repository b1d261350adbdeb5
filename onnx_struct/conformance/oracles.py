"""The independent oracles decode expectations come from, when the suite is generated: gguf-py's
``gguf.quants.dequantize`` for the GGUF family, ml_dtypes for OCP MX, the published NF4 codebook
(QLoRA, appendix E) and numpy for the linear (INT4/INT8/UINT*) family. None of them reads bytes
through onnx_struct's views or decoders."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

# name -> (element dtype, bits): OCP Microscaling Formats v1.0, table 1.
MX_ELEMENTS = {
    "OCP_MXFP8_E4M3": (ml_dtypes.float8_e4m3fn, 8),
    "OCP_MXFP8_E5M2": (ml_dtypes.float8_e5m2, 8),
    "OCP_MXFP6_E2M3": (ml_dtypes.float6_e2m3fn, 6),
    "OCP_MXFP6_E3M2": (ml_dtypes.float6_e3m2fn, 6),
    "OCP_MXFP4": (ml_dtypes.float4_e2m1fn, 4),
    "OCP_MXINT8": (np.int8, 8),
}

# NF4's 16 values, as published (QLoRA appendix E; bitsandbytes' table).
NF4_CODE = np.array(
    [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
     -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
     0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
     0.7229568362236023, 1.0],
    dtype=np.float32,
)  # fmt: skip


def gguf_dequantize(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    from gguf import GGMLQuantizationType, quants  # noqa: PLC0415 - optional (the gguf extra)

    data = np.frombuffer(payload, np.uint8).reshape(*shape[:-1], -1)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return quants.dequantize(data, GGMLQuantizationType[name]).astype(np.float32).reshape(shape)


def mx_dequantize(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """Per 32-element block: the E8M0 scale byte, then 32 codes of ``bits`` bits packed LSB first."""
    dtype, bits = MX_ELEMENTS[name]
    block_bits = np.unpackbits(np.frombuffer(payload, np.uint8).reshape(-1, 1 + 4 * bits), axis=1, bitorder="little")
    codes = (block_bits[:, 8:].reshape(len(block_bits), 32, bits) * (1 << np.arange(bits))).sum(axis=2).astype(np.uint8)
    scales = np.packbits(block_bits[:, :8], axis=1, bitorder="little")[:, 0]
    if dtype is np.int8:
        elements = codes.view(np.int8).astype(np.float32) * np.float32(2.0**-6)  # INT8 with 6 fraction bits
    else:
        elements = codes.view(dtype).astype(np.float32)
    x_scale = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (elements * x_scale[:, None]).reshape(shape)


def nf4_dequantize(payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """Per 64 values: absmax (float32), then 32 bytes, value 2i in byte i's high nibble."""
    blocks = np.frombuffer(payload, np.dtype([("absmax", "<f4"), ("qs", "u1", (32,))]))
    codes = np.empty((len(blocks), 64), np.int64)
    codes[:, 0::2] = blocks["qs"] >> 4
    codes[:, 1::2] = blocks["qs"] & 0xF
    with np.errstate(all="ignore"):
        return (NF4_CODE[codes] * blocks["absmax"][:, None]).reshape(shape)


def linear_dequantize(name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """``{INT4|UINT4|INT8|UINT8}_B{n}_{F16|F32}[_ZP]``: scale, [zero point byte], values (4-bit values
    two per byte, value 2i in byte i's low nibble, as ONNX packs INT4); (q - zero point) * scale."""
    element, block, scale_name, *rest = name.split("_")
    block_size, zero_point = int(block[1:]), bool(rest)
    scale_dtype = {"F16": "<f2", "F32": "<f4"}[scale_name]
    four_bit, signed = element.endswith("4"), element.startswith("INT")
    values = ("values", "u1", (block_size // 2,)) if four_bit else ("values", element.lower(), (block_size,))
    blocks = np.frombuffer(
        payload, np.dtype([("scale", scale_dtype), *([("zero_point", "u1")] if zero_point else []), values])
    )

    def nibbles(packed):
        out = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1).astype(np.int16)
        return np.where(out > 7, out - 16, out) if signed else out

    q = (nibbles(blocks["values"]) if four_bit else blocks["values"].astype(np.int16)).astype(np.float32)
    if zero_point:
        zp = blocks["zero_point"]
        zero = nibbles(zp[:, None])[:, 0] if four_bit else zp.view(element.lower()).astype(np.int16)
        q = q - zero.astype(np.float32)[:, None]
    with np.errstate(all="ignore"):
        return (q * blocks["scale"].astype(np.float32)[:, None]).reshape(shape)


def dequantize(family: str, name: str, payload: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 values of ``payload`` in format ``name`` (of ``family``) as ``shape``.

    Args:
        family: the format's family ("gguf", "mx", "nf4", "linear").
        name: the format's registered name.
        payload: its block bytes.
        shape: the logical shape.

    Returns:
        The oracle's float32 array.

    Raises:
        KeyError: a family without an oracle.
        ImportError: gguf-py is not installed (GGUF family).
    """
    if family == "gguf":
        return gguf_dequantize(name, payload, shape)
    if family == "mx":
        return mx_dequantize(name, payload, shape)
    if family == "nf4":
        return nf4_dequantize(payload, shape)
    if family == "linear":
        return linear_dequantize(name, payload, shape)
    raise KeyError(f"no oracle for the {family!r} family ({name})")
