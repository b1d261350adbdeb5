"""The plain test (``schema/plain.py``) is exact: a struct part anywhere makes a model "struct",
and no byte sequence inside a string, a tensor or an unknown field does.

The oracle is the construction: each model is written field by field on the wire
(tests/support/protowire.py), with a struct part where the case puts one and nowhere else
(docs/semantics.md, "Plain models", for the wrong wire types). Each case is also run with a
main-graph initializer of ``CUT_MIN_BYTES`` before it (the test then skips those records), from
a file's windows (``FileBytes``), and as an ``onnx.ModelProto`` (serialized, unknown fields kept).
"""

from __future__ import annotations

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import base_model
from support.protowire import field, tag, varint

from onnx_struct.check import stock
from onnx_struct.schema.plain import CUT_MIN_BYTES, FileBytes, has_struct_parts

MODEL_TYPES, GRAPH_VALUES, TYPE_STRUCT = 27, 17, 10  # ModelProto, GraphProto, TypeProto: the proposal's fields
GRAPH, NODE, ATTRIBUTE, INPUT, INITIALIZER = 7, 1, 5, 11, 5  # ModelProto.graph, GraphProto.node, ...


def long_tag(number: int, wire_type: int) -> bytes:
    """A tag in one byte more than its shortest form (protobuf reads both)."""
    shortest = bytearray(tag(number, wire_type))
    shortest[-1] |= 0x80
    return bytes(shortest) + b"\x00"


def in_graph(records: bytes) -> bytes:
    """A main-graph record: protobuf merges it into the model's graph."""
    return field(GRAPH, records)


def typed_input(type_proto: bytes) -> bytes:
    return field(INPUT, field(1, b"Z") + field(2, type_proto))  # ValueInfoProto: name, type


def node_with(attribute: bytes) -> bytes:
    """A NodeProto: op_type, one attribute (its name, then ``attribute``)."""
    return field(4, b"If") + field(ATTRIBUTE, field(1, b"a") + attribute)


def node_attribute(attribute: bytes) -> bytes:
    """A graph's node record holding :func:`node_with` ``attribute``."""
    return field(NODE, node_with(attribute))


STRUCT_TYPE = field(TYPE_STRUCT, b"")
STRUCT_VALUE = field(GRAPH_VALUES, b"")
PARTS = field(MODEL_TYPES, b"") + STRUCT_VALUE + STRUCT_TYPE + tag(27, 0) + b"\x05" + tag(17, 0) + b"\x01"

CASES = {
    # struct parts: the model's, the main graph's, in a type anywhere, in subgraphs, functions, training
    "struct_types": (field(MODEL_TYPES, b""), True),
    "struct_types, longer tag": (long_tag(MODEL_TYPES, 2) + b"\x00", True),
    "struct value": (in_graph(STRUCT_VALUE), True),
    "struct value, longer tag": (in_graph(long_tag(GRAPH_VALUES, 2) + b"\x00"), True),
    "graph input type": (in_graph(typed_input(STRUCT_TYPE)), True),
    "type, longer tag": (in_graph(typed_input(long_tag(TYPE_STRUCT, 2) + b"\x00")), True),
    "graph output type": (in_graph(field(12, field(2, STRUCT_TYPE))), True),
    "value_info type": (in_graph(field(13, field(2, STRUCT_TYPE))), True),
    "sequence element": (in_graph(typed_input(field(4, field(1, STRUCT_TYPE)))), True),
    "map value": (in_graph(typed_input(field(5, tag(1, 0) + b"\x07" + field(2, STRUCT_TYPE)))), True),
    "optional element": (in_graph(typed_input(field(9, field(1, STRUCT_TYPE)))), True),
    "subgraph value": (in_graph(node_attribute(field(6, STRUCT_VALUE))), True),
    "subgraph of graphs": (in_graph(node_attribute(field(11, STRUCT_VALUE))), True),
    "sub-subgraph type": (in_graph(node_attribute(field(6, node_attribute(field(6, typed_input(STRUCT_TYPE)))))), True),
    "attribute tp": (in_graph(node_attribute(field(14, STRUCT_TYPE))), True),
    "attribute type_protos": (in_graph(node_attribute(field(15, STRUCT_TYPE))), True),
    "function node subgraph": (field(25, field(7, node_with(field(6, STRUCT_VALUE)))), True),
    "function value_info": (field(25, field(12, field(2, STRUCT_TYPE))), True),
    "function attribute_proto": (field(25, field(11, field(14, STRUCT_TYPE))), True),
    "training initialization": (field(20, field(1, STRUCT_VALUE)), True),
    "training algorithm type": (field(20, field(2, typed_input(STRUCT_TYPE))), True),
    # a proposal field of the wrong wire type: a (broken) struct part in the model and its main graph
    "struct_types as a varint": (tag(MODEL_TYPES, 0) + varint(5), True),
    "struct_types as fixed64": (tag(MODEL_TYPES, 1) + bytes(8), True),
    "struct_types as fixed32": (tag(MODEL_TYPES, 5) + bytes(4), True),
    "struct_types as a group": (tag(MODEL_TYPES, 3) + tag(1, 0) + b"\x01" + tag(MODEL_TYPES, 4), True),
    "struct_types as a varint, longer tag": (long_tag(MODEL_TYPES, 0) + b"\x05", True),
    "struct value as a varint": (in_graph(tag(GRAPH_VALUES, 0) + b"\x01"), True),
    "struct value as fixed32, longer tag": (in_graph(long_tag(GRAPH_VALUES, 5) + bytes(4)), True),
    # ... and none in a type or a subgraph: protobuf drops it, as stock onnx does
    "type struct_type as a varint": (in_graph(typed_input(tag(TYPE_STRUCT, 0) + b"\x00")), False),
    "subgraph value as a varint": (in_graph(node_attribute(field(6, tag(GRAPH_VALUES, 0) + b"\x01"))), False),
    # the proposal's bytes where they are no field of the proposal
    "none": (b"", False),
    "doc_string": (field(6, PARTS), False),
    "graph name": (in_graph(field(2, PARTS)), False),
    "initializer raw_data": (in_graph(field(INITIALIZER, field(9, PARTS))), False),
    "attribute tensor": (in_graph(node_attribute(field(5, field(9, PARTS)))), False),
    "attribute string": (in_graph(node_attribute(field(4, PARTS))), False),
    "metadata value": (field(14, field(1, b"k") + field(2, PARTS)), False),
    "opset_import domain": (field(8, field(1, PARTS)), False),
    "unknown field of the model": (field(99, PARTS) + tag(98, 0) + b"\x01", False),
    "unknown field of the main graph": (in_graph(field(99, PARTS) + tag(98, 5) + bytes(4)), False),
    "unknown field of a type": (in_graph(typed_input(field(99, PARTS))), False),
    "stock field of the wrong wire type": (field(1, b"\x08") + in_graph(tag(2, 0) + b"\x01"), False),
}


def big_initializer() -> bytes:
    tensor = field(8, b"big") + tag(2, 0) + varint(onnx.TensorProto.UINT8) + field(9, bytes(CUT_MIN_BYTES))
    return in_graph(field(INITIALIZER, tensor))


def forms(data: bytes):
    """``data`` as the test reads it: bytes, and a file's windows (a small window: many reads)."""

    class Small(FileBytes):
        WINDOW = 7

    yield data
    yield Small(lambda offset, count: data[offset : offset + count], len(data))


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("case", list(CASES))
def test_struct_parts_are_found_exactly(case, size):
    suffix, expected = CASES[case]
    data = base_model().SerializeToString() + (big_initializer() if size == "large" else b"") + suffix
    onnx.ModelProto.FromString(data)  # the case is protobuf onnx reads
    for form in forms(data):
        assert has_struct_parts(form) is expected
    proto = onnx.ModelProto.FromString(data)  # unknown fields kept, re-serialized by protobuf
    assert stock.classify(proto)[0] == (stock.STRUCT if expected else stock.PLAIN)


def test_a_struct_part_in_a_second_occurrence_of_the_main_graph_is_found():
    data = base_model().SerializeToString()
    for suffix in (in_graph(STRUCT_VALUE), in_graph(tag(GRAPH_VALUES, 0) + b"\x01")):
        assert has_struct_parts(data + in_graph(field(2, b"h")) + suffix) is True
        assert has_struct_parts(data + suffix + in_graph(field(2, b"h"))) is True


@settings(max_examples=60, deadline=None)
@given(
    st.binary(max_size=64), st.sampled_from(["doc_string", "graph name", "initializer raw_data", "attribute tensor"])
)
def test_no_bytes_inside_a_string_or_tensor_make_a_struct_part(payload, where):
    wrap = {
        "doc_string": lambda p: field(6, p),
        "graph name": lambda p: in_graph(field(2, p)),
        "initializer raw_data": lambda p: in_graph(field(INITIALIZER, field(9, p))),
        "attribute tensor": lambda p: in_graph(node_attribute(field(5, field(9, p)))),
    }[where]
    data = base_model().SerializeToString() + wrap(PARTS + payload + PARTS)
    assert has_struct_parts(data) is False


def test_bytes_protobuf_cannot_parse_are_neither():
    data = base_model().SerializeToString()
    assert has_struct_parts(data + b"\x0a\x05ab") is None  # a length past the end
    assert has_struct_parts(data + field(MODEL_TYPES, b"\x0a\x05ab")) is None  # a struct part that does not parse
