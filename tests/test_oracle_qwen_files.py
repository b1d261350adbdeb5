"""The qwen3 / smollm3 / olmo2 test files and oracles without llama.cpp (fast tier): every CONFIG
writes a GGUF that reads back with the architecture, llama.cpp's keys and the declared tensor
shapes; the oracle's prefill + one-token cache steps give the whole prompt's logits."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")

from gguf import GGUFReader  # noqa: E402
from support.families import olmo2, qwen3, smollm3  # noqa: E402
from support.llm import read_weights, relative_rms  # noqa: E402

FAMILIES = {"qwen3": qwen3, "smollm3": smollm3, "olmo2": olmo2}
CASES = [(family, name) for family, module in FAMILIES.items() for name in module.CONFIGS]
PROMPT = list(range(259, 259 + 14))


def _field(reader: GGUFReader, key: str):
    field = reader.fields[key]
    value = field.parts[field.data[0]]
    return bytes(value).decode() if field.types[0].name == "STRING" else value.tolist()[0]


@pytest.mark.parametrize(("family", "name"), CASES)
def test_config_writes_and_reads_back(tmp_path, family, name):
    module, config = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path = tmp_path / "m.gguf"
    module.write_gguf(path, config)
    reader = GGUFReader(str(path))
    arch = config.architecture
    assert _field(reader, "general.architecture") == arch == family
    assert _field(reader, f"{arch}.block_count") == config.n_layers
    assert _field(reader, f"{arch}.attention.head_count_kv") == config.n_kv_heads
    assert _field(reader, f"{arch}.attention.layer_norm_rms_epsilon") == pytest.approx(config.rms_eps)
    if family != "olmo2":
        assert _field(reader, f"{arch}.attention.key_length") == config.head_dim
    weights = read_weights(path)
    assert {k: v.shape for k, v in weights.items()} == module.tensor_shapes(config)
    assert weights["token_embd.weight"].shape == (config.n_vocab, config.n_embd)
    for t in reader.tensors:
        expected = config.types.get(qwen3.tensor_kind(t.name), config.default_type) if len(t.shape) > 1 else "F32"
        assert t.tensor_type.name == expected, t.name


@pytest.mark.parametrize(("family", "name"), CASES)
def test_cache_steps_give_the_whole_prompt_logits(tmp_path, family, name):
    module, config = FAMILIES[family], FAMILIES[family].CONFIGS[name]
    path = tmp_path / "m.gguf"
    module.write_gguf(path, config)
    weights = read_weights(path)
    whole, cache = module.forward(weights, config, np.array(PROMPT))
    assert whole.shape == (len(PROMPT), config.n_vocab)
    assert [k.shape for k, _ in cache] == [(len(PROMPT), config.n_kv_heads, config.head_dim)] * config.n_layers
    steps, cache = module.forward(weights, config, np.array(PROMPT[:9]))
    rows = [steps]
    for token in PROMPT[9:]:
        logits, cache = module.forward(weights, config, np.array([token]), cache)
        rows.append(logits)
    assert relative_rms(np.concatenate(rows), whole) < 1e-12


def test_smollm3_skips_rope_on_every_fourth_layer():
    assert [il for il in range(9) if not smollm3.uses_rope(il)] == [3, 7]


def test_olmo2_swa_patterns():
    c = olmo2.CONFIGS["olmo2-swa"]
    assert [c.is_swa(il) for il in range(c.n_layers)] == [True, True, True, False]
    c = olmo2.CONFIGS["olmo2-swa-array"]
    assert [c.is_swa(il) for il in range(c.n_layers)] == [True, False, True]
    assert not any(olmo2.CONFIGS["olmo2-gqa"].is_swa(il) for il in range(2))
