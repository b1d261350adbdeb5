"""The one helper of each kind for names in a graph (lowering/names.py): the names a graph reads,
every name it holds, and a name not yet taken (hand-written expected sets)."""

from __future__ import annotations

import onnx
from onnx import TensorProto
from onnx import helper as oh

from onnx_struct.lowering.names import graph_names, read_names, unique_name


def _info(name: str) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, TensorProto.FLOAT, [1])


def model_graph() -> onnx.GraphProto:
    """An If whose then branch outputs an outer value by name (``w``) and whose else branch
    computes from another (``x``); a sparse initializer, a value_info and named nodes."""
    then_branch = oh.make_graph([], "then", [], [_info("w")])
    else_branch = oh.make_graph([oh.make_node("Neg", ["x"], ["n"], name="neg")], "else", [], [_info("n")])
    graph = oh.make_graph(
        [
            oh.make_node("Relu", ["a"], ["x"], name="relu"),
            oh.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch),
        ],
        "main",
        [_info("a"), oh.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [_info("y")],
        initializer=[oh.make_tensor("w", TensorProto.FLOAT, [1], [1.0])],
        value_info=[_info("x")],
    )
    values = oh.make_tensor("s_values", TensorProto.FLOAT, [1], [2.0])
    graph.sparse_initializer.append(
        oh.make_sparse_tensor(values, oh.make_tensor("s_i", TensorProto.INT64, [1], [0]), [4])
    )
    return graph


def test_read_names_counts_subgraph_outputs():
    assert read_names(model_graph()) == {"a", "cond", "x", "y", "w", "n"}


def test_graph_names_holds_every_kind_of_name():
    assert graph_names(model_graph()) == {"a", "cond", "x", "y", "w", "n", "s_values", "relu", "neg"}


def test_graph_names_of_a_function():
    function = oh.make_function("d", "f", ["i"], ["o"], [oh.make_node("Neg", ["i"], ["o"], name="k")], [])
    assert graph_names(function) == {"i", "o", "k"}


def test_unique_name_counts_from_one_and_takes_the_name():
    taken = {"w", "w_1"}
    assert [unique_name("w", taken), unique_name("w", taken), unique_name("v", taken)] == ["w_2", "w_3", "v"]
    assert taken == {"w", "w_1", "w_2", "w_3", "v"}
