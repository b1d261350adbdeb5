"""decode()/encode(): onnxruntime vs onnx's reference evaluator vs independent numpy oracles."""

from __future__ import annotations

import threading
import time
import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh
from support.models import (
    OPSET,
    bitpack_declaration,
    cast_decoder,
    const,
    linear_decoder,
    linear_encoder,
    linear_int4_128,
    linear_model,
    q4_block_model,
)
from support.oracles import bitpack_oracle, int4_oracle, q4_oracle, q4_payload

import onnx_struct as S
from onnx_struct import limits
from onnx_struct.functions import models as function_models
from onnx_struct.layout import bits
from onnx_struct.runtime import feeds as runtime_feeds
from onnx_struct.runtime import runners as runtime

RUNTIMES = ["onnxruntime", "reference"]


@pytest.fixture
def rng():
    return np.random.default_rng(20260829)


def decode_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning expected on these paths
        return S.decode(*args, **kwargs)


# ---------------------------------------------------------------------- the three formats of the brief
@pytest.mark.parametrize("runtime_name", RUNTIMES)
def test_linear_int4_128_inline(rng, runtime_name):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    value = S.make_struct_value("weight", linear_int4_128(decoder=linear_decoder()), payload)
    out = decode_quietly(value, runtime=runtime_name)
    assert out.dtype == np.float32 and out.shape == (128,)
    np.testing.assert_array_equal(out, int4_oracle(payload).astype(np.float32) * np.float32(0.125))


@pytest.mark.parametrize("runtime_name", RUNTIMES)
def test_linear_with_zero_point_by_name_and_index(rng, runtime_name, as_form):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    model = linear_model(payload)
    declaration = linear_int4_128(decoder=linear_decoder(), scale=0.5, zero_point=3)
    (index,) = S.add_struct_types(model, declaration)
    S.add_struct_values(model, S.make_struct_value("shifted", index, raw_data=payload))
    out = decode_quietly("shifted", as_form(model), runtime=runtime_name)
    np.testing.assert_array_equal(out, ((int4_oracle(payload) - 3) * 0.5).astype(np.float32))


@pytest.mark.parametrize("runtime_name", RUNTIMES)
@pytest.mark.parametrize("n", [1, 5, 64])
def test_q4_blocks_of_18_bytes(rng, runtime_name, n):
    payload = q4_payload(rng, n)
    model, _ = q4_block_model(payload, n)
    out = decode_quietly("w", model, runtime=runtime_name)
    assert out.shape == (n, 32)
    np.testing.assert_array_equal(out, q4_oracle(payload))


@pytest.mark.parametrize("runtime_name", RUNTIMES)
def test_bit_packing_root(rng, runtime_name):
    n = 37
    payload = rng.integers(0, 256, 2 * n, dtype=np.uint8).tobytes()
    out = decode_quietly(S.make_struct_value("r", bitpack_declaration(n), payload), runtime=runtime_name)
    np.testing.assert_array_equal(out, bitpack_oracle(payload))


@settings(max_examples=25, deadline=None)
@given(blocks=st.binary(min_size=18 * 4, max_size=18 * 4))
def test_runtimes_agree_on_arbitrary_bytes(blocks):
    # Any bytes, so also NaN/inf/subnormal scales: all three must agree bit for bit (NaN = NaN).
    model, root = q4_block_model(blocks, 4)
    value = S.make_struct_value("w", root, raw_data=blocks)
    a = decode_quietly(value, model)
    b = decode_quietly(value, model, runtime="reference")
    with np.errstate(invalid="ignore", over="ignore"):
        expected = q4_oracle(blocks)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    np.testing.assert_array_equal(a, expected)


# ---------------------------------------------------------------------- leaf feeding
def test_sub_byte_leaf_not_row_aligned_is_packed_from_the_view(rng):
    # {flag: UINT8, v: INT4[3]} x n: each v row is 12 bits, so rows do not own whole bytes.
    n = 10
    element = S.make_structure(
        [S.make_field("flag", TensorProto.UINT8), S.make_field("v", S.make_tensor_type(TensorProto.INT4, [3]))]
    )
    decoder = oh.make_function(
        "t", "v_only", ["v"], ["y"], [oh.make_node("Cast", ["v"], ["y"], to=TensorProto.FLOAT)], OPSET
    )
    root = S.make_array(S.make_type_reference(0), n, decoder=decoder)
    payload = rng.integers(0, 256, (20 * n + 7) // 8, dtype=np.uint8).tobytes()
    value = S.make_struct_value("x", root, payload)
    bits = np.unpackbits(np.frombuffer(payload, np.uint8), bitorder="little")
    starts = np.arange(n)[:, None] * 20 + 8 + np.arange(3)[None, :] * 4
    nibble = sum(bits[starts + k].astype(np.int64) << k for k in range(4))
    expected = np.where(nibble >= 8, nibble - 16, nibble).astype(np.float32)
    for name in RUNTIMES:
        np.testing.assert_array_equal(S.decode(value, [element], runtime=name), expected)


@pytest.mark.parametrize(
    ("elem_type", "dtype"),
    [
        (TensorProto.BFLOAT16, ml_dtypes.bfloat16),
        (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
        (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
        (TensorProto.UINT2, None),
        (TensorProto.FLOAT16, np.float16),
    ],
)
def test_types_numpy_cannot_hand_to_onnxruntime(rng, elem_type, dtype):
    count = 24
    opset = 25 if elem_type == TensorProto.UINT2 else 21  # Cast takes UINT2 from opset 25
    declaration = S.make_array(elem_type, count, decoder=cast_decoder(opset=opset))
    if dtype is None:  # UINT2: four values per byte, LSB first
        payload = rng.integers(0, 256, count // 4, dtype=np.uint8).tobytes()
        data = np.frombuffer(payload, np.uint8)
        expected = np.stack([(data >> s) & 3 for s in (0, 2, 4, 6)], axis=-1).reshape(-1).astype(np.float32)
    else:
        values = rng.uniform(-4, 4, count).astype(dtype)
        payload = values.tobytes()
        expected = values.astype(np.float32)
    out = decode_quietly(S.make_struct_value("x", declaration, payload))
    np.testing.assert_array_equal(out, expected)


def test_feeds_are_zero_copy():
    packed = np.frombuffer(bytes(range(16)), dtype=np.uint8)
    feed = runtime.Feed(TensorProto.INT4, (4, 8), packed=packed)
    assert feed.ort_value().data_ptr() == packed.ctypes.data
    values = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert runtime.Feed(TensorProto.BFLOAT16, (6,), array=values).ort_value().data_ptr() == values.ctypes.data


def test_int4_leaf_of_a_contiguous_value_is_fed_straight_from_the_payload(rng):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    value = S.make_struct_value("weight", linear_int4_128(decoder=linear_decoder()), payload)
    struct_view = S.view(value)
    feeds, constants = runtime_feeds.leaf_feeds(struct_view, {"values": struct_view.leaf("values")})
    assert feeds["values"].packed.ctypes.data == struct_view.buffer.ctypes.data  # no copy at all
    assert constants == []


def test_pack_and_unpack_bits_against_numpy():
    values = np.array([-8, 7, -1, 0, 3], dtype=ml_dtypes.int4)
    packed = bits.pack_sub_byte(values, 4)
    assert packed.tolist() == [0x78, 0x0F, 0x03]
    np.testing.assert_array_equal(bits.unpack_sub_byte(packed, 4, 5).view(ml_dtypes.int4), values)
    two_bit = np.array([1, 2, 3, 0, 3], dtype=np.uint8)
    assert bits.pack_sub_byte(two_bit, 2).tolist() == [0b00111001, 0b11]


# ---------------------------------------------------------------------- fallback and errors
def test_float4_falls_back_to_the_reference_evaluator_with_a_warning(rng):
    values = np.array([-6, -1, 0.5, 3, 0, 1.5, -0.5, 4], dtype=ml_dtypes.float4_e2m1fn)
    payload = bits.pack_sub_byte(values, 4).tobytes()
    value = S.make_struct_value("x", S.make_array(TensorProto.FLOAT4E2M1, 8, decoder=cast_decoder(opset=23)), payload)
    with pytest.warns(RuntimeWarning, match="ReferenceEvaluator"):
        out = S.decode(value)
    np.testing.assert_array_equal(out, values.astype(np.float32))


def test_reference_runtime_is_forced_without_warning(rng):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    value = S.make_struct_value("weight", linear_int4_128(decoder=linear_decoder()), payload)
    runtime.clear_cache()
    decode_quietly(value, runtime="reference")
    assert all(r.runtime == "reference" for r in runtime._cache.values())
    with pytest.raises(ValueError, match="runtime must be one of"):
        S.decode(value, runtime="tvm")


def test_value_without_decoder_is_rejected():
    value = S.make_struct_value("raw", S.make_array(TensorProto.UINT8, 4), b"abcd")
    with pytest.raises(S.ValidationError, match="has no decoder") as info:
        S.decode(value)
    assert info.value.path == "struct value 'raw'.struct_type"


def test_opset_newer_than_onnxruntime_names_the_declaration():
    _, max_opset = runtime.ort_limits()
    decoder = oh.make_function(
        "t", "future", ["x"], ["y"], [oh.make_node("Identity", ["x"], ["y"])], [oh.make_opsetid("", max_opset + 1)]
    )
    value = S.make_struct_value("x", S.make_array(TensorProto.UINT8, 4, name="FUTURE", decoder=decoder), b"abcd")
    with pytest.raises(S.ValidationError, match=f"supports up to {max_opset}") as info:
        S.decode(value)
    assert "('FUTURE').decoder ('future')" in info.value.path


def test_decoder_failing_at_run_time_is_a_validation_error():
    nodes = [const("shape", TensorProto.INT64, [1], [5]), oh.make_node("Reshape", ["x", "shape"], ["y"])]
    decoder = oh.make_function("t", "bad", ["x"], ["y"], nodes, OPSET)
    value = S.make_struct_value("x", S.make_array(TensorProto.UINT8, 4, decoder=decoder), b"abcd")
    for name in RUNTIMES:
        with pytest.raises(S.ValidationError, match="decoder \\('bad'\\)"):
            S.decode(value, runtime=name)


def test_payload_of_the_wrong_size_is_rejected_before_running():
    value = S.make_struct_value("weight", linear_int4_128(decoder=linear_decoder()), bytes(63))
    with pytest.raises(S.ValidationError, match="63 bytes; the type requires 64"):
        S.decode(value)


# ---------------------------------------------------------------------- sessions
def test_sessions_are_cached_per_decoder_and_leaf_signature(rng, monkeypatch):
    runtime.clear_cache()
    built = []
    original = runtime.FunctionRunner.__init__

    def counting(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(runtime.FunctionRunner, "__init__", counting)
    for _ in range(3):
        payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
        S.decode(S.make_struct_value("w", linear_int4_128(decoder=linear_decoder()), payload))
    assert len(built) == 1
    S.decode(
        S.make_struct_value("w", linear_int4_128(decoder=linear_decoder(), scale=0.25), bytes(64))
    )  # other constant
    model, _ = q4_block_model(q4_payload(rng, 2), 2)
    S.decode("w", model)
    model, _ = q4_block_model(q4_payload(rng, 3), 3)  # other leaf shapes
    S.decode("w", model)
    assert len(built) == 4


def test_concurrent_first_decodes_build_one_session(rng, monkeypatch):
    # Threads decoding values of one new format at once must share one session: building it is
    # the expensive part (and each holds its own kernels and arena).
    runtime.clear_cache()
    built = []
    original = runtime.FunctionRunner.__init__

    def slow_counting(self, *args, **kwargs):
        built.append(1)
        time.sleep(0.05)  # widen the window in which a second thread could miss the cache
        original(self, *args, **kwargs)

    monkeypatch.setattr(runtime.FunctionRunner, "__init__", slow_counting)
    payloads = [rng.integers(0, 256, 64, dtype=np.uint8).tobytes() for _ in range(4)]
    results: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(payloads))

    def work(k: int) -> None:
        start.wait()
        results[k] = S.decode(S.make_struct_value("w", linear_int4_128(decoder=linear_decoder()), payloads[k]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(payloads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1 and runtime.cache_size() == 1
    for k, payload in enumerate(payloads):
        np.testing.assert_array_equal(results[k], int4_oracle(payload).astype(np.float32) * np.float32(0.125))


def test_session_cache_is_bounded(monkeypatch, rng):
    runtime.clear_cache()
    monkeypatch.setattr(limits, "SESSION_CACHE_SIZE", 2)
    for n in (1, 2, 3):
        model, _ = q4_block_model(q4_payload(rng, n), n)
        S.decode("w", model)
    assert runtime.cache_size() == 2


def test_trailing_reshape_is_applied_in_numpy(rng):
    nodes = [
        const("shape", TensorProto.INT64, [3], [0, 4, -1]),
        oh.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
        oh.make_node("Reshape", ["f", "shape"], ["y"]),
    ]
    decoder = oh.make_function("t", "reshaped", ["x"], ["y"], nodes, OPSET)
    declaration = S.make_array(S.make_tensor_type(TensorProto.UINT8, [2, 8]), 1, decoder=decoder)
    payload = rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    runtime.clear_cache()
    out = decode_quietly(S.make_struct_value("x", declaration, payload))
    (runner,) = runtime._cache.values()
    assert runner._reshape == (0, 4, -1)
    np.testing.assert_array_equal(out, np.frombuffer(payload, np.uint8).reshape(1, 4, 4).astype(np.float32))
    np.testing.assert_array_equal(S.decode(S.make_struct_value("x", declaration, payload), runtime="reference"), out)


def test_external_payload(tmp_path, rng):
    payload = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
    (tmp_path / "w.bin").write_bytes(b"\xff" * 10 + payload)
    stripped = S.from_onnx(linear_model(payload))
    value = stripped.graph.struct_initializer[0]
    value.ClearField("raw_data")
    for key, text in (("location", "w.bin"), ("offset", "10"), ("length", "64")):
        value.external_data.add(key=key, value=text)
    path = tmp_path / "m.onnx"
    path.write_bytes(stripped.SerializeToString())
    np.testing.assert_array_equal(S.decode("weight", str(path)), int4_oracle(payload).astype(np.float32) * 0.125)


# ---------------------------------------------------------------------- encode
@pytest.mark.parametrize("runtime_name", RUNTIMES)
def test_encode_then_decode_round_trips_representable_values(rng, runtime_name):
    declaration = linear_int4_128(decoder=linear_decoder(), encoder=linear_encoder())
    x = (rng.integers(-8, 8, 128) * 0.125).astype(np.float32)
    value = S.encode(x, declaration, name="w", runtime=runtime_name)
    assert value.name == "w" and value.type == -1 and len(value.raw_data) == 64
    q = np.round(x / 0.125).astype(np.int64) & 0x0F
    assert value.raw_data == (q[0::2] | (q[1::2] << 4)).astype(np.uint8).tobytes()  # hand-packed oracle
    np.testing.assert_array_equal(S.decode(value, runtime=runtime_name), x)


def test_encode_by_index_and_unproduced_leaves_are_zero_bits():
    # {values: INT4[128], tag: UINT8, scale, zero_point}: the encoder does not produce "tag".
    fields = list(linear_int4_128(decoder=linear_decoder()).structure.field)
    fields.insert(1, S.make_field("tag", TensorProto.UINT8))
    declaration = S.make_structure(fields, decoder=linear_decoder(), encoder=linear_encoder())
    model = linear_model(bytes(64))
    (index,) = S.add_struct_types(model, declaration)
    x = np.full(128, -0.25, dtype=np.float32)
    value = S.encode(x, index, model, name="t")
    assert value.type == index and not value.HasField("struct_type")
    assert value.raw_data == bytes([0xEE]) * 64 + b"\x00"  # -2 in both nibbles, then the zero tag


def test_encode_without_encoder_or_with_bad_output():
    with pytest.raises(S.ValidationError, match="has no encoder"):
        S.encode(np.zeros(128, np.float32), linear_int4_128(decoder=linear_decoder()))
    # The encoder maps its input elementwise, so a 64-element input gives 64 values for 128.
    wrong = linear_encoder()
    with pytest.raises(S.ValidationError, match="has shape \\(64,\\); leaf 'values' is \\(128,\\)"):
        S.encode(np.zeros(64, np.float32), linear_int4_128(decoder=linear_decoder(), encoder=wrong))


# ---------------------------------------------------------------------- binding rules in check_model
def _declaration_model(declaration: S.StructTypeProto) -> onnx.ModelProto:
    model = linear_model(bytes(64))
    S.add_struct_types(model, declaration)
    return model


def test_check_model_rejects_a_decoder_input_bound_to_no_leaf():
    decoder = linear_decoder()
    decoder.input[0] = "valuez"
    decoder.node[0].input[0] = "valuez"
    with pytest.raises(S.ValidationError, match="decoder input 'valuez' binds to no leaf") as info:
        S.check_model(_declaration_model(linear_int4_128(decoder=decoder)))
    assert info.value.path == "struct_types[1].decoder ('linear')"


def test_check_model_rejects_a_decoder_with_two_outputs():
    decoder = linear_decoder()
    decoder.output.append("values")
    with pytest.raises(S.ValidationError, match="exactly one output") as info:
        S.check_model(_declaration_model(linear_int4_128(decoder=decoder)))
    assert info.value.path == "struct_types[1].decoder ('linear')"


def test_check_model_rejects_an_encoder_with_two_inputs_or_a_constant_output():
    encoder = linear_encoder()
    encoder.input.append("extra")
    with pytest.raises(S.ValidationError, match="exactly one input") as info:
        S.check_model(_declaration_model(linear_int4_128(decoder=linear_decoder(), encoder=encoder)))
    assert info.value.path == "struct_types[1].encoder ('linear_encode')"
    encoder = oh.make_function("t", "enc", ["x"], ["scale"], [oh.make_node("Identity", ["x"], ["scale"])], OPSET)
    with pytest.raises(S.ValidationError, match="names constant leaf 'scale'"):
        S.check_model(_declaration_model(linear_int4_128(decoder=linear_decoder(), encoder=encoder)))


def test_decode_applies_the_same_binding_rules():
    decoder = linear_decoder()
    decoder.input[0] = "valuez"
    with pytest.raises(S.ValidationError, match="binds to no leaf"):
        S.decode(S.make_struct_value("w", linear_int4_128(decoder=decoder), bytes(64)))


def test_single_unnamed_leaf_binds_to_the_only_input_whatever_its_name(rng):
    payload = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
    value = S.make_struct_value("x", S.make_array(TensorProto.UINT8, 8, decoder=cast_decoder()), payload)
    np.testing.assert_array_equal(decode_quietly(value), np.frombuffer(payload, np.uint8).astype(np.float32))


def test_nested_declaration_decoders_are_not_composed(rng):
    # The block declaration has a decoder that would fail; only the root's decoder runs.
    n = 3
    payload = q4_payload(rng, n)
    model, root_index = q4_block_model(payload, n)
    overlay = S.from_onnx(model)
    overlay.struct_types[0].decoder.CopyFrom(
        oh.make_function("t", "never", ["d"], ["y"], [oh.make_node("Not", ["d"], ["y"])], OPSET)
    )
    np.testing.assert_array_equal(decode_quietly("w", S.to_onnx(overlay)), q4_oracle(payload))


def test_contiguous_copies_strided_rows_exactly(rng):
    payload = rng.integers(0, 256, 18 * 7, dtype=np.uint8)
    rows = np.lib.stride_tricks.as_strided(payload[2:], (7, 16), (18, 1))
    np.testing.assert_array_equal(function_models.contiguous(rows), payload.reshape(7, 18)[:, 2:])
    assert function_models.contiguous(rows).flags.c_contiguous
    halves = np.ndarray((7, 2, 4), dtype="<u2", buffer=payload, offset=2, strides=(18, 8, 2))
    np.testing.assert_array_equal(function_models.contiguous(halves), halves.copy())
    columns = payload.reshape(7, 18)[:, ::3]  # not row-contiguous: the plain copy
    np.testing.assert_array_equal(function_models.contiguous(columns), columns.copy())


def test_decode_of_something_that_is_not_a_value_is_a_type_error():
    with pytest.raises(TypeError, match="expected a StructProto or the name of a struct value, got int"):
        S.decode(3, S.load_model(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))))
