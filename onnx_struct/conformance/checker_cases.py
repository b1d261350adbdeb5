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

from onnx_struct.conformance.checker_models import (
    DECODED,
    NIBBLES,
    OPSET,
    Files,
    add_one_decoder,
    bad_constant,
    base_model,
    cast_decoder,
    cast_to,
    clash_with_initializer,
    concrete_in_graph,
    consumer,
    deep_chain,
    dynamic_tensor,
    external_constant,
    external_value,
    files,
    identity_record,
    inline_with_type,
    linear,
    model_with,
    named_reference,
    policy_decoder,
    renamed,
    subgraph_values,
    unparsable_struct_types,
    value,
    with_encoder,
    wrong_wire_type,
)
from onnx_struct.schema import builders as B
from onnx_struct.schema.model import StructTypeProto


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
        "struct_parts_lost",
        "struct_parts_lost",
        "graph.node[1].input[0] ('weight')",
        m(lambda: consumer(DECODED)),
        m(lambda: base_model([oh.make_node("Relu", ["weight"], ["R"])])),
        "a node reads a name nothing defines, as a struct model written back by a tool that drops "
        "unknown fields (its declarations and values gone): diagnosed as lost struct parts",
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
