"""The one graph walker (schema/walk.py): paths and order of walk_graphs, in both path spellings,
and the tensor paths the external-data rules report through it (hand-written expected paths)."""

from __future__ import annotations

import onnx
from onnx import TensorProto
from onnx import helper as oh

from onnx_struct.payload import external
from onnx_struct.schema.walk import walk_graphs


def _graph(name: str, nodes=()) -> onnx.GraphProto:
    out = oh.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    return oh.make_graph(list(nodes), name, [], [out])


def _constant(name: str) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], value=oh.make_tensor(name, TensorProto.FLOAT, [1], [1.0]))


def nested_model() -> onnx.GraphProto:
    """node[0] If: else_branch, then then_branch holding a Loop whose body is a graph (make_node
    sorts keyword attributes by name); node[1] a node with a ``graphs`` list of two graphs."""
    loop_body = _graph("loop_body", [_constant("c_body")])
    then_branch = _graph("then", [oh.make_node("Loop", ["", ""], ["l"], body=loop_body)])
    else_branch = _graph("else", [_constant("c_else")])
    if_node = oh.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)
    listed = oh.make_node("Custom", [], ["z"], domain="x")
    listed.attribute.append(oh.make_attribute("parts", [_graph("p0"), _graph("p1")]))
    return _graph("main", [if_node, listed])


def test_walk_graphs_names_attributes_in_document_order():
    paths = [(path, graph.name) for path, graph in walk_graphs(nested_model())]
    assert paths == [
        ("graph", "main"),
        ("graph.node[0].attribute ('else_branch')", "else"),
        ("graph.node[0].attribute ('then_branch')", "then"),
        ("graph.node[0].attribute ('then_branch').node[0].attribute ('body')", "loop_body"),
        ("graph.node[1].attribute ('parts')[0]", "p0"),
        ("graph.node[1].attribute ('parts')[1]", "p1"),
    ]


def test_walk_graphs_by_index_spells_the_fields():
    paths = [(path, graph.name) for path, graph in walk_graphs(nested_model(), "g0", by_index=True)]
    assert paths == [
        ("g0", "main"),
        ("g0.node[0].attribute[0].g", "else"),
        ("g0.node[0].attribute[1].g", "then"),
        ("g0.node[0].attribute[1].g.node[0].attribute[0].g", "loop_body"),
        ("g0.node[1].attribute[0].graphs[0]", "p0"),
        ("g0.node[1].attribute[0].graphs[1]", "p1"),
    ]


def test_model_tensors_paths_through_subgraphs():
    model = oh.make_model(nested_model())
    model.graph.initializer.append(oh.make_tensor("w", TensorProto.FLOAT, [1], [2.0]))
    paths = [path for path, _ in external.model_tensors(model)]
    assert paths == [
        "graph.initializer[0] ('w')",
        "graph.node[0].attribute[0].g.node[0].attribute[0].t",
        "graph.node[0].attribute[1].g.node[0].attribute[0].g.node[0].attribute[0].t",
    ]
