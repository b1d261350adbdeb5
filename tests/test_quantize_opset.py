"""Raising an older default-domain opset to the decoder's without onnx's version converter
(passes/quantize_opset.py): only where every operator used has the same schema at both versions
(onnx.defs, the oracle), else the model is left for the converter."""

from __future__ import annotations

import onnx
import onnx.defs
from onnx import TensorProto
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
