"""quantize() reaches every weight a real model keeps: Constant nodes (RapidOCR's shape), If/Loop
bodies (silero-vad's), model-local functions (torch exports with functions), shared weights.

Each model is quantized, run in onnx_struct.InferenceSession (weights kept quantized where the
execution rewrite applies, decoded elsewhere) and through lower() in stock onnxruntime, and
compared with two oracles that share no code with the package: the float model with every
expected weight replaced by gguf-py's dequantize(quantize(W^T))^T, run in stock onnxruntime
(tight), and the float model itself (the format's error bound).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct.check.checked import checked_model
from onnx_struct.lowering.execution import rewrite_for_execution
from onnx_struct.passes.quantize import plan, quantize

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
BOUND = {"Q8_0": 0.01, "Q4_0": 0.15}  # relative L2 error of one product against the float model
OPSET = [oh.make_opsetid("", 21)]


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def array(shape, seed: int) -> np.ndarray:
    return (rng(seed).standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)  # a gain of about 1


def info(name: str, shape) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def roundtrip_k(w: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's round trip of a MatMul weight [K, N] with blocks along K (W^T's rows)."""
    t = np.ascontiguousarray(w.T)
    return np.ascontiguousarray(gguf.quants.dequantize(gguf.quants.quantize(t, qtype), qtype).reshape(t.shape).T)


def oracle(model: onnx.ModelProto, names: set[str], qtype) -> onnx.ModelProto:
    """``model`` with every FLOAT tensor named in ``names`` (initializers of any graph, Constant
    values of graphs and functions) replaced by its gguf-py round trip."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graphs = [copy.graph, *copy.functions]
    while graphs:
        graph = graphs.pop()
        for tensor in getattr(graph, "initializer", []):
            if tensor.name in names:
                tensor.CopyFrom(numpy_helper.from_array(roundtrip_k(numpy_helper.to_array(tensor), qtype), tensor.name))
        for node in graph.node:
            for attribute in node.attribute:
                if node.op_type == "Constant" and node.output[0] in names:
                    a = roundtrip_k(numpy_helper.to_array(attribute.t), qtype)
                    attribute.t.CopyFrom(numpy_helper.from_array(a, node.output[0]))
                if attribute.HasField("g"):
                    graphs.append(attribute.g)
                graphs.extend(attribute.graphs)
    return copy


def stock_run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check_quantized(model: onnx.ModelProto, fmt: str, expected: set[str], feeds, depth: int) -> onnx.ModelProto:
    """Quantize, check that exactly ``expected`` weights were replaced, and compare the outputs of
    InferenceSession and of the lowered model in stock onnxruntime with both oracles (against the
    float model: each of the ``depth`` quantized products on the way to an output adds its error)."""
    options = {}
    quantized = quantize(model, fmt, **options)
    S.check_model(quantized)
    onnx.checker.check_model(S.lower(quantized), full_check=True)
    assert {w.name for w in plan(model, fmt, **options).weights} == expected
    assert len(S.get_struct_values(quantized)) == len(expected)
    want = stock_run(oracle(model, expected, Q[fmt]), feeds)
    floats = stock_run(model, feeds)
    # accuracy_level=0: MatMulNBits multiplies float32 activations (its default, 4, rounds them to
    # int8 per block, an error of its own, checked against the float model below)
    exact = S.InferenceSession(quantized, accuracy_level=0).run(None, feeds)
    for got in (exact, stock_run(S.lower(quantized), feeds)):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # level 4 adds ~5e-3 per product (docs/execution.md): 2e-2 for this model's few layers
    products = BOUND[fmt] * depth
    for got, bound in ((exact, products), (S.InferenceSession(quantized).run(None, feeds), products + 0.02)):
        for g, f in zip(got, floats, strict=True):
            assert np.linalg.norm(g - f) / np.linalg.norm(f) < bound
    return quantized


def constant_node_model() -> onnx.ModelProto:
    """RapidOCR's shape: every weight a Constant node (value), biases value_floats, a value_float scale."""
    nodes = [
        constant("W1", array((64, 96), 1)),
        oh.make_node("Constant", [], ["b1"], value_floats=array((96,), 2).tolist()),
        oh.make_node("Constant", [], ["scale"], value_float=0.5),
        constant("W2", array((96, 64), 3)),
        oh.make_node("MatMul", ["X", "W1"], ["H"]),
        oh.make_node("Add", ["H", "b1"], ["Hb"]),
        oh.make_node("Mul", ["Hb", "scale"], ["Hs"]),
        oh.make_node("Gemm", ["Hs", "W2"], ["Y"]),
    ]
    graph = oh.make_graph(nodes, "constants", [info("X", [4, 64])], [info("Y", [4, 64])])
    return oh.make_model(graph, opset_imports=OPSET, ir_version=10)


def subgraph_model() -> onnx.ModelProto:
    """silero-vad's shape: weights inside If branches and a Loop body (an initializer of the branch,
    a Constant node of the other branch and of the loop body), and a main-graph weight read both in
    the main graph and in a branch."""
    then_branch = oh.make_graph(
        [oh.make_node("MatMul", ["H", "Wthen"], ["T0"]), oh.make_node("MatMul", ["T0", "Wshared"], ["T"])],
        "then",
        [],
        [info("T", [4, 64])],
        [numpy_helper.from_array(array((64, 64), 11), "Wthen")],
    )
    else_branch = oh.make_graph(
        [constant("Welse", array((64, 64), 12)), oh.make_node("MatMul", ["H", "Welse"], ["E"])],
        "else",
        [],
        [info("E", [4, 64])],
    )
    body = oh.make_graph(
        [
            constant("Wloop", array((64, 64), 13)),
            oh.make_node("MatMul", ["state", "Wloop"], ["step"]),
            oh.make_node("Tanh", ["step"], ["next"]),
            oh.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("i", TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            info("state", [4, 64]),
        ],
        [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []), info("next", [4, 64])],
    )
    nodes = [
        oh.make_node("MatMul", ["X", "Wshared"], ["H"]),
        oh.make_node("If", ["c"], ["B"], then_branch=then_branch, else_branch=else_branch),
        oh.make_node("Loop", ["trips", "", "B"], ["Y"], body=body),
    ]
    graph = oh.make_graph(
        nodes,
        "subgraphs",
        [info("X", [4, 64]), oh.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [info("Y", [4, 64])],
        [
            numpy_helper.from_array(array((64, 64), 14), "Wshared"),
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
        ],
    )
    return oh.make_model(graph, opset_imports=OPSET, ir_version=10)


def function_model(opset: int = 21) -> onnx.ModelProto:
    """A torch export with functions: ``Block`` keeps its weight in a Constant node and is called
    twice from the main graph and once from ``Outer``; ``Linear`` reads a main-graph initializer
    passed to it; ``Outer`` is called from the main graph. Everything imports ``opset``."""
    OPSET = [oh.make_opsetid("", opset)]  # noqa: N806 - the module's constant, at this opset
    block = oh.make_function(
        "local",
        "Block",
        ["x"],
        ["y"],
        [constant("w", array((64, 64), 21)), oh.make_node("MatMul", ["x", "w"], ["y"])],
        OPSET,
    )
    linear = oh.make_function("local", "Linear", ["x", "w"], ["y"], [oh.make_node("MatMul", ["x", "w"], ["y"])], OPSET)
    outer = oh.make_function(
        "local",
        "Outer",
        ["x"],
        ["y"],
        [oh.make_node("Block", ["x"], ["b"], domain="local"), oh.make_node("Relu", ["b"], ["y"])],
        [*OPSET, oh.make_opsetid("local", 1)],
    )
    nodes = [
        oh.make_node("Block", ["X"], ["A"], domain="local"),
        oh.make_node("Block", ["A"], ["B"], domain="local"),
        oh.make_node("Linear", ["B", "Wlin"], ["C"], domain="local"),
        oh.make_node("Outer", ["C"], ["Y"], domain="local"),
    ]
    graph = oh.make_graph(
        nodes,
        "functions",
        [info("X", [4, 64])],
        [info("Y", [4, 64])],
        [numpy_helper.from_array(array((64, 64), 22), "Wlin")],
    )
    return oh.make_model(
        graph, opset_imports=[*OPSET, oh.make_opsetid("local", 1)], functions=[block, linear, outer], ir_version=8
    )


def shared_model() -> onnx.ModelProto:
    """One weight read by two MatMuls and a Gemm (tied layers): one struct value."""
    nodes = [
        oh.make_node("MatMul", ["X", "W"], ["A"]),
        oh.make_node("MatMul", ["A", "W"], ["B"]),
        oh.make_node("Gemm", ["B", "W"], ["Y"]),
    ]
    graph = oh.make_graph(
        nodes, "shared", [info("X", [4, 64])], [info("Y", [4, 64])], [numpy_helper.from_array(array((64, 64), 31), "W")]
    )
    return oh.make_model(graph, opset_imports=OPSET, ir_version=10)


X = rng(0).standard_normal((4, 64)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_constant_node_weights(fmt):
    quantized = check_quantized(constant_node_model(), fmt, {"W1", "W2"}, {"X": X}, depth=2)
    assert not any(n.op_type == "Constant" and n.output[0] in ("W1", "W2") for n in quantized.graph.node)
    planned = plan(constant_node_model(), fmt, min_elements=1)
    assert planned.other == {
        "b1": "not a weight: read by Add (input 1)",
        "scale": "not a weight: read by Mul (input 1)",
    }
    assert planned.elements["b1"] == 96 and planned.elements["scale"] == 1


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("cond", [True, False])
def test_if_and_loop_bodies(fmt, cond):
    feeds = {"X": X, "c": np.array(cond)}
    check_quantized(subgraph_model(), fmt, {"Wshared", "Wthen", "Welse", "Wloop"}, feeds, depth=6)


def test_subgraph_weights_are_labelled_with_their_scope():
    planned = plan(subgraph_model(), "Q8_0")
    assert {w.label: w.kind for w in planned.weights} == {
        "Wshared": "initializer",
        "Wthen (in graph.node[1] (If) then_branch)": "initializer",
        "Welse (in graph.node[1] (If) else_branch)": "constant",
        "Wloop (in graph.node[2] (Loop) body)": "constant",
    }


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_model_local_function_weights(fmt):
    quantized = check_quantized(function_model(), fmt, {"w", "Wlin"}, {"X": X}, depth=4)
    functions = {f.name: f for f in quantized.functions}
    # Block's Constant became an input; Outer passes it on from its own new input
    assert len(functions["Block"].input) == 2 and not any(n.op_type == "Constant" for n in functions["Block"].node)
    assert len(functions["Outer"].input) == 2
    calls = [n for n in quantized.graph.node if n.domain == "local"]
    assert [len(n.input) for n in calls] == [2, 2, 2, 2]


@pytest.mark.parametrize("opset", [13, 17, 19, 21])
def test_model_local_function_weights_below_the_decoders_opset(opset):
    """The decoders import opset 21: quantize raises an older model's opset with onnx's version
    converter, which drops the model's local functions (found by a red-team pass: "local:Block is
    not a registered function"). They are kept, and lower() raises their imports (Relu differs
    between 13 and 21)."""
    model = function_model(opset)
    onnx.checker.check_model(model, full_check=True)
    quantized = check_quantized(model, "Q8_0", {"w", "Wlin"}, {"X": X}, depth=4)
    assert sorted(f.name for f in quantized.functions) == ["Block", "Linear", "Outer"]
    assert {o.domain: o.version for o in quantized.opset_import}[""] == 21


@pytest.mark.parametrize("opset", [13, 17, 19])
def test_lower_keeps_local_functions_when_it_converts_the_graph(opset):
    """lower() converts a graph below its decoders' opset whose operators differ (Relu here) and
    keeps the model's local functions, raising their imports too."""
    w = array((64, 64), 41)
    relu = oh.make_function(
        "local", "Act", ["x"], ["y"], [oh.make_node("Relu", ["x"], ["y"])], [oh.make_opsetid("", opset)]
    )
    nodes = [
        oh.make_node("Relu", ["X"], ["R"]),
        oh.make_node("MatMul", ["R", "W"], ["H"]),
        oh.make_node("Act", ["H"], ["Y"], domain="local"),
    ]
    graph = oh.make_graph(nodes, "lower", [info("X", [4, 64])], [info("Y", [4, 64])])
    opsets = [oh.make_opsetid("", opset), oh.make_opsetid("local", 1)]
    model = oh.make_model(graph, opset_imports=opsets, functions=[relu], ir_version=8)
    stored = gguf.quants.quantize(w, Q.Q8_0)  # blocks along W's rows (the output axis): decoded as stored
    S.add_struct_values(model, S.formats.get("Q8_0").make_value(model, "W", (64, 64), stored.tobytes()))
    S.check_model(model)
    lowered = S.lower(model)
    assert [f.name for f in lowered.functions if f.domain == "local"] == ["Act"]
    decoded = np.asarray(gguf.quants.dequantize(stored, Q.Q8_0), np.float32).reshape(64, 64)
    want = np.maximum(np.maximum(X, 0) @ decoded.astype(np.float64), 0)
    np.testing.assert_allclose(stock_run(lowered, {"X": X})[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_shared_weight_is_quantized_once(fmt):
    quantized = check_quantized(shared_model(), fmt, {"W"}, {"X": X}, depth=3)
    (value,) = S.get_struct_values(quantized)
    w = numpy_helper.to_array(shared_model().graph.initializer[0])
    assert value.raw_data == gguf.quants.quantize(np.ascontiguousarray(w.T), Q[fmt]).tobytes()


def test_weight_of_an_op_outside_op_types_is_left_alone_and_said_so():
    model = function_model()
    planned = plan(model, "Q8_0", op_types=("Gemm",))
    assert not planned.weights
    reason = "a MatMul weight; MatMul is not in op_types"
    assert planned.other == {"Wlin": reason, "w (in function 'local.Block')": reason}


def tied_embedding_model() -> onnx.ModelProto:
    """An embedding table read by Gather (the tokens) and by Gemm(transB=1) (the output head)."""
    nodes = [oh.make_node("Gather", ["W", "ids"], ["E"], axis=0), oh.make_node("Gemm", ["E", "W"], ["Y"], transB=1)]
    graph = oh.make_graph(
        nodes,
        "tied",
        [oh.make_tensor_value_info("ids", TensorProto.INT64, [4])],
        [info("Y", [4, 128])],
        [numpy_helper.from_array(array((128, 64), 41), "W")],
    )
    return oh.make_model(graph, opset_imports=OPSET, ir_version=10)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_a_tied_embedding_is_quantized_once_along_its_rows(fmt):
    """Gather and Gemm(transB=1) both read blocks along each row of W [V, D] (GGUF's token_embd):
    one struct value of W itself (not transposed), run quantized by both; it was kept as float
    ("its consumers disagree on which axis is the input axis"). Oracle: gguf-py's bytes of W and
    the float model run on gguf-py's round trip of W."""
    model = tied_embedding_model()
    w = numpy_helper.to_array(model.graph.initializer[0])
    ops = ("MatMul", "Gemm", "Gather")
    assert [x.name for x in plan(model, fmt, op_types=ops).weights] == ["W"]
    quantized = quantize(model, fmt, op_types=ops)
    (value,) = S.get_struct_values(quantized)
    assert value.raw_data == gguf.quants.quantize(w, Q[fmt]).tobytes()
    rewritten = rewrite_for_execution(checked_model(quantized), accuracy_level=0).report.rewritten[value.name]
    assert sorted(entry.split()[0] for entry in rewritten) == ["Gather", "Gemm"]
    feeds = {"ids": np.array([0, 5, 127, 5], np.int64)}
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    restored = gguf.quants.dequantize(gguf.quants.quantize(w, Q[fmt]), Q[fmt]).reshape(w.shape)
    expected.graph.initializer[0].CopyFrom(numpy_helper.from_array(restored.astype(np.float32), "W"))
    want = stock_run(expected, feeds)[0]
    for got in (
        S.InferenceSession(quantized, accuracy_level=0).run(None, feeds)[0],
        stock_run(S.lower(quantized), feeds)[0],
    ):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # Blocks along the output axis: Gather's rows and the head's columns disagree; kept, said so.
    by_output = plan(model, fmt, op_types=ops, group_axis="output")
    assert not by_output.weights and "disagree" in next(iter(by_output.skipped.values()))
