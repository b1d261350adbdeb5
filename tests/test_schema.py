"""The schema: the proposal's field numbers, wire compatibility with stock onnx, the import guard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto
from support.models import base_model, linear_int4_128

import onnx_struct as S
from onnx_struct import _proto
from onnx_struct._proto import pb

PROPOSAL_NUMBERS = {
    "StructTypeProto": {
        "array": 1,
        "structure": 2,
        "bit_packing": 3,
        "type_index": 5,
        "decoder": 6,
        "encoder": 7,
        "name": 8,
        "doc_string": 9,
        "metadata_props": 10,
    },
    "StructTypeProto.Array": {"element_type": 1, "dimension": 2},
    "StructTypeProto.Field": {"name": 1, "type": 2, "constant": 4, "doc_string": 3},
    "StructTypeProto.Structure": {"field": 1},
    "StructTypeProto.BitPacking": {"component": 1, "dimension": 2},
    "StructTypeProto.BitPacking.Component": {"name": 1, "bit_width": 2},
    "StructProto": {"type": 1, "struct_type": 2, "raw_data": 3, "external_data": 4, "name": 5, "doc_string": 6},
}


def _message(path: str):
    cls = pb
    for part in path.split("."):
        cls = getattr(cls, part)
    return cls


@pytest.mark.parametrize("message", sorted(PROPOSAL_NUMBERS))
def test_proposal_field_numbers(message):
    fields = {f.name: f.number for f in _message(message).DESCRIPTOR.fields}
    assert fields == PROPOSAL_NUMBERS[message]


def test_kind_and_content_are_oneofs():
    assert [f.name for f in pb.StructTypeProto.DESCRIPTOR.oneofs_by_name["kind"].fields] == [
        "array",
        "structure",
        "bit_packing",
        "type_index",
    ]
    assert [f.name for f in pb.StructTypeProto.Field.DESCRIPTOR.oneofs_by_name["content"].fields] == [
        "type",
        "constant",
    ]


def test_integration_numbers():
    assert pb.ModelProto.DESCRIPTOR.fields_by_name["struct_types"].number == 27
    assert pb.GraphProto.DESCRIPTOR.fields_by_name["struct_initializer"].number == 17
    struct_type = pb.TypeProto.DESCRIPTOR.fields_by_name["struct_type"]
    assert struct_type.number == 10 and struct_type.containing_oneof.name == "value"


OVERLAYS = [
    "ModelProto",
    "GraphProto",
    "NodeProto",
    "AttributeProto",
    "FunctionProto",
    "TrainingInfoProto",
    "ValueInfoProto",
    "TypeProto",
    "TypeProto.Sequence",
    "TypeProto.Map",
    "TypeProto.Optional",
]


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlay_mirrors_every_onnx_field(name):
    """Same number, name, type and label for every field onnx has; message types map by name."""
    stock = onnx
    for part in name.split("."):
        stock = getattr(stock, part)
    overlay = _message(name)
    for field in stock.DESCRIPTOR.fields:
        mine = overlay.DESCRIPTOR.fields_by_number.get(field.number)
        assert mine is not None, f"{name}.{field.name} missing"
        assert (mine.name, mine.type, mine.is_repeated) == (field.name, field.type, field.is_repeated)
        if field.message_type is not None:
            assert mine.message_type.name == field.message_type.name
        if field.containing_oneof is not None:
            assert mine.containing_oneof is not None and mine.containing_oneof.name == field.containing_oneof.name


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_parses_hand_written_wire_bytes():
    """Bytes written by hand from the proposal's .proto text parse into the expected message."""
    tensor = bytes([0x08]) + _varint(TensorProto.INT4) + _field(2, b"")  # Tensor.elem_type, empty shape
    type_proto = _field(1, tensor)  # TypeProto.tensor_type
    array = _field(1, type_proto) + bytes([0x10]) + _varint(128)  # Array.element_type, Array.dimension = 128
    data = _field(1, array) + _field(8, b"nibbles")  # StructTypeProto.array, .name
    decl = S.StructTypeProto.FromString(data)
    assert decl.WhichOneof("kind") == "array" and decl.array.dimension == 128 and decl.name == "nibbles"
    assert decl.array.element_type.tensor_type.elem_type == TensorProto.INT4
    assert S.size_in_bits(decl) == 512
    value = S.StructProto.FromString(bytes([0x08]) + _varint(-1) + _field(2, data) + _field(3, b"\x01" * 64))
    assert value.type == -1 and value.struct_type == decl and len(value.raw_data) == 64
    assert value.SerializeToString() == bytes([0x08]) + _varint(-1) + _field(2, data) + _field(3, b"\x01" * 64)


def test_stock_onnx_round_trip_keeps_struct_parts(tmp_path):
    model = base_model()
    (index,) = S.add_struct_types(model, linear_int4_128())
    S.add_struct_values(model, S.make_struct_value("weight", index, raw_data=bytes(range(64))))
    S.add_value_infos(model, value_info=[S.make_struct_value_info("s", index)])
    data = model.SerializeToString()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    reloaded = onnx.load(path)
    assert reloaded.SerializeToString() == data  # stock load/save: unknown fields written back
    onnx.save(onnx.load_from_string(data), tmp_path / "again.onnx")
    assert (tmp_path / "again.onnx").read_bytes() == data
    assert S.get_struct_types(path)[0] == linear_int4_128()
    assert S.get_struct_values(reloaded)[0].raw_data == bytes(range(64))
    S.check_model(path)


def test_overlay_round_trip_is_lossless():
    model = base_model()
    S.add_struct_types(model, linear_int4_128())
    assert S.to_onnx(S.from_onnx(model)).SerializeToString() == model.SerializeToString()


def test_import_guard_refuses_a_clashing_onnx(monkeypatch):
    class FakeDescriptor:
        fields_by_number = {27: type("F", (), {"name": "future_field"})()}

    monkeypatch.setattr(onnx, "ModelProto", type("ModelProto", (), {"DESCRIPTOR": FakeDescriptor}))
    with pytest.raises(ImportError, match=r"ModelProto\.future_field = 27"):
        _proto._check_field_numbers()


@pytest.mark.slow
def test_generated_bindings_have_no_drift():
    pytest.importorskip("grpc_tools")
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, str(root / "schemas" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_generated_iq_grids_have_no_drift():
    """``python schemas/make_iq_grids.py --check`` reproduces iq_grids.py from gguf-py in memory."""
    pytest.importorskip("gguf")
    root = Path(__file__).resolve().parent.parent
    script = root / "schemas" / "make_iq_grids.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_iq_grids_drift_check_fails_on_a_stale_file(tmp_path, monkeypatch):
    """The --check mode can fail: a copy of the generator pointed at an edited table file."""
    pytest.importorskip("gguf")
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("make_iq_grids", root / "schemas" / "make_iq_grids.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = tmp_path / "iq_grids.py"
    stale.write_text(module.TARGET.read_text().replace("kvalues_iq4nl", "kvalues_iq4nl_edited"))
    monkeypatch.setattr(module, "TARGET", stale)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["make_iq_grids.py", "--check"])
    assert module.main() == 1
    assert "kvalues_iq4nl_edited" in stale.read_text()  # --check writes nothing


def test_a_copy_protobuf_refuses_near_2_gib_is_a_validation_error():
    """Within a few bytes of 2 GiB protobuf may parse a model and then refuse to write it or read
    the copy back (seen: a 2,147,483,547-byte model, DecodeError out of ``lower``); converting
    between the stock and overlay messages turns that into ``limit_exceeded``. The real size
    takes 10 GB to build, so protobuf's two refusals are stood in for here."""
    from google.protobuf.message import DecodeError, EncodeError  # noqa: PLC0415

    from onnx_struct.schema import model as model_module  # noqa: PLC0415

    class Refuses:
        def __init__(self, error):
            self.error = error

        def SerializeToString(self):  # noqa: N802 - protobuf's name
            raise self.error("Failed to serialize proto")

        def FromString(self, data):  # noqa: N802
            raise self.error("Error parsing message")

    for error in (DecodeError, EncodeError):
        with pytest.raises(S.ValidationError, match="too large for protobuf") as caught:
            model_module.to_onnx(Refuses(error))
        assert caught.value.code == "limit_exceeded"
