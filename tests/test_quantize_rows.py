"""The report's per-weight errors measured range of rows by range of rows (passes/quantize_rows.py)
against numpy float64 on whole arrays: each weight's round trip by gguf-py's quantize/dequantize,
each op's input computed with numpy, ``||op(x, Wq) - op(x, W)|| / ||op(x, W)||``.

The ranges are forced small (``ROW_RANGE_ELEMENTS``: a few rows, the last range partial), and the
weights are read the three ways the report meets them: in memory, left in the model file by the
skeleton read, and in an external data file; the quantized payloads inline or streamed to OUT.data.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from onnx_struct.passes import quantize_rows
from onnx_struct.passes.quantize_report import quantize_with_report
from onnx_struct.passes.quantize_write import QuantizeOutput

gguf = pytest.importorskip("gguf")
Q8_0 = gguf.GGMLQuantizationType.Q8_0
RNG = np.random.default_rng(11)
# W1 is past the skeleton's 64 KiB: read back from the model file
SHAPES = {"W1": (96, 192), "W2": (72, 192), "W3": (96, 40), "E": (50, 64)}
WEIGHTS = {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items()}
FEEDS = {
    "X": RNG.standard_normal((4, 96)).astype(np.float32),
    "XT": RNG.standard_normal((96, 3)).astype(np.float32),
    "I": np.array([3, 3, 7, 49, -1, 0], np.int64),  # a repeated row, the last one, a negative index
}
OPTIONS = {"op_types": ("MatMul", "Gemm", "Gather"), "min_elements": 1}


def rows_model() -> onnx.ModelProto:
    """MatMul, Gemm(transB=1) on its output, Gemm(transA=1), Gather(indices I)."""
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H1"]),
        oh.make_node("Gemm", ["H1", "W2"], ["H2"], transB=1),
        oh.make_node("Gemm", ["XT", "W3"], ["H3"], transA=1),
        oh.make_node("Gather", ["E", "I"], ["G"]),
    ]
    inputs = [
        oh.make_tensor_value_info("X", TensorProto.FLOAT, [4, 96]),
        oh.make_tensor_value_info("XT", TensorProto.FLOAT, [96, 3]),
        oh.make_tensor_value_info("I", TensorProto.INT64, [6]),
    ]
    outputs = [
        oh.make_tensor_value_info(name, TensorProto.FLOAT, shape)
        for name, shape in (("H2", [4, 72]), ("H3", [3, 40]), ("G", [6, 64]))
    ]
    initializers = [numpy_helper.from_array(array, name) for name, array in WEIGHTS.items()]
    graph = oh.make_graph(nodes, "rows", inputs, outputs, initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def roundtrip(w: np.ndarray, transposed: bool) -> np.ndarray:
    """gguf-py's Q8_0 round trip of ``w`` stored with blocks along its last axis (of ``w.T`` when
    ``transposed``), zero-padded to whole blocks and sliced back."""
    stored = w.T if transposed else w
    pad = -stored.shape[1] % 32
    padded = np.ascontiguousarray(np.pad(stored, [(0, 0), (0, pad)]))
    back = gguf.quants.dequantize(gguf.quants.quantize(padded, Q8_0), Q8_0).reshape(padded.shape)
    back = back[:, : stored.shape[1]].astype(np.float64)
    return back.T if transposed else back


def relative(reference: np.ndarray, quantized: np.ndarray) -> float:
    return float(np.linalg.norm(quantized - reference) / np.linalg.norm(reference))


def expected_errors(group_axis: str) -> dict[str, float]:
    """Whole-array errors; which weights quantize stores transposed is the rule "blocks along the
    input axis K" (group_axis="input") or along the output axis N ("output"); a Gather table keeps its rows."""
    w = {name: array.astype(np.float64) for name, array in WEIGHTS.items()}
    k_first = group_axis == "input"  # MatMul / Gemm(transB=0): K is axis 0, stored transposed
    q = {
        "W1": roundtrip(WEIGHTS["W1"], k_first),
        "W2": roundtrip(WEIGHTS["W2"], not k_first),  # transB=1: K is axis 1
        "W3": roundtrip(WEIGHTS["W3"], k_first),
        "E": roundtrip(WEIGHTS["E"], False),
    }
    x, xt = FEEDS["X"].astype(np.float64), FEEDS["XT"].astype(np.float64)
    h1 = x @ w["W1"]
    rows = FEEDS["I"] % 50
    return {
        "W1": relative(x @ w["W1"], x @ q["W1"]),
        "W2": relative(h1 @ w["W2"].T, h1 @ q["W2"].T),
        "W3": relative(xt.T @ w["W3"], xt.T @ q["W3"]),
        "E": relative(w["E"][rows], q["E"][rows]),
    }


@pytest.fixture
def decodes(monkeypatch) -> list[tuple[int, ...]]:
    """Ranges of a few rows (7 x 96 elements: the last range of each weight partial), and the
    shape of every decode the report makes."""
    monkeypatch.setattr(quantize_rows, "ROW_RANGE_ELEMENTS", 7 * 96)
    shapes = []
    decode = quantize_rows.decode_resolved

    def counting(resolved):
        result = decode(resolved)
        shapes.append(result.shape)
        return result

    monkeypatch.setattr(quantize_rows, "decode_resolved", counting)
    return shapes


def check_report(report, group_axis: str) -> None:
    rows = {w.name: w for w in report.weights}
    for name, error in expected_errors(group_axis).items():
        assert rows[name].status == "quantized" and rows[name].error_input == "calibration", name
        # float64 on both sides: only the summation order differs
        assert rows[name].error == pytest.approx(error, rel=1e-6), name


@pytest.mark.parametrize("group_axis", ["input", "output"])
def test_errors_by_ranges_of_rows_match_whole_arrays(decodes, group_axis):
    _, report = quantize_with_report(rows_model(), "Q8_0", **OPTIONS, group_axis=group_axis, calibration=FEEDS)
    check_report(report, group_axis)
    stored = {w.name: w.stored_shape for w in report.weights}
    # every weight decoded in ranges of whole stored rows of at most 7 x 96 elements
    assert all(rows * cols <= 7 * 96 for rows, cols in decodes)
    assert len(decodes) == sum(-(-shape[0] // (7 * 96 // shape[1])) for shape in stored.values())


def test_a_weight_of_one_range_is_decoded_as_the_models_own_value(monkeypatch):
    """The default range holds each of these weights whole: one decode per weight, of its stored shape."""
    shapes = []
    decode = quantize_rows.decode_resolved
    monkeypatch.setattr(quantize_rows, "decode_resolved", lambda r: shapes.append(r.declaration_path) or decode(r))
    _, report = quantize_with_report(rows_model(), "Q8_0", **OPTIONS, calibration=FEEDS)
    check_report(report, "input")
    assert len(shapes) == 4 and all(path.startswith("struct_types[") for path in shapes)


@pytest.mark.parametrize("external", [False, True])
def test_errors_by_ranges_read_from_the_files(decodes, tmp_path, external):
    """From a path: W1 read back from the model file (inline) or every weight from its external
    data file; the payloads streamed to OUT.data and read back range by range."""
    path = tmp_path / "float.onnx"
    if external:
        onnx.save(rows_model(), path, save_as_external_data=True, location="float.data", size_threshold=0)
    else:
        onnx.save(rows_model(), path)
    with QuantizeOutput(tmp_path / "q.onnx", external=True) as output:
        model, report = quantize_with_report(path, "Q8_0", **OPTIONS, calibration=FEEDS, output=output)
        check_report(report, "input")
        output.finish(model)
    assert all(rows * cols <= 7 * 96 for rows, cols in decodes) and len(decodes) > 4
