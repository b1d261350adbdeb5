"""check_model/validate: every rule with a minimal valid and invalid model, in all three model forms."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from support.models import base_model, linear_int4_128, model_with

import onnx_struct as S

NIBBLES = S.make_array(T.UINT8, 4)  # 4 bytes


def ref(index: int = 0):
    return S.make_type_reference(index)


def identity_decoder(inputs=("values",), outputs=("y",), name="dec"):
    nodes = [oh.make_node("Cast", [inputs[0]], [outputs[0]], to=T.FLOAT)]
    nodes += [oh.make_node("Identity", [outputs[0]], [o]) for o in outputs[1:]]  # a valid function
    return oh.make_function("test", name, list(inputs), list(outputs), nodes, [oh.make_opsetid("", 21)])


def value(name="weight", index=0, size=4, **kwargs):
    return S.make_struct_value(name, index, raw_data=bytes(size), **kwargs)


def with_subgraph_values():
    model = model_with([NIBBLES])
    branch = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Z"])], "b", [], [oh.make_tensor_value_info("Z", T.FLOAT, [1])]
    )
    model.graph.node.append(oh.make_node("If", ["C"], ["W"], then_branch=branch, else_branch=branch))
    model.graph.input.append(oh.make_tensor_value_info("C", T.BOOL, []))
    overlay = S.from_onnx(model)
    overlay.graph.node[1].attribute[0].g.struct_initializer.append(value())
    return S.to_onnx(overlay)


def consumer(declaration):
    model = base_model([oh.make_node("Relu", ["weight"], ["R"])])
    S.add_struct_types(model, declaration)
    S.add_struct_values(model, value())
    return model


def field(name, type_=T.UINT8):
    return S.make_field(name, type_)


DECODED = S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",)))  # NIBBLES that a node may consume


# (rule, valid model, invalid model, (path, message) of the invalid model's one diagnostic). Its
# text is "path: message" (just the message at the model root, path ""); a message ending in "..."
# is a prefix (the rest is onnx's own wording).
CASES = [
    (
        "payload length 63",
        lambda: model_with([linear_int4_128()], [value(size=64)]),
        lambda: model_with([linear_int4_128()], [value(size=63)]),
        ("graph.struct_initializer[0] ('weight')", "payload is 63 bytes; the type requires 64"),
    ),
    (
        "trailing bytes (65)",
        lambda: model_with([linear_int4_128()], [value(size=64)]),
        lambda: model_with([linear_int4_128()], [value(size=65)]),
        ("graph.struct_initializer[0] ('weight')", "payload is 65 bytes; the type requires 64"),
    ),
    (
        "value type index out of range",
        lambda: model_with([NIBBLES], [value(index=0)]),
        lambda: model_with([NIBBLES], [value(index=3)]),
        ("graph.struct_initializer[0] ('weight').type", "type index 3 is out of range (1 struct_types)"),
    ),
    (
        "nested reference out of range",
        lambda: model_with([NIBBLES, S.make_array(ref(0), 1)]),
        lambda: model_with([NIBBLES, S.make_array(ref(7), 1)]),
        (
            "struct_types[1].array.element_type.struct_type.type_index",
            "type index 7 is out of range (2 struct_types)",
        ),
    ),
    (
        "cyclic reference",
        lambda: model_with([S.make_array(ref(1), 1), NIBBLES]),
        lambda: model_with([S.make_array(ref(1), 1), S.make_array(ref(0), 1)]),
        ("struct_types[1].array.element_type.struct_type.type_index", "cyclic type reference to struct_types[0]"),
    ),
    (
        "field without type or constant",
        lambda: model_with([S.make_structure([field("a")])]),
        lambda: model_with([S.make_structure([S.StructTypeProto.Field(name="a")])]),
        (
            "struct_types[0].structure.field[0] ('a')",
            "field has neither type nor constant (exactly one is required)",
        ),
    ),
    (
        "duplicate field name",
        lambda: model_with([S.make_structure([field("a"), field("b")])]),
        lambda: model_with([S.make_structure([field("a"), field("a")])]),
        ("struct_types[0].structure.field[1] ('a')", "duplicate field name"),
    ),
    (
        "duplicate constant/field name",
        lambda: model_with([S.make_structure([field("a"), S.make_constant_field("k", np.int8(1))])]),
        lambda: model_with([S.make_structure([field("a"), S.make_constant_field("a", np.int8(1))])]),
        ("struct_types[0].structure.field[1] ('a')", "duplicate field name"),
    ),
    (
        "empty field name",
        lambda: model_with([S.make_structure([field("a")])]),
        lambda: model_with([S.make_structure([field("")])]),
        ("struct_types[0].structure.field[0]", "field has no name"),
    ),
    (
        "dotted field name",
        lambda: model_with([S.make_structure([field("a_b")])]),
        lambda: model_with([S.make_structure([field("a.b")])]),
        ("struct_types[0].structure.field[0] ('a.b')", "field name 'a.b' contains '.', the leaf path separator"),
    ),
    (
        "duplicate component name",
        lambda: model_with([S.make_bit_packing([("x", 4), ("y", 4)], 1)]),
        lambda: model_with([S.make_bit_packing([("x", 4), ("x", 4)], 1)]),
        ("struct_types[0].bit_packing.component[1] ('x')", "duplicate component name"),
    ),
    (
        "zero component width",
        lambda: model_with([S.make_bit_packing([("x", 8)], 1)]),
        lambda: model_with([S.make_bit_packing([("x", 0)], 1)]),
        ("struct_types[0].bit_packing.component[0] ('x')", "component width is zero"),
    ),
    (
        "component width over 64",
        lambda: model_with([S.make_bit_packing([("x", 64)], 1)]),
        lambda: model_with([S.make_bit_packing([("x", 65)], 1)]),
        ("struct_types[0].bit_packing.component[0] ('x')", "component width 65 exceeds 64 bits"),
    ),
    (
        "unsupported leaf type",
        lambda: model_with([S.make_array(T.UINT8, 2)]),
        lambda: model_with([S.make_array(T.STRING, 2)]),
        ("struct_types[0].array.element_type.tensor_type", "element type STRING is not a fixed-width physical leaf"),
    ),
    (
        "non-static shape",
        lambda: model_with([S.make_array(S.make_tensor_type(T.UINT8, [2]), 2)]),
        lambda: model_with([S.make_array(oh_dynamic(), 2)]),
        (
            "struct_types[0].array.element_type.tensor_type.shape.dim[0]",
            "dimension is not a concrete non-negative integer",
        ),
    ),
    (
        "root not byte aligned",
        lambda: model_with([S.make_bit_packing([("x", 4)], 2)], [value(size=1)]),
        lambda: model_with([S.make_bit_packing([("x", 3)], 1)], [value(size=1)]),
        ("graph.struct_initializer[0] ('weight')", "payload size 3 bits is not a whole number of bytes"),
    ),
    (
        "concrete root is a type_index",
        lambda: model_with([NIBBLES]),
        lambda: model_with([NIBBLES, S.StructTypeProto(type_index=0)]),
        ("struct_types[1]", "a concrete declaration may not be a type_index"),
    ),
    (
        "concrete root with unset kind",
        lambda: model_with([NIBBLES]),
        lambda: model_with([S.StructTypeProto(name="nothing")]),
        ("struct_types[0]", "a concrete declaration may not be an unset kind (the unconstrained category)"),
    ),
    (
        "inline value needs type -1",
        lambda: model_with([], [S.make_struct_value("weight", NIBBLES, bytes(4))]),
        lambda: model_with([], [inline_with_type(0)]),
        ("graph.struct_initializer[0] ('weight').type", "type must be -1 when struct_type is present, not 0"),
    ),
    (
        "type -1 needs struct_type",
        lambda: model_with([NIBBLES], [value()]),
        lambda: model_with([NIBBLES], [value(index=-1)]),
        ("graph.struct_initializer[0] ('weight').type", "type is -1 but struct_type is absent"),
    ),
    (
        "inline value is a concrete root",
        lambda: model_with([NIBBLES], [S.make_struct_value("weight", NIBBLES, bytes(4))]),
        lambda: model_with([NIBBLES], [S.make_struct_value("weight", S.StructTypeProto(type_index=0), bytes(4))]),
        ("graph.struct_initializer[0] ('weight').struct_type", "a concrete declaration may not be a type_index"),
    ),
    (
        "static form carries a name",
        lambda: model_with([NIBBLES], inputs=[S.make_struct_value_info("s", 0)]),
        lambda: model_with([NIBBLES], inputs=[named_reference()]),
        ("graph.input[1] ('s').type.struct_type", "a static struct type may not carry name"),
    ),
    (
        "static form carries a decoder",
        lambda: model_with([NIBBLES, S.make_array(ref(0), 1)]),
        lambda: model_with([NIBBLES, S.make_array(reference_with_decoder(), 1)]),
        ("struct_types[1].array.element_type.struct_type", "a static struct type may not carry decoder"),
    ),
    (
        "concrete declaration in a graph type",
        lambda: model_with([NIBBLES], inputs=[S.make_struct_value_info("s", 0)]),
        lambda: model_with([NIBBLES], inputs=[S.make_value_info("s", concrete_type())]),
        (
            "graph.input[1] ('s').type.struct_type",
            "a concrete declaration may only appear in ModelProto.struct_types or StructProto.struct_type; use type_index or the unconstrained category here",
        ),
    ),
    (
        "unconstrained category needs no size in graphs, but in arrays",
        lambda: model_with([NIBBLES], inputs=[S.make_struct_value_info("s", None)]),
        lambda: model_with([S.make_array(S.make_struct_type_proto(None), 1)]),
        (
            "struct_types[0].array.element_type.struct_type",
            "the unconstrained struct category has no static size and is not allowed here",
        ),
    ),
    (
        "graph reference to unaligned declaration",
        lambda: model_with([NIBBLES], inputs=[S.make_struct_value_info("s", 0)]),
        lambda: model_with([S.make_bit_packing([("x", 3)], 1)], inputs=[S.make_struct_value_info("s", 0)]),
        ("graph.input[1] ('s').type.struct_type", "referenced declaration is 3 bits, not a whole number of bytes"),
    ),
    (
        "sequence of struct references",
        lambda: model_with(
            [NIBBLES], inputs=[S.make_value_info("s", S.make_sequence_type_proto(S.make_struct_type_proto(0)))]
        ),
        lambda: model_with(
            [NIBBLES], inputs=[S.make_value_info("s", S.make_sequence_type_proto(S.make_struct_type_proto(4)))]
        ),
        (
            "graph.input[1] ('s').type.sequence_type.elem_type.struct_type.type_index",
            "type index 4 is out of range (1 struct_types)",
        ),
    ),
    (
        "duplicate struct value names",
        lambda: model_with([NIBBLES], [value("a"), value("b")]),
        lambda: model_with([NIBBLES], [value("a"), value("a")]),
        ("graph.struct_initializer[1] ('a')", "duplicate struct value name"),
    ),
    (
        "struct value without a name",
        lambda: model_with([NIBBLES], [value("a")]),
        lambda: model_with([NIBBLES], [value("")]),
        ("graph.struct_initializer[0]", "struct value has no name"),
    ),
    (
        "struct value clashes with a graph input",
        lambda: model_with([DECODED], [value("W")]),
        lambda: model_with([DECODED], [value("X")]),  # X is consumed: DECODED keeps that rule quiet
        ("graph.struct_initializer[0] ('X')", "struct value name clashes with an initializer or graph input"),
    ),
    (
        "struct value clashes with an initializer",
        lambda: model_with([NIBBLES], [value("W")]),
        lambda: clash_with_initializer(),
        ("graph.struct_initializer[0] ('W')", "struct value name clashes with an initializer or graph input"),
    ),
    (
        "struct values only in the main graph",
        lambda: model_with([NIBBLES], [value()]),
        with_subgraph_values,
        (
            "graph.node[1].attribute[0] ('else_branch').g.struct_initializer",
            "struct values are only allowed in the main graph",
        ),
    ),
    (
        "consumer needs a decoder",
        lambda: consumer(S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",)))),
        lambda: consumer(S.make_array(T.UINT8, 4)),
        (
            "graph.node[1].input[0]",
            "consumes struct value 'weight', whose type has no decoder to define its logical value",
        ),
    ),
    (
        "decoder has one output",
        lambda: model_with([S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",)))]),
        lambda: model_with([S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",), ("y", "z")))]),
        ("struct_types[0].decoder ('dec')", "a decoder has exactly one output, the logical value; it has 2"),
    ),
    (
        "decoder input binds to a leaf",
        lambda: model_with([linear_int4_128(identity_decoder(("values", "scale")))]),
        lambda: model_with([linear_int4_128(identity_decoder(("values", "scael")))]),
        (
            "struct_types[0].decoder ('dec')",
            "decoder input 'scael' binds to no leaf (leaves: 'values', 'scale', 'zero_point')",
        ),
    ),
    (
        "encoder output may not be a constant",
        lambda: model_with([with_encoder(("values",))]),
        lambda: model_with([with_encoder(("values", "scale"))]),
        (
            "struct_types[0].encoder ('enc')",
            "encoder output 'scale' names constant leaf 'scale', which takes no payload bits",
        ),
    ),
    (
        "decoder is a valid function",
        lambda: model_with([S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",)))]),
        lambda: model_with([S.make_array(T.UINT8, 4, decoder=broken_function())]),
        ("struct_types[0].decoder ('dec')", "invalid function: ..."),
    ),
    (
        "constant must be inline",
        lambda: model_with([S.make_structure([S.make_constant_field("k", np.int8(1))])]),
        lambda: model_with([S.make_structure([S.make_constant_field("k", external_tensor())])]),
        (
            "struct_types[0].structure.field[0] ('k').constant",
            "constants are stored in the type; external data is not allowed",
        ),
    ),
    (
        "stock errors pass through",
        lambda: base_model(),
        lambda: base_model([oh.make_node("NoSuchOp", ["X"], ["Q"])]),
        ("", "onnx.checker: No Op registered for NoSuchOp..."),
    ),
]


def oh_dynamic():
    tensor = S.make_tensor_type(T.UINT8, [2])
    tensor.tensor_type.shape.dim[0].dim_param = "N"
    return tensor


def inline_with_type(type_index):
    v = S.make_struct_value("weight", NIBBLES, bytes(4))
    v.type = type_index
    return v


def named_reference():
    info = S.make_struct_value_info("s", 0)
    info.type.struct_type.name = "oops"
    return info


def reference_with_decoder():
    reference = ref(0)
    reference.struct_type.decoder.CopyFrom(identity_decoder(("v",)))
    return reference


def concrete_type():
    type_proto = S.make_struct_type_proto()
    type_proto.struct_type.CopyFrom(NIBBLES)
    return type_proto


def clash_with_initializer():
    model = model_with([NIBBLES], [value("W")])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), "W"))
    return model


def with_encoder(outputs):
    encoder = oh.make_function(
        "test",
        "enc",
        ["x"],
        list(outputs),
        [oh.make_node("Identity", ["x"], [o]) for o in outputs],
        [oh.make_opsetid("", 21)],
    )
    return linear_int4_128().__class__.FromString(
        S.make_structure(list(linear_int4_128().structure.field), encoder=encoder).SerializeToString()
    )


def broken_function():
    return oh.make_function(
        "test", "dec", ["v"], ["y"], [oh.make_node("Cast", ["v"], ["y"])], [oh.make_opsetid("", 21)]
    )


def external_tensor():
    tensor = onnx.numpy_helper.from_array(np.zeros(2, np.float32), "k")
    onnx.external_data_helper.set_external_data(tensor, "k.bin")
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    return tensor


@pytest.mark.parametrize(("rule", "valid", "invalid", "expected"), CASES, ids=[c[0] for c in CASES])
def test_rule(rule, valid, invalid, expected, as_form):
    assert S.validate(as_form(valid())) == []
    diagnostics = S.validate(as_form(invalid()))
    assert len(diagnostics) == 1, [str(d) for d in diagnostics]  # this rule, and only it
    (diagnostic,) = diagnostics
    path, message = expected
    assert diagnostic.path == path
    text = f"{path}: {message}" if path else message
    if text.endswith("..."):
        assert str(diagnostic).startswith(text[:-3]), str(diagnostic)
    else:
        assert str(diagnostic) == text
    with pytest.raises(S.ValidationError) as raised:
        S.check_model(as_form(invalid()))
    assert isinstance(raised.value, onnx.checker.ValidationError)
    assert str(raised.value) == str(diagnostic) and raised.value.path == path


def test_validate_reports_every_problem_at_once():
    model = model_with(
        [S.make_structure([field("a"), field("a")]), S.make_bit_packing([("x", 0)], 1)],
        [value("w", 0, size=3), value("w", 1, size=0)],
    )
    messages = [str(d) for d in S.validate(model)]
    assert any("duplicate field name" in m for m in messages)
    assert any("component width is zero" in m for m in messages)
    assert any("duplicate struct value name" in m for m in messages)
    assert len(messages) >= 3


def test_diagnostics_carry_structured_attributes():
    (error,) = S.validate(model_with([linear_int4_128()], [value(size=63)]))
    assert (error.path, error.details["expected"], error.details["actual"]) == (
        "graph.struct_initializer[0] ('weight')",
        64,
        63,
    )
    assert error.to_dict()["message"] == str(error)
    import pickle

    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_full_check_runs_stock_full_check():
    model = base_model(
        [oh.make_node("Add", ["X", "X"], ["Y2"])],
        outputs=[oh.make_tensor_value_info("Y", T.FLOAT, [1]), oh.make_tensor_value_info("Y2", T.INT64, [1])],
    )
    assert S.validate(model) == []
    assert any("onnx" in str(d) for d in S.validate(model, full_check=True))


def test_stock_view_keeps_a_struct_value_name_that_is_not_utf8():
    # The checker reports the name, but stock_view also serves infer_shapes and lower, which do
    # not check first: the name's bytes go into the graph input as they are.
    from onnx_struct.check.checker import stock_view
    from onnx_struct.schema.model import load

    model = model_with([NIBBLES], [value(name="Q")])
    data = model.SerializeToString().replace(b"*\x01Q", b"*\x01\xff")
    view = stock_view(load(data))
    assert view.graph.input[-1].SerializeToString().startswith(b"\n\x01\xff")
    assert view.graph.input[-1].type.opaque_type.name == "struct_types.0"


def decoded_values_model(*, clash: bool = False, ir_version: int = 10):
    """A node consumes struct value 'weight' (decoded); with ``clash`` a node also outputs 'weight'."""
    nodes = [oh.make_node("Relu", ["weight"], ["R"])]
    if clash:
        nodes.append(oh.make_node("Identity", ["X"], ["weight"]))
    model = consumer(S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",))))
    del model.graph.node[:]
    model.graph.node.extend([oh.make_node("Identity", ["X"], ["Y"]), *nodes])
    model.ir_version = ir_version
    if ir_version < 3:  # opset_import is not allowed before IR 3
        del model.opset_import[:]
    return model


# Every way the stock checker may be handed the model: struct values defined by one node of a
# private domain (the default), or as Opaque graph inputs where that node would be a finding
# (an unregistered operator under check_custom_domain; its opset_import before IR 3).
VIEW_PATHS = {
    "values node": ({}, {}),
    "check_custom_domain": ({"check_custom_domain": True}, {}),
    "IR version 2": ({}, {"ir_version": 2}),
    "struct-typed graph input": ({}, {}),
}


def test_check_model_raises_what_validate_lists_first_when_there_are_several(as_form):
    # check_model stops at its first diagnostic (docs/security.md); validate runs every rule.
    model = base_model()
    duplicate = S.make_structure([field("a"), field("a")])
    S.add_struct_types(model, duplicate, S.make_structure([field("b"), field("")]), duplicate)
    diagnostics = S.validate(as_form(model))
    assert [d.path for d in diagnostics] == [
        "struct_types[0].structure.field[1] ('a')",
        "struct_types[1].structure.field[1]",
        "struct_types[2].structure.field[1] ('a')",
    ]
    with pytest.raises(S.ValidationError) as raised:
        S.check_model(as_form(model))
    assert str(raised.value) == str(diagnostics[0]) and raised.value.code == diagnostics[0].code


@pytest.mark.parametrize("path", VIEW_PATHS)
def test_stock_checker_sees_struct_values_as_defined_names(path, as_form):
    options, build = VIEW_PATHS[path]

    def make(clash):
        model = decoded_values_model(clash=clash, **build)
        if path == "struct-typed graph input":  # the view is then parsed and rewritten in Python
            S.add_value_infos(model, inputs=[S.make_struct_value_info("s", 0)])
        return model

    assert S.validate(as_form(make(clash=False)), **options) == []
    diagnostics = [str(d) for d in S.validate(as_form(make(clash=True)), **options)]
    assert len(diagnostics) == 1 and "single static assignment" in diagnostics[0], diagnostics
    assert "onnx_struct.values" not in diagnostics[0]


def test_checker_view_is_the_model_plus_one_node(as_form):
    from onnx_struct.schema.model import load
    from onnx_struct.schema.projections import VALUES_DOMAIN, checker_view

    model = decoded_values_model()
    S.add_struct_values(model, value("second"))
    view = onnx.ModelProto.FromString(checker_view(load(as_form(model)), [], False, False))
    first = view.graph.node[0]
    assert (first.domain, list(first.output)) == (VALUES_DOMAIN, ["weight", "second"])
    assert [n.op_type for n in view.graph.node[1:]] == [n.op_type for n in model.graph.node]
    assert (VALUES_DOMAIN, 1) in [(o.domain, o.version) for o in view.opset_import]
    assert len(view.graph.input) == len(model.graph.input)


def test_inline_payloads_never_push_the_view_over_protobufs_limit(monkeypatch):
    # The values-node view carries the model's inline payloads (as unknown fields); near the 2 GiB
    # limit the checker falls back to the view without them. Scaled down: a 100 kB payload, 50 kB limit.
    model = model_with([S.make_array(T.UINT8, 100_000)], [value(size=100_000)])
    monkeypatch.setattr(onnx.checker, "MAXIMUM_PROTOBUF", 50_000)
    assert S.validate(model) == []


def _value_bytes(**fields) -> bytes:
    """A serialized StructProto written field by field (type = 1, struct_type = 2, raw_data = 3,
    external_data = 4, name = 5, doc_string = 6; unknown fields as given)."""
    from onnx_struct.schema.model import length_delimited

    out = b""
    if "type" in fields:
        out += bytes([0x08, fields["type"]])
    for number, key in ((2, "struct_type"), (3, "raw_data"), (4, "external_data"), (5, "name"), (6, "doc_string")):
        if key in fields:
            out += length_delimited(number, fields[key])
    return out + fields.get("unknown", b"")


# Values whose type, raw_data and name alone look valid: the checker's per-value fast path must
# still see every other field (it proves their absence from the serialized size).
TRICKY_VALUES = [
    ("plain", {"type": 0, "raw_data": bytes(4)}, None),
    ("type 0 absent, nothing else", {"raw_data": bytes(4)}, None),
    ("doc_string", {"type": 0, "raw_data": bytes(4), "doc_string": b"d"}, None),
    ("unknown field", {"type": 0, "raw_data": bytes(4), "unknown": bytes([0x38, 1])}, None),  # field 7 varint
    ("empty struct_type, type 0 absent", {"raw_data": bytes(4), "struct_type": b""}, "type is -1 but|must be -1"),
    ("empty external_data entry", {"type": 0, "raw_data": bytes(4), "external_data": b""}, "external"),
    ("external_data with type absent", {"raw_data": bytes(4), "external_data": b""}, "external"),
]


@pytest.mark.parametrize(("case", "fields", "error"), TRICKY_VALUES, ids=[c[0] for c in TRICKY_VALUES])
def test_every_field_of_a_struct_value_is_seen(case, fields, error):
    model = model_with([NIBBLES])
    value = S.StructProto.FromString(_value_bytes(name=b"weight", **fields))
    S.add_struct_values(model, value)
    messages = [str(d) for d in S.validate(model)]
    if error is None:
        assert messages == []
    else:
        assert messages and __import__("re").search(error, messages[0]), messages


@pytest.mark.parametrize("consumed", ["weight", "nosuch"])
def test_subgraphs_see_struct_values_of_the_main_graph(consumed, as_form):
    # The checker's view defines the values by a node of the main graph: outer-scope names for
    # every subgraph, as initializers are; an undefined name inside a branch is still onnx's finding.
    model = consumer(S.make_array(T.UINT8, 4, decoder=identity_decoder(("v",))))
    del model.graph.node[1:]
    branch = oh.make_graph(
        [oh.make_node("Relu", [consumed], ["Z"])], "b", [], [oh.make_tensor_value_info("Z", T.FLOAT, [4])]
    )
    model.graph.node.append(oh.make_node("If", ["C"], ["W"], then_branch=branch, else_branch=branch))
    model.graph.input.append(oh.make_tensor_value_info("C", T.BOOL, []))
    messages = [str(d) for d in S.validate(as_form(model))]
    if consumed == "weight":
        assert messages == []
    else:
        assert len(messages) == 1 and "'nosuch'" in messages[0], messages


def _local(name: str, calls: str | None) -> onnx.FunctionProto:
    from onnx import helper as oh

    node = oh.make_node(calls, ["x"], ["y"], domain="local") if calls else oh.make_node("Identity", ["x"], ["y"])
    return oh.make_function("local", name, ["x"], ["y"], [node], [oh.make_opsetid("", 21), oh.make_opsetid("local", 1)])


def _model_with_local_functions(functions, ir_version: int = 3) -> onnx.ModelProto:
    from support.models import linear_model

    model = linear_model(bytes(64))
    model.functions.extend(_local(name, calls) for name, calls in functions)
    model.opset_import.append(onnx.helper.make_opsetid("local", 1))
    model.ir_version = ir_version
    return model


CYCLE = "model-local functions must not be recursive: "


@pytest.mark.parametrize(
    "functions, message, onnx_says",
    [
        ([("F", None), ("R", "R")], f"functions[1] ('R'): {CYCLE}local::R -> local::R", "Cycle detected"),
        (
            [("A", "B"), ("B", "C"), ("C", "A")],
            f"functions[0] ('A'): {CYCLE}local::A -> local::B -> local::C -> local::A",
            "Cycle detected",
        ),
        # found by the long fuzz run on lower, 2026-12-01
        (
            [("F", None), ("F", None)],
            "functions[1] ('F'): another model-local function has the same id local:F",
            "multiple local functions with the same implementation id",
        ),
    ],
)
def test_model_local_function_rules_below_ir_8(functions, message, onnx_says):
    """onnx's checker ignores model-local functions below IR 8 (found by the fuzzer: an unused
    self-recursive function, or two with one id, passed, and lower() then raised the IR version
    and wrote a model onnx refuses)."""
    model = _model_with_local_functions(functions)
    (diagnostic,) = S.validate(model)
    assert str(diagnostic) == message
    assert diagnostic.code == "invalid_function"
    with pytest.raises(S.ValidationError) as raised:
        S.lower(model)
    assert str(raised.value) == message
    model.ir_version = 10  # onnx's own finding, reported once
    (diagnostic,) = S.validate(model)
    assert onnx_says in str(diagnostic)


def test_a_local_function_calling_a_domain_it_does_not_import_below_ir_8():
    """Found by the long fuzz run on lower: onnx's other rules for model-local functions (here the
    opsets their nodes use) apply from IR 8 on too; below it, check_model asks onnx's checker about
    the functions alone."""
    from onnx import helper as oh

    model = _model_with_local_functions([("F", None)])
    model.functions.append(
        oh.make_function("local", "R", ["x"], ["y"], [oh.make_node("R", ["x"], ["y"], domain="nowhere")], [])
    )
    (diagnostic,) = S.validate(model)
    assert diagnostic.path == "functions" and diagnostic.code == "invalid_function"
    assert "No Opset registered for domain nowhere" in diagnostic.reason
    with pytest.raises(S.ValidationError, match="No Opset registered"):
        S.lower(model)
    model.ir_version = 10  # onnx's own finding
    (diagnostic,) = S.validate(model)
    assert "No Opset registered for domain nowhere" in str(diagnostic)


def test_an_acyclic_call_chain_of_local_functions_below_ir_8_passes():
    assert S.validate(_model_with_local_functions([("A", "B"), ("B", None)])) == []
