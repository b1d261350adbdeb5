"""onnx_struct.InferenceSession: struct values and struct inputs (StructProto or bytes) in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from support.models import OPSET, cast_decoder, linear_decoder, linear_int4_128, linear_model, q4_block_model
from support.oracles import int4_oracle, q4_oracle, q4_payload

import onnx_struct as S


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def struct_input_model() -> tuple[onnx.ModelProto, int]:
    """Y = X * W with W a struct-typed graph input of type LINEAR_INT4_128."""
    graph = oh.make_graph(
        [oh.make_node("Mul", ["X", "W"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [128])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [128])],
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    (index,) = S.add_struct_types(model, linear_int4_128(decoder=linear_decoder()))
    S.add_value_infos(model, inputs=[S.make_struct_value_info("W", index)])
    return model, index


@pytest.mark.parametrize("compact", [False, True])
def test_model_with_struct_values(rng, compact, as_form):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    session = S.InferenceSession(as_form(linear_model(payload)), compact=compact)
    x = rng.standard_normal(128).astype(np.float32)
    (y,) = session.run(None, {"X": x})
    np.testing.assert_array_equal(y, np.maximum(x + int4_oracle(payload).astype(np.float32) * np.float32(0.125), 0))
    assert [i.name for i in session.get_inputs()] == ["X"]  # onnxruntime's own methods pass through


def test_struct_input_accepts_a_struct_value_or_bytes(rng):
    model, index = struct_input_model()
    session = S.InferenceSession(model)
    assert session.struct_inputs == {"W": ["W::values"]}
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    x = rng.standard_normal(128).astype(np.float32)
    expected = x * (int4_oracle(payload).astype(np.float32) * np.float32(0.125))
    for w in (
        S.make_struct_value("w", index, raw_data=payload),
        S.make_struct_value("w", linear_int4_128(decoder=linear_decoder()), payload),
        payload,
        bytearray(payload),
        np.frombuffer(payload, np.uint8),
    ):
        (y,) = session.run(["Y"], {"X": x, "W": w})
        np.testing.assert_array_equal(y, expected)


def test_a_missing_struct_input_is_named_as_the_model_names_it(rng):
    """onnxruntime named its lowered leaf (``W::values``), which the caller never wrote (found by a
    red-team pass)."""
    model, _ = struct_input_model()
    session = S.InferenceSession(model)
    with pytest.raises(ValueError, match=r"Required struct inputs \(\['W'\]\) are missing"):
        session.run(None, {"X": rng.standard_normal(128).astype(np.float32)})


def test_a_feed_naming_a_leaf_of_a_struct_input_is_refused(rng):
    """Found by a red-team pass: a feed ``W::values`` beside ``W`` silently replaced the leaf split
    from ``W``'s payload."""
    model, _ = struct_input_model()
    session = S.InferenceSession(model)
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    x = rng.standard_normal(128).astype(np.float32)
    zeros = np.zeros(128, np.int8).astype(np.dtype("int8"))
    with pytest.raises(ValueError, match=r"input_feed names 'W::values', a leaf of the struct input 'W'"):
        session.run(None, {"X": x, "W": payload, "W::values": zeros})
    (y,) = session.run(None, {"X": x, "W": payload})
    np.testing.assert_array_equal(y, x * (int4_oracle(payload).astype(np.float32) * np.float32(0.125)))


def test_struct_input_of_blocks(rng):
    n = 5
    payload = q4_payload(rng, n)
    model, root = q4_block_model(payload, n)
    graph = oh.make_graph(
        [oh.make_node("Abs", ["B"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [n, 32])]
    )
    struct_model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    S.add_struct_types(struct_model, *S.get_struct_types(model))
    S.add_value_infos(struct_model, inputs=[S.make_struct_value_info("B", root)])
    session = S.InferenceSession(struct_model)
    (y,) = session.run(None, {"B": payload})
    np.testing.assert_array_equal(y, np.abs(q4_oracle(payload)))


def test_wrong_struct_inputs_are_rejected(rng):
    model, index = struct_input_model()
    session = S.InferenceSession(model)
    x = np.zeros(128, np.float32)
    with pytest.raises(S.ValidationError, match="payload is 63 bytes; the type requires 64"):
        session.run(None, {"X": x, "W": bytes(63)})
    other = S.make_struct_value("w", S.make_array(TensorProto.UINT8, 64), bytes(64))
    with pytest.raises(S.ValidationError, match="another type") as info:
        session.run(None, {"X": x, "W": other})
    assert info.value.path == "input 'W'"
    with pytest.raises(S.ValidationError, match="expects a StructProto or payload bytes"):
        session.run(None, {"X": x, "W": 3.0})


def test_sequence_of_struct_inputs_is_rejected_when_the_session_is_created():
    graph = oh.make_graph([], "g", [], [])
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    S.add_struct_types(model, linear_int4_128(decoder=linear_decoder()))
    S.add_value_infos(model, inputs=[S.make_value_info("seq", S.make_sequence_type_proto(S.make_struct_type_proto(0)))])
    with pytest.raises(S.ValidationError, match="sequence_type") as info:
        S.InferenceSession(model)
    assert info.value.path == "graph.input[0] ('seq')"


def test_external_payload_read_from_the_models_directory(tmp_path, rng):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    (tmp_path / "w.bin").write_bytes(payload)
    overlay = S.from_onnx(linear_model(payload))
    value = overlay.graph.struct_initializer[0]
    value.ClearField("raw_data")
    value.external_data.add(key="location", value="w.bin")
    path = tmp_path / "m.onnx"
    path.write_bytes(overlay.SerializeToString())
    (y,) = S.InferenceSession(str(path)).run(None, {"X": np.zeros(128, np.float32)})
    np.testing.assert_array_equal(y, np.maximum(int4_oracle(payload) * np.float32(0.125), 0))


def test_lowered_model_onnxruntime_cannot_load_is_a_validation_error():
    graph = oh.make_graph(
        [oh.make_node("Identity", ["v"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [8])]
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=11)
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.FLOAT4E2M1, 8, decoder=cast_decoder(opset=23)))
    S.add_struct_values(model, S.make_struct_value("v", index, raw_data=bytes(4)))
    with pytest.raises(S.ValidationError, match="cannot load the lowered model"):
        S.InferenceSession(model)


@pytest.mark.parametrize("how", ["onnx_struct", "onnx"])
def test_stock_initializers_in_external_files_survive_lowering(tmp_path, rng, how):
    """A stock initializer saved as external data (by save_with_external_data's default or by
    onnx's own save_as_external_data) stays an initializer of the lowered model (it was dropped)."""
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    model = linear_model(payload)
    bias = rng.standard_normal(128).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(bias, "bias"))
    model.graph.node[1].input[0] = "biased"
    model.graph.node.insert(1, oh.make_node("Add", ["sum", "bias"], ["biased"]))
    path = tmp_path / "m.onnx"
    if how == "onnx_struct":
        S.save_with_external_data(model, path, size_threshold=0)
    else:
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, size_threshold=0)
    assert onnx.load(path, load_external_data=False).graph.initializer[0].data_location == TensorProto.EXTERNAL
    lowered = S.lower(str(path))
    assert "bias" in {t.name for t in lowered.graph.initializer}
    x = rng.standard_normal(128).astype(np.float32)
    (y,) = S.InferenceSession(str(path)).run(None, {"X": x})
    expected = np.maximum(x + int4_oracle(payload) * np.float32(0.125) + bias, 0)  # scale 0.125, zero point 0
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
