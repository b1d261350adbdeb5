"""quantize(): which weights are replaced, the payload bytes against gguf-py, and the lowered model in ORT.

The oracle for the quantized model's output is the float model with each replaced weight swapped
for gguf-py's dequantize(quantize(weight)), run in onnxruntime: it shares no code with the
package's encoder, decoder or lowering.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.cli import main
from onnx_struct.passes.quantize import plan, quantize

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
RNG = np.random.default_rng(7)


def weight(name: str, shape) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.2).astype(np.float32), name)


def synthetic_model() -> onnx.ModelProto:
    """X[3,64] -MatMul W1[64,128]-> -Gemm(transB=1) W2[96,128] + b2 -> -Gemm W3[96,64] -> -MatMul W4[64,32] -> Y,
    plus W5 (MatMul weight also read by a ReduceSum) and W6 (input axis 48, not a multiple of 32)."""
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H1"]),
        oh.make_node("Gemm", ["H1", "W2", "b2"], ["H2"], transB=1),
        oh.make_node("Gemm", ["H2", "W3"], ["H3"]),
        oh.make_node("MatMul", ["H3", "W4"], ["Y"]),
        oh.make_node("MatMul", ["X", "W5"], ["H5"]),
        oh.make_node("ReduceSum", ["W5"], ["S5"], keepdims=0),
        oh.make_node("ReduceSum", ["H5"], ["S"], keepdims=0),
        oh.make_node("Add", ["S", "S5"], ["Z"]),
        oh.make_node("Slice", ["X", "starts", "ends", "axes"], ["X48"]),
        oh.make_node("MatMul", ["X48", "W6"], ["V"]),
    ]
    initializers = [
        weight("W1", (64, 128)),
        weight("W2", (96, 128)),
        numpy_helper.from_array(np.linspace(-1, 1, 96, dtype=np.float32), "b2"),
        weight("W3", (96, 64)),
        weight("W4", (64, 32)),  # 2048 elements: below min_elements
        weight("W5", (64, 64)),
        weight("W6", (48, 128)),
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([48], np.int64), "ends"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
    ]
    graph = oh.make_graph(
        nodes,
        "synthetic",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [3, 64])],
        [
            oh.make_tensor_value_info(n, TensorProto.FLOAT, shape)
            for n, shape in (("Y", [3, 32]), ("Z", []), ("V", [3, 128]))
        ],
        initializers,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


X = RNG.standard_normal((3, 64)).astype(np.float32)


def run(model: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": X})


def gguf_roundtrip(array: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's quantize then dequantize, blocks along the last axis."""
    return gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype).reshape(array.shape)


def oracle(model: onnx.ModelProto, qtype, group_axis: str) -> list[np.ndarray]:
    """The float model with W1, W2, W3 (and W6 when grouped along the output axis) replaced by gguf-py's
    round trip, grouped along the input axis K (W^T for MatMul / Gemm(transB=0)) or the output axis."""
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    k_last = {"W1": False, "W2": True, "W3": False, "W6": False}  # is K already the last axis?
    if group_axis == "input":
        del k_last["W6"]
    for tensor in reference.graph.initializer:
        if tensor.name in k_last:
            w = numpy_helper.to_array(tensor)
            transpose = k_last[tensor.name] != (group_axis == "input")
            q = gguf_roundtrip(np.ascontiguousarray(w.T), qtype).T if transpose else gguf_roundtrip(w, qtype)
            tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q, dtype=np.float32), tensor.name))
    return run(reference)


@pytest.fixture(scope="module")
def model():
    return synthetic_model()


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_weights_are_replaced_and_lowered_model_matches_gguf_oracle(model, fmt):
    quantized = quantize(model, fmt)
    S.check_model(quantized)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    assert set(values) == {"W1_T", "W2", "W3"}  # W1 needs a Transpose node; W3's Gemm gets transB=1
    remaining = {t.name for t in quantized.graph.initializer}
    assert remaining == {"b2", "W4", "W5", "W6", "starts", "ends", "axes"}
    assert [n.op_type for n in quantized.graph.node[:1]] == ["Transpose"]
    gemm3 = next(n for n in quantized.graph.node if n.input[:2] == ["H2", "W3"])
    assert oh.get_attribute_value(next(a for a in gemm3.attribute if a.name == "transB")) == 1

    expected = oracle(model, Q[fmt], "input")
    actual = run(S.lower(quantized))
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # And the format's error against the float model is what the format promises.
    floats = run(model)
    bound = {"Q8_0": 0.01, "Q4_0": 0.15}[fmt]
    relative = np.linalg.norm(actual[0] - floats[0]) / np.linalg.norm(floats[0])
    assert 0 < relative < bound


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_payload_bytes_equal_gguf_quantize(model, fmt):
    quantized = quantize(model, fmt)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    # Blocks along K: W^T for MatMul and Gemm(transB=0), W itself for Gemm(transB=1): GGUF's layout.
    assert values["W1_T"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W1"].T), Q[fmt]).tobytes()
    assert values["W2"].raw_data == gguf.quants.quantize(w["W2"], Q[fmt]).tobytes()
    assert values["W3"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W3"].T), Q[fmt]).tobytes()


def test_group_along_output_axis_stores_weights_as_they_are(model):
    quantized = quantize(model, "Q4_0", group_axis="output")
    S.check_model(quantized)
    values = {v.name: v for v in S.get_struct_values(quantized)}
    assert set(values) == {"W1", "W2", "W3", "W6"}  # W6's output axis (128) is a multiple of 32
    assert not any(n.op_type == "Transpose" for n in quantized.graph.node)
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert values["W1"].raw_data == gguf.quants.quantize(w["W1"], Q.Q4_0).tobytes()
    assert values["W2"].raw_data == gguf.quants.quantize(np.ascontiguousarray(w["W2"].T), Q.Q4_0).tobytes()
    for got, want in zip(run(S.lower(quantized)), oracle(model, Q.Q4_0, "output"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_ineligible_weights_are_untouched_and_explained(model):
    planned = plan(model, "Q4_0")
    assert [w.name for w in planned.weights] == ["W1", "W2", "W3"]
    assert set(planned.skipped) == {"W4", "W5", "W6"}
    assert "fewer than min_elements=4096" in planned.skipped["W4"]
    assert "'ReduceSum' uses it as input 0" in planned.skipped["W5"]
    assert "not a multiple of the block size 32" in planned.skipped["W6"]
    quantized = quantize(model, "Q4_0")
    before = {t.name: t.SerializeToString() for t in model.graph.initializer}
    for tensor in quantized.graph.initializer:
        assert tensor.SerializeToString() == before[tensor.name]
    # min_elements and op_types narrow the selection.
    assert [w.name for w in plan(model, "Q4_0", min_elements=1).weights] == ["W1", "W2", "W3", "W4"]
    assert [w.name for w in plan(model, "Q4_0", op_types=("Gemm",)).weights] == ["W2", "W3"]


def test_input_model_is_not_modified(model):
    before = model.SerializeToString()
    quantize(model, "Q8_0")
    assert model.SerializeToString() == before


def test_nothing_eligible_returns_an_equal_copy(model):
    quantized = quantize(model, "Q8_0", min_elements=10**9)
    assert quantized is not model and quantized.SerializeToString() == model.SerializeToString()


def test_bad_arguments(model):
    with pytest.raises(KeyError, match="unknown format"):
        quantize(model, "NOT_A_FORMAT")
    with pytest.raises(ValueError, match="not supported"):
        quantize(model, "Q8_0", op_types=("Conv",))
    with pytest.raises(ValueError, match="group_axis"):
        quantize(model, "Q8_0", group_axis="rows")


def test_format_without_encoder_is_refused(model):
    import dataclasses

    no_encoder = dataclasses.replace(formats.get("Q8_0"), encoder=None)
    with pytest.raises(ValueError, match="has no encoder"):
        quantize(model, no_encoder)


def test_cli_quantize(model, tmp_path, capsys):
    source = tmp_path / "float.onnx"
    onnx.save(model, source)
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(source), str(out), "--format", "Q8_0"]) == 0
    err = capsys.readouterr().err
    assert "3 weights in Q8_0" in err and "kept W4" in err
    S.check_model(out)
    assert {v.name for v in S.get_struct_values(out)} == {"W1_T", "W2", "W3"}
    assert main(["quantize", str(source), str(out), "--format", "NOPE"]) == 2
    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"\xff" * 10)
    assert main(["quantize", str(bogus), str(out), "--format", "Q8_0"]) == 1  # invalid content, as in `check`
    assert main(["quantize", str(tmp_path / "missing.onnx"), str(out), "--format", "Q8_0"]) == 2


def test_gather_tables_quantize_along_rows():
    table = (RNG.standard_normal((100, 64)) * 0.3).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Gather", ["table", "ids"], ["E"])],
        "lookup",
        [oh.make_tensor_value_info("ids", TensorProto.INT64, [5])],
        [oh.make_tensor_value_info("E", TensorProto.FLOAT, [5, 64])],
        [numpy_helper.from_array(table, "table")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    assert quantize(model, "Q4_0").SerializeToString() == model.SerializeToString()  # not in the default op_types
    quantized = quantize(model, "Q4_0", op_types=("MatMul", "Gemm", "Gather"))
    (value,) = S.get_struct_values(quantized)
    assert value.name == "table" and value.raw_data == gguf.quants.quantize(table, Q.Q4_0).tobytes()
    ids = np.array([0, 99, 7, 7, 42], np.int64)
    session = ort.InferenceSession(S.lower(quantized).SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"ids": ids})
    np.testing.assert_allclose(got, gguf_roundtrip(table, Q.Q4_0)[ids], rtol=1e-6, atol=1e-6)


def test_an_older_opset_is_upgraded_so_the_decoder_runs():
    old = synthetic_model()
    old.opset_import[0].version = 17  # every operator of the model exists unchanged at 17
    quantized = quantize(old, "Q8_0")
    assert quantized.opset_import[0].version >= 21
    # Only the opset changes: the converter's shape-inference results are not left behind.
    assert not quantized.graph.value_info and list(quantized.graph.output) == list(old.graph.output)
    for got, want in zip(run(S.lower(quantized)), oracle(old, Q.Q8_0, "input"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_weights_seen_outside_the_main_graph_nodes_are_kept():
    """A weight that is also a graph output, or that a subgraph reads, keeps its float value."""
    then_branch = oh.make_graph(
        [oh.make_node("MatMul", ["X", "Wsub"], ["T"])],
        "then",
        [],
        [oh.make_tensor_value_info("T", TensorProto.FLOAT, None)],
    )
    else_branch = oh.make_graph(
        [oh.make_node("Identity", ["H"], ["E"])], "else", [], [oh.make_tensor_value_info("E", TensorProto.FLOAT, None)]
    )
    graph = oh.make_graph(
        [
            oh.make_node("MatMul", ["X", "Wsub"], ["H"]),
            oh.make_node("MatMul", ["X", "Wout"], ["H2"]),
            oh.make_node("If", ["cond"], ["Y"], then_branch=then_branch, else_branch=else_branch),
        ],
        "outside",
        [
            oh.make_tensor_value_info("X", TensorProto.FLOAT, [3, 64]),
            oh.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            oh.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 64]),
            oh.make_tensor_value_info("H2", TensorProto.FLOAT, [3, 64]),
            oh.make_tensor_value_info("Wout", TensorProto.FLOAT, [64, 64]),
        ],
        [weight("Wsub", (64, 64)), weight("Wout", (64, 64))],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    planned = plan(model, "Q8_0")
    assert not planned.weights
    assert planned.skipped == {"Wsub": "a subgraph uses it", "Wout": "it is also a graph input or output"}
