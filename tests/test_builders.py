"""The builders' and model accessors' user-facing contracts: a nested declaration gets a hint, and
get_struct_* are snapshots that set_struct_* write back."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T

import onnx_struct as S
from onnx_struct.schema.builders import NestedDeclarationError
from onnx_struct.schema.model import from_onnx, to_onnx


def stock_model_with_two_values() -> onnx.ModelProto:
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    (index,) = S.add_struct_types(model, S.make_structure([S.make_field("x", T.UINT8)], name="Byte"))
    S.add_struct_values(model, S.make_struct_value("a", index, raw_data=b"\x01"))
    S.add_struct_values(model, S.make_struct_value("b", index, raw_data=b"\x02"))
    return model


@pytest.mark.parametrize(
    "declaration",
    [
        S.make_bit_packing([("a", 3), ("b", 5)], 1),
        S.make_structure([S.make_field("x", T.UINT8)]),
        S.make_array(T.UINT8, 2),
    ],
)
def test_a_declaration_nested_inline_gets_a_hint(declaration):
    kind = declaration.WhichOneof("kind")
    for build in (lambda: S.make_field("meta", declaration), lambda: S.make_array(declaration, 2)):
        with pytest.raises(TypeError, match=f"a {kind} declaration cannot be nested inline") as info:
            build()
        assert isinstance(info.value, NestedDeclarationError)
        assert "add_struct_types(model, declaration)" in str(info.value)
        assert "make_type_reference(index)" in str(info.value)


def test_the_hinted_route_works():
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    (meta,) = S.add_struct_types(model, S.make_bit_packing([("a", 3), ("b", 5)], 1))
    (root,) = S.add_struct_types(model, S.make_structure([S.make_field("meta", S.make_type_reference(meta))]))
    S.add_struct_values(model, S.make_struct_value_from_leaves("v", {"meta.a": [5], "meta.b": [17]}, root, model))
    S.check_model(model)
    assert S.view("v", model)["meta.b"].tolist() == [17]


def test_a_field_type_that_is_no_type_is_a_type_error():
    with pytest.raises(TypeError, match="expected an ONNX element type .* got str"):
        S.make_field("x", "FLOAT")
    assert S.make_field("x", np.int32(T.FLOAT)).type.tensor_type.elem_type == T.FLOAT


def test_get_struct_values_is_a_snapshot_and_set_struct_values_writes_back():
    model = stock_model_with_two_values()
    values = S.get_struct_values(model)
    values[0].name = "renamed"
    assert [v.name for v in S.get_struct_values(model)] == ["a", "b"]  # the edit did not reach the model
    S.set_struct_values(model, values[::-1])
    assert [v.name for v in S.get_struct_values(model)] == ["b", "renamed"]
    assert S.view("renamed", model)["x"].tolist() == 1
    S.check_model(model)
    assert len(model.graph.node) == 0 and model.graph.name == "g"  # the rest is as it was


def test_set_struct_types_writes_back_on_both_model_forms():
    for model in (stock_model_with_two_values(), from_onnx(stock_model_with_two_values())):
        types = S.get_struct_types(model)
        types[0].name = "Octet"
        S.set_struct_types(model, types)
        assert [t.name for t in S.get_struct_types(model)] == ["Octet"]
        S.set_struct_values(model, S.get_struct_values(model))  # the very messages being replaced
        assert [v.name for v in S.get_struct_values(model)] == ["a", "b"]
        S.check_model(model if isinstance(model, onnx.ModelProto) else to_onnx(model))
    with pytest.raises(TypeError, match="expected an in-memory ModelProto"):
        S.set_struct_values(b"", [])
