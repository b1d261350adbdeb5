"""Conformance holes: bytes the proposal or docs/semantics.md forbid must not pass check_model.

The wire-level cases cannot be produced by protobuf (it keeps one oneof member, and drops a field
of the wrong wire type into the unknown fields), so their bytes are written by hand here.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from support.models import base_model, linear_decoder, linear_int4_128, model_with
from support.protowire import field as message_field
from support.protowire import tag, varint

import onnx_struct as S
from adversarial.bounded import run_bounded

CHECK = "S.check_model(ARG)"
FULL_CHECK = "S.check_model(ARG, full_check=True)"


def save(tmp_path, data: bytes) -> str:
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return str(path)


def refused(tmp_path, data: bytes, path_prefix: str, contains: str = "", code: str = CHECK) -> None:
    out = run_bounded(code, save(tmp_path, data), cpu_seconds=10, memory_mib=200)
    out.assert_validation_error(path_prefix, contains=contains)


def int8_type() -> bytes:
    return S.make_tensor_type(TensorProto.INT8, []).SerializeToString()


def constant_bytes() -> bytes:
    return onnx.numpy_helper.from_array(np.int8(3), "c").SerializeToString()


def model_with_field(field_bytes: bytes) -> bytes:
    """A stock model + struct_types[0] = Structure(field = <field_bytes>), by hand."""
    structure = message_field(1, field_bytes)  # Structure.field = 1
    declaration = message_field(2, structure)  # StructTypeProto.structure = 2
    return base_model().SerializeToString() + message_field(27, declaration)  # ModelProto.struct_types = 27


# ---------------------------------------------------------------------- (a) two oneof members
def test_the_hand_made_bytes_parse_as_protobuf_says():
    # Independent fact: protobuf keeps the last member, so the order decides what the field means.
    name = message_field(1, b"x")
    type_then_constant = S.StructTypeProto.Field.FromString(
        name + message_field(2, int8_type()) + message_field(4, constant_bytes())
    )
    constant_then_type = S.StructTypeProto.Field.FromString(
        name + message_field(4, constant_bytes()) + message_field(2, int8_type())
    )
    assert type_then_constant.WhichOneof("content") == "constant"
    assert constant_then_type.WhichOneof("content") == "type"


@pytest.mark.slow
@pytest.mark.parametrize("order", ["type_then_constant", "constant_then_type"])
def test_field_with_type_and_constant_is_refused(tmp_path, order):
    members = [message_field(2, int8_type()), message_field(4, constant_bytes())]
    if order == "constant_then_type":
        members.reverse()
    data = model_with_field(message_field(1, b"x") + b"".join(members))
    refused(tmp_path, data, "struct_types[0].structure.field[0] ('x')", contains="oneof")


@pytest.mark.slow
def test_declaration_kind_with_two_members_is_refused(tmp_path):
    # type_index 0, then a structure: protobuf keeps the structure, a valid declaration.
    field = message_field(1, b"x") + message_field(2, int8_type())
    declaration = tag(5, 0) + varint(0) + message_field(2, message_field(1, field))
    data = base_model().SerializeToString() + message_field(27, declaration)
    refused(tmp_path, data, "struct_types[0]", contains="kind")


@pytest.mark.slow
def test_type_proto_with_tensor_and_struct_type_is_refused(tmp_path):
    # value_info 'Y': struct_type {type_index 0}, then tensor_type float[1] -- protobuf keeps the tensor.
    model = model_with([linear_int4_128()])
    tensor = oh.make_tensor_type_proto(TensorProto.FLOAT, [1]).SerializeToString()
    type_proto = message_field(10, tag(5, 0) + varint(0)) + tensor
    info = message_field(1, b"Y") + message_field(2, type_proto)
    data = model.SerializeToString() + message_field(7, message_field(13, info))  # graph.value_info
    refused(tmp_path, data, "graph.value_info[0] ('Y').type", contains="oneof")


@pytest.mark.slow
def test_oneof_members_split_over_two_occurrences_of_one_message_are_refused(tmp_path):
    # ValueInfoProto.type given twice: protobuf merges the two TypeProtos into one, which keeps the
    # last member only; the two members are still two members of one message.
    model = model_with([linear_int4_128()])
    tensor = oh.make_tensor_type_proto(TensorProto.FLOAT, [1]).SerializeToString()
    info = (
        message_field(1, b"Y") + message_field(2, message_field(10, tag(5, 0) + varint(0))) + message_field(2, tensor)
    )
    data = model.SerializeToString() + message_field(7, message_field(13, info))
    refused(tmp_path, data, "graph.value_info[0] ('Y').type", contains="oneof")


@pytest.mark.slow
def test_an_attribute_whose_tag_has_a_longer_varint_form_is_still_scanned(tmp_path):
    # protobuf reads the tag 0xaa 0x00 as 0x2a (NodeProto.attribute): the node must not be skipped
    # as one without attributes, or the TypeProto with two members in its attribute goes unseen.
    model = model_with([linear_int4_128()])
    tensor = oh.make_tensor_type_proto(TensorProto.FLOAT, [1]).SerializeToString()
    type_proto = tensor + message_field(10, tag(5, 0) + varint(0))
    attribute = (
        message_field(1, b"t") + tag(20, 0) + varint(onnx.AttributeProto.TYPE_PROTO) + message_field(14, type_proto)
    )
    node = message_field(4, b"Foo") + bytes([0xAA, 0x00]) + varint(len(attribute)) + attribute
    data = model.SerializeToString() + message_field(7, message_field(1, node))
    assert len(onnx.ModelProto.FromString(data).graph.node[-1].attribute) == 1
    index = len(model.graph.node)
    refused(tmp_path, data, f"graph.node[{index}].attribute[0] ('t').tp", contains="oneof")


@pytest.mark.slow
def test_a_repeated_member_is_not_a_second_member(tmp_path):
    # The same oneof member twice is not ambiguous in the sense of this rule (protobuf merges a
    # message member, as for any singular field): the model stays valid.
    type_bytes = message_field(2, int8_type())
    data = model_with_field(message_field(1, b"x") + type_bytes + type_bytes)
    out = run_bounded(CHECK, save(tmp_path, data), cpu_seconds=10, memory_mib=200)
    assert out.error is None, out.message


# ---------------------------------------------------------------------- (b) wrong wire types
def test_wire_type_facts():
    # Independent fact: protobuf drops a known field of the wrong wire type into unknown fields.
    data = base_model().SerializeToString() + tag(27, 0) + varint(5)
    assert len(S.get_struct_types(data)) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "suffix, path",
    [
        (tag(27, 0) + varint(5), "struct_types"),
        (tag(27, 5) + bytes(4), "struct_types"),
        (message_field(7, tag(17, 0) + varint(1)), "graph.struct_initializer"),
        (
            message_field(7, message_field(11, message_field(1, b"Z") + message_field(2, tag(10, 0) + varint(0)))),
            "graph.input[1] ('Z').type.struct_type",
        ),
    ],
    ids=["model_27_varint", "model_27_fixed32", "graph_17_varint", "type_10_varint"],
)
def test_integration_field_with_wrong_wire_type_is_refused(tmp_path, suffix, path):
    data = base_model().SerializeToString() + suffix
    if path.endswith(".type.struct_type"):
        # In a type, a proposal field of the wrong wire type is no struct part (schema/plain.py):
        # the model is plain and stock onnx's checker refuses the type it leaves without a value.
        refused(tmp_path, data, "", contains="Unrecognized type value case")
        return
    refused(tmp_path, data, path, contains="wire type")


@pytest.mark.slow
def test_wrong_wire_type_inside_a_declaration_is_refused(tmp_path):
    # Array.dimension (uint64) sent length-delimited would be dropped: an array of 0 elements.
    array = message_field(1, int8_type()) + message_field(2, b"\x10")
    data = base_model().SerializeToString() + message_field(27, message_field(1, array))
    refused(tmp_path, data, "struct_types[0].array.dimension", contains="wire type")


def test_check_model_stops_at_a_wire_problem_with_the_error_validate_reports_first():
    # 5,000 valid declarations, then one whose field carries two oneof members: check_model
    # raises the wire problem without the declaration rules (docs/security.md), and it is the
    # very diagnostic validate lists first after running every rule.
    array = message_field(27, message_field(1, message_field(1, int8_type()) + b"\x10\x01"))  # Array(INT8, 1)
    bad = message_field(1, b"x") + message_field(2, int8_type()) + message_field(4, constant_bytes())
    data = (
        base_model().SerializeToString() + array * 5000 + model_with_field(bad)[len(base_model().SerializeToString()) :]
    )
    diagnostics = S.validate(data)
    assert len(diagnostics) >= 1 and "oneof" in str(diagnostics[0])
    assert str(diagnostics[0]).startswith("struct_types[5000].structure.field[0] ('x')")
    with pytest.raises(S.ValidationError) as raised:
        S.check_model(data)
    assert str(raised.value) == str(diagnostics[0]) and raised.value.code == diagnostics[0].code


@pytest.mark.slow
def test_wire_scan_of_a_stock_model_object(tmp_path):
    # The same evidence survives in an onnx.ModelProto (unknown fields are re-serialized in order).
    data = model_with_field(message_field(1, b"x") + message_field(2, int8_type()) + message_field(4, constant_bytes()))
    out = run_bounded("S.check_model(onnx.load(ARG))", save(tmp_path, data), cpu_seconds=10, memory_mib=200)
    out.assert_validation_error("struct_types[0].structure.field[0] ('x')", contains="oneof")


@pytest.mark.slow
def test_wire_scan_is_iterative_on_deep_nesting(tmp_path):
    # 45 nested sequence types (90 message levels, under upb's parse depth limit of 100): no
    # recursion in the scan, and the second oneof member at the bottom is still found.
    inner = (
        message_field(10, tag(5, 0) + varint(0)) + oh.make_tensor_type_proto(TensorProto.FLOAT, [1]).SerializeToString()
    )
    for _ in range(45):
        inner = message_field(4, message_field(1, inner))  # TypeProto.sequence_type.elem_type
    info = message_field(1, b"Y") + message_field(2, inner)
    data = model_with([linear_int4_128()]).SerializeToString() + message_field(7, message_field(13, info))
    refused(tmp_path, data, "graph.value_info[0] ('Y').type.sequence_type.elem_type", contains="oneof")


# ---------------------------------------------------------------------- exact struct references
def two_declarations():
    first = linear_int4_128()
    second = S.make_array(TensorProto.UINT8, 64, name="BYTES")
    return first, second


@pytest.mark.slow
def test_value_flowing_to_an_output_of_another_type_is_refused(tmp_path):
    model = model_with(
        two_declarations(),
        [S.make_struct_value("w", 0, raw_data=bytes(64))],
        outputs=[S.make_struct_value_info("w", 1)],
    )
    data = model.SerializeToString()
    refused(tmp_path, data, "graph.output[1] ('w')", contains="struct_types[0]")
    refused(tmp_path, data, "graph.output[1] ('w')", contains="struct_types[0]", code=FULL_CHECK)


@pytest.mark.slow
def test_value_info_of_another_type_is_refused(tmp_path):
    model = model_with(
        two_declarations(),
        [S.make_struct_value("w", 0, raw_data=bytes(64))],
        value_info=[S.make_struct_value_info("w", 1)],
    )
    refused(tmp_path, model.SerializeToString(), "graph.value_info[0] ('w')", contains="struct_types[1]")


@pytest.mark.slow
def test_struct_input_flowing_to_an_output_of_another_type_is_refused(tmp_path):
    model = model_with(
        two_declarations(), inputs=[S.make_struct_value_info("x", 0)], outputs=[S.make_struct_value_info("x", 1)]
    )
    refused(tmp_path, model.SerializeToString(), "graph.output[1] ('x')", contains="struct_types[0]")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "declared", "says"),
    [
        ("output", ([TensorProto.INT64], [128]), "declared tensor(INT64)[128], but 'w' decodes to tensor(FLOAT)[128]"),
        ("output", ([TensorProto.FLOAT], [64]), "declared tensor(FLOAT)[64], but 'w' decodes to tensor(FLOAT)[128]"),
        ("value_info", ([TensorProto.FLOAT], [2, 64]), "decodes to tensor(FLOAT)[128]"),
        ("output", ([None], [128]), "declared a sequence, but 'w' decodes to tensor(FLOAT)[128]"),
    ],
)
def test_a_logical_type_declared_otherwise_is_refused_by_the_full_check(tmp_path, field, declared, says):
    """Found by a red-team pass: the full check's logical view retypes such an output to the
    logical type, so onnx never saw the conflict; the lowered model keeps the declared type and
    onnx's full check and onnxruntime refuse it. The plain check, like onnx's, checks no types."""
    (elem,), dims = declared
    model = model_with([linear_int4_128(decoder=linear_decoder())], [S.make_struct_value("w", 0, raw_data=bytes(64))])
    if elem is None:  # a sequence of the right tensors is still not the value (found by a red-team pass)
        sequence = oh.make_sequence_type_proto(oh.make_tensor_type_proto(TensorProto.FLOAT, dims))
        getattr(model.graph, field).append(oh.make_value_info("w", sequence))
    else:
        getattr(model.graph, field).append(oh.make_tensor_value_info("w", elem, dims))
    data = model.SerializeToString()
    refused(tmp_path, data, f"graph.{field}[{1 if field == 'output' else 0}] ('w')", contains=says, code=FULL_CHECK)
    S.check_model(model)
    matching = model_with(
        [linear_int4_128(decoder=linear_decoder())], [S.make_struct_value("w", 0, raw_data=bytes(64))]
    )
    getattr(matching.graph, field).append(oh.make_tensor_value_info("w", TensorProto.FLOAT, [128]))
    S.check_model(matching, full_check=True)
    onnx.checker.check_model(S.lower(matching), full_check=True)


def test_matching_and_unconstrained_references_are_accepted():
    model = model_with(
        two_declarations(),
        [
            S.make_struct_value("w", 0, raw_data=bytes(64)),
            S.make_struct_value("v", linear_int4_128(), raw_data=bytes(64)),
        ],
        outputs=[S.make_struct_value_info("w", 0), S.make_struct_value_info("v", 0)],
        value_info=[S.make_struct_value_info("w")],
    )
    S.check_model(model)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["inputs", "outputs"])
@pytest.mark.parametrize("code", [CHECK, "S.lower(ARG)", "S.InferenceSession(ARG)"])
def test_struct_signature_with_a_non_utf8_name_is_refused(tmp_path, where, code):
    """Found by the long fuzz run (lower): ``lower`` names a struct input's leaves and decoder call
    after it, and a non-UTF-8 name escaped as UnicodeDecodeError; onnx's C++ checker and proto2's
    parse let such names through."""
    marker = "zzsignature"
    model = model_with([linear_int4_128()], **{where: [S.make_struct_value_info(marker, 0)]})
    data = model.SerializeToString()
    assert data.count(marker.encode()) == 1
    data = data.replace(marker.encode(), b"z\xa2signature")  # the same length
    index = len(model.graph.input if where == "inputs" else model.graph.output) - 1
    refused(tmp_path, data, f"graph.{where[:-1]}[{index}] (b'z\\xa2signature').name", "not valid UTF-8", code=code)


def _struct_model_with(graph, opsets, functions=()) -> bytes:
    model = oh.make_model(graph, opset_imports=opsets, ir_version=10, functions=list(functions))
    decoder = oh.make_function(
        "d", "dec", ["values"], ["y"], [oh.make_node("Cast", ["values"], ["y"], to=TensorProto.FLOAT)], opsets[:1]
    )
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=decoder))
    S.add_struct_values(model, S.make_struct_value("W", index, raw_data=bytes([1, 2, 3, 4])))
    return model.SerializeToString()


@pytest.mark.slow
@pytest.mark.parametrize("place", ["opset_import", "function"])
@pytest.mark.parametrize("code", [CHECK, "S.lower(ARG)", "S.InferenceSession(ARG)"])
def test_a_non_utf8_domain_is_refused(tmp_path, place, code):
    """Found by a red-team pass: ``lower`` merges opset imports by domain and raised
    UnicodeDecodeError on one that is not UTF-8 (onnx's checker accepts it)."""
    opsets = [oh.make_opsetid("", 21)]
    nodes = [oh.make_node("Add", ["X", "W"], ["Y"])]
    functions = []
    if place == "opset_import":  # an unused import
        opsets.append(oh.make_opsetid("zzq", 1))
    else:  # an unused model-local function
        functions = [oh.make_function("zzq", "f", ["a"], ["b"], [oh.make_node("Relu", ["a"], ["b"])], opsets)]
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
    )  # fmt: skip
    data = _struct_model_with(graph, opsets, functions).replace(b"zzq", b"z\xffq")
    refused(tmp_path, data, {"opset_import": "opset_import[1].domain", "function": "functions[0].domain"}[place],
            "not valid UTF-8", code=code)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["input", "output"])
def test_a_session_refuses_a_signature_name_onnxruntime_cannot_serve(tmp_path, kind):
    """Found by a red-team pass: onnxruntime creates the session, then its Python API fails on every
    run reading the names (UnicodeDecodeError); the session refuses the model when created."""
    graph = oh.make_graph(
        [oh.make_node("Add", ["Xq", "W"], ["Yq"])], "g", [oh.make_tensor_value_info("Xq", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("Yq", TensorProto.FLOAT, [4])],
    )  # fmt: skip
    old = {"input": b"Xq", "output": b"Yq"}[kind]
    data = _struct_model_with(graph, [oh.make_opsetid("", 21)]).replace(old, old[:1] + b"\xff")
    # The check refuses it first now, at the name's first use (tests/adversarial/test_strings.py).
    first = {"input": "graph.node[0].input[0]", "output": "graph.node[0].output[0]"}[kind]
    refused(tmp_path, data, first, "not valid UTF-8", code="S.InferenceSession(ARG)")


# ---------------------------------------------------------------------- consumers of struct inputs
@pytest.mark.slow
def test_node_consuming_a_struct_input_without_decoder_is_refused(tmp_path):
    model = model_with([linear_int4_128()], inputs=[S.make_struct_value_info("x", 0)])
    model.graph.node.append(oh.make_node("Identity", ["x"], ["x_copy"]))
    refused(tmp_path, model.SerializeToString(), "graph.node[1].input[0]", contains="no decoder")


@pytest.mark.slow
@pytest.mark.parametrize("source", ["value", "input", "value in a subgraph"])
def test_an_output_asking_for_the_logical_value_of_a_struct_without_decoder_is_refused(tmp_path, source):
    """Found by the long fuzz run on lower: a tensor-typed graph output naming a struct value of a
    declaration without decoder passed the check; lower dropped the value and wrote an output no
    node makes. The output asks for the logical value, as a consuming node does."""
    raw = S.make_array(TensorProto.UINT8, 4, name="raw")  # no decoder
    output = oh.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    if source == "input":
        model = model_with([raw], inputs=[S.make_struct_value_info("w", 0)])
    else:
        model = model_with([raw], values=[S.make_struct_value("w", 0, raw_data=bytes(4))])
    if source == "value in a subgraph":
        branch = oh.make_graph([], "branch", [], [output])
        cond = oh.make_tensor_value_info("c", TensorProto.BOOL, [])
        model.graph.input.append(cond)
        model.graph.node.append(oh.make_node("If", ["c"], ["w_out"], then_branch=branch, else_branch=branch))
        model.graph.output.append(oh.make_tensor_value_info("w_out", TensorProto.FLOAT, [4]))
        where = "graph.node[1].attribute[0] ('else_branch').g.output[0] ('w')"
    else:
        model.graph.output.append(output)
        where = "graph.output[1] ('w')"
    refused(tmp_path, model.SerializeToString(), where, contains="has no decoder to define its logical value")
    # A struct-typed output names the value itself: valid (lowering it is what is impossible).
    model.graph.output.pop()
    if source != "value in a subgraph":
        S.add_value_infos(model, outputs=[S.make_struct_value_info("w", 0)])
        S.check_model(model)
        with pytest.raises(S.ValidationError, match="(has no|without a) decoder"):
            S.lower(model)


# ---------------------------------------------------------------------- opaque stand-ins
def test_a_stock_opaque_input_is_not_a_struct_input():
    model = base_model()
    model.graph.input.append(
        oh.make_value_info(
            "o", onnx.TypeProto(opaque_type=onnx.TypeProto.Opaque(domain="onnx_struct", name="struct_types.0"))
        )
    )
    S.add_struct_types(model, linear_int4_128())
    lowered = S.lower(model)
    assert [i.name for i in lowered.graph.input] == ["X", "o"]
    assert lowered.graph.input[1].type.opaque_type.name == "struct_types.0"


@pytest.mark.parametrize(
    "name",
    ["struct_types.²", "struct_types.+1", "struct_types. 1", "struct_types.01", "struct_types.0x1", "struct_types.１"],
)
def test_exact_index_accepts_only_ascii_decimal(name):
    from onnx_struct.schema.opaque import exact_index

    type_proto = onnx.TypeProto(opaque_type=onnx.TypeProto.Opaque(domain="onnx_struct", name=name))
    assert exact_index(type_proto) is None
    type_proto.opaque_type.name = "struct_types.12"
    assert exact_index(type_proto) == 12


# ---------------------------------------------------------------------- the wire scan's cost
def short_runs_model(kind: str, runs: int) -> bytes:
    """Windows grown to 1 MiB by a long run of large records, then ``runs`` runs of 64 small
    records, each ended by a graph field (and holding a false record start that makes the chain
    take pointer doubling), then 1 MiB of more such bytes (a graph doc_string) under every window;
    the last struct value has its payload in ``../x``."""
    big_node = message_field(1, message_field(6, b"d" * 1000))  # NodeProto.doc_string: no attribute byte
    small = S.make_array(TensorProto.UINT8, 8)

    def value(i: int, payload: bytes = bytes(8), type_index: int = 1) -> bytes:
        return message_field(17, S.make_struct_value(f"v{i}", type_index, raw_data=payload).SerializeToString())

    if kind == "node":
        grow = big_node * 1100
        block = message_field(1, message_field(1, bytes((0x0A, 0x7F)))) + message_field(1, b"") * 63
        blocks = [block + message_field(2, b"g")] * runs
        count = 0
    else:
        grow = b"".join(value(i, bytes(1000), 0) for i in range(1100))
        blocks, count = [], 1100
        for _ in range(runs):
            # a false value start (0x8a 0x01) in the first payload, its length covering the next values
            run = [value(count, bytes(5) + bytes((0x8A, 0x01, 0x7F)))]
            run += [value(count + i) for i in range(1, 64)]
            blocks.append(b"".join(run) + message_field(2, b"g"))
            count += 64
    declarations = message_field(27, S.make_array(TensorProto.UINT8, 1000).SerializeToString())
    declarations += message_field(27, small.SerializeToString())
    escaping = S.make_struct_value("out", 1, raw_data=b"").SerializeToString()
    escaping = message_field(
        17,
        escaping.replace(message_field(3, b""), b"")
        + message_field(4, message_field(1, b"location") + message_field(2, b"../x")),
    )
    tail = message_field(10, b"".join(blocks)[: 1 << 20])
    graph = grow + b"".join(blocks) + tail + escaping
    return base_model().SerializeToString() + declarations + message_field(7, graph)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["node", "value"])
def test_short_runs_do_not_make_every_pass_read_a_long_window(tmp_path, kind):
    # Windows only grew: each run of 64 records cost a numpy pass over 1 MiB (with pointer doubling,
    # ~55 ms), so 200 such runs (13 KB) took 11 s and a 5 MB model hours. Passes now read at most
    # a few times what the pass before them stepped over.
    data = short_runs_model(kind, 2000)
    index = 0 if kind == "node" else 1100 + 64 * 2000
    refused(tmp_path, data, f"graph.struct_initializer[{index}] ('out')", contains="..")
