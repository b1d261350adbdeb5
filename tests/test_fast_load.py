"""Loading the struct parts of an onnx.ModelProto alone gives what a whole-model parse gives.

The oracle is protobuf's own whole-model parse (the model's bytes parsed as the overlay, which is
what ``load`` does for bytes and paths); payloads are also compared with the bytes put in.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import base_model, model_with
from google.protobuf.message import DecodeError
from onnx import TensorProto
from support.protowire import field, varint

import onnx_struct as S
from onnx_struct._proto import pb
from onnx_struct.schema.model import load


def stock(data: bytes) -> onnx.ModelProto:
    return onnx.ModelProto.FromString(data)


def outcome(function):
    try:
        return ("ok", function())
    except S.ValidationError as error:
        return ("ValidationError", str(error))
    except DecodeError:
        return ("DecodeError", None)


def assert_same_view(model: onnx.ModelProto, name: str, base_dir=None) -> dict | None:
    """view() on the stock object (struct parts only) and on its bytes (whole parse) agree."""
    fast = outcome(lambda: S.view(name, model, base_dir=base_dir).leaves())
    full = outcome(lambda: S.view(name, model.SerializeToString(), base_dir=base_dir).leaves())
    assert fast[0] == full[0], (fast, full)
    if fast[0] != "ok":
        assert fast[1] == full[1]
        return None
    assert fast[1].keys() == full[1].keys()
    for path in fast[1]:
        assert np.array_equal(fast[1][path], full[1][path]) and fast[1][path].dtype == full[1][path].dtype
    return fast[1]


def sample_model(tmp_path) -> onnx.ModelProto:
    (tmp_path / "w.bin").write_bytes(b"\x00" * 3 + bytes(range(10, 18)))
    block = S.make_structure([S.make_field("d", TensorProto.FLOAT16), S.make_field("q", TensorProto.UINT8)])
    values = [
        S.make_struct_value("a", 1, raw_data=np.arange(12, dtype=np.uint8).tobytes()),
        S.make_struct_value("inline", S.make_array(TensorProto.INT4, 6), raw_data=bytes([0x21, 0x43, 0xF5])),
        S.make_struct_value("ext", 2, external_data={"location": "w.bin", "offset": 3, "length": 8}),
        S.make_struct_value("a", 2, raw_data=bytes(8)),  # a second "a": the first one is meant
    ]
    types = [block, S.make_array(S.make_type_reference(0), 4), S.make_array(TensorProto.UINT16, 4)]
    return model_with(types, values)


def test_struct_parts_match_the_whole_parse(tmp_path):
    model = sample_model(tmp_path)
    overlay = pb.ModelProto.FromString(model.SerializeToString())
    loaded = load(model)
    assert list(loaded.struct_types) == list(overlay.struct_types)
    assert list(loaded.struct_values) == list(overlay.graph.struct_initializer)
    assert loaded.struct_value("a") == overlay.graph.struct_initializer[0]
    assert loaded._proto is None  # the struct parts were read without parsing the model whole
    assert S.get_struct_types(model) == list(overlay.struct_types)
    assert S.get_struct_values(model) == list(overlay.graph.struct_initializer)
    assert load(model).proto == overlay and load(model).serialized == model.SerializeToString()


def test_view_values_and_external_data(tmp_path):
    model = sample_model(tmp_path)
    leaves = assert_same_view(model, "a")
    assert leaves["q"].tolist() == [2, 5, 8, 11]  # records of 3 bytes: d (2 bytes), q
    assert leaves["d"].view(np.uint16).tolist() == [0x0100, 0x0403, 0x0706, 0x0A09]
    assert assert_same_view(model, "inline")[""].tolist() == [1, 2, 3, 4, 5, -1]
    assert assert_same_view(model, "ext", base_dir=tmp_path)[""].tolist() == [0x0B0A, 0x0D0C, 0x0F0E, 0x1110]
    assert assert_same_view(model, "ext") is None  # no base directory: the same error
    assert assert_same_view(model, "missing") is None  # the same list of known names
    assert S.view("a", model)["q"].flags.writeable is False


def test_raw_data_twice_and_with_external_data(tmp_path):
    # protobuf keeps the last raw_data; raw_data next to external_data is refused, even when empty.
    value = pb.StructProto(name="w", type=-1, struct_type=S.make_array(TensorProto.UINT8, 2)).SerializeToString()
    twice = value + field(3, b"ab") + field(3, b"cd")
    model = stock(base_model().SerializeToString() + field(7, field(17, twice)))
    assert assert_same_view(model, "w")[""].tolist() == [ord("c"), ord("d")]
    both = value + field(3, b"") + field(4, field(1, b"location") + field(2, b"x.bin"))
    model = stock(base_model().SerializeToString() + field(7, field(17, both)))
    assert assert_same_view(model, "w", base_dir=tmp_path) is None
    with pytest.raises(S.ValidationError, match="both inline"):
        S.view("w", model, base_dir=tmp_path)
    # A length in a longer varint form than needed: read by protobuf (nothing stripped), same result.
    overlong = value + bytes([0x1A, 0x82, 0x00]) + b"ef"
    model = stock(base_model().SerializeToString() + field(7, field(17, overlong)))
    assert assert_same_view(model, "w")[""].tolist() == [ord("e"), ord("f")]


def test_graph_twice_on_the_wire_is_merged():
    first = model_with([S.make_array(TensorProto.UINT8, 2)], [S.make_struct_value("x", 0, raw_data=b"\x01\x02")])
    second = S.make_struct_value("y", 0, raw_data=b"\x03\x04").SerializeToString()
    model = stock(first.SerializeToString() + field(7, field(17, second)))
    assert [v.name for v in S.get_struct_values(model)] == ["x", "y"]
    assert assert_same_view(model, "y")[""].tolist() == [3, 4]


def test_field_17_with_the_wrong_wire_type():
    # Not a struct value (protobuf keeps it as an unknown field), and check_model still sees it.
    model = stock(model_with([S.make_array(TensorProto.UINT8, 1)]).SerializeToString() + field(7, b"\x88\x01\x05"))
    assert S.get_struct_values(model) == []
    assert assert_same_view(model, "w") is None
    with pytest.raises(S.ValidationError, match=r"^graph\.struct_initializer: .*wire type") as fast:
        S.check_model(model)
    with pytest.raises(S.ValidationError) as full:
        S.check_model(model.SerializeToString())
    assert str(fast.value) == str(full.value)


def test_malformed_struct_value_raises_what_the_whole_parse_raises():
    model = stock(base_model().SerializeToString() + field(7, field(17, b"\x0a\x05ab")))
    assert outcome(lambda: pb.ModelProto.FromString(model.SerializeToString())) == ("DecodeError", None)
    # the whole parse's DecodeError, as a ValidationError (protobuf's own escaped before)
    refused = ("ValidationError", "the model's struct parts do not parse (protobuf: Wire format was corrupt)")
    assert outcome(lambda: S.get_struct_values(model)) == refused
    assert outcome(lambda: S.view("w", model)) == refused


def test_nesting_limit_counts_as_in_the_whole_parse():
    # An inline declaration nested deep: both parses accept or refuse the same depth (the limit
    # is counted from the model, not from the struct value). Each level adds 3 messages, the base
    # declaration 0, 1 or 2 more, so every depth around the limit is tried.
    results = set()
    bases = [b"", field(1, b""), field(1, field(1, b""))]  # nothing, an empty Array, an Array with a TypeProto
    for k in range(26, 36):
        for base in bases:
            # By hand: protobuf's own builders refuse to copy a message past the limit.
            declaration = base
            # StructTypeProto.array (1) = Array{element_type (1) = TypeProto{struct_type (10)}, dimension (2)}
            for _ in range(k):
                declaration = field(1, field(1, field(10, declaration)) + b"\x10\x01")
            value = field(5, b"w") + b"\x08" + varint(2**64 - 1) + field(2, declaration) + field(3, b"\x07")
            model = stock(base_model().SerializeToString() + field(7, field(17, value)))
            fast = outcome(lambda model=model: [v.raw_data for v in S.get_struct_values(model)])
            full = outcome(lambda model=model: [v.raw_data for v in S.from_onnx(model).graph.struct_initializer])
            assert (fast[0], full[0]) in (("ok", "ok"), ("ValidationError", "DecodeError")), (k, base)
            # view() reads the value without its payload: it too gets no further than the whole parse
            assert outcome(lambda model=model: S.view("w", model).nbytes)[0] != "ok" or full[0] == "ok"
            results.add(fast[0])
    assert results == {"ok", "ValidationError"}  # the range straddles the limit


def test_load_model_is_a_snapshot_and_rebasing_keeps_the_parts(tmp_path):
    model = sample_model(tmp_path)
    snapshot = S.load_model(model)
    S.add_struct_values(model, S.make_struct_value("late", 0, raw_data=bytes(3)))
    assert [v.name for v in snapshot.struct_values] == ["a", "inline", "ext", "a"]
    assert [v.name for v in S.get_struct_values(model)] == ["a", "inline", "ext", "a", "late"]
    lazy = load(model)
    assert lazy.find_value("late")[0] == 4
    rebased = load(lazy, tmp_path)
    assert rebased.base_dir == tmp_path and rebased._proto is None
    assert S.view("ext", rebased)[""].tolist() == [0x0B0A, 0x0D0C, 0x0F0E, 0x1110]
