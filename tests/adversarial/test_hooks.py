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
from support.protowire import field, tag, varint

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


@pytest.mark.slow
def test_struct_type_only_in_a_subgraph_reaches_onnx_struct(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model_with_branch(branch_with_struct_info(5)), path)  # no struct_types: index 5 is out of range
    run_bounded(HOOKED_CHECK, str(path), cpu_seconds=10, memory_mib=200).assert_validation_error(
        "graph.node[1].attribute", contains="type_index"
    )
    run_bounded(
        "S.install(); onnx.checker.check_model(onnx.load(ARG))", str(path), memory_mib=200
    ).assert_validation_error("graph.node[1].attribute", contains="type_index")


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# ---------------------------------------------------------------------- broken struct parts
def _stock_with_field_27(payload: bytes) -> bytes:
    """A stock model plus ModelProto field 27 (struct_types) holding ``payload`` as written: stock
    onnx keeps it as an unknown field and accepts the model."""
    return base_model().SerializeToString() + payload


BROKEN = {
    "garbage": _stock_with_field_27(field(27, b"\xff\xff\xff")),  # 3 bytes that do not parse
    "varint": _stock_with_field_27(tag(27, 0) + varint(5)),  # the wrong wire type
}


@pytest.mark.slow
@pytest.mark.parametrize("form", ["path", "bytes", "ModelProto"])
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_struct_part_reaches_onnx_struct(tmp_path, case, form):
    """Found by a red-team pass: with a ModelProto, protobuf's DecodeError escaped from every entry
    point; and the hook sent both models to stock onnx, which accepts them (an unknown field),
    where onnx_struct.check_model refuses them."""
    data = BROKEN[case]
    onnx.checker.check_model(onnx.ModelProto.FromString(data))  # stock onnx: valid
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    argument = {"path": "ARG", "bytes": "open(ARG, 'rb').read()", "ModelProto": "onnx.load(ARG)"}[form]
    contains = {"garbage": "do not parse", "varint": "wire type 0"}[case]
    for code in (f"S.check_model({argument})", f"S.install(); onnx.checker.check_model({argument})"):
        out = run_bounded(code, str(path), cpu_seconds=10, memory_mib=200)
        out.assert_validation_error("", contains="" if form != "ModelProto" and case == "garbage" else contains)


@pytest.mark.slow
def test_a_stock_oneof_written_twice_still_goes_to_stock_onnx(tmp_path):
    """The hook routes a wire problem to onnx_struct only for the proposal's own fields: a stock
    TypeProto with two members of its oneof on the wire (stock onnx keeps the last) is stock's."""
    model = base_model()
    model.graph.input.append(oh.make_tensor_value_info("Z", TensorProto.FLOAT, [7]))
    data = model.SerializeToString()
    sequence = onnx.TypeProto(sequence_type=onnx.TypeProto.Sequence(elem_type=model.graph.input[-1].type))
    tensor_type = model.graph.input[-1].type.SerializeToString()
    doubled = tensor_type + sequence.SerializeToString()
    assert data.count(tensor_type) == 1
    path = tmp_path / "model.onnx"
    path.write_bytes(
        data.replace(b"\x12" + bytes([len(tensor_type)]) + tensor_type, b"\x12" + bytes([len(doubled)]) + doubled)
    )
    out = run_bounded(SAME_AS_STOCK.replace("{entry}", "check"), ["path", str(path)], memory_mib=200)
    assert out.error is None, out.message
