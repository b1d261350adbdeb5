"""Shared fixtures: minimal models and the three forms every public model argument accepts."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S


def base_model(nodes=(), outputs=None, opset: int = 21) -> onnx.ModelProto:
    """A small valid stock model: Y = Identity(X); struct parts are added by each test."""
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"]), *nodes],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        outputs or [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def linear_int4_128(decoder: onnx.FunctionProto | None = None) -> S.StructTypeProto:
    """The proposal's example declaration."""
    return S.make_structure(
        [
            S.make_field("values", S.make_tensor_type(TensorProto.INT4, [128])),
            S.make_constant_field("scale", onnx.numpy_helper.from_array(__import__("numpy").float32(0.125), "scale")),
            S.make_constant_field(
                "zero_point", onnx.numpy_helper.from_array(__import__("numpy").int64(0), "zero_point")
            ),
        ],
        name="LINEAR_INT4_128",
        decoder=decoder,
    )


def model_with(declarations=(), values=(), **infos) -> onnx.ModelProto:
    model = base_model()
    if declarations:
        S.add_struct_types(model, *declarations)
    if values:
        S.add_struct_values(model, *values)
    if infos:
        S.add_value_infos(model, **infos)
    return model


@pytest.fixture(params=["proto", "bytes", "path"])
def as_form(request, tmp_path):
    """Turn an onnx.ModelProto into the form under test (the path form writes it to tmp_path)."""

    def convert(model: onnx.ModelProto):
        if request.param == "proto":
            return model
        if request.param == "bytes":
            return model.SerializeToString()
        path = tmp_path / "model.onnx"
        onnx.save(model, path)
        return str(path)

    convert.form = request.param
    return convert
