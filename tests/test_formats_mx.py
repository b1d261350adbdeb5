"""OCP Microscaling formats: declarations, byte layout, decoders and encoders.

Oracles: ml_dtypes (element and E8M0 values, round-to-nearest-even casts), numpy's frexp for the
shared exponent, numpy bit packing (``np.packbits(bitorder="little")``) for the byte layout, and
golden bytes written by hand. Which runtime each format runs in is pinned too: onnxruntime for
MXFP8/MXINT8, the reference evaluator (after a warning) for MXFP4/MXFP6.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import support.formats as oracles
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto
from support.formats import assert_valid_functions
from support.oracle_mx import SPEC, element_values, oracle_encode, pack_blocks, unpack_blocks
from support.roundtrip import common

from onnx_struct import ValidationError, formats, size_in_bits
from onnx_struct.formats import mx
from onnx_struct.layout.table import TypeTable
from onnx_struct.payload.view import view_buffer

NAMES = list(SPEC)
IN_ORT = {"OCP_MXFP8_E4M3", "OCP_MXFP8_E5M2", "OCP_MXINT8"}
RUNTIMES = ("onnxruntime", "reference")


# ---------------------------------------------------------------------- harness
def falls_back(name: str, runtime: str) -> bool:
    """onnxruntime runs MXFP8/MXINT8 itself and falls back to the reference for MXFP4/MXFP6."""
    return runtime == "onnxruntime" and name not in IN_ORT


def run_decode(name: str, shape, payload: bytes, runtime: str) -> np.ndarray:
    return oracles.run_decode(mx.FORMATS[name], shape, payload, runtime, fallback=falls_back(name, runtime))


def run_encode(name: str, x: np.ndarray, runtime: str) -> bytes:
    return oracles.run_encode(mx.FORMATS[name], x, runtime, fallback=falls_back(name, runtime))


# ---------------------------------------------------------------------- declarations
@pytest.mark.parametrize("name", NAMES)
def test_declaration(name):
    fmt = mx.FORMATS[name]
    dtype, bits, _, onnx_type = SPEC[name]
    assert (fmt.family, fmt.block_size, fmt.bytes_per_block) == ("mx", 32, 1 + 4 * bits)
    assert formats.get(name) is fmt
    block = fmt.block_declaration()
    assert size_in_bits(block) == 8 + 32 * bits
    scale, elements = TypeTable([block]).leaves(fmt.root_declaration((3, 64), 0), "root")
    assert (scale.path, scale.elem_type, scale.bit_offset, scale.shape) == ("scale", TensorProto.FLOAT8E8M0, 0, (6,))
    assert (elements.path, elements.elem_type, elements.bit_offset) == ("elements", onnx_type, 8)
    assert elements.shape == (6, 32) and elements.strides == (8 + 32 * bits, bits)


def test_opsets_are_the_lowest_that_cast_the_types():
    for name in NAMES:
        (opset,) = mx.FORMATS[name].decoder((32,)).opset_import
        assert opset.version == (28 if "MXFP6" in name else 25)


def test_shape_must_be_whole_blocks():
    with pytest.raises(ValidationError, match="block size 32"):
        mx.FORMATS["OCP_MXFP4"].decoder((2, 40))


# ---------------------------------------------------------------------- golden bytes
def test_golden_mxfp4():
    # scale 2**1; elements 0.5 (0b0001), 1.0 (0b0010), -6.0 (0b1111), then zeros; LSB-first nibbles
    payload = bytes([0x80, 0x21, 0x0F]) + bytes(14)
    expected = np.zeros(32, np.float32)
    expected[:3] = [1.0, 2.0, -12.0]
    np.testing.assert_array_equal(run_decode("OCP_MXFP4", (32,), payload, "reference"), expected)


def test_golden_mxfp6_e2m3():
    # E2M3 codes: 1.0 = 0b001000, -7.5 = 0b111111, 0.125 = 0b000001 (checked against ml_dtypes)
    codes = np.array([0x08, 0x3F, 0x01], np.uint8)
    np.testing.assert_array_equal(codes.view(ml_dtypes.float6_e2m3fn).astype(np.float32), [1.0, -7.5, 0.125])
    # element 0 = bits 0-5 of byte 0; element 1 = bits 6-7 of byte 0 and 0-3 of byte 1; element 2
    # = bits 4-7 of byte 1 and 0-1 of byte 2
    payload = bytes([0x7F, 0xC8, 0x1F, 0x00]) + bytes(21)
    expected = np.zeros(32, np.float32)
    expected[:3] = [1.0, -7.5, 0.125]
    np.testing.assert_array_equal(run_decode("OCP_MXFP6_E2M3", (32,), payload, "reference"), expected)


def test_golden_mxint8_and_nan_scale():
    payload = bytes([0x7F, 0x40, 0x80, 0x01]) + bytes(29) + bytes([0xFF]) + bytes(range(32))
    y = run_decode("OCP_MXINT8", (2, 32), payload, "onnxruntime")
    np.testing.assert_array_equal(y[0, :4], [1.0, -2.0, 1 / 64, 0.0])
    assert np.isnan(y[1]).all()  # NaN scale: the whole block is NaN, zero elements included


@pytest.mark.parametrize("name", NAMES)
def test_view_matches_numpy_packing(name):
    bits = SPEC[name][1]
    rng = np.random.default_rng(7)
    scales = rng.integers(0, 256, 5, dtype=np.uint8)
    codes = rng.integers(0, 1 << bits, (5, 32), dtype=np.uint8)
    fmt = mx.FORMATS[name]
    leaves = view_buffer(pack_blocks(scales, codes, bits), fmt.root_declaration((5, 32), 0), [fmt.block_declaration()])
    np.testing.assert_array_equal(leaves["scale"].view(np.uint8), scales)
    np.testing.assert_array_equal(leaves["elements"].view(np.uint8), codes)
    assert leaves["elements"].dtype == np.dtype(SPEC[name][0])


# ---------------------------------------------------------------------- decoder
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_ml_dtypes(name, runtime):
    bits = SPEC[name][1]
    rng = np.random.default_rng(8)
    scales = np.arange(256, dtype=np.uint8)  # every scale, 0xFF (NaN) included
    codes = rng.integers(0, 1 << bits, (256, 32), dtype=np.uint8)
    codes[:, 0] = np.arange(256) % (1 << bits)  # every element code
    common(name, (16, 512), payload=pack_blocks(scales, codes, bits), runtime=runtime)  # vs oracle_decode


# ---------------------------------------------------------------------- encoder
def edge_blocks(name: str) -> np.ndarray:
    """Blocks over the whole float32 range, ties, saturation, zeros and non-finite values."""
    dtype, _, emax, _ = SPEC[name]
    rng = np.random.default_rng(9)
    normal = rng.standard_normal((24, 32)) * np.ldexp(1.0, rng.integers(-150, 127, (24, 1)))
    blocks = [np.clip(normal, -3e38, 3e38)]
    # ties: with amax = 2**emax the scale X is 1, so midpoints of the element grid are exact ties
    grid = np.unique(np.abs(element_values(name, np.arange(1 << SPEC[name][1], dtype=np.uint8))))
    grid = grid[np.isfinite(grid)]
    midpoints = ((grid[:-1] + grid[1:]) / 2)[: np.searchsorted(grid, 2.0**emax)]
    picked = midpoints[np.linspace(0, midpoints.size - 1, 31).astype(int)]
    blocks.append(np.concatenate([[2.0**emax], picked])[None] * np.tile([1, -1], 16))
    saturate = np.full((1, 32), 1.999 * 2.0**emax) * np.tile([1, -1], 16)  # rounds past the largest element
    blocks.append(saturate)
    blocks.append(np.zeros((1, 32)))
    special = rng.standard_normal((3, 32))
    special[0, 4], special[1, 0], special[2, 31] = np.nan, np.inf, -np.inf
    blocks.append(special)
    blocks.append(np.full((1, 32), 2.0**-149))  # float32 subnormal amax: scale clamps to 2**-127
    wide = rng.standard_normal((1, 32)) * 2.0**-100
    wide[0, 7] = -(2.0**100)  # the small values underflow the element grid to (signed) zero
    blocks.append(wide)
    return np.concatenate(blocks).astype(np.float32)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_ocp_oracle(name, runtime):
    x = edge_blocks(name).reshape(-1, 64)
    common(name, x.shape, x=x, runtime=runtime)  # bytes == pack_blocks(*oracle_encode(name, x)), then decoded


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_error_is_bounded(name):
    """decode(encode(x)) is within half an element step of x (plus saturation at the top)."""
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((8, 64)) * 10).astype(np.float32)
    y = run_decode(name, x.shape, run_encode(name, x, "reference"), "reference")
    dtype, _, emax, _ = SPEC[name]
    mantissa_bits = 6 if dtype is np.int8 else ml_dtypes.finfo(dtype).nmant
    amax = np.abs(x).reshape(-1, 32).max(axis=1, keepdims=True)
    # relative to 2**floor(log2(amax)): steps are at most 2**-mantissa_bits of the top binade
    bound = 2.0 ** np.floor(np.log2(amax)) * 2.0 ** (-mantissa_bits) * (1.0 if dtype is np.int8 else 2.0)
    assert np.all(np.abs(y - x).reshape(-1, 32) <= bound)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["OCP_MXFP8_E4M3", "OCP_MXINT8", "OCP_MXFP8_E5M2"]),
    hnp.arrays(np.float32, (1, 32), elements=st.floats(width=32, allow_nan=False, allow_infinity=False)),
)
def test_encode_property_in_onnxruntime(name, x):
    scales, codes = unpack_blocks(run_encode(name, x, "onnxruntime"), SPEC[name][1])
    expected_scales, expected_codes = oracle_encode(name, x)
    np.testing.assert_array_equal(scales, expected_scales)
    np.testing.assert_array_equal(codes, expected_codes)


# ---------------------------------------------------------------------- ONNX validity
@pytest.mark.parametrize("name", NAMES)
def test_functions_are_valid_onnx(name):
    assert_valid_functions(mx.FORMATS[name], (2, 64))
