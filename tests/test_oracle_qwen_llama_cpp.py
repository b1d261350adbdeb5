"""The qwen3 / smollm3 / olmo2 float64 oracles (tests/support/families) against llama.cpp itself
(llama-cpp-python in ONNX_STRUCT_LLAMA_CPP_PYTHON; skipped when it does not import llama_cpp).

- every F32 config, F32 KV cache: llama.cpp's logits of a 16-id prompt within 1e-5 relative RMS of
  the oracle's, and 40 greedy tokens identical (these families have no reduced-precision op in
  ggml: SiLU, RMSNorm, softmax and RoPE run in F32, so no emulation option is needed);
- each feature a config exercises, switched off in the oracle (no SWA, every layer roped, no
  rope scaling, no biases): the oracle then misses llama.cpp by far more than 1e-5, so the match
  above tests the feature;
- the quantized mixes (Q4_K, Q5_0, Q6_K, Q8_0, F32): the distance is reported; llama.cpp
  quantizes activations (Q8_0 / Q8_K) so it is percent-level, bounded loosely here;
- files llama.cpp refuses (a required key missing, a required tensor missing, an extra tensor,
  rope.dimension_count != key_length) are refused by it (so the graph builder refuses them too).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")

from gguf import GGUFWriter  # noqa: E402
from support.families import olmo2, qwen3, smollm3  # noqa: E402
from support.llm import read_weights, relative_rms, run_llama_cpp  # noqa: E402

PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)
FAMILIES = {"qwen3": qwen3, "smollm3": smollm3, "olmo2": olmo2}
CASES = [(family, name) for family, module in FAMILIES.items() for name in module.CONFIGS]
F32_CASES = [case for case in CASES if FAMILIES[case[0]].CONFIGS[case[1]].default_type == "F32"]
QUANT_CASES = [case for case in CASES if case not in F32_CASES]
PROMPT = list(range(259, 259 + 16))  # 16 vocabulary ids: longer than the sliding windows (4, 5)


def _olmo2_rope_scaled_on_swa_layers_too(c, il):
    return c.freq_base, 1.0 / c.linear_rope_factor


_OLMO2_ROPE = olmo2.rope_base_and_scale


def _olmo2_rope_freq_base_swa_on_swa_layers(c, il):
    base, scale = _OLMO2_ROPE(c, il)
    return (c.freq_base_swa if c.is_swa(il) else base), scale


# config name -> {label: (config fields replaced, weight names dropped, module attributes patched)}
ABLATIONS = {
    "qwen3-untied": {"no rope scaling": ({"linear_rope_factor": None}, "", {}), "no biases": ({}, ".bias", {})},
    "smollm3-gqa": {"every layer roped": ({}, "", {"NO_ROPE_LAYER_STEP": 10**6})},
    "smollm3-untied": {
        "every layer roped": ({}, "", {"NO_ROPE_LAYER_STEP": 10**6}),
        "no rope scaling": ({"linear_rope_factor": None}, "", {}),
    },
    "olmo2-swa": {
        "no window": ({"sliding_window": None}, "", {}),
        "no rope scaling": ({"linear_rope_factor": None}, "", {}),
        "rope scaling on SWA layers too": ({}, "", {"rope_base_and_scale": _olmo2_rope_scaled_on_swa_layers_too}),
        "rope.freq_base_swa on SWA layers": ({}, "", {"rope_base_and_scale": _olmo2_rope_freq_base_swa_on_swa_layers}),
    },
    "olmo2-swa-array": {"default pattern 4": ({"swa_pattern": None}, "", {})},
}  # fmt: skip


def _has_llama_cpp() -> bool:
    try:
        return subprocess.run([PYTHON, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_available():
    if not _has_llama_cpp():
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")


def _written(tmp_path, family: str, name: str):
    module, config = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path = tmp_path / f"{name}.gguf"
    module.write_gguf(path, config)
    return module, config, path


def _llama_cpp_logits(path, tmp_path) -> np.ndarray:
    request = {"model": str(path), "task": "logits", "tokens": PROMPT, "kv": "f32"}
    return run_llama_cpp(PYTHON, request, tmp_path)["logits"]


@pytest.mark.parametrize(("family", "name"), F32_CASES)
def test_f32_logits_and_40_greedy_tokens_match_llama_cpp(tmp_path, family, name):
    module, config, path = _written(tmp_path, family, name)
    weights = read_weights(path)
    theirs = _llama_cpp_logits(path, tmp_path)
    ours, _ = module.forward(weights, config, np.array(PROMPT))
    distance = relative_rms(ours, theirs)
    print(f"{name}: logits relative RMS to llama.cpp {distance:.3g}")
    assert distance < 1e-5
    request = {"model": str(path), "task": "greedy", "tokens": PROMPT, "n_new": 40, "kv": "f32"}
    generated = run_llama_cpp(PYTHON, request, tmp_path)["generated"].tolist()
    assert module.greedy(weights, config, PROMPT, 40) == generated


@pytest.mark.parametrize(("name", "label"), [(name, label) for name, cases in ABLATIONS.items() for label in cases])
def test_the_oracle_without_a_feature_misses_llama_cpp(tmp_path, monkeypatch, name, label):
    family = name.split("-")[0]
    module, config, path = _written(tmp_path, family, name)
    fields, dropped, patches = ABLATIONS[name][label]
    weights = {k: v for k, v in read_weights(path).items() if not (dropped and k.endswith(dropped))}
    for attribute, value in patches.items():
        monkeypatch.setattr(module, attribute, value)
    ablated, _ = module.forward(weights, dataclasses.replace(config, **fields), np.array(PROMPT))
    distance = relative_rms(ablated, _llama_cpp_logits(path, tmp_path))
    print(f"{name} with {label}: {distance:.3g}")
    assert distance > 1e-3


@pytest.mark.parametrize(("family", "name"), QUANT_CASES)
def test_quantized_mix_distance(tmp_path, family, name):
    module, config, path = _written(tmp_path, family, name)
    exact, _ = module.forward(read_weights(path), config, np.array(PROMPT))
    distance = relative_rms(_llama_cpp_logits(path, tmp_path), exact)
    print(f"{name}: llama.cpp's logits relative RMS to the float64 oracle {distance:.3g}")
    assert distance < 0.2


def _skip(self, *args, **kwargs):
    return None


def _half_rope_dimensions(self, n):
    GGUFWriter.add_uint32(self, f"{self.arch}.rope.dimension_count", n // 2)


def _without(name):
    def shapes(config):
        return {k: v for k, v in _SHAPES[type(config)](config).items() if k != name}

    return shapes


def _with_attn_norm(config):
    return {**_SHAPES[type(config)](config), "blk.0.attn_norm.weight": (config.n_embd,)}


_SHAPES = {qwen3.Qwen3Config: qwen3.tensor_shapes, olmo2.Olmo2Config: olmo2.tensor_shapes}
# name -> (family, config, GGUFWriter methods replaced, tensor_shapes replacement); llama.cpp refuses
# each file (an error, or for the rope dimension count a GGML_ASSERT abort in qwen3.cpp)
REFUSED = {
    "no layer_norm_rms_epsilon": ("qwen3", "qwen3-gqa", {"add_layer_norm_rms_eps": _skip}, None),
    "no context_length": ("qwen3", "qwen3-gqa", {"add_context_length": _skip}, None),
    "no head_count": ("qwen3", "qwen3-gqa", {"add_head_count": _skip}, None),
    "no feed_forward_length": ("qwen3", "qwen3-gqa", {"add_feed_forward_length": _skip}, None),
    "rope.dimension_count != key_length": ("qwen3", "qwen3-gqa", {"add_rope_dimension_count": _half_rope_dimensions}, None),
    "no key_length while head_dim != n_embd / n_heads": (
        "qwen3", "qwen3-gqa", {"add_key_length": _skip, "add_value_length": _skip, "add_rope_dimension_count": _skip}, None
    ),
    "qwen3 without attn_k_norm": ("qwen3", "qwen3-gqa", {}, _without("blk.0.attn_k_norm.weight")),
    "olmo2 without output.weight": ("olmo2", "olmo2-gqa", {}, _without("output.weight")),
    "olmo2 with an attn_norm": ("olmo2", "olmo2-gqa", {}, _with_attn_norm),
}  # fmt: skip


@pytest.mark.parametrize("label", sorted(REFUSED))
def test_llama_cpp_refuses(tmp_path, monkeypatch, label):
    family, name, methods, shapes = REFUSED[label]
    for method, replacement in methods.items():
        monkeypatch.setattr(GGUFWriter, method, replacement)
    if shapes is not None:
        monkeypatch.setattr(FAMILIES[family], "tensor_shapes", shapes)
    _, _, path = _written(tmp_path, family, name)
    with pytest.raises(RuntimeError, match="llama.cpp peer failed"):
        _llama_cpp_logits(path, tmp_path)
