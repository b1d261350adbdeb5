"""Every decoder family's graph against llama.cpp itself (llama-cpp-python, the interpreter in
ONNX_STRUCT_LLAMA_CPP_PYTHON; skipped without it), on the tiny files of tests/support/families/:

- F32 weights, F32 KV cache: logits within 1e-5 relative RMS of llama.cpp's, and 40 greedy tokens
  identical. The gemma families' floor is llama.cpp's own: ggml's CPU GELU goes through an fp16
  table (GGML_GELU_FP16), 1.6e-4 to 1e-3 from exact GELU on these files; there the graph must be
  as close to llama.cpp as the exact float64 oracle is (the oracle with the table emulated is
  within 1e-5: tests/test_oracle_gemma_llama_cpp.py).
- Quantized mixes: the distances are printed (llama.cpp quantizes activations to Q8: 1-9% here).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")

from support.family_cases import CASES, f32  # noqa: E402
from support.llm import read_weights, relative_rms, run_llama_cpp  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.convert import convert  # noqa: E402
from onnx_struct.llm.generation import Generator  # noqa: E402

PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)
PROMPT = [3, 17, 5, 42, 7, 9, 60, 1, 33, 12, 80, 4, 27, 50, 11, 64]
N_CTX = 512  # the peer's n_ctx; the graph is built for as many positions
GELU_TABLE_FAMILIES = ("gemma", "gemma2", "gemma3")

pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_available():
    try:
        found = subprocess.run([PYTHON, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")


def _files(tmp_path, name):
    module, config = CASES[name]
    path = tmp_path / f"{name}.gguf"
    module.write_gguf(path, config)
    return (
        module,
        config,
        path,
        convert(path, graph=True, context_length=min(N_CTX, config.context_length), all_logits=True),
    )


def _logits(model, config) -> np.ndarray:
    empty = np.zeros((1, config.n_kv_heads, 0, config.head_dim), np.float32)
    feeds = {"input_ids": np.array([PROMPT], np.int64), "attention_mask": np.ones((1, len(PROMPT)), np.int64)}
    for i in range(config.n_layers):
        feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
    return onnx_struct.InferenceSession(model, accuracy_level=0).run(["logits"], feeds)[0][0]


F32_CASES = sorted(name for name in CASES if f32(name))
QUANTIZED_CASES = sorted(name for name in CASES if not f32(name))


@pytest.mark.parametrize("name", F32_CASES)
def test_f32_logits_and_40_greedy_tokens_match_llama_cpp(tmp_path, name):
    module, config, path, model = _files(tmp_path, name)
    request = {"model": str(path), "task": "logits", "tokens": PROMPT, "kv": "f32", "n_ctx": N_CTX}
    theirs = run_llama_cpp(PYTHON, request, tmp_path)["logits"].astype(np.float64)
    distance = relative_rms(_logits(model, config), theirs)
    if config.architecture in GELU_TABLE_FAMILIES:
        exact, _ = module.forward(read_weights(path), config, np.array(PROMPT))
        floor = relative_rms(exact, theirs)
        print(f"{name}: graph {distance:.2e} from llama.cpp, exact oracle {floor:.2e} (fp16 GELU table)")
        assert distance < floor * 1.1 + 1e-5
    else:
        print(f"{name}: graph {distance:.2e} from llama.cpp")
        assert distance < 1e-5
    request = {"model": str(path), "task": "greedy", "tokens": PROMPT, "n_new": 40, "kv": "f32", "n_ctx": N_CTX}
    generated = run_llama_cpp(PYTHON, request, tmp_path)["generated"].tolist()
    ours = Generator(model, accuracy_level=0).generate(PROMPT, max_new_tokens=40, stop_at_eos=False).tokens
    assert ours == generated


@pytest.mark.parametrize("name", QUANTIZED_CASES)
def test_quantized_mix_distances(tmp_path, name):
    """Ours within 2e-4 of the float64 forward of the same bytes; llama.cpp's distance reported."""
    module, config, path, model = _files(tmp_path, name)
    exact, _ = module.forward(read_weights(path), config, np.array(PROMPT))
    request = {"model": str(path), "task": "logits", "tokens": PROMPT, "n_ctx": N_CTX}
    theirs = run_llama_cpp(PYTHON, request, tmp_path)["logits"]
    ours = relative_rms(_logits(model, config), exact)
    print(f"{name}: graph {ours:.2e} from exact, llama.cpp {relative_rms(theirs, exact):.2e}")
    assert ours < 2e-4
    assert relative_rms(theirs, exact) < 0.2
