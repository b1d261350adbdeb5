"""quantize's calibration, from hostile models and files (onnx_struct/passes/quantize_report.py,
quantize_calibration.py, quantize_error.py): the random input made from a declared shape is bounded
(a negative, zero or enormous dimension is a ValidationError naming the input), a calibration file
is read in the machine's byte order and refused unopened when it is a FIFO, and a NaN error is a
warning and valid JSON (docs/security.md)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from adversarial.bounded import run_bounded

pytestmark = pytest.mark.slow

RUN = """
import contextlib, io, json
from onnx_struct.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(ARG["argv"])
open(ARG["report"], "w").write(json.dumps({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}))
"""


def _model(path, x_shape, weight=None) -> str:
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((256, 64)).astype(np.float32) if weight is None else weight
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 64])],
        [numpy_helper.from_array(weight, "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)
    return str(path)


def _quantize(tmp_path, model: str, *options: str, cpu_seconds: float = 20, memory_mib: int = 400) -> dict:
    report = tmp_path / "report.json"
    argv = ["quantize", model, str(tmp_path / "q.onnx"), "--format", "Q8_0", "--min-elements", "1", *options]
    out = run_bounded(RUN, {"argv": argv, "report": str(report)}, cpu_seconds=cpu_seconds, memory_mib=memory_mib)
    assert out.error is None, out.traceback
    return json.loads(report.read_text())


def _strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON (RFC 8259)")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "shape, contains",
    [
        pytest.param([10**9, 256], "limits.MAX_RANDOM_CALIBRATION_BYTES", id="10^9-x-256"),
        pytest.param([-3, 256], "declares a negative dimension", id="negative"),
        pytest.param([0, 256], "declares a zero dimension", id="zero"),
    ],
)
def test_a_declared_shape_no_random_input_can_follow_is_refused(tmp_path, shape, contains):
    """10^9 x 256 allocated 1.86 TiB; -3 raised numpy's "negative dimensions"; 0 numpy's "cannot reshape"."""
    got = _quantize(tmp_path, _model(tmp_path / "m.onnx", shape))
    assert got["code"] == 1, got
    lines = got["stderr"].strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in got["stderr"], got["stderr"]
    assert "graph.input[0] ('X')" in lines[0] and contains in lines[0] and "--calibration" in lines[0], lines[0]
    assert not (tmp_path / "q.onnx").exists()


def test_unknown_dimensions_are_still_taken_as_one(tmp_path):
    got = _quantize(tmp_path, _model(tmp_path / "m.onnx", ["batch", 256]), "--json")
    assert got["code"] == 0, got
    assert _strict_json(got["stdout"])["calibration"].startswith("random inputs")


def test_a_calibration_entry_of_no_element_is_refused(tmp_path):
    np.savez(tmp_path / "c.npz", X=np.ones((0, 256), np.float32))
    got = _quantize(tmp_path, _model(tmp_path / "m.onnx", [None, 256]), "--calibration", str(tmp_path / "c.npz"))
    assert got["code"] == 1, got
    assert "entry 'X' holds no element" in got["stderr"] and "Traceback" not in got["stderr"]


def test_a_big_endian_calibration_array_means_the_same_numbers(tmp_path):
    """np.savez keeps '>f4' as it is; its bytes were fed to onnxruntime as little-endian floats."""
    model = _model(tmp_path / "m.onnx", [None, 256])
    x = np.random.default_rng(7).standard_normal((4, 256)).astype(np.float32)
    reports = {}
    for order in "<>":
        np.savez(tmp_path / f"c{order == '>'}.npz", X=x.astype(f"{order}f4"))
        got = _quantize(tmp_path, model, "--json", "--calibration", str(tmp_path / f"c{order == '>'}.npz"))
        assert got["code"] == 0, got
        reports[order] = _strict_json(got["stdout"])
    little, big = reports["<"], reports[">"]
    assert big["output_errors"] == little["output_errors"]
    assert [w["error"] for w in big["weights"]] == [w["error"] for w in little["weights"]]
    # an oracle for the measured error: Q8_0's error on a standard normal weight is well under 1%
    assert 0 < little["output_errors"]["Y"] < 0.01


@pytest.mark.skipif(sys.platform == "win32", reason="mkfifo")
def test_a_calibration_fifo_is_refused_unopened(tmp_path):
    fifo = tmp_path / "c.npz"
    os.mkfifo(fifo)
    got = _quantize(tmp_path, _model(tmp_path / "m.onnx", [None, 256]), "--calibration", str(fifo), cpu_seconds=5)
    assert got["code"] == 2, got
    assert "is a FIFO, not a regular file; refused unopened" in got["stderr"]
    assert str(fifo) in got["stderr"]


def test_a_nan_error_is_valid_json_and_a_warning(tmp_path):
    model = _model(tmp_path / "m.onnx", [2, 256], np.full((256, 64), np.nan, np.float32))
    got = _quantize(tmp_path, model, "--json")
    assert got["code"] == 0, got
    report = _strict_json(got["stdout"])  # NaN was printed bare: not JSON
    assert report["output_errors"] == {"Y": "NaN"}
    assert report["weights"][0]["error"] == "NaN"  # max(0.0, nan) made it 0.0 before
    assert report["weights"][0]["warning"] is True
    assert len(report["warnings"]) == 2 and all("NaN" in text for text in report["warnings"])
    assert got["stderr"].count("warning:") == 2
