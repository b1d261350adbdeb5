"""quantize_with_report(): the report's numbers against independent computation.

Bytes come from gguf-py's table (GGML_QUANT_SIZES) and the stored shapes worked out by hand; each
op's error is recomputed with numpy (float64) from gguf-py's dequantize(quantize(.)) of the weight
and the op's input in the float model (computed with numpy too); a Conv's with stock onnxruntime
on the float model whose kernel is gguf-py's round trip.
"""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from test_quantize import cli, synthetic_model
from test_quantize_reach import subgraph_model

import onnx_struct as S
from onnx_struct import limits
from onnx_struct.cli import main
from onnx_struct.passes.quantize_report import DEFAULT_THRESHOLD, quantize_with_report

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
X = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)


def roundtrip(stored: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's round trip of a tensor with blocks along its last axis (a multiple of the block)."""
    return gguf.quants.dequantize(gguf.quants.quantize(stored, qtype), qtype).reshape(stored.shape)


def relative(reference: np.ndarray, quantized: np.ndarray) -> float:
    return float(np.linalg.norm(quantized - reference) / np.linalg.norm(reference))


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_bytes_and_errors_match_an_independent_computation(fmt):
    model = synthetic_model()
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    _, report = quantize_with_report(model, fmt, calibration={"X": X})
    rows = {r.name: r for r in report.weights}
    block, size = gguf.constants.GGML_QUANT_SIZES[Q[fmt]]
    # stored shapes: W^T for MatMul / Gemm(transB=0), W for Gemm(transB=1), W6^T padded 48 -> 64
    stored = {"W1": (128, 64), "W2": (96, 128), "W3": (64, 96), "W6": (128, 64)}
    for name, shape in stored.items():
        assert rows[name].stored_shape == shape
        assert rows[name].bytes_before == 4 * w[name].size
        assert rows[name].bytes_after == shape[0] * shape[1] // block * size
    assert (rows["W4"].status, rows["W4"].bytes_after, rows["W4"].error) == ("kept", 4 * 64 * 32, None)
    assert rows["b2"].status == "not considered" and rows["b2"].reason == "not a weight: read by Gemm (input 2)"

    def q(name: str, transposed: bool, pad: int = 0) -> np.ndarray:
        a = w[name].T if transposed else w[name]
        a = np.pad(a, [(0, 0), (0, pad)]).astype(np.float32)
        back = roundtrip(np.ascontiguousarray(a), Q[fmt])[:, : a.shape[1] - pad].astype(np.float64)
        return back.T if transposed else back

    x = X.astype(np.float64)
    h1 = x @ w["W1"]  # the float model's activations, in numpy
    h2 = h1 @ w["W2"].T + w["b2"]
    x48 = x[:, :48]
    expected = {
        "W1": relative(x @ w["W1"], x @ q("W1", True)),
        "W2": relative(h1 @ w["W2"].T, h1 @ q("W2", False).T),
        "W3": relative(h2 @ w["W3"], h2 @ q("W3", True)),
        "W6": relative(x48 @ w["W6"], x48 @ q("W6", True, pad=16)),
    }
    for name, error in expected.items():
        assert rows[name].error_input == "calibration"
        assert rows[name].error == pytest.approx(error, rel=1e-3), name
        assert rows[name].warning == (error > DEFAULT_THRESHOLD)
    assert 0 < max(expected.values()) < {"Q8_0": 0.01, "Q4_0": 0.15}[fmt]
    # how each runs in InferenceSession (execution="quantized"): W6 is padded, so decoded
    assert {n: rows[n].execution for n in stored} == {
        "W1": "quantized",
        "W2": "quantized",
        "W3": "quantized",
        "W6": "decoded",
    }
    assert "padded (48 to 64)" in rows["W6"].execution_reason
    # the model's outputs, compounded: the lowered model in stock onnxruntime against the float one
    assert set(report.output_errors) == {"Y", "Z", "V"}
    assert 0 < report.output_errors["Y"] < {"Q8_0": 0.02, "Q4_0": 0.3}[fmt]


def test_calibration_file_and_threshold(tmp_path):
    path = tmp_path / "inputs.npz"
    np.savez(path, X=X)
    model = synthetic_model()  # its weights are new random ones at each call
    _, from_file = quantize_with_report(model, "Q4_0", calibration=path, threshold=0.05)
    _, given = quantize_with_report(model, "Q4_0", calibration={"X": X}, threshold=0.05)
    assert [r.error for r in from_file.weights] == [r.error for r in given.weights]
    assert from_file.calibration == str(path)
    flagged = [r.name for r in from_file.weights if r.warning]
    assert flagged and flagged == [r.name for r in from_file.quantized if r.error > 0.05]
    assert len(from_file.warnings) >= len(flagged)
    np.save(tmp_path / "one.npy", X)
    with pytest.raises(S.ValidationError, match="one array, not an .npz"):
        quantize_with_report(model, "Q4_0", calibration=tmp_path / "one.npy")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(S.ValidationError, match="not an .npz of arrays"):
        quantize_with_report(model, "Q4_0", calibration=tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        quantize_with_report(model, "Q4_0", calibration=tmp_path / "missing.npz")


def test_calibration_entries_that_fit_no_input_are_refused_naming_the_entry(tmp_path, capsys):
    """Found by a red-team pass: a name matching no graph input, or an object array (which
    allow_pickle=False refuses to load), printed onnxruntime's or numpy's traceback."""
    model = synthetic_model()
    np.savez(tmp_path / "wrong.npz", X=X, Y=X)
    with pytest.raises(S.ValidationError, match=r"entry 'Y' names no input of the model \(its inputs: 'X'\)"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "wrong.npz")
    np.savez(tmp_path / "objects.npz", X=np.array([{"a": 1}], dtype=object))
    with pytest.raises(S.ValidationError, match=r"objects.npz: entry 'X': Object arrays cannot be loaded"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "objects.npz")
    with pytest.raises(S.ValidationError, match=r"no entry for the model's input 'X'"):
        quantize_with_report(model, "Q8_0", calibration={})
    with pytest.raises(S.ValidationError, match=r"entry 'X' is not an array of real numbers or booleans \(<U1\)"):
        quantize_with_report(model, "Q8_0", calibration={"X": np.array(["a"])})
    # onnxruntime takes no complex feed: its bare RuntimeError escaped the report as a traceback
    with pytest.raises(S.ValidationError, match=r"entry 'X' is not an array of real numbers or booleans \(complex64\)"):
        quantize_with_report(model, "Q8_0", calibration={"X": X.astype(np.complex64)})

    onnx.save(model, tmp_path / "m.onnx")
    for name in ("wrong.npz", "objects.npz"):
        argv = ["quantize", str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), "--format", "q8_0"]
        assert main([*argv, "--calibration", str(tmp_path / name)]) == 1
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("onnx-struct quantize: ") and name in line, line
    assert not (tmp_path / "q.onnx").exists()


def npy_header(shape: tuple[int, ...]) -> bytes:
    """An .npy header (format 1.0, float32) stating ``shape``, written by numpy's own writer."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def test_calibration_sizes_are_checked_before_numpy_allocates(tmp_path, monkeypatch):
    """numpy allocates an entry's array from its header's shape before reading it (2^40 elements:
    MemoryError), and inflates a deflated entry whole (a 3 MB file of zeros: 3 GiB)."""
    model = synthetic_model()
    with zipfile.ZipFile(tmp_path / "claims.npz", "w") as archive:
        archive.writestr("X.npy", npy_header((2**40,)) + bytes(12))
    with pytest.raises(S.ValidationError, match=r"claims.npz: entry 'X': its header states shape \(1099511627776,\)"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "claims.npz")
    np.savez(tmp_path / "crc.npz", X=X)  # a stored entry: its bytes follow the header
    damaged = bytearray((tmp_path / "crc.npz").read_bytes())
    damaged[damaged.find(b"NUMPY") + 200] ^= 0xFF
    (tmp_path / "crc.npz").write_bytes(damaged)  # zipfile's BadZipFile at the entry's end
    with pytest.raises(S.ValidationError, match=r"crc.npz: (entry 'X': )?Bad CRC-32 for file 'X.npy'"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "crc.npz")
    damaged = bytearray((tmp_path / "claims.npz").read_bytes())
    central = damaged.find(b"PK\x01\x02")  # the method: local header +8, central directory entry +10
    damaged[8:10] = damaged[central + 10 : central + 12] = (99).to_bytes(2, "little")  # AES
    (tmp_path / "aes.npz").write_bytes(damaged)  # zipfile's NotImplementedError
    with pytest.raises(S.ValidationError, match=r"aes.npz: That compression method is not supported"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "aes.npz")
    damaged = bytearray((tmp_path / "claims.npz").read_bytes())
    damaged[6] |= 1  # the general purpose flag "encrypted", local header and central directory entry
    damaged[damaged.find(b"PK\x01\x02") + 8] |= 1
    (tmp_path / "encrypted.npz").write_bytes(damaged)  # zipfile's RuntimeError: a password is needed
    with pytest.raises(S.ValidationError, match=r"encrypted.npz: entry 'X' is encrypted"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "encrypted.npz")
    inputs = np.zeros(X.shape, np.float32)
    np.savez_compressed(tmp_path / "zeros.npz", X=inputs)
    monkeypatch.setattr(limits, "MAX_CALIBRATION_BYTES", inputs.nbytes - 1)
    with pytest.raises(S.ValidationError, match=r"zeros.npz: its entries inflate to \d+ bytes, past 767"):
        quantize_with_report(model, "Q8_0", calibration=tmp_path / "zeros.npz")
    monkeypatch.setattr(limits, "MAX_CALIBRATION_BYTES", inputs.nbytes + 1024)  # the header's bytes too
    _, report = quantize_with_report(model, "Q8_0", calibration=tmp_path / "zeros.npz")
    assert report.calibration == str(tmp_path / "zeros.npz")


def damaged_conv_model() -> onnx.ModelProto:
    """A Conv whose kernel has a few large weights per output channel (as BatchNorm folding
    leaves them): one scale per 32 weights then leaves 4-bit codes too coarse for the rest."""
    rng = np.random.default_rng(5)
    kernel = (rng.standard_normal((32, 16, 3, 3)) * 0.05).astype(np.float32)
    kernel.reshape(32, -1)[:, ::31] = 2.0  # one outlier in every block of 32
    graph = oh.make_graph(
        [oh.make_node("Conv", ["X", "W"], ["Y"], pads=[1, 1, 1, 1])],
        "conv",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 16, 12, 12])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32, 12, 12])],
        [numpy_helper.from_array(kernel, "W")],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_conv_damage_is_shown_and_flagged(fmt):
    model = damaged_conv_model()
    x = np.random.default_rng(6).standard_normal((1, 16, 12, 12)).astype(np.float32)
    _, report = quantize_with_report(model, fmt, op_types=("Conv",), min_elements=1024, calibration={"X": x})
    (row,) = report.quantized
    assert row.execution == "decoded" and "no block-quantized Conv kernel" in row.execution_reason
    # the oracle: the float model with gguf-py's round trip of the flattened kernel [32, 144 -> 160]
    kernel = numpy_helper.to_array(model.graph.initializer[0])
    flat = np.pad(kernel.reshape(32, 144), [(0, 0), (0, 16)])
    oracle = onnx.ModelProto()
    oracle.CopyFrom(model)
    q = roundtrip(flat, Q[fmt])[:, :144].reshape(kernel.shape)
    oracle.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(q), "W"))

    def run(m):
        return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]

    error = relative(run(model).astype(np.float64), run(oracle).astype(np.float64))
    assert row.error == pytest.approx(error, rel=1e-3)
    assert row.warning == (fmt == "Q4_0")  # Q4_0 damages this kernel past the threshold, Q8_0 does not
    assert report.output_errors["Y"] == pytest.approx(error, rel=1e-3)
    if fmt == "Q4_0":
        assert any("W: its Q4_0 quantization changes its op's output by" in t for t in report.warnings)


def test_subgraph_weights_are_never_called_unread():
    _, report = quantize_with_report(subgraph_model(), "Q8_0", op_types=("Gemm",))
    lines = report.summary(("Gemm",))
    assert not any("read by no node" in line for line in lines)
    assert "not quantized: MatMul (100% of the float elements): MatMul is not in --op-types" in "\n".join(lines)
    rows = {r.name: r for r in report.weights}
    assert rows["Wloop"].reason == "a MatMul weight; MatMul is not in op_types"
    assert rows["Wloop"].where == "graph.node[2] (Loop) body"


@pytest.mark.slow
def test_cli_json_report(tmp_path):
    source = tmp_path / "float.onnx"
    model = synthetic_model()
    onnx.save(model, source)
    np.savez(tmp_path / "inputs.npz", X=X)
    out = tmp_path / "q.onnx"
    result = cli("quantize", source, out, "--format", "Q4_0", "--json", "--calibration", tmp_path / "inputs.npz")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    _, report = quantize_with_report(model, "Q4_0", calibration={"X": X})
    assert document["weights"] == report.to_json()["weights"]
    assert document["bytes"] == out.stat().st_size
    assert document["totals"]["bytes_after"] == sum(r.bytes_after for r in report.weights)
    result = cli("quantize", source, out, "--format", "Q4_0", "--warn-above", "0.01", "--quiet")
    assert result.returncode == 0 and "onnx-struct quantize: warning: W1: its Q4_0 quantization" in result.stderr
