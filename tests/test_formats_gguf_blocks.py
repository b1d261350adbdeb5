"""GGUF plain, legacy and K-quant formats against gguf-py, bit for bit.

Oracles are independent of the code under test: the ggml block structs written out below as
numpy structured dtypes (from ggml-common.h), ``gguf.constants.GGML_QUANT_SIZES``, and
``gguf.quants.dequantize`` / ``quantize`` on the same bytes / floats. Decoding and encoding go
through the user path, ``onnx_struct.decode`` / ``onnx_struct.encode``, in onnxruntime and in
onnx's ReferenceEvaluator.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnx.shape_inference
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper as oh
from support.formats import assert_same_floats

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.formats.base import FORMAT_DOMAIN
from onnx_struct.layout.table import size_in_bits
from onnx_struct.payload.view import view
from onnx_struct.runtime.codec import decode, encode
from onnx_struct.runtime.ort import ort_limits

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants  # noqa: E402

F2, U1, I1 = "<f2", "u1", "i1"
# ggml-common.h, field for field (ggml_half d; uint8_t qs[QK4_0 / 2]; ...). The plain types have
# no struct in ggml; their one field is named "value" here.
GGML_BLOCKS: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {
    "F32": [("value", "<f4", ())],
    "F16": [("value", F2, ())],
    "BF16": [("value", "<u2", ())],  # bfloat16 bits
    "Q4_0": [("d", F2, ()), ("qs", U1, (16,))],
    "Q4_1": [("d", F2, ()), ("m", F2, ()), ("qs", U1, (16,))],
    "Q5_0": [("d", F2, ()), ("qh", U1, (4,)), ("qs", U1, (16,))],
    "Q5_1": [("d", F2, ()), ("m", F2, ()), ("qh", U1, (4,)), ("qs", U1, (16,))],
    "Q8_0": [("d", F2, ()), ("qs", I1, (32,))],
    "Q2_K": [("scales", U1, (16,)), ("qs", U1, (64,)), ("d", F2, ()), ("dmin", F2, ())],
    "Q3_K": [("hmask", U1, (32,)), ("qs", U1, (64,)), ("scales", U1, (12,)), ("d", F2, ())],
    "Q4_K": [("d", F2, ()), ("dmin", F2, ()), ("scales", U1, (12,)), ("qs", U1, (128,))],
    "Q5_K": [("d", F2, ()), ("dmin", F2, ()), ("scales", U1, (12,)), ("qh", U1, (32,)), ("qs", U1, (128,))],
    "Q6_K": [("ql", U1, (128,)), ("qh", U1, (64,)), ("scales", I1, (16,)), ("d", F2, ())],
}
ONNX_TYPES = {"<f4": "FLOAT", F2: "FLOAT16", "<u2": "BFLOAT16", U1: "UINT8", I1: "INT8"}
NAMES = list(GGML_BLOCKS)
WITH_ENCODER = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
# encoders whose oracle is llama.cpp, not gguf-py (tests/test_formats_kquants_encode.py)
WITH_LLAMA_CPP_ENCODER = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
RUNTIMES = ["onnxruntime", "reference"]

# FLOAT16 bit patterns every scale field is tested with: quiet/signalling/negative NaN, +-inf,
# +-0, subnormals, the smallest normal, the largest finite.
F16_SPECIALS = np.array(
    [0x7E00, 0x7C01, 0xFE00, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF],
    dtype=np.uint16,
)
F32_SPECIALS = np.array(
    [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x807FFFFF],
    dtype=np.uint32,
)


def block_dtype(name: str) -> np.dtype:
    return np.dtype(GGML_BLOCKS[name])


def gguf_type(name: str) -> GGMLQuantizationType:
    return GGMLQuantizationType[name]


def random_payload(name: str, n_blocks: int, seed: int) -> np.ndarray:
    """Random blocks (every byte pattern is a valid block) with special values in the scales."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, n_blocks * block_dtype(name).itemsize, dtype=np.uint8).view(block_dtype(name))
    for field_name, code, dims in GGML_BLOCKS[name]:
        if dims:
            continue
        column = blocks[field_name].view(np.uint16 if code in (F2, "<u2") else np.uint32)
        specials = F32_SPECIALS if code == "<f4" else F16_SPECIALS
        where = rng.choice(n_blocks, size=min(n_blocks, 2 * len(specials)), replace=False)
        column[where] = np.resize(specials, where.size).astype(column.dtype)
    return blocks.view(np.uint8)


def declared(name: str, shape: tuple[int, ...], payload: bytes = b"") -> tuple[onnx.ModelProto, S.StructProto, int]:
    """A model holding ``shape`` in format ``name``: (model, value, root index)."""
    model = onnx.ModelProto()
    fmt = formats.get(name)
    index = fmt.add_to_model(model, shape)
    return model, S.make_struct_value(name, index, raw_data=payload), index


def calling_model(
    function: onnx.FunctionProto, inputs: list[tuple[str, int, tuple[int, ...]]], rank: int
) -> onnx.ModelProto:
    """A model whose one node calls ``function`` on typed graph inputs (output dims left to inference)."""
    node = oh.make_node(function.name, list(function.input), list(function.output), domain=function.domain)
    graph = oh.make_graph(
        [node],
        "call",
        [oh.make_tensor_value_info(name, elem_type, dims) for name, elem_type, dims in inputs],
        [oh.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [None] * rank) for name in function.output],
    )
    opsets = [oh.make_opsetid(o.domain, o.version) for o in function.opset_import] + [
        oh.make_opsetid(function.domain, 1)
    ]
    return oh.make_model(graph, opset_imports=opsets, functions=[function], ir_version=10)


def in_runtime(runtime: str, run):
    """``run()`` with numpy's warnings about NaN/inf arithmetic silenced; in onnxruntime any
    RuntimeWarning (e.g. a fallback to the reference evaluator) is an error instead."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error" if runtime == "onnxruntime" else "ignore", RuntimeWarning)
        return run()


def gguf_py(run):
    """``run()`` with gguf-py's numpy warnings about NaN/inf scales silenced."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return run()


def shape_for(name: str, n_blocks: int) -> tuple[int, ...]:
    block_size = formats.get(name).block_size
    rows = 8 if n_blocks % 8 == 0 else 1
    return (rows, n_blocks // rows * block_size)


# ---------------------------------------------------------------------- declarations
@pytest.mark.parametrize("name", NAMES)
def test_declaration_is_the_ggml_block(name):
    fmt = formats.get(name)
    assert fmt.family == "gguf"
    assert (fmt.block_size, fmt.bytes_per_block) == GGML_QUANT_SIZES[gguf_type(name)]
    declaration = fmt.block_declaration()
    assert declaration.name == f"{name}_block"
    fields = [
        (
            f.name,
            onnx.TensorProto.DataType.Name(f.type.tensor_type.elem_type),
            tuple(d.dim_value for d in f.type.tensor_type.shape.dim),
        )
        for f in declaration.structure.field
    ]
    assert fields == [(n, ONNX_TYPES[code], dims) for n, code, dims in GGML_BLOCKS[name]]
    assert size_in_bits(declaration) == 8 * fmt.bytes_per_block == 8 * block_dtype(name).itemsize


@pytest.mark.parametrize("name", NAMES)
def test_leaves_are_the_struct_fields(name):
    """The view of a declared tensor splits the bytes exactly as the ggml struct does."""
    payload = random_payload(name, 24, seed=1)
    model, value, _ = declared(name, shape_for(name, 24), payload.tobytes())
    leaves = view(value, model).leaves()
    expected = payload.view(block_dtype(name))
    assert list(leaves) == [n for n, _, _ in GGML_BLOCKS[name]]
    for field_name in leaves:
        got = np.ascontiguousarray(leaves[field_name])
        want = np.ascontiguousarray(expected[field_name])
        assert got.shape == want.shape and got.dtype.itemsize == want.dtype.itemsize
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("name", NAMES)
def test_functions_follow_the_contract(name):
    fmt = formats.get(name)
    shape = shape_for(name, 8)
    field_names = [n for n, _, _ in GGML_BLOCKS[name]]
    decoder = fmt.decoder(shape)
    assert (decoder.domain, decoder.name) == (FORMAT_DOMAIN, f"decode_{name}")
    assert list(decoder.input) == field_names and len(decoder.output) == 1
    functions = [decoder]
    if name in WITH_ENCODER + WITH_LLAMA_CPP_ENCODER:
        encoder = fmt.encoder(shape)
        assert (encoder.domain, encoder.name) == (FORMAT_DOMAIN, f"encode_{name}")
        assert len(encoder.input) == 1 and list(encoder.output) == field_names
        functions.append(encoder)
    else:
        assert fmt.encoder is None
    for function in functions:
        (opset,) = [o.version for o in function.opset_import if o.domain == ""]
        assert opset <= ort_limits()[1]
    # Full onnx checking with shape inference of a model calling the decoder on typed leaves.
    n = fmt.num_blocks(shape)
    inputs = [
        (field_name, getattr(onnx.TensorProto, ONNX_TYPES[code]), (n, *dims))
        for field_name, code, dims in GGML_BLOCKS[name]
    ]
    model = calling_model(decoder, inputs, len(shape))
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    (output,) = inferred.graph.output
    assert output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert tuple(d.dim_value for d in output.type.tensor_type.shape.dim) == shape


@pytest.mark.parametrize("name", ["Q4_0", "Q6_K", "F16"])
def test_shape_not_made_of_blocks_is_rejected(name):
    fmt = formats.get(name)
    bad = (3, fmt.block_size + 1) if fmt.block_size > 1 else ()
    with pytest.raises(S.ValidationError, match="block size"):
        fmt.decoder(bad)
    with pytest.raises(S.ValidationError, match=name):
        fmt.add_to_model(onnx.ModelProto(), bad)


# ---------------------------------------------------------------------- decoders
@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", NAMES)
def test_decode_equals_gguf_dequantize(name, runtime):
    n_blocks = 256 if formats.get(name).block_size > 1 else 2048
    payload = random_payload(name, n_blocks, seed=7)
    shape = shape_for(name, n_blocks)
    model, value, _ = declared(name, shape, payload.tobytes())
    expected = gguf_py(lambda: quants.dequantize(payload.reshape(shape[0], -1), gguf_type(name)))
    actual = in_runtime(runtime, lambda: decode(value, model, runtime=runtime))
    assert expected.shape == shape
    # Bit-exact (so within any ulp budget). F32 and BF16 are pure bit moves, NaN payloads included;
    # onnxruntime's vectorized FLOAT16 -> FLOAT Cast quiets a signalling NaN (numpy keeps its bits).
    assert_same_floats(actual, expected, nan_bits=name in ("F32", "BF16"))


@pytest.mark.parametrize("shape", [(256,), (2, 3, 512), (1, 1, 256), (0, 256)])
@pytest.mark.parametrize("name", ["Q4_0", "Q5_1", "Q4_K", "Q3_K"])
def test_decode_any_rank(name, shape):
    n_blocks = formats.get(name).num_blocks(shape)
    payload = random_payload(name, n_blocks, seed=3) if n_blocks else np.zeros(0, np.uint8)
    model, value, _ = declared(name, shape, payload.tobytes())
    if n_blocks:
        expected = gguf_py(lambda: quants.dequantize(payload.reshape(*shape[:-1], -1), gguf_type(name)))
    else:  # gguf-py cannot reshape an empty payload
        expected = np.zeros(shape, np.float32)
    actual = in_runtime("onnxruntime", lambda: decode(value, model))
    assert actual.shape == shape
    assert_same_floats(actual, expected)


# ---------------------------------------------------------------------- encoders
def edge_blocks(block_size: int = 32) -> np.ndarray:
    """Blocks gguf-py's quantizers treat specially, 32 floats each."""
    k = np.arange(32, dtype=np.float32)
    rows = [
        np.zeros(32),  # all zero: d == 0, id = 0
        np.full(32, -0.0),  # negative zero
        np.full(32, 3.0),  # constant: max == min
        np.where(k == 5, -2.5, np.where(k == 9, 2.5, 0.1)),  # |max| tie: the first one (negative) wins
        np.where(k == 5, 2.5, np.where(k == 9, -2.5, 0.1)),  # |max| tie: the first one (positive) wins
        k - 15.5,  # Q8_0/Q4_1 half-way points
        np.where(k == 0, 127.0, (k - 16) + 0.5),  # Q8_0: d = 1, every q is a .5 tie (away from zero)
        np.where(k == 0, -8.0, k / 4 - 4),  # Q4_0: d = 1, id = 1, many x * id + 8.5 on .5 steps
        np.where(k == 0, 15.0, np.where(k == 1, 0.0, (k % 15) + 0.5)),  # Q4_1: d = 1, x - min + 0.5 ties
        np.where(k == 0, 31.0, np.where(k == 1, 0.0, (k % 31) + 0.5)),  # Q5_1: d = 1 ties
        np.linspace(-1e6, 7e5, 32),  # scale overflows FLOAT16 to infinity
        np.linspace(-3e-6, 2e-6, 32),  # scale is a FLOAT16 subnormal
        np.linspace(-65504, 65504, 32),
        np.geomspace(1e-30, 1e30, 32),
    ]
    return np.stack([np.asarray(r, np.float32) for r in rows])


def encoder_input(name: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    magnitudes = rng.choice([1e-4, 1e-2, 1.0, 37.0, 1e4], size=(32, 1))
    random = (rng.standard_normal((32, 32)) * magnitudes).astype(np.float32)
    x = np.concatenate([edge_blocks(), random]).astype(np.float32)
    if formats.get(name).block_size == 1:  # plain types: every special value and rounding case
        bits = np.array(
            [0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FBFFFFF, 0x7F800000, 0xFF800000,
             0x477FF000, 0x477FEFFF, 0x477FE000, 0x33800000, 0x33000000, 0x33000001, 0x80000000, 0x00000001,
             0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x807FFFFF],
            dtype=np.uint32,
        )  # fmt: skip
        x.reshape(-1)[: bits.size] = bits.view(np.float32)
    return x.reshape(-1, 64)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", WITH_ENCODER)
def test_encode_equals_gguf_quantize(name, runtime):
    x = encoder_input(name, seed=11)
    model, _, index = declared(name, x.shape)
    expected = gguf_py(lambda: quants.quantize(x, gguf_type(name)))
    value = in_runtime(runtime, lambda: encode(x, index, model, runtime=runtime))
    assert value.raw_data == expected.tobytes()


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]),
    x=hnp.arrays(
        np.float32,
        st.integers(1, 4).map(lambda blocks: (blocks * 32,)),
        elements=st.one_of(
            st.just(0.0),
            st.floats(float(np.float32(1e-30)), float(np.float32(1e30)), width=32),
            st.floats(-float(np.float32(1e30)), -float(np.float32(1e-30)), width=32),
        ),
    ),
)
def test_encode_equals_gguf_quantize_property(name, x):
    """Finite floats whose block scale has a finite reciprocal (gguf-py's casts of inf/NaN to uint8
    are undefined, so nothing outside that range has a reference result)."""
    model, _, index = declared(name, x.shape)
    expected = gguf_py(lambda: quants.quantize(x, gguf_type(name)))
    value = in_runtime("onnxruntime", lambda: encode(x, index, model))
    assert value.raw_data == expected.tobytes()


@pytest.mark.parametrize("name", ["Q4_1", "Q5_0", "Q8_0", "BF16"])
def test_encode_then_decode_is_gguf_round_trip(name):
    x = encoder_input(name, seed=5)[8:]
    model, _, index = declared(name, x.shape)
    expected = gguf_py(lambda: quants.dequantize(quants.quantize(x, gguf_type(name)), gguf_type(name)))
    actual = in_runtime("onnxruntime", lambda: decode(encode(x, index, model, name="w"), model))
    assert_same_floats(actual, expected)


# ---------------------------------------------------------------------- the shared builder
@pytest.mark.parametrize("name", ["Q4_K", "IQ4_NL", "MXFP4", "NF4", "OCP_MXFP8_E4M3", "INT4_B32_F16"])
def test_decoders_end_in_a_reshape_the_runtime_can_skip(name):
    """Every family's decoder ends in Reshape(value, logical shape) named "y": without allowzero
    for a shape with data (onnx_struct's runtime then returns a numpy view instead of
    onnxruntime's copy), with allowzero=1 when the shape has a zero dimension (no blocks: a 0 is
    a real empty dimension, not "copy")."""
    fmt = formats.get(name)
    for shape, allowzero in (((2, 2 * fmt.block_size), None), ((0, fmt.block_size), 1)):
        last = fmt.decoder(shape).node[-1]
        assert (last.op_type, list(last.output)) == ("Reshape", ["y"])
        attributes = {a.name: oh.get_attribute_value(a) for a in last.attribute}
        assert attributes.get("allowzero") == allowzero, (shape, attributes)
