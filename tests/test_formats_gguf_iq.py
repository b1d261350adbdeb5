"""GGUF IQ and TQ types: declarations, tables, decoders and encoders against gguf-py.

Oracles: ``gguf.quants`` (dequantize/quantize and its grids), hand-written numpy structured dtypes
of ggml's block structs (to split block bytes independently of our declarations), numpy's float16,
and ``onnx.reference.ReferenceEvaluator`` as a second runtime. Decoders must be *bit-exact* against
gguf-py (a NaN where gguf-py has a NaN; the sign/payload of NaN is not compared).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator
from support.formats import assert_same_floats

import onnx_struct
from onnx_struct import ValidationError, formats, size_in_bits
from onnx_struct.formats import FORMAT_DOMAIN
from onnx_struct.formats.function_builder import OPSET, FunctionBuilder
from onnx_struct.formats.gguf import iq_grids
from onnx_struct.formats.gguf._iq_graph import f16_bits_to_float
from onnx_struct.formats.gguf.iq import FORMATS
from onnx_struct.payload.view import view_buffer

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402
from gguf import quants as gq  # noqa: E402

# ggml's block structs (ggml-common.h), written out by hand, in gguf-py's field split.
ORACLE_DTYPES = {
    "IQ2_XXS": [("d", "<f2"), ("qs", "<u2", (32,))],
    "IQ2_XS": [("d", "<f2"), ("qs", "<u2", (32,)), ("scales", "u1", (8,))],
    "IQ3_XXS": [("d", "<f2"), ("qs", "u1", (64,)), ("scales", "<u4", (8,))],
    "IQ1_S": [("d", "<f2"), ("qs", "u1", (32,)), ("qh", "<u2", (8,))],
    "IQ4_NL": [("d", "<f2"), ("qs", "u1", (16,))],
    "IQ3_S": [("d", "<f2"), ("qs", "u1", (64,)), ("qh", "u1", (8,)), ("signs", "u1", (32,)), ("scales", "u1", (4,))],
    "IQ2_S": [("d", "<f2"), ("qs", "u1", (32,)), ("signs", "u1", (32,)), ("qh", "u1", (8,)), ("scales", "u1", (8,))],
    "IQ4_XS": [("d", "<f2"), ("scales_h", "<u2"), ("scales_l", "u1", (4,)), ("qs", "u1", (128,))],
    "IQ1_M": [("qs", "u1", (32,)), ("qh", "u1", (16,)), ("scales", "<u2", (4,))],
    "TQ1_0": [("qs", "u1", (48,)), ("qh", "u1", (4,)), ("d", "<f2")],
    "TQ2_0": [("qs", "u1", (64,)), ("d", "<f2")],
}
CONSTANTS = {
    "IQ2_XXS": {"iq2xxs_grid", "ksigns_iq2xs"},
    "IQ2_XS": {"iq2xs_grid", "ksigns_iq2xs"},
    "IQ3_XXS": {"iq3xxs_grid", "ksigns_iq2xs"},
    "IQ1_S": {"iq1s_grid", "delta"},
    "IQ4_NL": {"kvalues_iq4nl"},
    "IQ3_S": {"iq3s_grid"},
    "IQ2_S": {"iq2s_grid"},
    "IQ4_XS": {"kvalues_iq4nl"},
    "IQ1_M": {"iq1s_grid", "delta"},
    "TQ1_0": set(),
    "TQ2_0": set(),
}
NAMES = list(ORACLE_DTYPES)
F16_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6e-8, -3e-5, 65504.0, 1.0], dtype=np.float16)


# ---------------------------------------------------------------------- harness
def structured(name: str) -> np.dtype:
    return np.dtype(ORACLE_DTYPES[name])


def random_blocks(name: str, n: int, seed: int) -> bytes:
    """``n`` random blocks; the first f16 scales are NaN, +-inf, zeros, subnormals and extremes."""
    rng = np.random.default_rng(seed)
    blocks = np.frombuffer(
        rng.integers(0, 256, n * structured(name).itemsize, dtype=np.uint8).tobytes(), structured(name)
    ).copy()
    specials = F16_SPECIALS[:n]
    if "d" in blocks.dtype.names:  # odd blocks keep random bit patterns (any f16, NaN included)
        blocks["d"][::2] = rng.uniform(-2, 2, (n + 1) // 2).astype(np.float16)
        blocks["d"][: len(specials)] = specials
    if name == "IQ1_M":  # d is split over the top nibbles of the 4 scale words; plant specials there
        bits = specials.view(np.uint16)
        for k in range(4):
            word = blocks["scales"][: len(bits), k]
            blocks["scales"][: len(bits), k] = (word & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12)
    return blocks.tobytes()


def oracle_leaves(name: str, raw: bytes) -> dict[str, np.ndarray]:
    """Payload leaves split with the hand-written structured dtype; constants from the declaration."""
    blocks = np.frombuffer(raw, structured(name))
    leaves = {field: np.ascontiguousarray(blocks[field]) for field in blocks.dtype.names}
    for field in FORMATS[name].block_fields():
        if field.WhichOneof("content") == "constant":
            leaves[field.name] = numpy_helper.to_array(field.constant)
    return leaves


def value_info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, oh.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))


def function_model(function: onnx.FunctionProto, feeds: dict, outputs: dict[str, tuple]) -> onnx.ModelProto:
    """One node calling ``function``, with ``function`` as a model-local function; ``outputs``
    maps each output to its (element type, shape)."""
    node = oh.make_node(function.name, list(function.input), list(function.output), domain=FORMAT_DOMAIN)
    outputs = [oh.make_tensor_value_info(o, *outputs[o]) for o in function.output]
    graph = oh.make_graph([node], "g", [value_info(i, feeds[i]) for i in function.input], outputs)
    opsets = [oh.make_opsetid("", OPSET), oh.make_opsetid(FORMAT_DOMAIN, 1)]
    return oh.make_model(graph, opset_imports=opsets, functions=[function], ir_version=10)


def run(function: onnx.FunctionProto, feeds: dict, outputs: dict[str, tuple], runtime: str = "ort") -> list:
    model = function_model(function, feeds, outputs)
    onnx.checker.check_model(model, full_check=True)
    if runtime == "ort":
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def decode(name: str, shape: tuple[int, ...], leaves: dict, runtime: str = "ort") -> np.ndarray:
    decoder = FORMATS[name].decoder(shape)
    feeds = {i: leaves[i] for i in decoder.input}
    return run(decoder, feeds, {decoder.output[0]: (TensorProto.FLOAT, shape)}, runtime)[0]


def gguf_dequantize(name: str, raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    qtype = GGMLQuantizationType[name]
    data = np.frombuffer(raw, np.uint8).reshape(*shape[:-1], -1)
    with np.errstate(all="ignore"):
        return gq.dequantize(data, qtype)


def shape_for(name: str, rows: int, blocks_per_row: int) -> tuple[int, int]:
    return (rows, blocks_per_row * FORMATS[name].block_size)


# ---------------------------------------------------------------------- tables
def test_tables_equal_gguf_py():
    """The committed tables (ggml's element types) hold exactly gguf-py's grid values."""
    for name, cls in [("iq2xxs_grid", gq.IQ2_XXS), ("iq2xs_grid", gq.IQ2_XS), ("iq2s_grid", gq.IQ2_S),
                      ("iq3xxs_grid", gq.IQ3_XXS), ("iq3s_grid", gq.IQ3_S), ("iq1s_grid", gq.IQ1_S)]:  # fmt: skip
        cls.init_grid()
        ours = getattr(iq_grids, name)
        np.testing.assert_array_equal(
            ours.astype(np.float32), np.asarray(cls.grid).reshape(cls.grid_shape), err_msg=name
        )
    assert iq_grids.ksigns_iq2xs.tobytes() == gq.IQ2_XXS.ksigns
    assert iq_grids.kvalues_iq4nl.tolist() == list(gq.IQ4_NL.kvalues)


def test_tables_match_ggml_spot_values():
    """A few entries of ggml-common.h's uint64/uint32 tables, written by hand."""
    assert iq_grids.iq2xxs_grid.view("<u8")[1, 0] == 0x080808080808082B
    assert iq_grids.iq2xs_grid.view("<u8")[511, 0] == 0x2B2B2B2B2B2B2B2B
    assert iq_grids.iq3xxs_grid.view("<u4")[1, 0] == 0x04040414
    assert iq_grids.iq1s_grid.view("<u8")[0, 0] == 0xFFFFFFFFFFFFFFFF
    assert iq_grids.iq1s_grid.view("<u8")[1, 0] == 0xFFFFFFFFFFFFFF01
    assert iq_grids.ksigns_iq2xs[:4].tolist() == [0, 129, 130, 3]


# ---------------------------------------------------------------------- declarations
@pytest.mark.parametrize("name", NAMES)
def test_declaration_matches_ggml_block(name):
    fmt = FORMATS[name]
    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[name]]
    assert (fmt.family, fmt.block_size, fmt.bytes_per_block) == ("gguf", block_size, type_size)
    assert size_in_bits(fmt.block_declaration()) == 8 * type_size == 8 * structured(name).itemsize
    fields = fmt.block_fields()
    payload = [f for f in fields if f.WhichOneof("content") == "type"]
    assert [f.name for f in payload] == list(structured(name).names)
    assert {f.name for f in fields if f.WhichOneof("content") == "constant"} == CONSTANTS[name]


@pytest.mark.parametrize("name", NAMES)
def test_view_leaves_equal_structured_split(name):
    """Our declaration read through view() splits blocks exactly like ggml's struct."""
    fmt = FORMATS[name]
    shape = shape_for(name, 2, 3)
    model = oh.make_model(oh.make_graph([], "g", [], []))
    root = fmt.add_to_model(model, shape)
    raw = random_blocks(name, 6, seed=1)
    leaves = view_buffer(raw, root, model).leaves()
    expected = oracle_leaves(name, raw)
    assert set(leaves) == set(expected)
    for path, array in expected.items():
        assert leaves[path].dtype == array.dtype, path
        np.testing.assert_array_equal(leaves[path].tobytes(), array.tobytes(), err_msg=path)


@pytest.mark.parametrize("name", NAMES)
def test_decoder_inputs_are_the_leaves(name):
    fmt = FORMATS[name]
    decoder = fmt.decoder(shape_for(name, 1, 2))
    assert (decoder.domain, decoder.name, len(decoder.output)) == (FORMAT_DOMAIN, f"decode_{name}", 1)
    assert list(decoder.input) == [f.name for f in fmt.block_fields()]
    assert {o.version for o in decoder.opset_import if o.domain == ""} == {OPSET}


@pytest.mark.parametrize("name", NAMES)
def test_decoder_rejects_a_partial_block(name):
    with pytest.raises(ValidationError, match="block size"):
        FORMATS[name].decoder((3, FORMATS[name].block_size + 1))


# ---------------------------------------------------------------------- decoders vs gguf-py
@pytest.mark.parametrize("name", NAMES)
def test_decode_bit_exact_onnxruntime(name):
    shape = shape_for(name, 8, 25)  # 200 blocks in 8 rows
    raw = random_blocks(name, 200, seed=hash(name) % 1000)
    assert_same_floats(decode(name, shape, oracle_leaves(name, raw)), gguf_dequantize(name, raw, shape))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 in the reference Mul, as in gguf-py
def test_decode_bit_exact_reference_evaluator(name):
    shape = (3, 1, 4 * FORMATS[name].block_size)  # rank 3, 12 blocks
    raw = random_blocks(name, 12, seed=7)
    assert_same_floats(decode(name, shape, oracle_leaves(name, raw), "reference"), gguf_dequantize(name, raw, shape))


@pytest.mark.parametrize("name", NAMES)
def test_decode_zero_blocks(name):
    shape = (0, FORMATS[name].block_size)
    leaves = oracle_leaves(name, b"")
    assert decode(name, shape, leaves).shape == shape


@pytest.mark.parametrize("name", NAMES)
def test_decode_through_runtime(name):
    """``onnx_struct.decode`` on a real struct value (constants bound as initializers)."""
    fmt = FORMATS[name]
    shape = shape_for(name, 2, 4)
    raw = random_blocks(name, 8, seed=3)
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", OPSET)])
    value = fmt.make_value(model, "w", shape, raw)
    assert_same_floats(np.asarray(onnx_struct.decode(value, model)), gguf_dequantize(name, raw, shape))


def test_f16_bits_to_float_all_patterns():
    """The IQ1_M scale path: every uint16 pattern equals numpy's float16 -> float32."""
    g = FunctionBuilder("f16", ["bits"])
    g.op("Identity", f16_bits_to_float(g, "bits"), out="y")
    bits = np.arange(1 << 16, dtype=np.uint16)
    (actual,) = run(g.build("y"), {"bits": bits}, {"y": (TensorProto.FLOAT, bits.shape)})
    assert_same_floats(actual, bits.view(np.float16).astype(np.float32))
    finite = ~np.isnan(actual)
    assert np.array_equal(np.signbit(actual[finite]), np.signbit(bits.view(np.float16)[finite]))  # -0.0 kept


# ---------------------------------------------------------------------- TQ encoders vs gguf-py
def encode(name: str, x: np.ndarray, runtime: str = "ort") -> bytes:
    """Our encoder's outputs assembled into blocks with the hand-written struct dtype."""
    encoder = FORMATS[name].encoder(x.shape)
    blocks = np.zeros(x.size // 256, structured(name))
    outputs = run(encoder, {encoder.input[0]: x}, encoder_outputs(blocks), runtime)
    for field, array in zip(encoder.output, outputs, strict=True):
        assert array.dtype == blocks.dtype[field].base, field
        blocks[field] = array
    return blocks.tobytes()


def encoder_outputs(blocks: np.ndarray) -> dict[str, tuple]:
    """(element type, shape) of each encoder output: the leaves of ``blocks``' fields."""
    return {
        field: (oh.np_dtype_to_tensor_dtype(blocks.dtype[field].base), blocks[field].shape)
        for field in blocks.dtype.names
    }


def gguf_quantize(name: str, x: np.ndarray) -> bytes:
    with np.errstate(all="ignore"):
        return gq.quantize(x, GGMLQuantizationType[name]).tobytes()


def tq_inputs(seed: int) -> np.ndarray:
    """Rows that hit the rounding edges: ties at +-0.5 of the block maximum, zero blocks, a lone
    maximum, negative maxima, f16 overflow and subnormal scales, and ordinary noise."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 512)).astype(np.float32)
    x[0] = 0.0
    x[1, :256] = np.tile(np.float32([1, -1, 0.5, -0.5, 0.25, 0.49999997, 0.50000006, 0]), 32)
    x[2, 7] = -40.0
    x[3] *= 1e5  # d overflows float16 to inf
    x[4] *= 1e-6  # d is a float16 subnormal
    x[5] = rng.integers(-1, 2, 512).astype(np.float32) * 3.0
    x[6, 256:] = -0.0
    x[7, :256] = 0.0  # max |x| a float32 subnormal: 1 / d overflows in gguf-py
    x[7, :3] = [1e-40, -3e-41, 5e-45]
    return x


@pytest.mark.parametrize("name", ["TQ1_0", "TQ2_0"])
@pytest.mark.parametrize("runtime", ["ort", "reference"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference Div/Cast see 1/0 and f16 overflow
def test_encode_byte_identical(name, runtime):
    x = tq_inputs(seed=5)
    assert encode(name, x, runtime) == gguf_quantize(name, x)


@pytest.mark.parametrize("name", ["TQ1_0", "TQ2_0"])
def test_encode_then_decode_equals_gguf_round_trip(name):
    x = tq_inputs(seed=9)
    raw = encode(name, x)
    assert_same_floats(
        decode(name, x.shape, oracle_leaves(name, raw)), gguf_dequantize(name, gguf_quantize(name, x), x.shape)
    )


@pytest.mark.parametrize("name", ["TQ1_0", "TQ2_0"])
def test_encode_through_runtime(name):
    """``onnx_struct.encode`` packs the encoder's outputs into exactly gguf-py's block bytes."""
    x = tq_inputs(seed=11)
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", OPSET)])
    root = FORMATS[name].add_to_model(model, x.shape)
    assert onnx_struct.encode(x, root, model).raw_data == gguf_quantize(name, x)


@functools.cache
def tq_sessions(name: str):
    encoder = FORMATS[name].encoder((1, 256))
    outputs = encoder_outputs(np.zeros(1, structured(name)))
    model = function_model(encoder, {"x": np.zeros((1, 256), np.float32)}, outputs)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]), encoder


finite = st.floats(width=32, allow_nan=False, allow_infinity=False, min_value=-(2.0**100), max_value=2.0**100)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(finite, min_size=256, max_size=256), name=st.sampled_from(["TQ1_0", "TQ2_0"]))
def test_encode_property_byte_identical(values, name):
    x = np.array(values, dtype=np.float32).reshape(1, 256)
    session, encoder = tq_sessions(name)
    outputs = session.run(None, {"x": x})
    blocks = np.zeros(1, structured(name))
    for field, array in zip(encoder.output, outputs, strict=True):
        blocks[field] = array
    assert blocks.tobytes() == gguf_quantize(name, x)


@pytest.mark.parametrize("name", NAMES)
def test_encoder_exactly_where_gguf_py_quantizes(name):
    """gguf-py quantizes TQ1_0 and TQ2_0 only (the IQ types need an importance matrix)."""
    try:
        gguf_quantize(name, np.zeros((1, 256), np.float32))
        gguf_can = True
    except NotImplementedError:
        gguf_can = False
    assert (FORMATS[name].encoder is not None) == gguf_can == name.startswith("TQ")


def test_importing_iq_registers_every_type():
    """Importing the iq module registers the TQ types too; the registry hands out the same objects."""
    assert set(FORMATS) == set(NAMES)
    assert set(NAMES) <= set(formats.names())
    assert all(formats.get(name) is FORMATS[name] for name in NAMES)
