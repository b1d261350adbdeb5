"""Raising an older default-domain opset to the decoder's without onnx's version converter
(passes/quantize_opset.py): only where every operator used has the same schema at both versions
(onnx.defs, the oracle), else the model is left for the converter."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from onnx_struct.passes.quantize_opset import raise_unchanged_opset


def _model(op_type: str, opset: int, functions=()) -> onnx.ModelProto:
    nodes = [oh.make_node(op_type, ["X", "W"], ["Y"])]
    graph = oh.make_graph(
        nodes,
        "g",
        [
            oh.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2]),
            oh.make_tensor_value_info("W", TensorProto.FLOAT, [2, 2]),
        ],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], functions=list(functions))


def _since(op_type: str, opset: int) -> int:
    return onnx.defs.get_schema(op_type, opset).since_version


def test_imports_alone_are_raised_when_no_operator_differs():
    assert _since("MatMul", 17) == _since("MatMul", 21)  # the oracle: MatMul-13 at both
    model = _model("MatMul", 17)
    graph = model.graph.SerializeToString()
    assert raise_unchanged_opset(model, 21)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
    assert model.graph.SerializeToString() == graph  # nothing else touched (no converter)
    onnx.checker.check_model(model)


def test_an_operator_that_differs_leaves_the_model_to_the_converter():
    assert _since("Reshape", 17) != _since("Reshape", 21)
    model = _model("Reshape", 17)
    before = model.SerializeToString()
    assert not raise_unchanged_opset(model, 21)
    assert model.SerializeToString() == before


def test_a_subgraph_operator_counts():
    model = _model("MatMul", 17)
    branch = oh.make_graph(
        [oh.make_node("Reshape", ["Y", "S"], ["Z"])], "b", [], [oh.make_tensor_value_info("Z", TensorProto.FLOAT, None)]
    )
    model.graph.node.append(oh.make_node("If", ["C"], ["R"], then_branch=branch, else_branch=branch))
    before = model.SerializeToString()
    assert not raise_unchanged_opset(model, 21)
    assert model.SerializeToString() == before


def test_local_functions_are_raised_with_the_model_or_not_at_all():
    unchanged = oh.make_function(
        "local", "f", ["a"], ["b"], [oh.make_node("Relu", ["a"], ["b"])], [oh.make_opsetid("", 17)]
    )
    assert _since("Relu", 17) == _since("Relu", 21)
    model = _model("MatMul", 17, [unchanged])
    assert raise_unchanged_opset(model, 21)
    assert [o.version for o in model.functions[0].opset_import] == [21]

    changed = oh.make_function(
        "local", "g", ["a", "s"], ["b"], [oh.make_node("Reshape", ["a", "s"], ["b"])], [oh.make_opsetid("", 17)]
    )
    model = _model("MatMul", 17, [unchanged, changed])
    before = model.SerializeToString()
    assert not raise_unchanged_opset(model, 21)
    assert model.SerializeToString() == before


def test_a_model_at_or_above_the_version_is_left_as_it_is():
    model = _model("MatMul", 21)
    assert not raise_unchanged_opset(model, 21)
    assert model.opset_import[0].version == 21


def _chain_with_reshape(opset: int) -> onnx.ModelProto:
    """Two MatMul layers with 128 KiB weights (left in the file by quantize's read), then a
    Reshape: its schema differs between 17 and 21, so onnx's converter must run."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((128, 256), dtype=np.float32), "W0")]
    weights.append(numpy_helper.from_array(rng.standard_normal((256, 128), dtype=np.float32), "W1"))
    weights.append(numpy_helper.from_array(np.array([-1, 64], np.int64), "shape"))
    graph = oh.make_graph(
        [
            oh.make_node("MatMul", ["X", "W0"], ["H0"]),
            oh.make_node("MatMul", ["H0", "W1"], ["H1"]),
            oh.make_node("Reshape", ["H1", "shape"], ["R"]),
        ],
        "chain",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [2, 128])],
        [oh.make_tensor_value_info("R", TensorProto.FLOAT, [4, 64])],
        weights,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


@pytest.mark.slow
def test_the_converter_runs_on_the_skeleton_without_the_weights(tmp_path, monkeypatch):
    """Reshape differs from 17 to 21: onnx's converter runs, on the model as quantize read it from
    the file (the weights' data left there), and the result computes what the float model with
    gguf-py's round-tripped weights computes."""
    import gguf
    import onnxruntime as ort

    from onnx_struct.passes import quantize as quantize_module

    model = _chain_with_reshape(17)
    assert _since("Reshape", 17) != _since("Reshape", 21)
    path = tmp_path / "float.onnx"
    onnx.save(model, path)
    converted = []
    upgrade = quantize_module._upgrade_opset

    def spy(m, *args):
        converted.append({t.name: len(t.raw_data) for t in m.graph.initializer})
        return upgrade(m, *args)

    monkeypatch.setattr(quantize_module, "_upgrade_opset", spy)
    quantized = quantize_module.quantize(str(path), "Q8_0")
    assert converted[0] == {"W0": 0, "W1": 0, "shape": 16}  # converted without the weights' data
    assert next(o.version for o in quantized.opset_import if o.domain == "") == 21

    import onnx_struct as S

    x = np.random.default_rng(1).standard_normal((2, 128), dtype=np.float32)
    session = ort.InferenceSession(S.lower(quantized).SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"X": x})
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    for tensor in reference.graph.initializer[:2]:  # MatMul weights: blocks along K, gguf-py's Q8_0 round trip
        w = numpy_helper.to_array(tensor)
        qt = gguf.GGMLQuantizationType.Q8_0
        q = gguf.quants.dequantize(gguf.quants.quantize(np.ascontiguousarray(w.T), qt), qt).T
        tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q, np.float32), tensor.name))
    (want,) = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"X": x}
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
