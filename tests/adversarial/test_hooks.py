"""install(): every model with struct parts reaches onnx_struct, everything else is stock onnx's.

Struct parts only in subgraphs (If branches, training-info graphs) must not slip past the hook,
and a model the hook cannot read, or that has no struct parts, must fail exactly as stock onnx
fails on it: the same exception type, whatever the form (path, bytes, ModelProto).
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from support.models import base_model, linear_int4_128

import onnx_struct as S
from adversarial.bounded import run_bounded
from onnx_struct.schema.model import pb

HOOKED_CHECK = "S.install(); onnx.checker.check_model(ARG)"


def branch_with_struct_info(type_index: int) -> onnx.GraphProto:
    """An If branch whose output value_info is a struct type: the model's only struct part."""
    branch = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["B"])], "branch", [], [oh.make_tensor_value_info("B", TensorProto.FLOAT, [1])]
    )
    fragment = pb.GraphProto(value_info=[S.make_struct_value_info("B", type_index)])
    branch.MergeFromString(fragment.SerializeToString())
    return branch


def model_with_branch(branch: onnx.GraphProto) -> onnx.ModelProto:
    model = base_model()
    model.graph.input.append(oh.make_tensor_value_info("C", TensorProto.BOOL, []))
    model.graph.node.append(oh.make_node("If", ["C"], ["W"], then_branch=branch, else_branch=branch))
    model.graph.output.append(oh.make_tensor_value_info("W", TensorProto.FLOAT, [1]))
    return model


def test_the_subgraph_model_passes_stock_onnx():
    onnx.checker.check_model(model_with_branch(branch_with_struct_info(5)))  # struct parts are unknown fields


def test_struct_type_only_in_a_subgraph_reaches_onnx_struct(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model_with_branch(branch_with_struct_info(5)), path)  # no struct_types: index 5 is out of range
    run_bounded(HOOKED_CHECK, str(path), cpu_seconds=10, memory_mib=200).assert_validation_error(
        "graph.node[1].attribute", contains="type_index"
    )
    run_bounded(
        "S.install(); onnx.checker.check_model(onnx.load(ARG))", str(path), memory_mib=200
    ).assert_validation_error("graph.node[1].attribute", contains="type_index")


def test_struct_value_only_in_a_subgraph_reaches_onnx_struct(tmp_path):
    branch = branch_with_struct_info(0)
    del branch.value_info[:]
    branch.MergeFromString(
        pb.GraphProto(struct_initializer=[S.make_struct_value("v", 3, raw_data=b"")]).SerializeToString()
    )
    path = tmp_path / "model.onnx"
    onnx.save(model_with_branch(branch), path)
    run_bounded(HOOKED_CHECK, str(path), memory_mib=200).assert_validation_error(
        "graph.node[1].attribute", contains="main graph"
    )


def test_struct_type_only_in_a_training_graph_reaches_onnx_struct(tmp_path):
    model = base_model()
    training = onnx.TrainingInfoProto(algorithm=branch_with_struct_info(7))
    model.training_info.append(training)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    run_bounded(HOOKED_CHECK, str(path), memory_mib=200).assert_validation_error(
        "training_info[0].algorithm", contains="type_index"
    )


def test_valid_struct_declarations_still_pass_the_hook():
    model = model_with_branch(branch_with_struct_info(0))
    S.add_struct_types(model, linear_int4_128())
    S.install()
    try:
        onnx.checker.check_model(model)
    finally:
        S.uninstall()


# ---------------------------------------------------------------------- stock behaviour unchanged
SAME_AS_STOCK = """
def kind(call):
    try:
        call()
    except BaseException as error:
        return type(error)
    return None

form, name = ARG
argument = {"path": lambda: name, "bytes": lambda: open(name, "rb").read() if name.endswith(".bin") else name.encode()}[form]()
entry = getattr(onnx.checker, "check_model") if "{entry}" == "check" else onnx.shape_inference.infer_shapes
stock = kind(lambda: entry(argument))
S.install()
hooked_entry = onnx.checker.check_model if "{entry}" == "check" else onnx.shape_inference.infer_shapes
assert hooked_entry is not entry
hooked = kind(lambda: hooked_entry(argument))
S.uninstall()
assert stock is hooked, f"stock onnx raised {stock}, the installed hook {hooked}"
"""


@pytest.mark.parametrize(
    "entry, form, what",
    [
        ("check", "path", "missing"),
        ("check", "path", "directory"),
        ("check", "path", "garbage"),
        ("check", "bytes", "garbage"),
        ("infer", "bytes", "garbage"),
    ],
)
def test_hook_fails_as_stock_onnx_on_models_it_cannot_read(tmp_path, entry, form, what):
    if what == "missing":
        name = str(tmp_path / "absent.onnx")
    elif what == "directory":
        name = str(tmp_path)
    else:
        name = str(tmp_path / "garbage.bin")
        (tmp_path / "garbage.bin").write_bytes(b"\xff\xff\xff\xff garbage")
    out = run_bounded(SAME_AS_STOCK.replace("{entry}", entry), [form, name], memory_mib=200)
    assert out.error is None, out.message
