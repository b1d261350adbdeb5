"""The README's code runs as written (so it cannot rot): the example, and the three workflows of
its first screen, each command a real subprocess on files in a temporary directory."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block, in order."""
    return re.findall(r"```(\w+)\n(.*?)```", text, re.S)


def test_readme_example_runs():
    (code,) = [code for lang, code in _blocks(README.read_text()) if lang == "python" and "LINEAR_INT4_128" in code]
    assert len([line for line in code.splitlines() if line.strip() and not line.startswith("    ")]) <= 12
    exec(compile(code, str(README), "exec"), {})


def test_readme_names_install_and_test_commands_used_by_ci():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'python -m pip install ".[test]"' in text and 'python -m pip install ".[test]"' in ci
    assert "python -m pytest -q" in text and "python -m pytest -q" in ci


def _workflow_inputs(directory: Path) -> dict[str, np.ndarray]:
    """The files the workflows start from: llama.gguf (written by gguf-py, llama's layout: numpy
    shape [n_ff, n_embd]) and model.onnx (a float MatMul over a [4096, 64] weight)."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(0)
    up = rng.standard_normal((64, 4096)).astype(np.float32)
    stored = gguf.quants.quantize(up, gguf.GGMLQuantizationType.Q4_0)
    writer = gguf.GGUFWriter(directory / "llama.gguf", "llama")
    writer.add_tensor("blk.0.ffn_up.weight", stored, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    w = rng.standard_normal((4096, 64)).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"])],
        "mlp",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4096])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [onnx.numpy_helper.from_array(w, "W")],
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10), directory / "model.onnx")
    x = np.ones((1, 4096), np.float32)  # what the README feeds
    # Oracles from gguf-py alone: its dequantized bytes times x, in float64.
    from_gguf = x.astype(np.float64) @ gguf.quants.dequantize(stored, gguf.GGMLQuantizationType.Q4_0).T
    w_q4_0 = gguf.quants.dequantize(gguf.quants.quantize(w.T.copy(), gguf.GGMLQuantizationType.Q4_0), 2).T
    return {"gguf": from_gguf, "quantize": x.astype(np.float64) @ w_q4_0}


@pytest.mark.slow
def test_readme_three_workflows_run_as_written(tmp_path, monkeypatch):
    text = README.read_text()
    section = text[text.index("## Three workflows") :]
    section = section[: section.index("\n## ", 1)]
    oracles = iter(_workflow_inputs(tmp_path).values())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    commands = 0
    for lang, code in _blocks(section):
        if lang == "bash":
            for line in code.splitlines():
                argv = shlex.split(line, comments=True)
                assert argv[0] == "onnx-struct", line
                result = subprocess.run(
                    [sys.executable, "-m", "onnx_struct", *argv[1:]],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert result.returncode == 0, (line, result.stderr)
                commands += 1
        else:
            assert lang == "python"
            exec(compile(code, str(README), "exec"), namespace)
            # onnxruntime's int8 activations are exact for a row of ones: only the sum order differs.
            np.testing.assert_allclose(namespace.pop("y"), next(oracles), rtol=1e-4, atol=1e-3)
    assert commands == 3 and next(oracles, None) is None  # every workflow ran, and was compared
    # "the weights run quantized", as the README says: on MatMulNBits, not decoded to float.
    for model in ("ffn_up.onnx", "model.q4_0.onnx"):
        ops = {node.op_type for node in S.InferenceSession(model).lowered.graph.node}
        assert "MatMulNBits" in ops and "MatMul" not in ops and "Gemm" not in ops, (model, ops)
    assert not (tmp_path / "llama.onnx.data").exists()  # --reference copied no payload byte
    assert (tmp_path / "llama.onnx").stat().st_size < 64 * 4096 // 32 * 18  # the payload stayed in the .gguf
