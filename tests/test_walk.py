"""The one graph walker (schema/walk.py): paths and order of walk_graphs, in both path spellings,
and the tensor paths the external-data rules report through it (hand-written expected paths)."""

from __future__ import annotations

import ast
import pathlib
import textwrap

import onnx
from onnx import TensorProto
from onnx import helper as oh

from onnx_struct.payload import external
from onnx_struct.schema.walk import subgraphs, walk_graph_pairs, walk_graphs, walk_scoped


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


# ---------------------------------------------------------------------- scoped and paired walks
def test_walk_scoped_gives_each_node_the_names_defined_before_it():
    """Document order (a node, its subgraphs' nodes, the next node); a subgraph sees the names
    defined before the node holding it, not that node's outputs or later ones."""
    body = oh.make_graph(
        [oh.make_node("Add", ["x", "outer"], ["s"]), oh.make_node("Neg", ["s"], ["y"])],
        "body",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["a"], ["outer"]),
            oh.make_node("Loop", ["", ""], ["looped"], body=body),
            oh.make_node("Neg", ["looped"], ["last"]),
        ],
        "main",
        [oh.make_tensor_value_info("a", TensorProto.FLOAT, [1])],
        [oh.make_tensor_value_info("last", TensorProto.FLOAT, [1])],
        initializer=[oh.make_tensor("w", TensorProto.FLOAT, [1], [1.0])],
    )
    seen = [(path, i, node.op_type, sorted(defined)) for path, i, node, defined in walk_scoped(graph, outer={"o"})]
    body_path = "graph.node[1].attribute ('body')"
    assert seen == [
        ("graph", 0, "Relu", ["a", "o", "w"]),
        ("graph", 1, "Loop", ["a", "o", "outer", "w"]),
        (body_path, 0, "Add", ["a", "o", "outer", "w", "x"]),
        (body_path, 1, "Neg", ["a", "o", "outer", "s", "w", "x"]),
        ("graph", 2, "Neg", ["a", "looped", "o", "outer", "w"]),
    ]


def test_subgraphs_reads_g_and_graphs_in_document_order():
    (if_node, listed) = nested_model().node
    assert [(k, a.name, j, g.name) for k, a, j, g in subgraphs(if_node)] == [
        (0, "else_branch", None, "else"),
        (1, "then_branch", None, "then"),
    ]
    assert [(k, a.name, j, g.name) for k, a, j, g in subgraphs(listed)] == [
        (0, "parts", 0, "p0"),
        (0, "parts", 1, "p1"),
    ]
    assert list(subgraphs(_constant("c"))) == []


def test_walk_graph_pairs_pairs_graphs_by_place():
    first, second = nested_model(), nested_model()
    second.node[1].attribute[0].graphs.pop()  # p1 has no counterpart
    for graph in second.node[0].attribute[0].g, second.node[0].attribute[1].g:
        graph.name += "'"
    pairs = [(a.name, b.name) for a, b in walk_graph_pairs(first, second)]
    assert pairs == [("main", "main"), ("else", "else'"), ("then", "then'"), ("loop_body", "loop_body"), ("p0", "p0")]


# ---------------------------------------------------------------------- one walker
PACKAGE = pathlib.Path(external.__file__).parent.parent
WALKER = PACKAGE / "schema" / "walk.py"


def subgraph_reads(source: str) -> list[int]:
    """Lines that read a node attribute's graphs (``.g``, ``.graphs``, ``HasField("g")``) or name
    the GRAPH/GRAPHS attribute types: a walk over subgraphs that is not the walker's. ``self.g``
    and ``self.graphs`` are an object's own fields, not an attribute's."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            own = isinstance(node.value, ast.Name) and node.value.id == "self"
            if (node.attr in ("g", "graphs") and not own) or node.attr in ("GRAPH", "GRAPHS"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and [getattr(a, "value", None) for a in node.args] in (["g"], ["graphs"]):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "HasField":
                lines.append(node.lineno)
    return sorted(set(lines))


def test_only_the_walker_reads_subgraphs():
    """A new recursion into subgraphs outside schema/walk.py fails here: use walk_graphs,
    walk_scoped, walk_graph_pairs or subgraphs instead."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != WALKER
        for line in subgraph_reads(path.read_text())
    ]
    assert not found, "subgraphs read outside schema/walk.py:\n" + "\n".join(found)
    assert subgraph_reads(WALKER.read_text()), "the scan finds nothing even in the walker"


def test_the_scan_sees_a_hand_written_recursion():
    source = textwrap.dedent(
        """
        def names(graph):
            out = set()
            for node in graph.node:
                for attribute in node.attribute:
                    if attribute.HasField("g"):
                        out |= names(attribute.g)
                    for sub in attribute.graphs:
                        out |= names(sub)
                    if attribute.type == onnx.AttributeProto.GRAPHS:
                        pass
            return out

        class Holder:
            def __init__(self):
                self.graphs = []
        """
    )
    assert subgraph_reads(source) == [6, 7, 8, 10]
