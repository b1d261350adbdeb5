"""NF4 (bitsandbytes NormalFloat 4-bit): codebook, layout, decoder and encoder.

Oracles: the published codebook (QLoRA appendix E / bitsandbytes ``_NF4_QUANT_TABLE``) typed in
below as decimal strings, a numpy transcription of bitsandbytes' pure-torch ``quantize_4bit`` /
``dequantize_4bit`` (bitsandbytes/backends/default/ops.py: ``packed = q[::2] << 4 | q[1::2]``,
``scaled = clamp(A * (1 / absmax), -1, 1)``, ``argmin |scaled - code|``), and golden bytes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto
from support.formats import assert_valid_functions, run_decode, run_encode
from support.oracle_nf4 import BLOCK, CODE, PUBLISHED, bnb_dequantize, bnb_quantize
from support.roundtrip import common

from onnx_struct import ValidationError, formats, size_in_bits
from onnx_struct.formats import nf4
from onnx_struct.layout.table import TypeTable

RUNTIMES = ("onnxruntime", "reference")


# ---------------------------------------------------------------------- codebook and declaration
def test_codebook_is_the_published_one():
    for value, text in zip(nf4.CODE, PUBLISHED, strict=True):
        assert float(value) == float(text)  # each published decimal is exactly a float32
        assert float(np.float32(text)) == float(text)
    assert np.all(np.diff(nf4.CODE) > 0) and nf4.CODE[nf4.ZERO_CODE] == 0


def test_declaration():
    fmt = nf4.NF4
    assert (fmt.family, fmt.block_size, fmt.bytes_per_block) == ("nf4", 64, 36)
    assert formats.get("NF4") is fmt
    block = fmt.block_declaration()
    assert size_in_bits(block) == 8 * BLOCK.itemsize
    absmax, qs, code = TypeTable([block]).leaves(fmt.root_declaration((2, 64), 0), "root")
    assert (absmax.path, absmax.elem_type, absmax.bit_offset, absmax.shape) == ("absmax", TensorProto.FLOAT, 0, (2,))
    assert (qs.path, qs.elem_type, qs.bit_offset, qs.shape) == ("qs", TensorProto.UINT8, 32, (2, 32))
    assert code.kind == "constant" and code.path == "code"
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(code.constant), CODE)
    with pytest.raises(ValidationError, match="block size 64"):
        fmt.decoder((96,))


# ---------------------------------------------------------------------- decoder
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_golden_block(runtime):
    # absmax 2.0; byte 0 = 0xF0: the first value is code 15 (+1.0), the second code 0 (-1.0);
    # byte 1 = 0x78: codes 7 (0.0) then 8 (0.0795...)
    payload = np.float32(2.0).tobytes() + bytes([0xF0, 0x78]) + bytes([0x77] * 30)
    y = run_decode(nf4.NF4, (64,), payload, runtime)
    np.testing.assert_array_equal(y[:4], np.float32([2.0, -2.0, 0.0, 2 * np.float32(0.07958029955625534)]))
    np.testing.assert_array_equal(y[4:], 0)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_decode_matches_bitsandbytes(runtime):
    rng = np.random.default_rng(11)
    blocks = np.frombuffer(rng.integers(0, 256, 48 * BLOCK.itemsize, dtype=np.uint8).tobytes(), BLOCK).copy()
    blocks["absmax"][::2] = rng.uniform(0, 4, 24).astype(np.float32)  # odd blocks: any bit pattern
    blocks["absmax"][:4] = [0.0, np.inf, np.nan, 1e-40]
    common("NF4", (6, 8, 64), payload=blocks.tobytes(), runtime=runtime)  # vs bnb_dequantize


# ---------------------------------------------------------------------- encoder
def edge_blocks() -> np.ndarray:
    rng = np.random.default_rng(12)
    blocks = [rng.standard_normal((16, 64)) * np.ldexp(1.0, rng.integers(-60, 60, (16, 1)))]
    ties = np.resize((CODE[:-1].astype(np.float64) + CODE[1:]) / 2, 64)  # midpoints: exact or near ties
    ties[0] = 1.0
    blocks.append(ties[None])
    blocks.append(np.zeros((1, 64)))
    with_nan = rng.standard_normal((1, 64))
    with_nan[0, 3] = np.nan
    blocks.append(with_nan)
    blocks.append(np.full((1, 64), -3.5))  # every value at -absmax: code 0
    blocks.append(rng.standard_normal((1, 64)) * 2.0**-140)  # subnormal absmax: 1 / absmax overflows
    blocks.append(reciprocal_sensitive_block())
    return np.concatenate(blocks).astype(np.float32)


def nearest_codes(scaled: np.ndarray) -> np.ndarray:
    return np.argmin(np.abs(np.clip(scaled, -1, 1)[..., None] - CODE), axis=-1)


def reciprocal_sensitive_block() -> np.ndarray:
    """absmax 3 and values near codebook midpoints whose code differs between bitsandbytes'
    ``x * (1 / absmax)`` and ``x / absmax``: they pin the reciprocal."""
    absmax = np.float32(3)
    midpoints = ((CODE[:-1].astype(np.float64) + CODE[1:]) / 2 * 3).astype(np.float32)
    steps = np.arange(-8, 9)
    x = (midpoints[:, None].view(np.int32) + steps).view(np.float32).ravel()  # +-8 ulps around each
    by_reciprocal = nearest_codes(x * (np.float32(1) / absmax))
    by_division = nearest_codes(x / absmax)
    sensitive = x[by_reciprocal != by_division]
    assert sensitive.size >= 4
    return np.concatenate([[absmax], np.resize(sensitive, 63)])[None]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_encode_matches_bitsandbytes_algorithm(runtime):
    x = edge_blocks()  # one block per row
    common("NF4", x.shape, x=x, runtime=runtime)  # bytes == bnb_quantize(x), then decoded


def test_round_trip_error_is_half_the_widest_codebook_gap():
    x = np.random.default_rng(13).standard_normal((4, 256)).astype(np.float32)
    y = bnb_dequantize(run_encode(nf4.NF4, x, "onnxruntime")).reshape(x.shape)
    absmax = np.abs(x).reshape(-1, 64).max(axis=1, keepdims=True)
    gap = np.max(np.diff(CODE)) / 2
    assert np.all(np.abs(y - x).reshape(-1, 64) <= absmax * gap * (1 + 1e-6))


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, (2, 64), elements=st.floats(width=32, allow_nan=False, allow_infinity=False)))
def test_encode_property(x):
    assert run_encode(nf4.NF4, x, "onnxruntime") == bnb_quantize(x)


# ---------------------------------------------------------------------- ONNX validity
def test_functions_are_valid_onnx():
    assert_valid_functions(nf4.NF4, (3, 128))
