"""Every decoder family's graph (onnx_struct/llm/graph/families/) against the independent float64
numpy forward of that family (tests/support/families/, written from llama.cpp's graph and shown
equal to llama.cpp by tests/test_oracle_*_llama_cpp.py), on tiny random GGUF files with
llama.cpp's keys and tensor names, F32 and quantized mixes: logits at accuracy_level=0 within
1e-4 relative RMS for a whole prompt and for prefill + steps through the KV cache (windows shorter
than the prompt bind); greedy tokens identical."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")

from support.family_cases import CASES, SLOW  # noqa: E402
from support.llm import read_weights, relative_rms  # noqa: E402

import onnx_struct  # noqa: E402
from onnx_struct.convert import convert  # noqa: E402

PROMPT = np.array([3, 17, 5, 42, 7, 9, 60, 1, 33, 12, 80, 4, 27, 50], np.int64)
TOLERANCE = 1e-4
# olmo2's quantized mix measures 0.7-1.5e-4 from its first step on (its F32 configs 1e-6): no
# pre-norm feeds the raw residual of random K-quant blocks (means not zero) to q/k/v, and the
# post-norms rescale float32 rounding of small outputs to unit size.
TOLERANCES = {"olmo2-q4_k_m": 2e-4}
PARAMS = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in sorted(CASES)]


@pytest.fixture(scope="module", params=PARAMS)
def family(request, tmp_path_factory):
    module, config = CASES[request.param]
    path = tmp_path_factory.mktemp("family") / "tiny.gguf"
    module.write_gguf(path, config)
    # phi3 picks its LongRoPE factors by the context built for, as llama.cpp by its n_ctx
    model = convert(path, graph=True, context_length=getattr(config, "n_ctx", None), all_logits=True)
    session = onnx_struct.InferenceSession(model, accuracy_level=0)
    return module, config, read_weights(path), session, TOLERANCES.get(request.param, TOLERANCE)


def feeds(config, ids: np.ndarray, total: int, cache: list | None) -> dict[str, np.ndarray]:
    empty = np.zeros((1, config.n_kv_heads, 0, config.head_dim), np.float32)
    out = {"input_ids": ids[None], "attention_mask": np.ones((1, total), np.int64)}
    for i in range(config.n_layers):
        out[f"past_key_values.{i}.key"] = cache[2 * i] if cache else empty
        out[f"past_key_values.{i}.value"] = cache[2 * i + 1] if cache else empty
    return out


def test_whole_prompt_matches_the_family_oracle(family):
    module, config, weights, session, tolerance = family
    expected, _ = module.forward(weights, config, PROMPT)
    logits, *present = session.run(None, feeds(config, PROMPT, len(PROMPT), None))
    assert logits.shape == (1, len(PROMPT), config.n_vocab)
    assert relative_rms(logits[0], expected) < tolerance
    assert present[0].shape == (1, config.n_kv_heads, len(PROMPT), config.head_dim)


def test_prefill_then_steps_through_the_cache(family):
    """Prefill 6 tokens, then 10 steps one at a time (past the windows); greedy as the oracle's."""
    module, config, weights, session, tolerance = family
    prefix = PROMPT[:6]
    logits, *cache = session.run(None, feeds(config, prefix, len(prefix), None))
    expected, ref_cache = module.forward(weights, config, prefix)
    assert relative_rms(logits[0], expected) < tolerance
    ours, theirs = [int(np.argmax(logits[0, -1]))], [int(np.argmax(expected[-1]))]
    total = len(prefix)
    for _ in range(10):
        total += 1
        logits, *cache = session.run(None, feeds(config, np.array(ours[-1:]), total, cache))
        expected, ref_cache = module.forward(weights, config, np.array(ours[-1:]), ref_cache)
        assert relative_rms(logits[0], expected) < tolerance
        ours.append(int(np.argmax(logits[0, -1])))
        theirs.append(int(np.argmax(expected[-1])))
    assert ours == theirs


def test_a_chunk_after_the_prompt(family):
    """A multi-token step after a prefill (past > 0, seq > 1) attends causally within the chunk."""
    module, config, weights, session, tolerance = family
    _, *cache = session.run(None, feeds(config, PROMPT[:5], 5, None))
    logits, *_ = session.run(None, feeds(config, PROMPT[5:], len(PROMPT), cache))
    _, ref_cache = module.forward(weights, config, PROMPT[:5])
    expected, _ = module.forward(weights, config, PROMPT[5:], ref_cache)
    assert relative_rms(logits[0], expected) < tolerance


ONE_PER_ARCHITECTURE = {}
for _name in sorted(CASES):
    _module, _config = CASES[_name]
    if _name not in SLOW and _config.default_type == "F32" and not _config.types:
        ONE_PER_ARCHITECTURE.setdefault(_config.architecture, _name)


@pytest.mark.parametrize("name", sorted(ONE_PER_ARCHITECTURE.values()))
def test_from_gguf_graph_reference_then_generate(tmp_path, name):
    """The user's path: `from-gguf --graph --reference` (the .gguf beside the model), then
    onnx_struct.generate from token ids; its greedy tokens are the family oracle's."""
    from onnx_struct.cli import main

    module, config = CASES[name]
    module.write_gguf(tmp_path / "model.gguf", config)
    argv = ["from-gguf", str(tmp_path / "model.gguf"), str(tmp_path / "model.onnx"), "--graph", "--reference"]
    assert main([*argv, "--quiet"]) == 0
    ids = PROMPT[:8].tolist()
    generated = onnx_struct.generate(str(tmp_path / "model.onnx"), ids, max_new_tokens=6, accuracy_level=0, stop_ids=())
    assert generated.tokens == module.greedy(read_weights(tmp_path / "model.gguf"), config, ids, 6)
