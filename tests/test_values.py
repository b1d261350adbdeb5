"""One value resolver (payload/values.py): every entry point reports a struct value's fault with
the checker's path, message, code and details."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from support.models import linear_model

import onnx_struct as S
from onnx_struct.payload.values import resolve_value

WHERE = "graph.struct_initializer[0] ('weight')"
SIZE_FAULT = f"{WHERE}: payload is 63 bytes; the type requires 64"


def _entry_points(model):
    loaded = S.load_model(model)
    return {
        "check_model": lambda: S.check_model(model),
        "validate": lambda: (_ for _ in ()).throw(S.validate(model)[0]),
        "view by name": lambda: S.view("weight", model),
        "view of the model's StructProto": lambda: S.view(loaded.struct_values[0], loaded),
        "decode by name": lambda: S.decode("weight", model),
        "decode of the model's StructProto": lambda: S.decode(loaded.struct_values[0], loaded),
        "lower": lambda: S.lower(model),
        "InferenceSession": lambda: S.InferenceSession(model),
    }


@pytest.mark.parametrize("entry", list(_entry_points(linear_model(bytes(64)))))
def test_a_payload_size_fault_reads_the_same_from_every_entry_point(entry):
    model = linear_model(bytes(63))
    with pytest.raises(S.ValidationError) as info:
        _entry_points(model)[entry]()
    error = info.value
    assert str(error) == SIZE_FAULT
    assert (error.path, error.code, error.details) == (WHERE, "size_mismatch", {"expected": 64, "actual": 63})


@pytest.mark.parametrize("entry", ["check_model", "view by name", "decode by name", "lower"])
def test_a_fractional_byte_size_reads_the_same_from_every_entry_point(entry):
    model = linear_model(bytes(64))
    overlay = S.from_onnx(model)
    # 3 bits of payload: an inline root that is not a whole number of bytes
    overlay.graph.struct_initializer[0].CopyFrom(
        S.make_struct_value("weight", S.make_bit_packing([("a", 3)], 1), raw_data=b"")
    )
    model = S.to_onnx(overlay)
    with pytest.raises(S.ValidationError) as info:
        _entry_points(model)[entry]()
    error = info.value
    assert str(error) == f"{WHERE}: payload size 3 bits is not a whole number of bytes"
    assert (error.code, error.details) == ("not_byte_aligned", {"size_bits": 3})


def test_a_struct_proto_not_in_the_model_keeps_its_own_label():
    """A copy that shares a name is not the model's element: it is not given the model's path."""
    model = linear_model(bytes(64))
    copy = S.make_struct_value("weight", 0, raw_data=bytes(63))
    with pytest.raises(S.ValidationError) as info:
        S.view(copy, model)
    assert str(info.value) == "struct value 'weight': payload is 63 bytes; the type requires 64"


def test_resolved_value_record():
    payload = bytes(range(64))
    resolved = resolve_value("weight", linear_model(payload))
    assert resolved.where == WHERE
    assert resolved.declaration_path == "struct_types[0] ('LINEAR_INT4_128')"
    assert (resolved.size_bits, resolved.nbytes) == (512, 64)
    assert [leaf.path for leaf in resolved.leaves] == ["values", "scale", "zero_point"]
    assert bytes(resolved.payload) == payload
    with pytest.raises(AttributeError):
        resolved.where = "x"  # frozen


def test_a_named_value_without_a_model_and_an_unknown_name():
    with pytest.raises(S.ValidationError) as info:
        S.decode("weight")
    assert (info.value.code, info.value.details) == ("no_model", {"name": "weight"})
    with pytest.raises(S.ValidationError) as info:
        S.view("nope", linear_model(bytes(64)))
    assert info.value.code == "unknown_value" and info.value.details == {"known": "weight"}


def test_encode_and_pack_name_an_index_the_same_way():
    model = linear_model(bytes(64))
    for call in (lambda: S.encode(np.zeros(128, np.float32), 5, model), lambda: S.pack({}, 5, model)):
        with pytest.raises(S.ValidationError) as info:
            call()
        assert str(info.value) == "struct_type: type index 5 is out of range (1 struct_types)"
        assert (info.value.code, info.value.details) == ("unknown_type_index", {"index": 5})


def test_decode_of_a_declaration_without_decoder_names_it():
    value = S.make_struct_value("w", S.make_array(2, 4, name="raw"), bytes(4))  # 4 x UINT8
    with pytest.raises(S.ValidationError) as info:
        S.decode(value)
    assert str(info.value).startswith("struct value 'w'.struct_type ('raw'): the root declaration has no decoder")
    assert info.value.code == "no_decoder"


def test_code_survives_pickling_and_to_dict():
    error = S.ValidationError("p", "r", code="size_mismatch", expected=2, actual=1, blob=object())
    again = pickle.loads(pickle.dumps(error))
    assert (again.path, again.reason, again.code, again.details["expected"]) == ("p", "r", "size_mismatch", 2)
    out = error.to_dict()
    assert out["code"] == "size_mismatch" and out["details"] == {"expected": 2, "actual": 1}
    assert (out["expected"], out["actual"], out["message"]) == (2, 1, "p: r")
    assert S.ValidationError("", "r").code == "invalid"
