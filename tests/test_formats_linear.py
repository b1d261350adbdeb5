"""The linear family: make_linear_format, presets, layout, decoder and encoder.

Oracles: hand-computed golden bytes (little-endian float16/float32 scales, ONNX's LSB-first INT4
nibbles), a numpy block splitter written here, and a numpy transcription of the documented
encoder (symmetric absmax, or ONNX DynamicQuantizeLinear's asymmetric range) in float32 with
round-half-to-even (``np.rint``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from support.formats import assert_valid_functions, run_decode, run_encode
from support.oracle_linear import (
    RANGES,
    block_dtype,
    oracle_decode,
    oracle_encode,
    spec_of,
    split,
)
from support.roundtrip import common

from onnx_struct import ValidationError, formats, size_in_bits
from onnx_struct.formats import linear
from onnx_struct.formats.linear import make_linear_format
from onnx_struct.layout.table import TypeTable
from onnx_struct.payload.view import view_buffer

PRESET_BYTES = {  # scale + (zero point + padding) + values, by hand
    "INT4_B32_F16": 2 + 16,
    "INT4_B128_F16": 2 + 64,
    "UINT4_B32_F16_ZP": 2 + 1 + 16,
    "UINT4_B128_F16_ZP": 2 + 1 + 64,
    "INT8_B32_F16": 2 + 32,
    "INT8_B32_F32": 4 + 32,
    "UINT8_B32_F32_ZP": 4 + 1 + 32,
}
CUSTOM = [
    ("UINT8", 48, "FLOAT16", False),
    ("INT4", 6, "FLOAT", True),
    ("INT8", 5, "FLOAT", True),
    ("UINT4", 2, "FLOAT16", False),
]
RUNTIMES = ("onnxruntime", "reference")


ALL = [spec_of(name) for name in PRESET_BYTES] + CUSTOM
IDS = [linear.linear_format_name(*spec) for spec in ALL]


# ---------------------------------------------------------------------- factory and declarations
@pytest.mark.parametrize("name", list(PRESET_BYTES))
def test_presets_are_registered(name):
    fmt = formats.get(name)
    assert fmt is linear.FORMATS[name]
    assert (fmt.family, fmt.bytes_per_block, fmt.block_size) == ("linear", PRESET_BYTES[name], spec_of(name)[1])
    assert size_in_bits(fmt.block_declaration()) == 8 * PRESET_BYTES[name]


def test_factory_does_not_register_unless_asked():
    fmt = make_linear_format("INT8", 64, "FLOAT")
    assert fmt.name == "INT8_B64_F32" and fmt.name not in formats.names()
    named = make_linear_format("UINT4", 16, "FLOAT16", True, name="TEST_LINEAR_UINT4_16", register_format=True)
    assert formats.get("TEST_LINEAR_UINT4_16") is named and named.bytes_per_block == 2 + 1 + 8
    assert make_linear_format("INT4", scale="FLOAT32").name == "INT4_B32_F32"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"element": "INT3"}, "element 'INT3'"),
        ({"scale": "BFLOAT16"}, "scale 'BFLOAT16'"),
        ({"block_size": 0}, "positive integer"),
        ({"block_size": 2.0}, "positive integer"),
        ({"element": "UINT4", "block_size": 7}, "whole bytes"),
    ],
)
def test_factory_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValidationError, match=message) as error:
        make_linear_format(**kwargs)
    assert error.value.path == "make_linear_format"


def test_layout_has_explicit_padding_after_a_4_bit_zero_point():
    fmt = linear.FORMATS["UINT4_B32_F16_ZP"]
    leaves = TypeTable([fmt.block_declaration()]).leaves(fmt.root_declaration((64,), 0), "root")
    layout = [(leaf.path, leaf.elem_type, leaf.bit_offset) for leaf in leaves]
    assert layout == [
        ("scale", TensorProto.FLOAT16, 0),
        ("zero_point", TensorProto.UINT4, 16),
        ("padding", TensorProto.UINT4, 20),
        ("values", TensorProto.UINT4, 24),
    ]
    assert leaves[-1].strides == (19 * 8, 4)
    with pytest.raises(ValidationError, match="block size 32"):
        fmt.encoder((48,))


@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_view_matches_numpy_split(spec):
    fmt = make_linear_format(*spec)
    rng = np.random.default_rng(14)
    payload = np.frombuffer(
        rng.integers(0, 256, 3 * fmt.bytes_per_block, dtype=np.uint8).tobytes(), block_dtype(*spec)
    ).copy()
    if spec[3] and spec[0].endswith("4"):
        payload["zero_point"] &= 0x0F  # padding bits are zero
    payload = payload.tobytes()
    leaves = view_buffer(payload, fmt.root_declaration((3 * spec[1],), 0), [fmt.block_declaration()])
    scale, zero, values = split(payload, spec)
    np.testing.assert_array_equal(leaves["scale"].astype(np.float32), scale)
    np.testing.assert_array_equal(leaves["values"].astype(np.int16), values)
    if spec[3]:
        np.testing.assert_array_equal(leaves["zero_point"].astype(np.int16), zero)


# ---------------------------------------------------------------------- golden bytes
def test_golden_int4_block():
    # scale f16 0.5 = 0x3800 (little-endian 00 38); values 1, -2, 7, -8 -> bytes 0xE1, 0x87
    payload = bytes([0x00, 0x38, 0xE1, 0x87]) + bytes(14)
    y = run_decode(linear.FORMATS["INT4_B32_F16"], (32,), payload, "onnxruntime")
    np.testing.assert_array_equal(y[:4], [0.5, -1.0, 3.5, -4.0])
    np.testing.assert_array_equal(y[4:], 0)


def test_golden_uint4_zero_point_block():
    # scale f16 1.0 = 0x3C00; zero point 8 (+ 4 zero padding bits); values 8, 9, 0, 15, then 8s
    payload = bytes([0x00, 0x3C, 0x08, 0x98, 0xF0]) + bytes([0x88] * 14)
    y = run_decode(linear.FORMATS["UINT4_B32_F16_ZP"], (32,), payload, "onnxruntime")
    np.testing.assert_array_equal(y[:4], [0.0, 1.0, -8.0, 7.0])
    np.testing.assert_array_equal(y[4:], 0)


def test_golden_encoding_int8_f32():
    # amax 127 -> scale 1.0 (f32 00 00 80 3F); 2.5 -> 2 and -0.5 -> -0 (half to even)
    x = np.zeros(32, np.float32)
    x[:4] = [127.0, 2.5, -0.5, -3.5]
    payload = run_encode(linear.FORMATS["INT8_B32_F32"], x, "onnxruntime")
    assert payload[:8] == bytes([0x00, 0x00, 0x80, 0x3F, 127, 2, 0, 0xFC]) and payload[8:] == bytes(28)


# ---------------------------------------------------------------------- decoder / encoder
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_decode_matches_numpy(spec, runtime):
    fmt = make_linear_format(*spec)
    rng = np.random.default_rng(15)
    n = 12
    blocks = np.frombuffer(
        rng.integers(0, 256, n * fmt.bytes_per_block, dtype=np.uint8).tobytes(), block_dtype(*spec)
    ).copy()
    blocks["scale"][::2] = rng.uniform(-2, 2, (n + 1) // 2)  # odd blocks: any bit pattern (NaN, inf)
    if spec[3] and spec[0].endswith("4"):
        blocks["zero_point"] &= 0x0F
    common(fmt, (2, n // 2 * spec[1]), payload=blocks.tobytes(), runtime=runtime)  # vs oracle_decode


def edge_data(spec) -> np.ndarray:
    block_size = spec[1]
    rng = np.random.default_rng(16)
    rows = [rng.standard_normal((6, block_size)) * np.ldexp(1.0, rng.integers(-20, 20, (6, 1)))]
    rows.append(np.abs(rng.standard_normal((1, block_size))) + 1)  # all positive
    rows.append(-np.abs(rng.standard_normal((1, block_size))) - 1)  # all negative
    rows.append(np.zeros((1, block_size)))
    rows.append(np.full((1, block_size), 1e6))  # f16 scale saturates at 65504
    halves = np.arange(block_size) - block_size / 2 + 0.5  # ties under scale 1 when amax = qmax
    rows.append(halves[None] / np.abs(halves).max() * RANGES[spec[0]][1])
    return np.concatenate(rows).astype(np.float32)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_encode_matches_numpy(spec, runtime):
    x = edge_data(spec)
    common(make_linear_format(*spec), x.shape, x=x, runtime=runtime)  # bytes == oracle_encode(x, spec), then decoded


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(list(RANGES)),
    st.integers(1, 20),
    st.sampled_from(["FLOAT16", "FLOAT"]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_any_geometry_round_trips(element, half_block, scale, zero_point, seed):
    spec = (element, 2 * half_block, scale, zero_point)
    fmt = make_linear_format(*spec)
    x = np.random.default_rng(seed).uniform(-3, 3, (2, 2 * half_block)).astype(np.float32)
    if element.startswith("U") and not zero_point:
        x = np.abs(x)  # unsigned without a zero point holds non-negative values only
    payload = run_encode(fmt, x, "onnxruntime")
    assert payload == oracle_encode(x, spec)
    y = run_decode(fmt, x.shape, payload, "onnxruntime")
    np.testing.assert_array_equal(y, oracle_decode(payload, spec).reshape(x.shape))
    # within one step of the stored scale (half for rounding, half for the zero point's rounding)
    # plus the float16 rounding of the scale, which can clip the extremes
    scale = split(payload, spec)[0].reshape(2, -1, 1)
    error = np.abs(y - x).reshape(2, -1, 2 * half_block)
    assert np.all(error <= scale + np.abs(x).max() * 2.0**-9)


# ---------------------------------------------------------------------- ONNX validity
@pytest.mark.parametrize("spec", ALL, ids=IDS)
def test_functions_are_valid_onnx(spec):
    assert_valid_functions(make_linear_format(*spec), (2, 2 * spec[1]))
