"""The granite and phi3 tiny files (tests/support/families) without llama.cpp: every config writes a
file that reads back with the declared tensor names, shapes, types and metadata keys, and the
oracle's cache gives the whole prompt's logits when fed position by position."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")

from gguf import GGUFReader  # noqa: E402
from support.families import granite, phi3  # noqa: E402
from support.llm import read_weights, relative_rms  # noqa: E402

FAMILIES = {"granite": granite, "phi3": phi3}
CASES = [(family, name) for family, module in FAMILIES.items() for name in module.CONFIGS]


def _kind(name: str) -> str:
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def _expected_keys(family: str, c) -> set[str]:
    keys = {"block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count"}
    keys |= {"attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count"}
    if family == "granite":
        optional = {
            "logit_scale": c.logit_scale,
            "embedding_scale": c.embedding_scale,
            "residual_scale": c.residual_scale,
            "attention.scale": c.attention_scale,
            "rope.scaling.finetuned": c.rope,
        }
    else:
        optional = {
            "rope.scaling.original_context_length": c.original_context_length,
            "rope.scaling.attn_factor": c.rope_attn_factor,
            "attention.sliding_window": c.sliding_window,
        }
    return {f"{family}.{k}" for k in keys | {k for k, v in optional.items() if v is not None}}


@pytest.mark.parametrize(("family", "name"), CASES)
def test_config_writes_and_reads_back_as_declared(tmp_path, family, name):
    module, c = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path = tmp_path / "tiny.gguf"
    module.write_gguf(path, c)
    reader = GGUFReader(str(path))
    assert str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8") == family
    arch_keys = {k for k in reader.fields if k.startswith(f"{family}.")}
    assert arch_keys == _expected_keys(family, c)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    for tensor, shape in module.tensor_shapes(c).items():
        assert types[tensor] == ("F32" if len(shape) == 1 else c.types.get(_kind(tensor), c.default_type)), tensor
    weights = read_weights(path)
    assert {k: v.shape for k, v in weights.items()} == module.tensor_shapes(c)
    assert c.n_vocab == weights["token_embd.weight"].shape[0]
    assert (c.n_layers, c.n_kv_heads, c.head_dim) == (c.n_layers, c.n_kv_heads, c.n_embd // c.n_heads)


@pytest.mark.parametrize(("family", "name"), CASES)
def test_oracle_cache_steps_give_the_whole_prompt_logits(tmp_path, family, name):
    module, c = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path = tmp_path / "tiny.gguf"
    module.write_gguf(path, c)
    weights = read_weights(path)
    ids = np.random.default_rng(7).integers(3, c.n_vocab, 12)
    whole, cache = module.forward(weights, c, ids)
    assert whole.shape == (12, c.n_vocab)
    assert [k.shape for k, _ in cache] == [(12, c.n_kv_heads, c.head_dim)] * c.n_layers
    part, cache = module.forward(weights, c, ids[:7])
    steps = [part]
    for i in ids[7:]:
        logits, cache = module.forward(weights, c, np.array([i]), cache)
        steps.append(logits)
    assert relative_rms(np.concatenate(steps), whole) < 1e-12


def test_phi3_factor_choice_follows_the_context():
    """get_rope_factors: long iff n_ctx padded to 256 > the original context."""
    long, short = phi3.CONFIGS["phi3-longrope-long-f32"], phi3.CONFIGS["phi3-longrope-short-f32"]
    assert long.uses_long_factors and not short.uses_long_factors
    assert long.n_ctx_orig == 256 and long.n_ctx == 512
    assert not phi3.Phi3Config(original_context_length=256, n_ctx=200).uses_long_factors  # 200 -> 256
    assert phi3.Phi3Config(original_context_length=256, n_ctx=257).uses_long_factors  # 257 -> 512
