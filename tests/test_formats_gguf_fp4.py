"""GGUF MXFP4 and NVFP4: declarations, decoders and encoders against gguf-py.

Oracles: ``gguf.quants`` (dequantize for both types, quantize for MXFP4), a numpy port of ggml's
``quantize_row_nvfp4_ref`` built on gguf-py's own ``NVFP4.fp32_to_ue4m3`` / ``ue4m3_to_fp32``
helpers (gguf-py has no NVFP4 quantizer), numpy structured dtypes of ggml's block structs (to
split block bytes independently of our declarations), and numpy's float32 ``log2``. Decoders are
compared bit for bit (stricter than the 2-ulp budget), encoders byte for byte.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from support.formats import assert_same_floats, assert_valid_functions, run_encode

from onnx_struct import ValidationError, formats, size_in_bits
from onnx_struct.formats.gguf import fp4
from onnx_struct.payload.view import view_buffer

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402
from gguf import quants as gq  # noqa: E402
from support.roundtrip import common  # noqa: E402

QTYPES = {"MXFP4": GGMLQuantizationType.MXFP4, "NVFP4": GGMLQuantizationType.NVFP4}
# ggml's block_mxfp4 / block_nvfp4 (ggml-common.h), written out by hand.
ORACLE_DTYPES = {
    "MXFP4": np.dtype([("e", "u1"), ("qs", "u1", (16,))]),
    "NVFP4": np.dtype([("d", "u1", (4,)), ("qs", "u1", (32,))]),
}
RUNTIMES = ("onnxruntime", "reference")


# ---------------------------------------------------------------------- harness
def gguf_quantize(x: np.ndarray, name: str) -> bytes:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # gguf-py's float -> uint8 cast of tiny/inf amax
        return gq.quantize(x, QTYPES[name]).tobytes()


# ---------------------------------------------------------------------- declarations
@pytest.mark.parametrize("name", list(QTYPES))
def test_declaration_matches_ggml(name):
    fmt = getattr(fp4, name)
    block_size, type_size = GGML_QUANT_SIZES[QTYPES[name]]
    assert (fmt.block_size, fmt.bytes_per_block, fmt.family) == (block_size, type_size, "gguf")
    assert size_in_bits(fmt.block_declaration()) == 8 * type_size == 8 * ORACLE_DTYPES[name].itemsize
    kvalues = next(f.constant for f in fmt.block_fields() if f.name == "kvalues")
    reference = gq.MXFP4.kvalues if name == "MXFP4" else gq.NVFP4.kvalues
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(kvalues), np.array(reference, dtype=np.int8))


def test_registered_under_gguf_names():
    assert formats.get("MXFP4") is fp4.MXFP4 and formats.get("NVFP4") is fp4.NVFP4
    assert {"MXFP4", "NVFP4"} <= set(formats.names())


@pytest.mark.parametrize("name", list(QTYPES))
def test_view_splits_blocks_like_ggml(name):
    fmt = getattr(fp4, name)
    shape = (2, 3 * fmt.block_size)
    payload = np.random.default_rng(1).integers(0, 256, fmt.num_blocks(shape) * fmt.bytes_per_block, dtype=np.uint8)
    block = fmt.block_declaration()
    leaves = view_buffer(payload.tobytes(), fmt.root_declaration(shape, 0), [block]).leaves()
    oracle = payload.view(ORACLE_DTYPES[name])
    for field in ORACLE_DTYPES[name].names:
        np.testing.assert_array_equal(leaves[field], oracle[field])


def test_shape_must_be_whole_blocks():
    with pytest.raises(ValidationError, match="multiple of the block size 32"):
        fp4.MXFP4.decoder((4, 48))
    with pytest.raises(ValidationError, match="block size 64"):
        fp4.NVFP4.encoder((32,))


# ---------------------------------------------------------------------- decoders
def every_scale_payload(name: str, n_blocks: int, seed: int) -> bytes:
    """Random blocks whose scale bytes run through all 256 values."""
    blocks = np.random.default_rng(seed).integers(0, 256, (n_blocks, ORACLE_DTYPES[name].itemsize), dtype=np.uint8)
    blocks = blocks.view(ORACLE_DTYPES[name]).reshape(n_blocks)
    if name == "MXFP4":
        blocks["e"] = np.arange(n_blocks) % 256
    else:
        blocks["d"] = (np.arange(4 * n_blocks) % 256).reshape(n_blocks, 4)
    return blocks.tobytes()


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize(("name", "shape"), [("MXFP4", (8, 1024)), ("NVFP4", (2, 4, 512))])
def test_decode_is_bit_exact_against_gguf(name, shape, runtime):
    fmt = getattr(fp4, name)
    payload = every_scale_payload(name, fmt.num_blocks(shape), seed=2)
    common(name, shape, payload=payload, runtime=runtime)  # vs gq.dequantize (e = 255 overflows to inf in both)


def test_scale_tables_match_gguf():
    byte = np.arange(256, dtype=np.uint8)
    assert_same_floats(fp4.E8M0_HALF, gq.MXFP4.e8m0_to_fp32_half(byte))
    assert_same_floats(fp4.UE4M3_HALF, gq.NVFP4.ue4m3_to_fp32(byte).astype(np.float32))


# ---------------------------------------------------------------------- MXFP4 encoder
def test_log2_thresholds_match_numpy_float32_log2():
    """T[i] is where numpy's (= gguf-py's) floor(log2(float32)) reaches i - 148."""
    k = np.arange(-148, 129)
    thresholds = fp4.LOG2_THRESHOLDS
    before = np.nextafter(thresholds, np.float32(0))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(np.floor(np.log2(thresholds)), k)
        np.testing.assert_array_equal(np.floor(np.log2(before)), k - 1)
    # float32 rounding is visible: for large k, floor(log2f) reaches k a few ulps below 2**k
    assert thresholds[148 + 100] < np.float32(2.0**100) and thresholds[148 + 1] == np.float32(2.0)


def mxfp4_edge_blocks() -> np.ndarray:
    """32-value blocks probing every branch of gguf-py's quantizer."""
    rng = np.random.default_rng(3)
    blocks = []
    # amax exactly at, and one float32 below, each log2 threshold (where log2f rounds up)
    for amax in np.concatenate([fp4.LOG2_THRESHOLDS[::7], np.nextafter(fp4.LOG2_THRESHOLDS[::7], np.float32(0))]):
        block = rng.uniform(-1, 1, 32).astype(np.float32) * amax
        block[rng.integers(32)] = -amax if rng.integers(2) else amax
        blocks.append(block)
    blocks.append(np.zeros(32, np.float32))  # amax == 0 -> e = 0
    blocks.append(np.full(32, -0.0, np.float32))
    tiny = np.zeros(32, np.float32)
    tiny[[0, 5]] = [2.0**-140, -(2.0**-149)]  # 0 < amax < 2**-125: gguf-py's uint8 cast wraps
    blocks.append(tiny)
    # ties: values exactly midway between two kvalues * d (d = 2**(e-128) with e = 127 -> 0.5)
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4, np.float32) * np.tile([1, -1], 16)
    ties[0] = 4.0  # amax 4 -> floor(log2) = 2 -> e = 127
    blocks.append(ties)
    blocks.append(np.array([np.nan] + [1.0] * 31, np.float32))  # NaN amax -> e = 0
    blocks.append(np.array([np.inf, -2.0] + [0.5] * 30, np.float32))  # inf amax -> e = 0 (x86)
    blocks.append(np.array([-np.inf, np.nan] + [3.0] * 30, np.float32))
    return np.stack(blocks).astype(np.float32)  # every value above is a float32


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_mxfp4_encoder_is_byte_identical_to_gguf(runtime):
    rng = np.random.default_rng(4)
    random_blocks = rng.standard_normal((64, 32)).astype(np.float32)
    random_blocks *= np.ldexp(np.float32(1), rng.integers(-120, 120, (64, 1))).astype(np.float32)
    x = np.concatenate([random_blocks, mxfp4_edge_blocks()])  # one block per row
    assert x.dtype == np.float32
    common("MXFP4", x.shape, x=x, runtime=runtime)  # bytes == gguf_quantize(x, "MXFP4"), then decoded


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, (2, 32), elements=st.floats(width=32, allow_nan=False, allow_infinity=False)))
def test_mxfp4_encoder_property(x):
    assert run_encode(fp4.MXFP4, x, "onnxruntime") == gguf_quantize(x, "MXFP4")


# ---------------------------------------------------------------------- NVFP4 encoder
def test_ue4m3_thresholds_match_gguf():
    """Our UE4M3 conversion steps are where gguf-py's fp32_to_ue4m3 steps."""
    t = fp4.UE4M3_THRESHOLDS
    codes = fp4.UE4M3_CODES
    np.testing.assert_array_equal(gq.NVFP4.fp32_to_ue4m3(t), codes[1:])
    np.testing.assert_array_equal(gq.NVFP4.fp32_to_ue4m3(np.nextafter(t, np.float32(0))), codes[:-1])
    sample = np.random.default_rng(5).uniform(0, 500, 20000).astype(np.float32)
    expected = gq.NVFP4.fp32_to_ue4m3(sample)
    np.testing.assert_array_equal(codes[np.searchsorted(t, sample, side="right")], expected)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_nvfp4_encoder_matches_ggml_reference(runtime):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((40, 64)).astype(np.float32)
    x *= np.ldexp(np.float32(1), rng.integers(-14, 8, (40, 4)).repeat(16, axis=1)).astype(np.float32)
    x[0] = 0.0
    x[1, :16] = 500.0  # > 448 * 6: saturates at 0x7E
    x[2, 3] = np.nan  # skipped by the amax loop, encoded as code 0
    x[3, 20] = -np.inf
    x[4, :] = np.float32(2.0**-12)  # subnormal UE4M3 scale
    x = x.reshape(10, 256)
    payload = common("NVFP4", x.shape, x=x, runtime=runtime)  # == ggml_nvfp4_reference(x), then decoded
    # gguf-py decodes it to within half the widest E2M1 step (amax / 6) plus the scale's rounding
    # (UE4M3 keeps 3 mantissa bits: amax / 16) in blocks whose scale is a normal UE4M3
    decoded = gq.dequantize(np.frombuffer(payload, np.uint8).reshape(10, -1), QTYPES["NVFP4"])
    groups = x.reshape(-1, 16)
    amax = np.abs(groups).max(axis=1, keepdims=True)
    ok = (np.isfinite(groups).all(axis=1, keepdims=True) & (amax / 6 >= 2.0**-6) & (amax / 6 <= 240)).ravel()
    error = np.abs(decoded.reshape(-1, 16) - groups)[ok]
    assert ok.sum() > 50 and np.all(error <= amax[ok] * (1 / 6 + 1 / 16))


# ---------------------------------------------------------------------- ONNX validity
@pytest.mark.parametrize("name", list(QTYPES))
def test_functions_are_valid_onnx(name):
    fmt = getattr(fp4, name)
    assert_valid_functions(fmt, (2, 2 * fmt.block_size))
