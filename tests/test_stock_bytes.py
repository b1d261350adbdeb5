"""The bytes stock views parse: the model's own bytes without the main graph's struct values
(``struct_parts.without_struct_values``, ``LoadedModel.stock_serialized``).

The oracle is protobuf's own parse: the overlay parse of the cut bytes equals the overlay parse of
the whole bytes with the main graph's ``struct_initializer`` cleared, for models written field by
field on the wire (tests/support/protowire.py), in any order, with ``graph`` more than once,
unknown fields of every wire type, non-minimal tags and struct values in subgraphs (kept).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as oh
from support.protowire import field, tag, varint

import onnx_struct as S
from onnx_struct._proto import pb
from onnx_struct.schema import wire_format
from onnx_struct.schema.model import STOCK_CUT_MIN_BYTES, load
from onnx_struct.schema.projections import checker_view, stock_view
from onnx_struct.schema.struct_parts import without_struct_values

GRAPH, VALUES = 7, 17  # ModelProto.graph, GraphProto.struct_initializer (the overlay's)


def value_record(name: bytes, payload: bytes, *, long_tag: bool = False) -> bytes:
    """A main-graph struct value (type 0, raw_data, name); ``long_tag``: its tag in 3 bytes, not 2."""
    body = bytes([1 << 3 | 0, 0]) + field(3, payload) + field(5, name)  # StructProto: type, raw_data, name
    header = bytes([VALUES << 3 | 2 | 0x80, 0x81, 0x00]) if long_tag else tag(VALUES, 2)
    return header + varint(len(body)) + body


def subgraph_node_with_a_value(payload: bytes) -> bytes:
    """A NodeProto whose graph attribute holds a struct value: not the main graph's, so kept."""
    graph = field(2, b"branch") + value_record(b"inner", payload)
    attribute = field(1, b"then_branch") + field(6, graph) + tag(20, 0) + varint(5)  # name, g, type GRAPH
    return field(4, b"If") + field(5, attribute)  # op_type, attribute


NODE = field(4, b"Identity") + field(1, b"a") + field(2, b"b")
GRAPH_RECORDS = st.one_of(
    st.builds(lambda n: field(1, NODE + field(3, n)), st.binary(max_size=4)),  # node (name)
    st.builds(lambda p: field(1, subgraph_node_with_a_value(p)), st.binary(max_size=40)),
    st.builds(lambda n: field(2, n), st.binary(max_size=3)),  # name
    st.builds(lambda r: field(5, field(8, b"t") + bytes([2 << 3, T.UINT8]) + field(9, r)), st.binary(max_size=300)),
    st.builds(lambda n: field(11, field(1, n)), st.binary(min_size=1, max_size=3)),  # input
    st.builds(
        lambda n, p, long_tag: value_record(n, p, long_tag=long_tag),
        st.binary(min_size=1, max_size=3),
        st.binary(max_size=300),
        st.booleans(),
    ),
    st.builds(lambda v: tag(99, 0) + varint(v), st.integers(0, 2**64 - 1)),  # unknown varint
    st.builds(lambda b: tag(98, 5) + b, st.binary(min_size=4, max_size=4)),  # unknown fixed32
    st.builds(lambda b: tag(97, 1) + b, st.binary(min_size=8, max_size=8)),  # unknown fixed64
    st.builds(lambda v: tag(96, 3) + tag(1, 0) + varint(v) + tag(96, 4), st.integers(0, 300)),  # group
    st.just(tag(VALUES, 0) + varint(5)),  # field 17 with the wrong wire type: not a struct value
)
MODEL_RECORDS = st.one_of(
    st.builds(lambda records: field(GRAPH, b"".join(records)), st.lists(GRAPH_RECORDS, max_size=8)),
    st.builds(lambda v: tag(1, 0) + varint(v), st.integers(1, 11)),  # ir_version
    st.just(field(8, field(1, b"") + tag(2, 0) + varint(21))),  # opset_import
    st.builds(lambda b: tag(95, 5) + b, st.binary(min_size=4, max_size=4)),  # unknown fixed32
)


def whole_parse_without_values(data: bytes) -> bytes:
    model = pb.ModelProto.FromString(data)
    if model.HasField("graph"):
        del model.graph.struct_initializer[:]
    return model.SerializeToString(deterministic=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(MODEL_RECORDS, max_size=6))
def test_the_cut_parses_as_the_whole_parse_without_main_graph_values(records):
    data = b"".join(records)
    cut = without_struct_values(data)
    assert pb.ModelProto.FromString(cut).SerializeToString(deterministic=True) == whole_parse_without_values(data)
    if not pb.ModelProto.FromString(data).graph.struct_initializer:
        assert cut is data  # nothing to cut: no copy
    else:
        assert len(cut) < len(data)


def test_subgraph_values_and_wrong_wire_types_are_kept():
    payload = bytes(range(200))
    graph = field(1, subgraph_node_with_a_value(payload)) + tag(VALUES, 0) + varint(5) + value_record(b"w", payload)
    data = field(GRAPH, graph)
    cut = without_struct_values(data)
    assert cut.count(payload) == 1  # the subgraph's
    parsed = pb.ModelProto.FromString(cut)
    assert not parsed.graph.struct_initializer
    assert parsed.graph.node[0].attribute[0].g.struct_initializer[0].raw_data == payload
    wrong = [(f.field_number, f.wire_type, f.data) for f in UnknownFieldSet(parsed.graph)]
    assert wrong == [(VALUES, 0, 5)]  # the wrong wire type stays for the wire scan to report


@pytest.mark.parametrize("data", [field(GRAPH, tag(VALUES, 2) + varint(50) + b"x"), tag(GRAPH, 2) + bytes([0xFF] * 11)])
def test_malformed_bytes_raise_malformed(data):
    with pytest.raises(wire_format.Malformed):
        without_struct_values(data)


def inline_model(nbytes: int) -> bytes:
    graph = oh.make_graph(
        [oh.make_node("Identity", ["W"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", T.FLOAT, [nbytes])]
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    decoder = oh.make_function(
        "d", "dec", ["values"], ["y"], [oh.make_node("Cast", ["values"], ["y"], to=T.FLOAT)], [oh.make_opsetid("", 21)]
    )
    (index,) = S.add_struct_types(model, S.make_array(T.UINT8, nbytes, decoder=decoder))
    payload = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    S.add_struct_values(model, S.make_struct_value("W", index, raw_data=payload))
    return model.SerializeToString()


def test_views_do_not_copy_inline_payloads():
    """The checker's view and the stock view hold no payload byte: they copied every inline
    payload once or twice before (the peak of InferenceSession over an inline model)."""
    nbytes = STOCK_CUT_MIN_BYTES  # smaller models are not cut (the walk would cost more)
    loaded = load(inline_model(nbytes))
    struct_type_protos = []  # the value's type is in struct_types, no TypeProto names it
    view = checker_view(loaded, struct_type_protos, external_initializers=False, check_custom_domain=False)
    assert len(view) < 4096 < nbytes
    stock = stock_view(loaded)
    assert stock.ByteSize() < 4096
    assert [i.name for i in stock.graph.input] == ["W"]  # the value is still a graph input of the view


@pytest.mark.parametrize("nbytes", [64, STOCK_CUT_MIN_BYTES])
def test_release_keeps_what_views_and_lowering_need(nbytes):
    data = inline_model(nbytes)
    loaded = load(data)
    S.check_model(loaded)
    stock = loaded.stock_serialized
    assert (stock is data) == (nbytes < STOCK_CUT_MIN_BYTES)
    loaded.release_serialized()
    assert loaded.serialized is None and loaded.stock_serialized is stock
    expected = np.frombuffer(pb.ModelProto.FromString(data).graph.struct_initializer[0].raw_data, np.uint8)
    lowered = S.lower(loaded)
    onnx.checker.check_model(lowered, full_check=True)
    from onnx.reference import ReferenceEvaluator  # noqa: PLC0415

    np.testing.assert_array_equal(ReferenceEvaluator(lowered).run(None, {})[0], expected.astype(np.float32))
