"""Hostile values of the keys the decoder families read (onnx_struct/llm/graph/families/): each is
a ValidationError naming the key, never a graph onnxruntime would run wrongly (its
GroupQueryAttention takes softcap 0 or NaN as "no cap" and scale 0 as the default:
docs/llm.md) or a crash. The files are the families' tiny test files (tests/support/families/),
their metadata then changed one key at a time."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("gguf")

from support.family_cases import CASES  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.llm.graph import plan_decoder  # noqa: E402
from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from gguf import GGUFReader

    out = {}
    for name in ("gemma3-swa", "gemma2-defaults", "granite-f32", "olmo2-swa", "phi3-longrope-long-f32", "qwen3-gqa"):
        module, config = CASES[name]
        path = tmp_path_factory.mktemp("hostile") / f"{name}.gguf"
        module.write_gguf(path, config)
        tensors = {
            t.name: (t.tensor_type.name, tuple(int(d) for d in reversed(t.shape.tolist())))
            for t in GGUFReader(str(path)).tensors
        }
        out[name] = (read_gguf_metadata(path), tensors)
    return out


NAN, INF = math.nan, math.inf
CASES_HOSTILE = [
    ("gemma3-swa", "gemma3.attention.sliding_window", -1, "positive integer"),
    ("gemma3-swa", "gemma3.attention.sliding_window", "4", "positive integer"),
    ("gemma3-swa", "gemma3.attention.sliding_window_pattern", [True] * 7, "at most 6 values"),
    ("gemma3-swa", "gemma3.attention.sliding_window_pattern", [1.0, 0], "bools or integers"),
    ("gemma3-swa", "gemma3.attention.sliding_window_pattern", ["x"], "bools or integers"),
    ("gemma3-swa", "gemma3.attention.sliding_window_pattern", -2, "non-negative integer"),
    ("gemma3-swa", "gemma3.attention.sliding_window_pattern", [False] * 6, "marks no layer"),
    ("gemma3-swa", "gemma3.attention.sliding_window_pattern", 1, "marks no layer"),
    ("gemma3-swa", "gemma3.rope.freq_base_swa", 0.0, "positive, finite"),
    ("gemma3-swa", "gemma3.rope.freq_base_swa", NAN, "positive, finite"),
    ("gemma3-swa", "gemma3.final_logit_softcapping", NAN, "positive, finite"),
    ("gemma3-swa", "gemma3.final_logit_softcapping", -3.0, "positive, finite"),
    ("gemma3-swa", "gemma3.attention.key_length", 24, "multiple of 16"),
    ("gemma3-swa", "gemma3.attention.value_length", 32, "one head size"),
    ("gemma3-swa", "gemma3.rope.dimension_count", 32, "rotates whole heads"),
    ("gemma2-defaults", "gemma2.attention.sliding_window", 0, "positive integer"),
    ("gemma2-defaults", "gemma2.attn_logit_softcapping", 0.0, "positive, finite"),
    ("gemma2-defaults", "gemma2.attn_logit_softcapping", NAN, "positive, finite"),
    ("gemma2-defaults", "gemma2.attn_logit_softcapping", INF, "positive, finite"),
    ("gemma2-defaults", "gemma2.final_logit_softcapping", 0.0, "positive, finite"),
    ("gemma2-defaults", "gemma2.final_logit_softcapping", 1e39, "float32"),
    ("granite-f32", "granite.logit_scale", 0.0, "positive, finite"),
    ("granite-f32", "granite.logit_scale", None, "missing"),
    ("granite-f32", "granite.embedding_scale", NAN, "positive, finite"),
    ("granite-f32", "granite.residual_scale", -0.5, "positive, finite"),
    ("granite-f32", "granite.attention.scale", INF, "positive, finite"),
    ("granite-f32", "granite.rope.scaling.finetuned", 1, "must be a bool"),
    ("olmo2-swa", "olmo2.attention.sliding_window", 2**40, "over 2147483647"),
    ("olmo2-swa", "olmo2.attention.sliding_window_pattern", [True] * 9, "at most 4 values"),
    ("phi3-longrope-long-f32", "phi3.rope.scaling.attn_factor", 0.0, "positive, finite"),
    ("phi3-longrope-long-f32", "phi3.rope.scaling.original_context_length", 0, "positive integer"),
    ("phi3-longrope-long-f32", "phi3.rope.dimension_count", 40, "multiple of 16"),
    ("phi3-longrope-long-f32", "phi3.rope.dimension_count", 128, "up to the head size"),
    ("qwen3-gqa", "qwen3.attention.head_count_kv", 3, "kv heads must divide"),
    ("qwen3-gqa", "qwen3.attention.layer_norm_rms_epsilon", None, "missing"),
    ("qwen3-gqa", "qwen3.rope.scaling.type", "yarn", "yarn"),
    ("qwen3-gqa", "qwen3.expert_count", 8, "mixture of experts"),
]


@pytest.mark.parametrize(("name", "key", "value", "words"), CASES_HOSTILE)
def test_a_hostile_key_is_refused_naming_it(files, name, key, value, words):
    metadata, tensors = files[name]
    metadata = {k: v for k, v in metadata.items() if k != key} | ({} if value is None else {key: value})
    with pytest.raises(onnx_struct.ValidationError) as caught:
        plan_decoder(metadata, tensors)
    assert caught.value.path == f"gguf.kv[{key!r}]", str(caught.value)
    assert words in str(caught.value)


@pytest.mark.parametrize("name", ["gemma3-swa", "olmo2-swa"])
def test_a_window_as_long_as_the_context_is_no_window(files, name):
    """A window covering every position attends like none: the graph sets no local_window_size."""
    metadata, tensors = files[name]
    arch = metadata["general.architecture"]
    wide = metadata | {f"{arch}.attention.sliding_window": metadata[f"{arch}.context_length"]}
    assert all(layer.window is None for layer in plan_decoder(wide, tensors).block.layers)
    assert any(layer.window for layer in plan_decoder(metadata, tensors).block.layers)


def test_an_unsupported_architecture_names_the_nearest_supported_one(files):
    metadata, tensors = files["qwen3-gqa"]
    expected = {
        "qwen3moe": r"'qwen3moe' has no decoder graph \(a mixture of experts: onnxruntime's CPU QMoE kernel "
        r".* nearest dense family: qwen3\)",
        "falcon": r"'falcon' has no decoder graph; supported: gemma, ",
        "olmo": r"'olmo' has no decoder graph \(nearest supported: olmo2\)",
    }
    for arch, words in expected.items():
        with pytest.raises(onnx_struct.ValidationError, match=words):
            plan_decoder(metadata | {"general.architecture": arch}, tensors)


def test_an_integer_pattern_array_is_read_as_llama_cpp_reads_it(files):
    """llama.cpp reads int32/uint32 pattern arrays too: non-zero marks a windowed layer."""
    metadata, tensors = files["gemma3-swa"]
    key = "gemma3.attention.sliding_window_pattern"
    as_ints = plan_decoder(metadata | {key: [1, 0, 1, 0, 0, 2]}, tensors).block.layers
    as_bools = plan_decoder(metadata | {key: [True, False, True, False, False, True]}, tensors).block.layers
    assert as_ints == as_bools and [layer.window is not None for layer in as_ints] == [1, 0, 1, 0, 0, 1]


# Found by tests/fuzz/targets_graph.py (2026-12-07).
@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("qwen3-gqa", "qwen3.rope.scaling.factor", 1.4e-45),  # 1 / factor overflows float32: NaN angles
        ("qwen3-gqa", "qwen3.rope.freq_base", 1.4e-45),  # base^(-2i/d) overflows float32
        ("gemma3-swa", "gemma3.rope.freq_base_swa", 1e-40),
    ],
)
def test_rope_angles_that_overflow_float32_are_refused(files, name, key, value):
    metadata, tensors = files[name]
    arch = metadata["general.architecture"]
    metadata = metadata | {key: value} | ({f"{arch}.rope.scaling.type": "linear"} if "factor" in key else {})
    with pytest.raises(onnx_struct.ValidationError, match="overflow float32") as caught:
        plan_decoder(metadata, tensors)
    assert caught.value.path == f"gguf.kv[{key!r}]"


def test_a_q_bias_beside_a_fused_qkv_is_an_unused_tensor_not_a_key_error(files):
    metadata, tensors = files["gemma3-swa"]
    fused = {k: v for k, v in tensors.items() if not k.startswith("blk.0.attn_") or k.endswith("output.weight")}
    fused |= {"blk.0.attn_qkv.weight": ("F32", (256 + 2 * 128, 256)), "blk.0.attn_q.bias": ("F32", (256,))}
    with pytest.raises(onnx_struct.ValidationError) as caught:
        plan_decoder(metadata, fused)
    assert caught.value.path.startswith("gguf.tensors[")
