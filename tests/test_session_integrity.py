"""The session holds the right weights: never the working directory's, never another session's,
only the ones the graph reads; a caller's SessionOptions is left as given. Oracles: numpy float64
products over the bytes written here, and stock onnxruntime (docs/execution.md, "Memory";
docs/security.md, "Files")."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from test_weights_file import K, bias_model, expected

import onnx_struct as S
from onnx_struct.runtime import runners

CPU = ["CPUExecutionProvider"]


def plain_bias_model(tmp_path, location: str = "weights.bin") -> tuple[str, np.ndarray]:
    """y = x + b, b an external float initializer in ``location`` of the model's directory."""
    bias = np.arange(4, dtype=np.float32) + 1
    b = numpy_helper.from_array(bias, "b")
    b.ClearField("raw_data")
    b.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(bias.nbytes))):
        b.external_data.add(key=key, value=value)
    graph = oh.make_graph(
        [oh.make_node("Add", ["x", "b"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [b],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    (tmp_path / location).write_bytes(bias.tobytes())
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path), bias


@pytest.mark.parametrize("options", [False, True])
def test_a_data_file_named_weights_bin_is_the_models_not_the_working_directorys(tmp_path, monkeypatch, options):
    """The model's own ``weights.bin`` was skipped as if it were the session's repacked weights,
    and onnxruntime then read ``./weights.bin`` of the working directory."""
    model_dir, elsewhere = tmp_path / "model", tmp_path / "cwd"
    model_dir.mkdir()
    elsewhere.mkdir()
    path, bias = plain_bias_model(model_dir)
    (elsewhere / "weights.bin").write_bytes((np.full(4, 1000, np.float32)).tobytes())
    monkeypatch.chdir(elsewhere)
    x = np.zeros(4, np.float32)
    (y,) = S.InferenceSession(path, ort.SessionOptions() if options else None).run(None, {"x": x})
    np.testing.assert_array_equal(y, bias)
    # The quantized route too: the struct model's stock bias in a file named weights.bin.
    qpath, weight, qbias = bias_model(model_dir, bias_file="weights.bin")
    (elsewhere / "weights.bin").write_bytes(bytes(10_000))
    xs = np.random.default_rng(3).standard_normal((2, K)).astype(np.float32)
    (y,) = S.InferenceSession(qpath, ort.SessionOptions() if options else None, accuracy_level=0).run(None, {"x": xs})
    reference = expected(xs, weight, qbias)
    assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))


FIELDS = (
    "enable_cpu_mem_arena",
    "enable_mem_pattern",
    "enable_mem_reuse",
    "enable_profiling",
    "execution_mode",
    "execution_order",
    "graph_optimization_level",
    "inter_op_num_threads",
    "intra_op_num_threads",
    "log_severity_level",
    "log_verbosity_level",
    "logid",
    "optimized_model_filepath",
    "use_deterministic_compute",
)
KEYS = ("session.qdq_matmulnbits_accuracy_level", "session.model_external_initializers_file_folder_path")


def snapshot(options) -> dict:
    fields = {name: getattr(options, name) for name in FIELDS}
    for key in KEYS:
        try:
            fields[key] = options.get_session_config_entry(key)
        except RuntimeError:  # not set
            fields[key] = None
    return fields


def test_a_callers_options_are_left_as_given_and_reusable(tmp_path):
    """Two sessions from one options object (the second failed with a raw RuntimeError: the first
    had added fixed-name in-memory files to it), the options' fields unchanged."""
    path, weight, bias = bias_model(tmp_path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    before = snapshot(options)
    xs = np.random.default_rng(4).standard_normal((2, K)).astype(np.float32)
    reference = expected(xs, weight, bias)
    for level in (0, 0):
        (y,) = S.InferenceSession(path, options, accuracy_level=level).run(None, {"x": xs})
        assert np.max(np.abs(y - reference)) <= 1e-5 * np.max(np.abs(reference))
        assert snapshot(options) == before
    plain, plain_bias = plain_bias_model(tmp_path, "b2.bin")
    for _ in range(2):
        (y,) = S.InferenceSession(plain, options).run(None, {"x": np.zeros(4, np.float32)})
        np.testing.assert_array_equal(y, plain_bias)
    assert snapshot(options) == before


def test_sessions_keep_their_own_weights_through_the_buffer_pool_and_set_providers(tmp_path):
    """A session whose external tensors went to onnxruntime in memory keeps computing with them
    after their buffers went back to the pool, another session reused it and the cache was
    cleared; set_providers, which would re-create it from those buffers, refuses clearly. A
    self-contained session's set_providers works and changes no output."""
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    first, bias = plain_bias_model(first_dir, "b.bin")
    second, _ = plain_bias_model(second_dir, "b.bin")
    (second_dir / "b.bin").write_bytes(np.full(4, -7, np.float32).tobytes())
    a = S.InferenceSession(first)
    b = S.InferenceSession(second)
    runners.clear_cache()
    x = np.zeros(4, np.float32)
    np.testing.assert_array_equal(a.run(None, {"x": x})[0], bias)
    np.testing.assert_array_equal(b.run(None, {"x": x})[0], np.full(4, -7, np.float32))
    with pytest.raises(NotImplementedError, match="providers"):
        a.set_providers(CPU)
    np.testing.assert_array_equal(a.run(None, {"x": x})[0], bias)
    inline = onnx.load(first)
    inline.graph.initializer[0].CopyFrom(numpy_helper.from_array(bias, "b"))
    c = S.InferenceSession(inline)
    c.set_providers(CPU)
    np.testing.assert_array_equal(c.run(None, {"x": x})[0], bias)


def test_a_negative_dim_on_an_external_initializer_names_it(tmp_path):
    path, _ = plain_bias_model(tmp_path, "b.bin")
    model = onnx.load(path, load_external_data=False)
    model.graph.initializer[0].dims[0] = -4
    onnx.save(model, path)
    for options in (None, ort.SessionOptions()):
        with pytest.raises(S.ValidationError) as info:
            S.InferenceSession(path, options)
        assert info.value.path == "graph.initializer[0] ('b').dims" and info.value.code == "bad_shape"


def test_unused_struct_values_are_not_lowered():
    """Only the struct values the graph reads get leaves and a decoder call."""
    from test_lower import cast_decoder  # noqa: PLC0415

    graph = oh.make_graph(
        [oh.make_node("Identity", ["used"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [4])]
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=cast_decoder()))
    S.add_struct_values(
        model,
        S.make_struct_value("used", index, raw_data=bytes([1, 2, 3, 4])),
        S.make_struct_value("unused", index, raw_data=bytes([9, 9, 9, 9])),
    )
    lowered = S.lower(model)
    assert not [t.name for t in lowered.graph.initializer if t.name.startswith("unused")]
    assert [n.output[0] for n in lowered.graph.node if n.domain != ""] == ["used"]
    (y,) = S.InferenceSession(model).run(None, {})
    np.testing.assert_array_equal(y, [1, 2, 3, 4])


def test_an_ir3_model_keeps_its_initializers_constant_when_lowered():
    """IR 3 lists every initializer as a graph input, and onnxruntime treats them as constants;
    lowering raises the IR for its decoder functions: those inputs go, so the weights are neither
    overridable nor computed differently (a Conv differed by 2.4e-7 from onnxruntime)."""
    from test_lower import cast_decoder  # noqa: PLC0415

    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
            oh.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
        ],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    plain = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 8)], ir_version=3)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    stock = ort.InferenceSession(plain.SerializeToString(), providers=CPU)
    (expected_y,) = stock.run(None, {"x": x})
    model = onnx.ModelProto()
    model.CopyFrom(plain)
    model.graph.output.append(oh.make_tensor_value_info("v", TensorProto.FLOAT, [4]))
    (index,) = S.add_struct_types(model, S.make_array(TensorProto.UINT8, 4, decoder=cast_decoder()))
    S.add_struct_values(model, S.make_struct_value("v", index, raw_data=bytes([1, 2, 3, 4])))
    lowered = S.lower(model)
    assert lowered.ir_version >= 8 and "w" not in [i.name for i in lowered.graph.input]
    session = S.InferenceSession(model, execution="decode")
    assert session.get_overridable_initializers() == [] == stock.get_overridable_initializers()
    y, v = session.run(None, {"x": x})
    assert y.tobytes() == expected_y.tobytes()
    np.testing.assert_array_equal(v, [1, 2, 3, 4])


def test_quantizes_probe_never_reads_the_working_directory(tmp_path, monkeypatch):
    """quantize's probe of a model given without a directory: an external tensor is a refusal,
    whatever the working directory holds (a file named weights.bin there was read before)."""
    from onnx_struct.passes.quantize import runtime_error  # noqa: PLC0415

    path, _ = plain_bias_model(tmp_path)
    model = onnx.load(path, load_external_data=False)
    monkeypatch.chdir(tmp_path)  # weights.bin is right here
    assert "base_dir" in runtime_error(model)


def test_one_session_run_from_threads_gives_the_sequential_outputs(tmp_path):
    """Concurrent runs of one session (quantized weights, a caller's options) give what the same
    runs give one after another."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    path, _, _ = bias_model(tmp_path)
    session = S.InferenceSession(path, ort.SessionOptions())
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((3, K)).astype(np.float32) for _ in range(16)]
    sequential = [session.run(None, {"x": x})[0] for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(lambda x: session.run(None, {"x": x})[0], inputs))
    for a, b in zip(concurrent, sequential, strict=True):
        assert a.tobytes() == b.tobytes()
