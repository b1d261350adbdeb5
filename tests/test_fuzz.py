"""Hostile bytes: whatever the input, the checker and size function answer with ValidationErrors,
never another exception, a crash, a read outside the model directory, or a huge allocation."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from support.models import base_model, rich_model

import onnx_struct as S

SEED = rich_model()


def _only_validation_errors(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "payload.bin").write_bytes(bytes(32))
        (directory / "m.onnx").write_bytes(data)
        for form in (data, str(directory / "m.onnx")):
            diagnostics = S.validate(form)
            assert all(isinstance(d, S.ValidationError) and str(d) for d in diagnostics)


def test_seed_is_valid(tmp_path):
    (tmp_path / "payload.bin").write_bytes(bytes(32))
    (tmp_path / "m.onnx").write_bytes(SEED)
    assert S.validate(tmp_path / "m.onnx") == []


@st.composite
def mutations(draw):
    data = bytearray(SEED)
    for _ in range(draw(st.integers(1, 6))):
        position = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        if action == "flip":
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            data[position] = draw(st.integers(0, 255))
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[position : position + draw(st.integers(1, 8))]
        else:
            del data[position:]
        if not data:
            break
    return bytes(data)


@pytest.mark.slow  # in-process, over a second of CPU: 300 mutated models
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutated_models_give_only_validation_errors(data):
    _only_validation_errors(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_declaration_bytes(data):
    try:
        declaration = S.StructTypeProto.FromString(data)
    except Exception:  # not parsable: protobuf's own error, before onnx_struct sees anything
        return
    try:
        assert S.size_in_bits(declaration) >= 0
    except S.ValidationError as error:
        assert str(error)


def test_hostile_constant_dims_do_not_allocate():
    huge = onnx.TensorProto(data_type=T.FLOAT, dims=[1 << 40])
    model = base_model()
    S.add_struct_types(model, S.make_structure([S.make_constant_field("k", huge)]))
    (error,) = S.validate(model)
    assert "constant holds 0 values in float_data for 1099511627776 elements" in str(error)


def test_view_refuses_a_hostile_constant_before_allocating():
    huge = onnx.TensorProto(data_type=T.FLOAT, dims=[1 << 40], name="k")
    declaration = S.make_structure([S.make_field("a", T.UINT8), S.make_constant_field("k", huge)])
    value = S.make_struct_value("v", declaration, raw_data=b"\x07")
    viewed = S.view(value)
    assert viewed["a"] == 7
    with pytest.raises(S.ValidationError, match="constant holds 0 values"):
        viewed["k"]


def _views_give_only_validation_errors(data: bytes) -> None:
    """Every struct value of a (mutated) model: view it, read every leaf, pack the leaves back,
    draw and describe its declaration; only ValidationErrors may come out."""
    from onnx_struct.tools.describe import describe  # noqa: PLC0415
    from onnx_struct.tools.svg import layout_svg  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "payload.bin").write_bytes(bytes(range(32)))
        try:
            model = S.load_model(data, base_dir=directory)
        except S.ValidationError:
            return
        for value in model.struct_values:
            try:
                viewed = S.view(value, model)
                leaves = viewed.leaves()
                declaration = value.struct_type if value.HasField("struct_type") else value.type
                assert S.pack(leaves, declaration, model) == viewed.buffer.tobytes()  # every bit is in a leaf
            except S.ValidationError as error:
                assert str(error)
        try:
            describe(model)
            for index in range(len(model.struct_types)):
                layout_svg(model, index)
        except S.ValidationError as error:
            assert str(error)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutated_models_view_pack_and_inspect_give_only_validation_errors(data):
    _views_give_only_validation_errors(data)
