"""The README's code runs as written (so it cannot rot): the example, and the three workflows of
its first screen, each command a real subprocess on files in a temporary directory; the
generated text and tokens against the float64 numpy forward of the GGUF file (greedy)."""

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


def _workflow_inputs(directory: Path) -> dict[str, object]:
    """The files the workflows start from: model.gguf (a tiny random llama written by gguf-py with
    a SentencePiece test vocabulary), and model.onnx / mlp.onnx (a float MatMul over a [4096, 64]
    weight). Returns the oracles: the greedy tokens of the float64 numpy forward of model.gguf and
    their text (tests/support/llm.py), and the quantized MLP's output from gguf-py's bytes."""
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from support.llm import TinyLlama, greedy, read_weights, spm_detokenize, spm_tokenize, spm_vocab, write_gguf

    config = TinyLlama(**spm_vocab(), seed=11)
    write_gguf(directory / "model.gguf", config)
    prompt = spm_tokenize(config.tokens, config.token_scores, "Once upon a time")
    tokens = greedy(read_weights(directory / "model.gguf"), config, prompt, 20)
    before = spm_detokenize(config.tokens, prompt)
    text = spm_detokenize(config.tokens, prompt + tokens)[len(before) :]

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4096, 64)).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"])],
        "mlp",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4096])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 64])],
        [onnx.numpy_helper.from_array(w, "W")],
    )
    mlp = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    onnx.save(mlp, directory / "model.onnx")
    onnx.save(mlp, directory / "mlp.onnx")
    x = np.ones((1, 4096), np.float32)  # what the README feeds
    w_q4_0 = gguf.quants.dequantize(gguf.quants.quantize(w.T.copy(), gguf.GGMLQuantizationType.Q4_0), 2).T
    return {"tokens": tokens, "text": text, "y": x.astype(np.float64) @ w_q4_0}


@pytest.mark.slow
def test_readme_three_workflows_run_as_written(tmp_path, monkeypatch):
    text = README.read_text()
    section = text[text.index("## Three workflows") :]
    section = section[: section.index("\n## ", 1)]
    oracles = _workflow_inputs(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    commands = []
    compared = []
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
                commands.append(argv[1])
                if argv[1] == "generate":  # the streamed text, then a newline
                    assert result.stdout == oracles["text"] + "\n"
                    compared.append("generate")
        else:
            assert lang == "python"
            exec(compile(code, str(README), "exec"), namespace)
            if "result" in namespace:
                assert namespace.pop("result").tokens == oracles["tokens"]
                compared.append("S.generate")
            if "y" in namespace:
                # onnxruntime's int8 activations are exact for a row of ones: only the sum order differs.
                np.testing.assert_allclose(namespace.pop("y"), oracles["y"], rtol=1e-4, atol=1e-3)
                compared.append("quantize")
    assert commands == ["check", "from-gguf", "generate", "quantize"]
    assert compared == ["generate", "S.generate", "quantize"]  # every workflow ran, and was compared
    # "the weights run quantized", as the README says: on MatMulNBits, not decoded to float.
    for model in ("model.onnx", "mlp.q4_0.onnx"):
        ops = {node.op_type for node in S.InferenceSession(model).lowered.graph.node}
        assert "MatMulNBits" in ops and "MatMul" not in ops and "Gemm" not in ops, (model, ops)
    assert not (tmp_path / "model.onnx.data").exists()  # --reference copied no payload byte
    assert (tmp_path / "model.onnx").stat().st_size < 100_000  # the payloads stayed in the .gguf
