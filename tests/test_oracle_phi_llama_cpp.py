"""The granite and phi3 float64 oracles (tests/support/families) against llama.cpp itself
(llama-cpp-python, run by ONNX_STRUCT_LLAMA_CPP_PYTHON; skipped when it does not import llama_cpp).

- every F32 config, F32 KV cache: llama.cpp's logits within 1e-5 relative RMS of the oracle's and
  40 greedy tokens identical (no op here runs at reduced precision in ggml: SiLU, RMSNorm, RoPE
  and softmax are F32, so the oracle needs no emulation);
- mutants: the oracle with one feature wrong (a scale dropped, the other LongRoPE factors, the
  gate/up halves swapped, ...) is far from llama.cpp, so each feature is seen by the comparison;
- phi3: one file run at two contexts takes the short factors, then the long ones; a sliding window
  in the metadata changes nothing (llama.cpp disables phi3's SWA);
- granite without ``granite.logit_scale`` is refused by llama.cpp;
- the quantized mixes: the distance of llama.cpp to the oracle, reported (< 5%).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")

from support.families import granite, phi3  # noqa: E402
from support.llm import read_weights, relative_rms, run_llama_cpp  # noqa: E402

PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)
FAMILIES = {"granite": granite, "phi3": phi3}
F32 = [(f, n) for f, m in FAMILIES.items() for n in m.CONFIGS if n.endswith("-f32")]
QUANTIZED = [(f, n) for f, m in FAMILIES.items() for n in m.CONFIGS if not n.endswith("-f32")]

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


def _prompt(c) -> list[int]:
    """16 ids from the vocabulary (longer than the sliding windows in the configs)."""
    return np.random.default_rng(7).integers(3, c.n_vocab, 16).tolist()


def _llama_cpp_logits(tmp_path, path, ids, **extra) -> np.ndarray:
    request = {"model": str(path), "task": "logits", "tokens": ids, "kv": "f32", **extra}
    return run_llama_cpp(PYTHON, request, tmp_path)["logits"]


def _written(tmp_path, family: str, c):
    path = tmp_path / f"{family}.gguf"
    FAMILIES[family].write_gguf(path, c)
    return path, read_weights(path)


@pytest.mark.parametrize(("family", "name"), F32)
def test_f32_logits_and_40_greedy_tokens_match_llama_cpp(tmp_path, family, name):
    module, c = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path, weights = _written(tmp_path, family, c)
    ids = _prompt(c)
    theirs = _llama_cpp_logits(tmp_path, path, ids, n_ctx=c.n_ctx if family == "phi3" else 512)
    distance = relative_rms(theirs, module.forward(weights, c, np.array(ids))[0])
    print(f"{name}: llama.cpp logits at {distance:.2e} relative RMS of the oracle")
    assert distance < 1e-5
    request = {"model": str(path), "task": "greedy", "tokens": ids, "n_new": 40, "kv": "f32"}
    generated = run_llama_cpp(PYTHON, request, tmp_path)["generated"].tolist()
    assert module.greedy(weights, c, ids, 40) == generated


def _swap_gate_up(weights, c):
    """phi3's ffn_up with its halves swapped (up rows first): the wrong reading of ggml_swiglu."""
    out = dict(weights)
    for i in range(c.n_layers):
        up = weights[f"blk.{i}.ffn_up.weight"]
        out[f"blk.{i}.ffn_up.weight"] = np.concatenate([up[c.n_ff :], up[: c.n_ff]])
    return out, c


def _replace(**fields):
    return lambda weights, c: (weights, dataclasses.replace(c, **fields))


MUTANTS = {
    "granite-f32 without embedding_scale": ("granite", "granite-f32", _replace(embedding_scale=None)),
    "granite-f32 without residual_scale": ("granite", "granite-f32", _replace(residual_scale=None)),
    "granite-f32 with kq_scale 1/sqrt(head_dim)": ("granite", "granite-f32", _replace(attention_scale=None)),
    "granite-f32 without logit_scale": ("granite", "granite-f32", _replace(logit_scale=1.0)),
    "granite-nope-f32 with RoPE": ("granite", "granite-nope-f32", _replace(rope=True)),
    "phi3-longrope-long-f32 with the short factors": ("phi3", "phi3-longrope-long-f32", _replace(n_ctx=256)),
    "phi3-longrope-short-f32 with the long factors": ("phi3", "phi3-longrope-short-f32", _replace(n_ctx=8192)),
    "phi3-longrope-long-f32 without attn_factor": ("phi3", "phi3-longrope-long-f32", _replace(rope_attn_factor=1.0)),
    "phi3-mini-f32 with gate and up swapped": ("phi3", "phi3-mini-f32", _swap_gate_up),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_an_oracle_with_one_feature_wrong_is_far_from_llama_cpp(tmp_path, mutant):
    family, name, mutate = MUTANTS[mutant]
    module, c = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path, weights = _written(tmp_path, family, c)
    ids = _prompt(c)
    theirs = _llama_cpp_logits(tmp_path, path, ids)
    distance = relative_rms(theirs, module.forward(*mutate(weights, c), np.array(ids))[0])
    print(f"{mutant}: {distance:.2e}")
    assert distance > 1e-3


def test_phi3_one_file_takes_the_short_then_the_long_factors_as_the_context_grows(tmp_path):
    """rope.scaling.original_context_length 256: n_ctx 256 runs the short factors, 512 the long."""
    c = phi3.CONFIGS["phi3-longrope-long-f32"]
    path, weights = _written(tmp_path, "phi3", c)
    ids = _prompt(c)
    for n_ctx, long in ((256, False), (512, True)):
        at = dataclasses.replace(c, n_ctx=n_ctx)
        assert at.uses_long_factors is long
        theirs = _llama_cpp_logits(tmp_path, path, ids, n_ctx=n_ctx)
        assert relative_rms(theirs, phi3.forward(weights, at, np.array(ids))[0]) < 1e-5


def test_phi3_sliding_window_in_the_metadata_changes_nothing(tmp_path):
    """phi3.cpp: a window > 0 is read, warned about and disabled: the logits are bit for bit those
    of the same file without the key (the window, 6, is shorter than the 16-id prompt)."""
    c = phi3.CONFIGS["phi3-mini-f32"]
    assert c.sliding_window < len(_prompt(c))
    with_window, _ = _written(tmp_path, "phi3", c)
    without = tmp_path / "without.gguf"
    phi3.write_gguf(without, dataclasses.replace(c, sliding_window=None))
    ids = _prompt(c)
    np.testing.assert_array_equal(
        _llama_cpp_logits(tmp_path, with_window, ids), _llama_cpp_logits(tmp_path, without, ids)
    )


def test_granite_without_logit_scale_is_refused_by_llama_cpp(tmp_path):
    """granite.cpp reads LLM_KV_LOGIT_SCALE as required: the file does not load."""
    c = dataclasses.replace(granite.CONFIGS["granite-f32"], logit_scale=None)
    path, _ = _written(tmp_path, "granite", c)
    with pytest.raises(RuntimeError, match="Failed to load model"):
        _llama_cpp_logits(tmp_path, path, _prompt(c))


@pytest.mark.parametrize(("family", "name"), QUANTIZED)
def test_quantized_mix_distance_to_the_oracle(tmp_path, family, name):
    """Reported, not a bar of ours: llama.cpp quantizes activations to Q8 for quantized matmuls."""
    module, c = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path, weights = _written(tmp_path, family, c)
    ids = _prompt(c)
    distance = relative_rms(_llama_cpp_logits(tmp_path, path, ids), module.forward(weights, c, np.array(ids))[0])
    print(f"{name}: llama.cpp at {distance:.2e} relative RMS of the oracle")
    assert distance < 0.05
