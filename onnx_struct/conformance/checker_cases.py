"""Checker cases: for every rule (a ValidationError ``code`` the checker raises), a model that
passes and a model that breaks the rule once, with the path of the offending element.

The expected code and path of each invalid model are written here by hand (they are the contract);
they are never read back from the checker when the suite is generated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnx
import onnx.external_data_helper
from onnx import TensorProto as T
from onnx import helper as oh

from onnx_struct.schema import builders as B
from onnx_struct.schema.model import StructTypeProto, add_struct_types, add_struct_values, add_value_infos

OPSET = [oh.make_opsetid("", 21)]
Files = dict[str, bytes]


@dataclasses.dataclass(frozen=True)
class CheckerCase:
    """One checker case: ``build()`` gives the case's files (``model.onnx`` and any payload file).

    ``code`` is None for a model every checker must accept; otherwise the rule the model breaks and
    ``path`` the element a diagnostic must name.
    """

    name: str
    rule: str
    build: Callable[[], Files]
    code: str | None = None
    path: str = ""
    description: str = ""


# ---------------------------------------------------------------------- building blocks
NIBBLES = B.make_array(T.UINT8, 4)  # 4 bytes


def base_model(nodes=(), inputs=(), outputs=None) -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"]), *nodes],
        "g",
        [oh.make_tensor_value_info("X", T.FLOAT, [1]), *inputs],
        outputs or [oh.make_tensor_value_info("Y", T.FLOAT, [1])],
    )
    return oh.make_model(graph, opset_imports=OPSET, ir_version=10)


def model_with(declarations=(), values=(), nodes=(), **infos) -> onnx.ModelProto:
    model = base_model(nodes)
    if declarations:
        add_struct_types(model, *declarations)
    if values:
        add_struct_values(model, *values)
    if infos:
        add_value_infos(model, **infos)
    return model


def files(model: onnx.ModelProto, **extra: bytes) -> Files:
    return {"model.onnx": model.SerializeToString(), **extra}


def value(name="weight", index=0, size=4, **kwargs):
    return B.make_struct_value(name, index, raw_data=bytes(size), **kwargs)


def external_value(name="weight", index=0, **entries):
    return B.make_struct_value(name, index, external_data={"location": "weight.bin", **entries})


def cast_decoder(inputs=("v",), outputs=("y",), name="dec", op="Cast", domain=""):
    nodes = [oh.make_node(op, [inputs[0]], [outputs[0]], to=T.FLOAT, domain=domain)]
    nodes += [oh.make_node("Identity", [outputs[0]], [o]) for o in outputs[1:]]
    return oh.make_function("test", name, list(inputs), list(outputs), nodes, OPSET)


def linear(decoder=None, encoder=None) -> StructTypeProto:
    """The proposal's LINEAR_INT4_128: values INT4[128], constants scale and zero_point (64 bytes)."""
    return B.make_structure(
        [
            B.make_field("values", B.make_tensor_type(T.INT4, [128])),
            B.make_constant_field("scale", np.float32(0.125)),
            B.make_constant_field("zero_point", np.int64(0)),
        ],
        name="LINEAR_INT4_128",
        decoder=decoder,
        encoder=encoder,
    )


def consumer(declaration, name="weight"):
    model = base_model([oh.make_node("Relu", [name], ["R"])])
    add_struct_types(model, declaration)
    add_struct_values(model, value(name))
    return model


DECODED = B.make_array(T.UINT8, 4, decoder=cast_decoder())


def dynamic_tensor():
    tensor = B.make_tensor_type(T.UINT8, [2])
    tensor.tensor_type.shape.dim[0].dim_param = "N"
    return tensor


def subgraph_values():
    """(valid, invalid): an If whose else branch holds a struct value in the invalid one."""

    def with_if(else_values):
        branch = oh.make_graph(
            [oh.make_node("Identity", ["X"], ["Z"])], "b", [], [oh.make_tensor_value_info("Z", T.FLOAT, [1])]
        )
        holder = oh.make_model(oh.make_graph([], "holder", [], []))
        holder.graph.CopyFrom(branch)
        if else_values:
            add_struct_values(holder, *else_values)  # the branch as a main graph, then moved below the If
        model = model_with([NIBBLES])
        model.graph.node.append(oh.make_node("If", ["C"], ["W"], then_branch=branch, else_branch=holder.graph))
        model.graph.input.append(oh.make_tensor_value_info("C", T.BOOL, []))
        return model

    return with_if(()), with_if((value(),))


def inline_with_type(type_index):
    v = B.make_struct_value("weight", NIBBLES, bytes(4))
    v.type = type_index
    return v


def named_reference():
    info = B.make_struct_value_info("s", 0)
    info.type.struct_type.name = "oops"
    return info


def concrete_in_graph():
    type_proto = B.make_struct_type_proto()
    type_proto.struct_type.CopyFrom(NIBBLES)
    return B.make_value_info("s", type_proto)


def with_encoder(outputs):
    encoder = oh.make_function(
        "test", "enc", ["x"], list(outputs), [oh.make_node("Identity", ["x"], [o]) for o in outputs], OPSET
    )
    return linear(encoder=encoder)


def external_constant():
    tensor = onnx.numpy_helper.from_array(np.zeros(2, np.float32), "k")
    onnx.external_data_helper.set_external_data(tensor, "k.bin")
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    return tensor


def bad_constant():
    tensor = onnx.numpy_helper.from_array(np.zeros(2, np.float32), "k")
    tensor.dims[0] = 3  # 8 bytes of raw_data for 3 floats
    return tensor


def clash_with_initializer():
    model = model_with([NIBBLES], [value("W")])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), "W"))
    return model


def renamed(model: onnx.ModelProto, old: bytes, new: bytes) -> bytes:
    """The model's bytes with one string replaced by another of the same length (a byte string
    protobuf's builders would refuse, such as one that is not UTF-8)."""
    data = model.SerializeToString()
    assert len(old) == len(new) and data.count(old) == 1
    return data.replace(old, new)


def wrong_wire_type(model: onnx.ModelProto) -> bytes:
    """ModelProto.struct_types (field 27) written as a varint instead of a length-delimited message."""
    return model.SerializeToString() + bytes([0xD8, 0x01, 0x01])  # tag varint(27 << 3 | 0), value 1


def unparsable_struct_types(model: onnx.ModelProto) -> bytes:
    """A second struct_types entry (field 27, length-delimited) holding bytes that are no message."""
    return model.SerializeToString() + bytes([0xDA, 0x01, 0x02, 0xFF, 0xFF])


def deep_chain(depth: int) -> list[StructTypeProto]:
    """struct_types[i] = Array(type_index i+1, 1), ending in NIBBLES: ``depth`` references deep."""
    return [B.make_array(B.make_type_reference(i + 1), 1) for i in range(depth)] + [NIBBLES]


def policy_decoder():
    """A decoder calling an operator of another domain (com.microsoft), which the policy refuses."""
    node = oh.make_node("Gelu", ["v"], ["y"], domain="com.microsoft")
    return oh.make_function("test", "dec", ["v"], ["y"], [node], [*OPSET, oh.make_opsetid("com.microsoft", 1)])


def referenced_files(model: onnx.ModelProto, size: int) -> onnx.ModelProto:
    entry = model.metadata_props.add()
    entry.key = "onnx_struct.referenced_files"
    entry.value = f'{{"weight.bin": {{"size": {size}}}}}'
    return model


def cast_to(elem_type: int) -> onnx.FunctionProto:
    """The Cast decoder with ``to`` set to ``elem_type`` (99 is no ONNX element type)."""
    decoder = cast_decoder()
    decoder.node[0].attribute[0].i = elem_type
    return decoder


def add_one_decoder(one: dict) -> onnx.FunctionProto:
    """y = Cast(v, FLOAT) + Constant(**one): a type error inside the decoder when ``one`` is an int64."""
    nodes = [
        oh.make_node("Cast", ["v"], ["c"], to=T.FLOAT),
        oh.make_node("Constant", [], ["one"], **one),
        oh.make_node("Add", ["c", "one"], ["y"]),
    ]
    return oh.make_function("test", "dec", ["v"], ["y"], nodes, OPSET)


def identity_record(size: int, digest_of: bytes) -> onnx.ModelProto:
    import hashlib

    from onnx_struct.payload.file_identity import FileIdentity, record

    model = model_with([NIBBLES], [external_value(offset=0, length=4)])
    identity = FileIdentity("weight.bin", size, ((0, len(digest_of)),), hashlib.sha256(digest_of).hexdigest())
    record(model.metadata_props, [identity])
    return model


PAYLOAD = bytes(range(4))
SV0 = "graph.struct_initializer[0] ('weight')"


def pair(name: str, code: str, path: str, valid: Callable[[], Files], invalid: Callable[[], Files], description: str):
    """The valid and the invalid case of one rule."""
    return [
        CheckerCase(f"{name}_valid", code, valid, None, "", f"passes: {description}"),
        CheckerCase(f"{name}_invalid", code, invalid, code, path, description),
    ]


def m(build: Callable[[], onnx.ModelProto], **extra: bytes) -> Callable[[], Files]:
    return lambda: files(build(), **extra)


# (name, code, path, valid, invalid, the rule) - one row per rule; a code may have several rows.
CASES: list[CheckerCase] = [
    *pair(
        "payload_short",
        "size_mismatch",
        SV0,
        m(lambda: model_with([linear()], [value(size=64)])),
        m(lambda: model_with([linear()], [value(size=63)])),
        "a payload's length is its type's size: 63 bytes for LINEAR_INT4_128's 64",
    ),
    *pair(
        "value_type_index",
        "unknown_type_index",
        f"{SV0}.type",
        m(lambda: model_with([NIBBLES], [value(index=0)])),
        m(lambda: model_with([NIBBLES], [value(index=3)])),
        "a value's type index names one of struct_types (3 of 1)",
    ),
    *pair(
        "cyclic_reference",
        "cycle",
        "struct_types[1].array.element_type.struct_type.type_index",
        m(lambda: model_with([B.make_array(B.make_type_reference(1), 1), NIBBLES])),
        m(lambda: model_with([B.make_array(B.make_type_reference(1), 1), B.make_array(B.make_type_reference(0), 1)])),
        "type_index references form no cycle",
    ),
    *pair(
        "field_without_type",
        "bad_field",
        "struct_types[0].structure.field[0] ('a')",
        m(lambda: model_with([B.make_structure([B.make_field("a", T.UINT8)])])),
        m(lambda: model_with([B.make_structure([StructTypeProto.Field(name="a")])])),
        "a field has exactly one of type and constant",
    ),
    *pair(
        "duplicate_field",
        "duplicate_name",
        "struct_types[0].structure.field[1] ('a')",
        m(lambda: model_with([B.make_structure([B.make_field("a", T.UINT8), B.make_field("b", T.UINT8)])])),
        m(lambda: model_with([B.make_structure([B.make_field("a", T.UINT8), B.make_field("a", T.UINT8)])])),
        "field names are unique in a structure",
    ),
    *pair(
        "unnamed_field",
        "missing_name",
        "struct_types[0].structure.field[0]",
        m(lambda: model_with([B.make_structure([B.make_field("a", T.UINT8)])])),
        m(lambda: model_with([B.make_structure([B.make_field("", T.UINT8)])])),
        "every field has a name",
    ),
    *pair(
        "dotted_field",
        "bad_name",
        "struct_types[0].structure.field[0] ('a.b')",
        m(lambda: model_with([B.make_structure([B.make_field("a_b", T.UINT8)])])),
        m(lambda: model_with([B.make_structure([B.make_field("a.b", T.UINT8)])])),
        "a name holds no '.', the leaf path separator",
    ),
    *pair(
        "zero_width_component",
        "bad_component",
        "struct_types[0].bit_packing.component[0] ('x')",
        m(lambda: model_with([B.make_bit_packing([("x", 8)], 1)])),
        m(lambda: model_with([B.make_bit_packing([("x", 0)], 1)])),
        "a bit_packing component is at least 1 bit wide",
    ),
    *pair(
        "wide_component",
        "limit_exceeded",
        "struct_types[0].bit_packing.component[0] ('x')",
        m(lambda: model_with([B.make_bit_packing([("x", 64)], 1)])),
        m(lambda: model_with([B.make_bit_packing([("x", 65)], 1)])),
        "a component is at most 64 bits wide",
    ),
    *pair(
        "string_leaf",
        "not_physical",
        "struct_types[0].array.element_type.tensor_type",
        m(lambda: model_with([B.make_array(T.UINT8, 2)])),
        m(lambda: model_with([B.make_array(T.STRING, 2)])),
        "a leaf is a fixed-width physical element type (not STRING)",
    ),
    *pair(
        "dynamic_dimension",
        "bad_shape",
        "struct_types[0].array.element_type.tensor_type.shape.dim[0]",
        m(lambda: model_with([B.make_array(B.make_tensor_type(T.UINT8, [2]), 2)])),
        m(lambda: model_with([B.make_array(dynamic_tensor(), 2)])),
        "a leaf's dimensions are concrete non-negative integers",
    ),
    *pair(
        "unaligned_root",
        "not_byte_aligned",
        SV0,
        m(lambda: model_with([B.make_bit_packing([("x", 4)], 2)], [value(size=1)])),
        m(lambda: model_with([B.make_bit_packing([("x", 3)], 1)], [value(size=1)])),
        "a value's type is a whole number of bytes (3 bits is not)",
    ),
    *pair(
        "concrete_root_reference",
        "not_concrete",
        "struct_types[1]",
        m(lambda: model_with([NIBBLES])),
        m(lambda: model_with([NIBBLES, StructTypeProto(type_index=0)])),
        "a model-level declaration is concrete, not a type_index",
    ),
    *pair(
        "inline_value_type",
        "type_conflict",
        f"{SV0}.type",
        m(lambda: model_with([], [B.make_struct_value("weight", NIBBLES, bytes(4))])),
        m(lambda: model_with([], [inline_with_type(0)])),
        "a value with an inline struct_type has type -1",
    ),
    *pair(
        "value_without_type",
        "missing_type",
        f"{SV0}.type",
        m(lambda: model_with([NIBBLES], [value()])),
        m(lambda: model_with([NIBBLES], [value(index=-1)])),
        "type -1 needs an inline struct_type",
    ),
    *pair(
        "static_form_name",
        "static_type_fields",
        "graph.input[1] ('s').type.struct_type",
        m(lambda: model_with([NIBBLES], inputs=[B.make_struct_value_info("s", 0)])),
        m(lambda: model_with([NIBBLES], inputs=[named_reference()])),
        "a static struct type (a reference in a graph) carries no name, decoder, encoder or metadata",
    ),
    *pair(
        "concrete_in_graph",
        "misplaced_declaration",
        "graph.input[1] ('s').type.struct_type",
        m(lambda: model_with([NIBBLES], inputs=[B.make_struct_value_info("s", 0)])),
        m(lambda: model_with([NIBBLES], inputs=[concrete_in_graph()])),
        "concrete declarations appear only in struct_types and StructProto.struct_type",
    ),
    *pair(
        "duplicate_value",
        "duplicate_name",
        "graph.struct_initializer[1] ('a')",
        m(lambda: model_with([NIBBLES], [value("a"), value("b")])),
        m(lambda: model_with([NIBBLES], [value("a"), value("a")])),
        "struct value names are unique",
    ),
    *pair(
        "unnamed_value",
        "missing_name",
        "graph.struct_initializer[0]",
        m(lambda: model_with([NIBBLES], [value("a")])),
        m(lambda: model_with([NIBBLES], [value("")])),
        "every struct value has a name",
    ),
    *pair(
        "value_clashes",
        "name_clash",
        "graph.struct_initializer[0] ('W')",
        m(lambda: model_with([NIBBLES], [value("V")])),
        m(clash_with_initializer),
        "a struct value's name is no initializer's or graph input's",
    ),
    *pair(
        "subgraph_value",
        "misplaced_value",
        "graph.node[1].attribute[0] ('else_branch').g.struct_initializer",
        m(lambda: subgraph_values()[0]),
        m(lambda: subgraph_values()[1]),
        "struct values live in the main graph only",
    ),
    *pair(
        "consumer_without_decoder",
        "no_decoder",
        "graph.node[1].input[0]",
        m(lambda: consumer(DECODED)),
        m(lambda: consumer(NIBBLES)),
        "a struct value a node consumes has a decoder",
    ),
    *pair(
        "decoder_outputs",
        "function_arity",
        "struct_types[0].decoder ('dec')",
        m(lambda: model_with([DECODED])),
        m(lambda: model_with([B.make_array(T.UINT8, 4, decoder=cast_decoder(outputs=("y", "z")))])),
        "a decoder has exactly one output",
    ),
    *pair(
        "decoder_input_leaf",
        "unknown_leaf",
        "struct_types[0].decoder ('dec')",
        m(lambda: model_with([linear(cast_decoder(("values", "scale")))])),
        m(lambda: model_with([linear(cast_decoder(("values", "scael")))])),
        "each decoder input names a leaf",
    ),
    *pair(
        "encoder_constant_output",
        "constant_leaf_bound",
        "struct_types[0].encoder ('enc')",
        m(lambda: model_with([with_encoder(("values",))])),
        m(lambda: model_with([with_encoder(("values", "scale"))])),
        "an encoder output names a payload leaf, not a constant",
    ),
    *pair(
        "decoder_function",
        "invalid_function",
        "struct_types[0].decoder ('dec')",
        m(lambda: model_with([DECODED])),
        m(
            lambda: model_with(
                [
                    B.make_array(
                        T.UINT8,
                        4,
                        decoder=oh.make_function(
                            "test", "dec", ["v"], ["y"], [oh.make_node("Cast", ["v"], ["y"])], OPSET
                        ),
                    )
                ]
            )
        ),
        "a decoder is a valid ONNX function (Cast needs its 'to' attribute)",
    ),
    *pair(
        "decoder_types",
        "invalid_function",
        "struct_types[0].decoder ('dec')",
        m(lambda: model_with([B.make_array(T.UINT8, 4, decoder=add_one_decoder({"value_float": 1.0}))])),
        m(lambda: model_with([B.make_array(T.UINT8, 4, decoder=add_one_decoder({"value_int": 1}))])),
        "a decoder's types infer (Add of a float and an int64 does not)",
    ),
    *pair(
        "decoder_policy",
        "decoder_policy",
        "struct_types[0].decoder ('dec').node[0] ('Gelu')",
        m(lambda: model_with([DECODED])),
        m(lambda: model_with([B.make_array(T.UINT8, 4, decoder=policy_decoder())])),
        "a decoder uses only the standard domain's operators",
    ),
    *pair(
        "decoder_element_type",
        "unknown_element_type",
        "struct_types[0].decoder ('dec').node[0] ('Cast')",
        m(lambda: model_with([B.make_array(T.UINT8, 4, decoder=cast_to(T.FLOAT))])),
        m(lambda: model_with([B.make_array(T.UINT8, 4, decoder=cast_to(99))])),
        "an element type in a decoder (Cast's 'to') is an ONNX element type (99 is not)",
    ),
    *pair(
        "external_constant",
        "external_not_allowed",
        "struct_types[0].structure.field[0] ('k').constant",
        m(lambda: model_with([B.make_structure([B.make_constant_field("k", np.int8(1))])])),
        m(lambda: model_with([B.make_structure([B.make_constant_field("k", external_constant())])])),
        "constants are inline in the type",
    ),
    *pair(
        "constant_data",
        "bad_constant",
        "struct_types[0].structure.field[0] ('k').constant",
        m(lambda: model_with([B.make_structure([B.make_constant_field("k", np.zeros(2, np.float32))])])),
        m(lambda: model_with([B.make_structure([B.make_constant_field("k", bad_constant())])])),
        "a constant's data matches its dims",
    ),
    *pair(
        "stock_rule",
        "onnx_checker",
        "",
        m(lambda: model_with([NIBBLES])),
        m(lambda: model_with([NIBBLES], nodes=[oh.make_node("NoSuchOp", ["X"], ["Q"])])),
        "the stock parts of a struct model obey onnx's own checker (no operator NoSuchOp)",
    ),
    *pair(
        "external_key",
        "bad_external_data",
        f"{SV0}.external_data[1] ('lenght')",
        m(lambda: model_with([NIBBLES], [external_value(length=4)]), **{"weight.bin": PAYLOAD}),
        m(lambda: model_with([NIBBLES], [external_value(lenght=4)]), **{"weight.bin": PAYLOAD}),
        "external_data keys are location, offset, length (and checksum)",
    ),
    *pair(
        "absolute_location",
        "bad_location",
        f"{SV0}.external_data",
        m(lambda: model_with([NIBBLES], [external_value()]), **{"weight.bin": PAYLOAD}),
        m(lambda: model_with([NIBBLES], [external_value(location="/weight.bin")])),
        "an external location is relative to the model's directory",
    ),
    *pair(
        "external_short",
        "file_too_short",
        f"{SV0}.external_data",
        m(lambda: model_with([NIBBLES], [external_value(offset=0, length=4)]), **{"weight.bin": PAYLOAD}),
        m(lambda: model_with([NIBBLES], [external_value(offset=2, length=4)]), **{"weight.bin": PAYLOAD}),
        "an external range lies inside its file (bytes 2..6 of a 4-byte file)",
    ),
    *pair(
        "external_missing",
        "file_unreadable",
        f"{SV0}.external_data",
        m(lambda: model_with([NIBBLES], [external_value()]), **{"weight.bin": PAYLOAD}),
        m(lambda: model_with([NIBBLES], [external_value()])),
        "an external file exists",
    ),
    *pair(
        "inline_and_external",
        "inline_and_external",
        SV0,
        m(lambda: model_with([NIBBLES], [external_value()]), **{"weight.bin": PAYLOAD}),
        m(
            lambda: model_with(
                [NIBBLES],
                [B.make_struct_value("weight", 0, raw_data=PAYLOAD, external_data={"location": "weight.bin"})],
            ),
            **{"weight.bin": PAYLOAD},
        ),
        "a payload is inline or external, not both",
    ),
    *pair(
        "external_overflow",
        "overflow",
        f"{SV0}.external_data",
        m(lambda: model_with([NIBBLES], [external_value(offset=0, length=4)]), **{"weight.bin": PAYLOAD}),
        m(lambda: model_with([NIBBLES], [external_value(offset=2**64 - 2, length=4)]), **{"weight.bin": PAYLOAD}),
        "offset + length fits in uint64",
    ),
    *pair(
        "recorded_file",
        "file_changed",
        f"{SV0}.external_data",
        m(lambda: identity_record(4, PAYLOAD), **{"weight.bin": PAYLOAD}),
        m(lambda: identity_record(4, bytes(4)), **{"weight.bin": PAYLOAD}),
        "an external file is the one the model records (the SHA-256 of its sampled bytes)",
    ),
    *pair(
        "leaf_rank",
        "limit_exceeded",
        "struct_types[0].array",
        m(lambda: model_with(deep_chain(63))),
        m(lambda: model_with(deep_chain(64))),
        "a leaf has at most MAX_LEAF_RANK (64) dimensions: 64 arrays over a 1-d array make 65",
    ),
    *pair(
        "reference_type",
        "type_mismatch",
        "graph.value_info[0] ('weight')",
        m(
            lambda: model_with(
                [NIBBLES, B.make_array(T.UINT8, 2)], [value()], value_info=[B.make_struct_value_info("weight", 0)]
            )
        ),
        m(
            lambda: model_with(
                [NIBBLES, B.make_array(T.UINT8, 2)], [value()], value_info=[B.make_struct_value_info("weight", 1)]
            )
        ),
        "a value info names the declaration of the struct value it describes",
    ),
    *pair(
        "value_name_utf8",
        "invalid_utf8",
        "graph.struct_initializer[0] (b'\\xffeight')",
        m(lambda: model_with([NIBBLES], [value()])),
        lambda: {"model.onnx": renamed(model_with([NIBBLES], [value("Weight")]), b"Weight", b"\xffeight")},
        "names are valid UTF-8",
    ),
    *pair(
        "wire_type",
        "wire_format",
        "struct_types",
        m(lambda: model_with([NIBBLES])),
        lambda: {"model.onnx": wrong_wire_type(model_with([NIBBLES]))},
        "the proposal's fields have their declared wire types (struct_types is a message, not a varint)",
    ),
    *pair(
        "struct_parts_parse",
        "not_parsable",
        "",
        m(lambda: model_with([NIBBLES])),
        lambda: {"model.onnx": unparsable_struct_types(model_with([NIBBLES]))},
        "the struct parts parse as the proposal's messages (struct_types[1] is 2 bytes of garbage)",
    ),
]
