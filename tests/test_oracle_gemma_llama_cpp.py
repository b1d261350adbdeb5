"""The gemma-family oracle (tests/support/families/gemma.py) against llama.cpp itself
(llama-cpp-python; ONNX_STRUCT_LLAMA_CPP_PYTHON names an interpreter that imports llama_cpp,
skipped otherwise). F32 weights, F32 KV cache, a 14-id prompt (windows of 4-5 bind):

- logits within the config's bar of llama.cpp's with ggml's fp16 GELU table emulated (3e-5 for
  one- and two-layer configs, a depth-aware bar for deeper ones: see
  gemma.STRICT / DEEP for why), and the exact-GELU oracle measurably farther (the emulation is
  what closes the gap);
- 40 greedy tokens identical to the oracle's, which runs one position at a time through its cache;
- quantized mixes (Q4_K, Q5_0, Q6_K, Q8_0, F32): llama.cpp within 5% of the float64 forward
  (it quantizes activations to Q8_K / Q8_0; 1-3% is its usual distance);
- llama.cpp refuses a gemma3 file whose sliding window is set while no layer is SWA.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")

from support.families.gemma import CONFIGS, f32_bar, forward, greedy, write_gguf  # noqa: E402
from support.llm import read_weights, relative_rms, run_llama_cpp  # noqa: E402

PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)
PROMPT = [300, 301, 277, 290, 305, 262, 270, 280, 299, 263, 284, 271, 295, 288]  # spm_vocab ids
F32 = sorted(name for name, c in CONFIGS.items() if c.default_type == "F32" and not c.types)
QUANTIZED = sorted(name for name, c in CONFIGS.items() if c.types)

pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


def _has_llama_cpp() -> bool:
    try:
        return subprocess.run([PYTHON, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_available():
    if not _has_llama_cpp():
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")


def _llama_logits(tmp_path, path) -> np.ndarray:
    request = {"model": str(path), "task": "logits", "tokens": PROMPT, "kv": "f32"}
    return run_llama_cpp(PYTHON, request, tmp_path)["logits"].astype(np.float64)


@pytest.mark.parametrize("name", F32)
def test_f32_logits_match_llama_cpp(tmp_path, name):
    c = CONFIGS[name]
    path = tmp_path / "m.gguf"
    write_gguf(path, c)
    weights = read_weights(path)
    theirs = _llama_logits(tmp_path, path)
    emulated = relative_rms(theirs, forward(weights, c, np.array(PROMPT), gelu_fp16=True)[0])
    exact = relative_rms(theirs, forward(weights, c, np.array(PROMPT))[0])
    print(f"{name}: relative RMS to llama.cpp, fp16 GELU emulated {emulated:.2e}, exact GELU {exact:.2e}")
    assert emulated < f32_bar(name)
    assert exact > 1.5 * emulated  # the table is what the emulation accounts for


@pytest.mark.parametrize("name", F32)
def test_40_greedy_tokens_match_llama_cpp(tmp_path, name):
    c = CONFIGS[name]
    path = tmp_path / "m.gguf"
    write_gguf(path, c)
    request = {"model": str(path), "task": "greedy", "tokens": PROMPT, "n_new": 40, "kv": "f32"}
    theirs = run_llama_cpp(PYTHON, request, tmp_path)["generated"].tolist()
    assert greedy(read_weights(path), c, PROMPT, 40, gelu_fp16=True) == theirs


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_mix_within_5_percent_of_llama_cpp(tmp_path, name):
    c = CONFIGS[name]
    path = tmp_path / "m.gguf"
    write_gguf(path, c)
    distance = relative_rms(_llama_logits(tmp_path, path), forward(read_weights(path), c, np.array(PROMPT))[0])
    print(f"{name}: relative RMS to llama.cpp {distance:.2e}")
    assert distance < 0.05


def test_llama_cpp_refuses_gemma3_window_without_swa_layers(tmp_path):
    # attention.sliding_window > 0 but the pattern marks no layer SWA: GGML_ASSERT(is_swa_any()) aborts
    c = dataclasses.replace(CONFIGS["gemma3-swa-1layer"], sliding_window_pattern=[False])
    path = tmp_path / "m.gguf"
    write_gguf(path, c)
    with pytest.raises(RuntimeError, match="is_swa_any"):
        _llama_logits(tmp_path, path)
