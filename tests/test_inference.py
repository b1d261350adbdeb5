"""Struct-aware shape inference, the logical view behind check_model(full_check=True), and the
install()/uninstall() hook of onnx.shape_inference.infer_shapes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.checker
import onnx.shape_inference
import pytest
from onnx import TensorProto
from onnx import helper as oh
from support.models import OPSET, const, linear_decoder, linear_int4_128, linear_model

import onnx_struct as S
from onnx_struct.check import hooks
from onnx_struct.check.inference import logical_type
from onnx_struct.layout.table import TypeTable


def tensor_of(type_proto) -> tuple[int, list]:
    tensor = type_proto.tensor_type
    return tensor.elem_type, [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor.shape.dim]


def value_info(model: onnx.ModelProto) -> dict[str, tuple[int, list]]:
    return {v.name: tensor_of(v.type) for v in model.graph.value_info}


def test_struct_value_gets_the_decoder_output_type_and_consumers_are_inferred():
    model = linear_model(bytes(64))
    inferred = S.infer_shapes(model)
    assert isinstance(inferred, onnx.ModelProto)
    types = value_info(inferred)
    assert types["weight"] == (TensorProto.FLOAT, [128])
    assert types["sum"] == (TensorProto.FLOAT, [128])
    assert len(S.get_struct_values(inferred)) == 1 and len(S.get_struct_types(inferred)) == 1
    S.check_model(inferred, full_check=True)  # still a valid struct model


def test_constant_shape_leaf_gives_an_exact_shape():
    # The decoder reshapes by a constant leaf: only a value-aware inference can see [8, 16].
    nodes = [
        oh.make_node("Cast", ["values"], ["f"], to=TensorProto.FLOAT),
        oh.make_node("Reshape", ["f", "shape"], ["y"]),
    ]
    decoder = oh.make_function("t", "shaped", ["values", "shape"], ["y"], nodes, OPSET)
    declaration = S.make_structure(
        [
            S.make_field("values", S.make_tensor_type(TensorProto.INT4, [128])),
            S.make_constant_field("shape", np.array([8, 16], dtype=np.int64)),
        ],
        decoder=decoder,
    )
    assert tensor_of(logical_type(declaration, TypeTable(), "d")) == (TensorProto.FLOAT, [8, 16])
    only_types = onnx.shape_inference.infer_function_output_types(
        decoder,
        [oh.make_tensor_type_proto(TensorProto.INT4, [128]), oh.make_tensor_type_proto(TensorProto.INT64, [2])],
        [],
    )
    assert tensor_of(only_types[0])[1] != [8, 16]  # why the function model route is taken


def test_struct_input_stays_struct_typed_and_consumers_see_its_logical_type():
    graph = oh.make_graph(
        [oh.make_node("Neg", ["W"], ["N"]), oh.make_node("Abs", ["N"], ["Y"])],
        "g",
        [],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    (index,) = S.add_struct_types(model, linear_int4_128(decoder=linear_decoder()))
    S.add_value_infos(model, inputs=[S.make_struct_value_info("W", index)])
    inferred = S.infer_shapes(model)
    overlay = S.from_onnx(inferred)
    assert overlay.graph.input[0].type.WhichOneof("value") == "struct_type"
    assert value_info(inferred)["N"] == (TensorProto.FLOAT, [128])
    assert tensor_of(inferred.graph.output[0].type) == (TensorProto.FLOAT, [128])


def test_struct_value_consumed_in_a_subgraph():
    then = oh.make_graph(
        [oh.make_node("Neg", ["weight"], ["t"]), oh.make_node("Abs", ["t"], ["out"])],
        "then",
        [],
        [oh.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    other = oh.make_graph(
        [oh.make_node("Abs", ["weight"], ["out2"])],
        "else",
        [],
        [oh.make_tensor_value_info("out2", TensorProto.FLOAT, None)],
    )
    graph = oh.make_graph(
        [oh.make_node("If", ["c"], ["Y"], then_branch=then, else_branch=other)],
        "g",
        [oh.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    (index,) = S.add_struct_types(model, linear_int4_128(decoder=linear_decoder()))
    S.add_struct_values(model, S.make_struct_value("weight", index, raw_data=bytes(64)))
    inferred = S.infer_shapes(model)
    assert tensor_of(inferred.graph.output[0].type) == (TensorProto.FLOAT, [128])


def test_full_check_uses_the_logical_view():
    model = linear_model(bytes(64))
    S.check_model(model, full_check=True)
    # The decoded FLOAT value fed to BitShift (integers only) is a type error only full_check sees.
    graph = oh.make_graph(
        [const("k", TensorProto.UINT8, [], [1]), oh.make_node("BitShift", ["weight", "k"], ["Y"], direction="LEFT")],
        "g",
        [],
        [oh.make_tensor_value_info("Y", TensorProto.UINT8, [128])],
    )
    bad = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    (index,) = S.add_struct_types(bad, linear_int4_128(decoder=linear_decoder()))
    S.add_struct_values(bad, S.make_struct_value("weight", index, raw_data=bytes(64)))
    S.check_model(bad)
    with pytest.raises(S.ValidationError, match="onnx"):
        S.check_model(bad, full_check=True)


def test_decoder_type_error_names_the_decoder():
    decoder = linear_decoder()
    decoder.node[1].input[1] = "scale"  # Sub(int64, float): a type error inside the decoder
    model = linear_model(bytes(64))
    (index,) = S.add_struct_types(model, linear_int4_128(decoder=decoder))
    S.add_struct_values(model, S.make_struct_value("broken", index, raw_data=bytes(64)))
    with pytest.raises(S.ValidationError, match="type inference of the decoder failed") as info:
        S.infer_shapes(model)
    assert info.value.path == "struct_types[1] ('LINEAR_INT4_128').decoder ('linear')"


def test_install_routes_infer_shapes_and_uninstall_restores_the_originals():
    original_infer = onnx.shape_inference.infer_shapes
    original_check = onnx.checker.check_model
    model = linear_model(bytes(64))
    try:
        S.install()
        assert onnx.shape_inference.infer_shapes is not original_infer
        inferred = onnx.shape_inference.infer_shapes(model)
        assert value_info(inferred)["weight"] == (TensorProto.FLOAT, [128])
        as_bytes = onnx.shape_inference.infer_shapes(model.SerializeToString())
        assert isinstance(as_bytes, bytes)
        assert value_info(onnx.ModelProto.FromString(as_bytes))["weight"] == (TensorProto.FLOAT, [128])
        plain = oh.make_model(
            oh.make_graph(
                [oh.make_node("Neg", ["x"], ["y"])],
                "g",
                [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            ),
            opset_imports=OPSET,
        )
        assert tensor_of(onnx.shape_inference.infer_shapes(plain).graph.output[0].type) == (TensorProto.FLOAT, [2])
    finally:
        S.uninstall()
    assert onnx.shape_inference.infer_shapes is original_infer
    assert onnx.checker.check_model is original_check
    assert not hooks.installed()


@pytest.mark.parametrize("inline", [False, True])
def test_each_decoder_is_typed_once_per_call(monkeypatch, inline):
    """infer_shapes typed every value's decoder twice (for its logical view, then for the
    value_info it writes), and the full check twice when an output declares a value's logical
    type (the conflict rule, then the logical view); an inline declaration once per use."""
    from onnx_struct.functions import policy as decoder_policy

    calls = []
    original = decoder_policy._analyze  # the analysis proper (check_sizes memoizes it by label)
    monkeypatch.setattr(decoder_policy, "_analyze", lambda *a, **k: calls.append(a[3]) or original(*a, **k))
    decoder_policy._cache.clear()
    model = linear_model(bytes(64))
    model.graph.output.append(oh.make_tensor_value_info("weight", TensorProto.FLOAT, [128]))
    if inline:
        (value,) = S.get_struct_values(model)
        value.struct_type.CopyFrom(S.get_struct_types(model)[value.type])
        value.type = -1
        S.set_struct_values(model, [value])
    S.infer_shapes(model)
    assert len(calls) == 1, calls
    calls.clear()
    decoder_policy._cache.clear()
    S.check_model(model, full_check=True)
    assert len(calls) == 1, calls
