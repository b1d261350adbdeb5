"""onnx-struct lower IN OUT [--compact]: exit codes and the written model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from support.models import linear_model
from support.oracles import int4_oracle

from onnx_struct.cli import main


def write(tmp_path, payload: bytes, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(linear_model(payload), path)
    return str(path)


def test_lower_writes_a_model_onnxruntime_runs(tmp_path, capsys):
    payload = bytes(range(64))
    out = tmp_path / "plain.onnx"
    assert main(["lower", write(tmp_path, payload), str(out)]) == 0
    assert "1 decoder functions" in capsys.readouterr().out
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    (y,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"X": np.zeros(128, np.float32)}
    )
    np.testing.assert_array_equal(y, np.maximum(int4_oracle(payload) * np.float32(0.125), 0))


def test_compact_lists_leaves_as_inputs(tmp_path):
    out = tmp_path / "plain.onnx"
    assert main(["lower", write(tmp_path, bytes(64)), str(out), "--compact"]) == 0
    assert "weight::values" in [i.name for i in onnx.load(out).graph.input]


def test_exit_codes(tmp_path, capsys):
    assert main(["lower", write(tmp_path, bytes(63)), str(tmp_path / "o.onnx")]) == 1
    assert "63 bytes" in capsys.readouterr().err
    assert main(["lower", str(tmp_path / "missing.onnx"), str(tmp_path / "o.onnx")]) == 2
