"""The gemma-family test files (tests/support/families/gemma.py) write and read back: every
tensor with the name, shape and GGML type declared, the metadata keys llama.cpp reads, and the
per-layer values the oracle derives from them. No llama.cpp here (tests/test_oracle_gemma_llama_cpp.py)."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from support.families.gemma import CONFIGS, derive, forward, shapes, write_gguf  # noqa: E402
from support.llm import read_weights  # noqa: E402

SMALL = sorted(name for name, c in CONFIGS.items() if c.n_layers <= 6)


@pytest.mark.parametrize("name", SMALL)
def test_config_writes_and_reads_back_with_declared_shapes_and_types(tmp_path, name):
    c = CONFIGS[name]
    path = tmp_path / "m.gguf"
    write_gguf(path, c)
    reader = gguf.GGUFReader(str(path))
    declared = shapes(c)
    found = {t.name: t for t in reader.tensors}
    assert sorted(found) == sorted(declared)
    for tensor_name, shape in declared.items():
        t = found[tensor_name]
        assert tuple(int(d) for d in reversed(t.shape.tolist())) == shape, tensor_name
        kind = tensor_name.split(".")[2] if tensor_name.startswith("blk.") else tensor_name.split(".")[0]
        expected = "F32" if len(shape) == 1 else c.types.get(kind, c.default_type)
        assert gguf.GGMLQuantizationType(t.tensor_type).name == expected, tensor_name
    weights = read_weights(path)
    assert {k: v.shape for k, v in weights.items()} == declared
    arch = c.architecture
    fields = reader.fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == arch
    assert int(fields[f"{arch}.attention.key_length"].parts[-1][0]) == c.head_dim
    assert int(fields[f"{arch}.block_count"].parts[-1][0]) == c.n_layers
    assert f"{arch}.attention.layer_norm_rms_epsilon" in fields  # llama.cpp requires it for all three
    assert (f"{arch}.attention.sliding_window" in fields) == (c.sliding_window is not None)
    assert (f"{arch}.rope.scaling.factor" in fields) == (c.linear_rope_factor is not None)
    assert len(fields["tokenizer.ggml.tokens"].data) == c.n_vocab


def test_derived_gemma3_pattern_bases_and_scale():
    d = derive(CONFIGS["gemma3-swa"])  # 6 layers, default pattern 6: il % 6 < 5 is SWA
    assert d.swa_layers == [True] * 5 + [False]
    assert d.rope_base == [10000.0] * 5 + [1_000_000.0]
    assert d.n_swa == 5 and d.attn_softcap is None and d.final_softcap is None
    d = derive(CONFIGS["gemma3-linear-rope"])  # pattern 2, linear factor 8 on the global layers only
    assert d.swa_layers == [True, False, True, False]
    assert d.rope_scale == [1.0, 0.125, 1.0, 0.125]
    assert d.attn_scale == pytest.approx(1 / np.sqrt(32)) and d.final_softcap == 3.0
    assert derive(CONFIGS["gemma3-27b-scale"]).attn_scale == pytest.approx(1 / np.sqrt(64 // 4))
    assert derive(CONFIGS["gemma3-no-swa"]).swa_layers == [False, False]


def test_derived_gemma2_defaults():
    d = derive(CONFIGS["gemma2-defaults"])
    assert d.swa_layers == [True, False] and d.n_swa == 4096
    assert (d.attn_softcap, d.final_softcap) == (50.0, 30.0)
    d = derive(CONFIGS["gemma"])
    assert not any(d.swa_layers) and d.attn_softcap is None and d.final_softcap is None


def test_oracle_cache_steps_equal_the_whole_prompt(tmp_path):
    # prefill 9 then one position at a time: the window (5) binds on every step
    c = CONFIGS["gemma3-linear-rope"]
    path = tmp_path / "m.gguf"
    write_gguf(path, c)
    w = read_weights(path)
    ids = np.array([300, 301, 277, 290, 305, 262, 270, 280, 299, 263, 284, 271, 295])
    whole, _ = forward(w, c, ids)
    logits, cache = forward(w, c, ids[:9])
    steps = [logits]
    for i in range(9, len(ids)):
        logits, cache = forward(w, c, ids[i : i + 1], cache)
        steps.append(logits)
    np.testing.assert_allclose(np.concatenate(steps), whole, rtol=1e-10, atol=1e-10)
    assert cache[0][0].shape == (len(ids), c.n_kv_heads, c.head_dim)
