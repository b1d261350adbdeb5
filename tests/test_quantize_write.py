"""quantize's writer (passes/quantize_write.py): a result estimated past the inline limit goes to
OUT + OUT.data, its payloads and kept float tensors appended as they are produced.

The limit is lowered here (monkeypatched in onnx_struct.limits) so that a small model takes the
path a model past 2 GiB takes. Oracles: the inline result of the same quantization (its payload
bytes and its outputs in InferenceSession), gguf-py's quantizer for the bytes, and the float
tensors of the input file.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct import limits
from onnx_struct.cli import main
from onnx_struct.passes.quantize import estimate_bytes, quantize, read_model_deferred
from onnx_struct.passes.quantize_plan import build_plan, resolve_format

gguf = pytest.importorskip("gguf")
K = 256


def float_model(path) -> dict[str, np.ndarray]:
    """Two MatMul weights (quantized) and a large bias read by Add (kept as float, 64 KiB+),
    saved inline at ``path``; returns the arrays."""
    rng = np.random.default_rng(11)
    arrays = {
        "W1": rng.standard_normal((K, K), np.float32) * 0.1,
        "W2": rng.standard_normal((K, K), np.float32) * 0.1,
        "bias": rng.standard_normal((64, K), np.float32),
    }
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H"]),
        oh.make_node("MatMul", ["H", "W2"], ["G"]),
        oh.make_node("Add", ["G", "bias"], ["Y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "write",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [64, K])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [64, K])],
        [numpy_helper.from_array(a, n) for n, a in arrays.items()],
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10), path)
    return arrays


def _external(entries) -> dict[str, str]:
    return {e.key: e.value for e in entries}


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_a_result_past_the_inline_limit_streams_to_the_data_file(tmp_path, monkeypatch, capsys, fmt):
    arrays = float_model(tmp_path / "float.onnx")
    inline = quantize(tmp_path / "float.onnx", fmt)
    monkeypatch.setattr(limits, "INLINE_RESULT_LIMIT", 100_000)  # the result is about 0.3 MB
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(tmp_path / "float.onnx"), str(out), "--format", fmt, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # measured on the streamed result, read back from the data file
    assert report["bytes"] == out.stat().st_size and set(report["output_errors"]) == {"Y"}
    assert all(w["error"] is not None for w in report["weights"] if w["status"] == "quantized")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx", "q.onnx", "q.onnx.data"]  # no temporaries
    assert out.stat().st_size < 10_000  # the skeleton
    S.check_model(out)
    data = (tmp_path / "q.onnx.data").read_bytes()
    expected = {v.name: v.raw_data for v in S.get_struct_values(inline)}
    values = S.get_struct_values(out)
    assert sorted(v.name for v in values) == sorted(expected) == ["W1_T", "W2_T"]
    for value in values:
        entries = _external(value.external_data)
        offset, length = int(entries["offset"]), int(entries["length"])
        assert entries["location"] == "q.onnx.data" and offset % 4096 == 0 and not value.raw_data
        stored = data[offset : offset + length]
        assert stored == expected[value.name]
        weight = arrays[value.name.removesuffix("_T")]
        assert stored == gguf.quants.quantize(np.ascontiguousarray(weight.T), gguf.GGMLQuantizationType[fmt]).tobytes()
    (bias,) = [t for t in onnx.load(out, load_external_data=False).graph.initializer if t.name == "bias"]
    entries = _external(bias.external_data)
    assert bias.data_location == TensorProto.EXTERNAL and entries["location"] == "q.onnx.data"
    start = int(entries["offset"])
    np.testing.assert_array_equal(
        np.frombuffer(data[start : start + int(entries["length"])], "<f4"), arrays["bias"].ravel()
    )
    x = np.random.default_rng(0).standard_normal((64, K)).astype(np.float32)
    got = S.InferenceSession(str(out), accuracy_level=0).run(None, {"X": x})[0]
    want = S.InferenceSession(inline, accuracy_level=0).run(None, {"X": x})[0]
    np.testing.assert_array_equal(got, want)


def test_a_result_under_the_limit_is_one_file(tmp_path, capsys):
    float_model(tmp_path / "float.onnx")
    assert (
        main(["quantize", str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), "--format", "Q8_0", "--quiet"]) == 0
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx", "q.onnx"]
    assert all(v.raw_data for v in S.get_struct_values(tmp_path / "q.onnx"))


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0", "Q6_K"])
def test_the_estimate_is_the_inline_results_size_within_a_few_kilobytes(tmp_path, fmt):
    float_model(tmp_path / "float.onnx")
    stock, deferred = read_model_deferred(tmp_path / "float.onnx")
    planned = build_plan(stock, resolve_format(fmt), ("MatMul", "Gemm"), 4096, "input", True)
    estimate = estimate_bytes(stock, resolve_format(fmt), planned, deferred)
    actual = len(quantize(tmp_path / "float.onnx", fmt).SerializeToString())
    assert abs(estimate - actual) < 4096, (estimate, actual)


def test_the_estimate_counts_the_struct_values_an_input_already_holds(tmp_path):
    """A model quantized before (W1, W2 in Q8_0, 139264 payload bytes inline) with a new float
    weight: its values are part of the result, so they are part of the estimate (without them a
    result past the limit was written inline)."""
    float_model(tmp_path / "float.onnx")
    once = quantize(tmp_path / "float.onnx", "Q8_0")
    w3 = np.random.default_rng(3).standard_normal((K, K), np.float32)
    once.graph.initializer.append(numpy_helper.from_array(w3, "W3"))
    once.graph.node.append(oh.make_node("MatMul", ["Y", "W3"], ["Y3"]))
    once.graph.output[0].name = "Y3"
    onnx.save(once, tmp_path / "partly.onnx")
    fmt = resolve_format("Q4_0")
    stock, deferred = read_model_deferred(tmp_path / "partly.onnx")
    estimate = estimate_bytes(stock, fmt, build_plan(stock, fmt, ("MatMul", "Gemm"), 4096, "input", True), deferred)
    actual = len(quantize(tmp_path / "partly.onnx", fmt).SerializeToString())
    assert actual > 139264 and abs(estimate - actual) < 4096, (estimate, actual)


def test_a_link_at_the_data_file_is_refused_before_any_work(tmp_path, capsys):
    float_model(tmp_path / "float.onnx")
    (tmp_path / "victim").write_text("keep")
    (tmp_path / "q.onnx.data").symlink_to("victim")
    argv = ["quantize", str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), "--format", "Q8_0", "--external"]
    assert main(argv) == 2
    assert "'q.onnx.data' is a symbolic link" in capsys.readouterr().err
    assert (tmp_path / "victim").read_text() == "keep" and not (tmp_path / "q.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx", "q.onnx.data", "victim"]  # no temporary left


def test_another_models_data_file_is_not_replaced_by_external_out(tmp_path, capsys):
    float_model(tmp_path / "float.onnx")
    argv = ["quantize", str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), "--format", "Q8_0", "--external"]
    (tmp_path / "q.onnx.data").write_bytes(b"another model's weights")  # and no q.onnx that references it
    assert main([*argv, "--quiet"]) == 2
    assert "q.onnx.data: exists and is not the external data of" in capsys.readouterr().err
    assert (tmp_path / "q.onnx.data").read_bytes() == b"another model's weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx", "q.onnx.data"]  # no temporary left
    (tmp_path / "q.onnx.data").unlink()
    assert main([*argv, "--quiet"]) == 0
    first = (tmp_path / "q.onnx.data").read_bytes()
    assert main([*argv, "--quiet"]) == 0  # OUT's own data file is replaced with OUT
    assert (tmp_path / "q.onnx.data").read_bytes() == first


def test_another_models_data_file_is_not_replaced_by_an_automatic_external_out(tmp_path, monkeypatch, capsys):
    """A result made external by its estimate (past the inline limit) refuses an existing OUT.data
    that OUT does not reference, as --external does: nothing is replaced, nothing left behind."""
    float_model(tmp_path / "float.onnx")
    monkeypatch.setattr(limits, "INLINE_RESULT_LIMIT", 100_000)  # the result is about 0.3 MB
    argv = ["quantize", str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), "--format", "Q8_0", "--quiet"]
    (tmp_path / "q.onnx.data").write_bytes(b"another model's weights")
    assert main(argv) == 2
    assert "q.onnx.data: exists and is not the external data of" in capsys.readouterr().err
    assert (tmp_path / "q.onnx.data").read_bytes() == b"another model's weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx", "q.onnx.data"]
    (tmp_path / "q.onnx.data").unlink()
    assert main(argv) == 0 and (tmp_path / "q.onnx.data").stat().st_size > 100_000  # made external
    first = (tmp_path / "q.onnx.data").read_bytes()
    assert main(argv) == 0  # OUT's own data file is replaced with OUT
    assert (tmp_path / "q.onnx.data").read_bytes() == first
    monkeypatch.setattr(limits, "INLINE_RESULT_LIMIT", 1 << 40)  # an inline result never writes OUT.data
    (tmp_path / "other.onnx.data").write_bytes(b"x")
    assert main([*argv[:2], str(tmp_path / "other.onnx"), *argv[3:]]) == 0
    assert (tmp_path / "other.onnx.data").read_bytes() == b"x"


def test_an_input_with_external_data_is_read_one_weight_at_a_time(tmp_path, monkeypatch, capsys):
    """A model past 2 GiB keeps its weights in an external file: quantize leaves them there (the
    skeleton holds no weight) and reads each back when it encodes or copies it."""
    arrays = float_model(tmp_path / "inline.onnx")
    inline = quantize(onnx.load(tmp_path / "inline.onnx"), "Q8_0")
    (tmp_path / "in").mkdir()
    onnx.save(
        onnx.load(tmp_path / "inline.onnx"), tmp_path / "in" / "m.onnx", save_as_external_data=True, location="w.bin"
    )
    stock, deferred = read_model_deferred(tmp_path / "in" / "m.onnx")
    assert sorted(deferred.files) == ["W1", "W2", "bias"] and not any(t.raw_data for t in stock.graph.initializer)
    np.testing.assert_array_equal(deferred.array(stock.graph.initializer[2]), arrays["bias"])
    monkeypatch.setattr(limits, "INLINE_RESULT_LIMIT", 100_000)
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(tmp_path / "in" / "m.onnx"), str(out), "--format", "Q8_0", "--quiet"]) == 0
    data = (tmp_path / "q.onnx.data").read_bytes()
    expected = {v.name: v.raw_data for v in S.get_struct_values(inline)}
    for value in S.get_struct_values(out):
        entries = _external(value.external_data)
        assert data[int(entries["offset"]) :][: int(entries["length"])] == expected[value.name]
    x = np.random.default_rng(1).standard_normal((64, K)).astype(np.float32)
    got = S.InferenceSession(str(out), accuracy_level=0).run(None, {"X": x})[0]
    np.testing.assert_array_equal(got, S.InferenceSession(inline, accuracy_level=0).run(None, {"X": x})[0])


@pytest.mark.parametrize("external", [False, True])
def test_a_model_from_a_file_with_nothing_to_quantize_keeps_its_weights(tmp_path, capsys, external):
    """The large initializers' data is left in the file while quantize plans; with no eligible
    weight it was never read back: quantize returned initializers without data, and the CLI
    failed on them with onnx's "one and only one value field"."""
    arrays = float_model(tmp_path / "m.onnx")
    if external:
        onnx.save(onnx.load(tmp_path / "m.onnx"), tmp_path / "m.onnx", save_as_external_data=True, location="w.bin")
    result = quantize(tmp_path / "m.onnx", "Q8_0", min_elements=10**9)
    assert {t.name: numpy_helper.to_array(t).tolist() for t in result.graph.initializer} == {
        name: array.tolist() for name, array in arrays.items()
    }
    assert (
        main(
            [
                "quantize",
                str(tmp_path / "m.onnx"),
                str(tmp_path / "q.onnx"),
                "--format",
                "Q8_0",
                "--min-elements",
                "1000000000",
                "--quiet",
            ]
        )
        == 0
    )
    stored = onnx.load(tmp_path / "q.onnx")
    assert {t.name: numpy_helper.to_array(t).tolist() for t in stored.graph.initializer} == {
        name: array.tolist() for name, array in arrays.items()
    }


def test_an_out_whose_data_file_no_model_can_name_is_refused(tmp_path, monkeypatch, capsys):
    """'a:b.onnx.data' reads as a drive to the model-location rules: the result, written with that
    location, could not be loaded (check_model: 'is absolute')."""
    float_model(tmp_path / "float.onnx")
    argv = ["quantize", str(tmp_path / "float.onnx"), str(tmp_path / "a:b.onnx"), "--format", "Q8_0", "--quiet"]
    assert main([*argv, "--external"]) == 2
    assert "location 'a:b.onnx.data' is absolute" in capsys.readouterr().err
    monkeypatch.setattr(limits, "INLINE_RESULT_LIMIT", 100_000)  # streamed when the estimate says so
    assert main(argv) == 1
    assert "location 'a:b.onnx.data' is absolute" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx"]
    monkeypatch.undo()
    assert main(argv) == 0  # inline: no location is written
    assert S.check_model(str(tmp_path / "a:b.onnx")) is None


def test_an_inline_result_is_the_in_memory_result(tmp_path):
    """Under the limit the payloads still go to a scratch file as they are encoded (the checks and
    the report read them there); OUT is then the skeleton plus one fragment per value, which
    protobuf reads as the model quantize() returns, value for value and in order. The directory
    holds no scratch file afterwards."""
    float_model(tmp_path / "float.onnx")
    in_memory = quantize(tmp_path / "float.onnx", "Q4_0")
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(tmp_path / "float.onnx"), str(out), "--format", "Q4_0", "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx", "q.onnx"]
    written = S.from_onnx(onnx.load(out))
    assert written == S.from_onnx(in_memory)
    assert [v.name for v in written.graph.struct_initializer] == ["W1_T", "W2_T"]
    assert all(v.raw_data and not v.external_data for v in written.graph.struct_initializer)
    S.check_model(out)
    x = np.random.default_rng(0).standard_normal((64, K)).astype(np.float32)
    np.testing.assert_array_equal(
        S.InferenceSession(out).run(None, {"X": x})[0], S.InferenceSession(in_memory).run(None, {"X": x})[0]
    )


def test_struct_values_already_in_the_input_stay_first_and_inline(tmp_path):
    """A model quantized before (W1, W2 in Q8_0, inline) with a new float weight W3 quantized
    again: its values stay in the skeleton, the new one follows, as quantize() orders them."""
    float_model(tmp_path / "float.onnx")
    once = quantize(tmp_path / "float.onnx", "Q8_0")
    before = S.get_struct_values(once)
    w3 = np.random.default_rng(3).standard_normal((K, K), np.float32)
    once.graph.initializer.append(numpy_helper.from_array(w3, "W3"))
    once.graph.node.append(oh.make_node("MatMul", ["Y", "W3"], ["Y3"]))
    once.graph.output[0].name = "Y3"
    onnx.save(once, tmp_path / "partly.onnx")
    S.check_model(tmp_path / "partly.onnx")
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(tmp_path / "partly.onnx"), str(out), "--format", "Q4_0", "--quiet"]) == 0
    written = S.from_onnx(onnx.load(out))
    assert [v.name for v in written.graph.struct_initializer] == ["W1_T", "W2_T", "W3_T"]
    assert [v.raw_data for v in written.graph.struct_initializer[:2]] == [v.raw_data for v in before]
    assert written == S.from_onnx(quantize(tmp_path / "partly.onnx", "Q4_0"))


def partly_external(tmp_path) -> dict[str, bytes]:
    """a/partly.onnx: W1, W2 quantized to Q8_0 with their payloads in a/q.onnx.data, and a new
    float weight W3 read by a MatMul after them; returns the payloads as that file holds them."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    float_model(tmp_path / "a" / "float.onnx")
    argv = ["quantize", str(tmp_path / "a" / "float.onnx"), str(tmp_path / "a" / "q.onnx"), "--format", "Q8_0"]
    assert main([*argv, "--external", "--quiet"]) == 0
    partly = onnx.load(tmp_path / "a" / "q.onnx", load_external_data=False)
    data = (tmp_path / "a" / "q.onnx.data").read_bytes()
    before = {}  # the oracle: each value's bytes at its stated range of the input's data file
    for value in S.get_struct_values(tmp_path / "a" / "q.onnx"):
        entries = _external(value.external_data)
        assert entries["location"] == "q.onnx.data"
        before[value.name] = data[int(entries["offset"]) : int(entries["offset"]) + int(entries["length"])]
    w3 = np.random.default_rng(3).standard_normal((K, K), np.float32)
    partly.graph.initializer.append(numpy_helper.from_array(w3, "W3"))
    partly.graph.node.append(oh.make_node("MatMul", ["Y", "W3"], ["Y3"]))
    partly.graph.output[0].name = "Y3"
    onnx.save(partly, tmp_path / "a" / "partly.onnx")  # its float tensors inline, its values in q.onnx.data
    return before


@pytest.mark.parametrize("extra", [[], ["--external"], ["--min-elements", "1000000000"]])
def test_an_inputs_external_struct_values_are_carried_into_out_elsewhere(tmp_path, extra):
    """A model whose struct values are in its own data file (a/q.onnx.data), quantized into
    another directory: their locations are relative to a/ alone, so OUT takes their bytes (as it
    takes the input's external float tensors) instead of naming a file b/ does not have. Before,
    a result with nothing to quantize was written naming it (exit 0, unloadable), and one with a
    weight to quantize (and quantize() in memory) was refused as "onnxruntime cannot run the
    model given to quantize"."""
    before = partly_external(tmp_path)
    out = tmp_path / "b" / "q.onnx"
    assert main(["quantize", str(tmp_path / "a" / "partly.onnx"), str(out), "--format", "Q4_0", "--quiet", *extra]) == 0
    S.check_model(out)
    written = {v.name: v for v in S.get_struct_values(out)}
    assert set(written) == {"W1_T", "W2_T"} | ({"W3_T"} if "--min-elements" not in extra else set())
    for name, payload in before.items():
        assert written[name].raw_data == payload and not written[name].external_data
    options = {"min_elements": 10**9} if "--min-elements" in extra else {}
    in_memory = quantize(tmp_path / "a" / "partly.onnx", "Q4_0", **options)  # read from a/: its values resolve
    x = np.random.default_rng(0).standard_normal((64, K)).astype(np.float32)
    np.testing.assert_array_equal(
        S.InferenceSession(out).run(None, {"X": x})[0], S.InferenceSession(in_memory).run(None, {"X": x})[0]
    )


@pytest.mark.parametrize("stated", [True, False])
def test_an_inputs_external_struct_values_too_large_to_carry_are_refused_elsewhere(
    tmp_path, monkeypatch, capsys, stated
):
    """Payloads past the inline limit cannot be read into one model: refused before any is read,
    naming the limit, by the size their declarations give (``stated=False``: the references
    state no length, the payload runs to the end of the file); OUT beside the input keeps naming
    the input's data file."""
    partly_external(tmp_path)
    if not stated:
        overlay = S.from_onnx(onnx.load(tmp_path / "a" / "partly.onnx", load_external_data=False))
        for value in overlay.graph.struct_initializer:
            kept = [(e.key, e.value) for e in value.external_data if e.key != "length"]
            del value.external_data[:]
            for key, text in kept:
                value.external_data.add(key=key, value=text)
        onnx.save(S.to_onnx(overlay), tmp_path / "a" / "partly.onnx")
    monkeypatch.setattr(limits, "INLINE_RESULT_LIMIT", 100_000)  # the two Q8_0 payloads hold 139264 bytes
    argv = ["quantize", str(tmp_path / "a" / "partly.onnx"), "--format", "Q4_0", "--quiet"]
    assert main([*argv[:2], str(tmp_path / "b" / "q.onnx"), *argv[2:]]) == 1
    assert "the struct payloads total 139264 bytes" in capsys.readouterr().err
    assert list((tmp_path / "b").iterdir()) == []
    if not stated:  # beside the input the references stay, and W1_T's runs on past its 69632 bytes
        assert main([*argv[:2], str(tmp_path / "a" / "out.onnx"), *argv[2:]]) == 1
        error = capsys.readouterr().err  # the input's own fault, by path, not "cannot run the model given"
        assert "graph.struct_initializer[0] ('W1_T'): external payload length is 204800 bytes" in error, error
        return
    assert main([*argv[:2], str(tmp_path / "a" / "out.onnx"), *argv[2:]]) == 0
    S.check_model(tmp_path / "a" / "out.onnx")
    locations = {_external(v.external_data)["location"] for v in S.get_struct_values(tmp_path / "a" / "out.onnx")}
    assert locations == {"q.onnx.data", "out.onnx.data"}


def test_a_failure_after_encoding_leaves_no_scratch_file(tmp_path, monkeypatch, capsys):
    from onnx_struct.passes import quantize as quantize_pass  # noqa: PLC0415

    float_model(tmp_path / "float.onnx")
    monkeypatch.setattr(quantize_pass, "runtime_error", lambda *a, **k: "refused for the test")
    argv = ["quantize", str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), "--format", "Q4_0", "--quiet"]
    assert main(argv) == 1
    assert "refused for the test" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["float.onnx"]


@pytest.mark.parametrize("length", [0, 1, 127, 128, 300, 70_000])
def test_a_value_fragment_head_and_its_payload_append_the_value(length):
    """Oracle: protobuf's own parse of the model bytes followed by the head and the payload
    equals the model with the value appended by add_struct_values (lengths across varint sizes)."""
    from onnx_struct.schema.model import struct_value_fragment_head  # noqa: PLC0415

    model = oh.make_model(oh.make_graph([], "g", [], []))
    S.add_struct_values(model, S.make_struct_value("first", 0, raw_data=b"\x01\x02"))
    payload = bytes(np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8))
    value = S.make_struct_value("second", 0)
    value.external_data.add(key="location", value="elsewhere")  # left out of the fragment
    data = model.SerializeToString() + struct_value_fragment_head(value, length) + payload
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    S.add_struct_values(expected, S.make_struct_value("second", 0, raw_data=payload))
    assert S.from_onnx(onnx.ModelProto.FromString(data)) == S.from_onnx(expected)


@pytest.mark.parametrize("ending", ["commit", "discard"])
def test_a_writers_scratch_file_is_removed_by_commit_and_discard(tmp_path, ending):
    from onnx_struct.payload.external_write import DirectoryWriter  # noqa: PLC0415

    writer = DirectoryWriter(tmp_path)
    path, handle = writer.scratch("work")
    handle.write(b"scratch")
    handle.flush()
    assert path.parent == tmp_path and path.read_bytes() == b"scratch"
    writer.open("kept.bin", "test").write(b"kept")
    getattr(writer, ending)(*(["test"] if ending == "commit" else []))
    assert sorted(p.name for p in tmp_path.iterdir()) == (["kept.bin"] if ending == "commit" else [])


def test_a_kept_tensors_data_file_cut_short_during_the_run_is_a_validation_error(tmp_path, monkeypatch, capsys):
    """The float tensors an external result keeps are copied from the input's data file with the
    checked reads every external byte gets (payload.external): a file cut short after the model was
    read is the input's ValidationError naming the tensor, and nothing is written."""
    from onnx_struct.passes import quantize_write  # noqa: PLC0415

    float_model(tmp_path / "inline.onnx")
    (tmp_path / "in").mkdir()
    source = tmp_path / "in" / "m.onnx"
    onnx.save(onnx.load(tmp_path / "inline.onnx"), source, save_as_external_data=True, location="w.bin")
    start = quantize_write.QuantizeOutput.start

    def start_then_cut(self, estimate):
        streaming = start(self, estimate)
        weights = tmp_path / "in" / "w.bin"
        with open(weights, "r+b") as handle:  # W1 and W2 stay whole; bias (last) loses its end
            handle.truncate(weights.stat().st_size - 1000)
        return streaming

    monkeypatch.setattr(quantize_write.QuantizeOutput, "start", start_then_cut)
    out = tmp_path / "out" / "q.onnx"
    out.parent.mkdir()
    assert main(["quantize", str(source), str(out), "--format", "Q8_0", "--quiet", "--external"]) == 1
    assert "graph.initializer ('bias').external_data" in capsys.readouterr().err
    assert list(out.parent.iterdir()) == []


def test_struct_values_bytes_is_their_serialized_size():
    """quantize's estimate counts an input's own struct values from onnx's unknown fields, without
    a parse of the whole model; oracle: each value's ByteSize as the overlay parses it."""
    from onnx_struct.schema.model import struct_values_bytes  # noqa: PLC0415

    model = oh.make_model(oh.make_graph([], "g", [], []))
    assert struct_values_bytes(model) == 0
    S.add_struct_values(model, S.make_struct_value("a", 0, raw_data=bytes(300)), S.make_struct_value("b", 1))
    assert struct_values_bytes(model) == sum(v.ByteSize() for v in S.get_struct_values(model)) > 300
