"""The decoder graph and tokenizer against llama.cpp itself (llama-cpp-python), outside the default
suite: llama.cpp compiles for 6-15 minutes, so it is an optional peer. Runs when the interpreter
in ONNX_STRUCT_LLAMA_CPP_PYTHON (default: this one) imports llama_cpp; skipped otherwise.

- F32 weights, F32 KV cache: logits within 1e-5 relative RMS of llama.cpp's, 40 greedy tokens
  identical (llama with GQA, qwen2's NEOX rope and biases, Llama 3.1-style rope_freqs, linear
  rope scaling);
- the SentencePiece test vocabulary: token ids identical to llama.cpp's tokenize;
- Q4_0: ours within 1e-4 of the float64 forward; llama.cpp within 5% of it (it quantizes
  activations to Q8 and keeps its cache in F16: 1.5-3% is its usual distance).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from support.llm import (  # noqa: E402
    TEXTS,
    TinyLlama,
    bpe_vocab,
    forward,
    prompt_feeds,
    read_weights,
    relative_rms,
    run_llama_cpp,
    spm_vocab,
    write_gguf,
)

from onnx_struct.convert import convert, decode_metadata  # noqa: E402
from onnx_struct.llm.generation import Generator  # noqa: E402
from onnx_struct.llm.tokenizer.compat import GGUFTokenizer  # noqa: E402

PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)


def _has_llama_cpp() -> bool:
    try:
        return subprocess.run([PYTHON, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_available():
    # Asked when a test of this module runs, not at collection: the fast tier starts no process.
    if not _has_llama_cpp():
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")


PROMPT = "hello world and the café"
F32_CONFIGS = {
    "llama-gqa": {},
    "qwen2": {"architecture": "qwen2", "tied": False},
    "rope-freqs": {"rope_freqs": True, "n_kv_heads": 4},
    "linear-rope": {"linear_rope_factor": 4.0, "freq_base": 500000.0},
}


def _logits(model, config: TinyLlama, ids: list[int]) -> np.ndarray:
    return Generator(model, accuracy_level=0).session.run(["logits"], prompt_feeds(config, ids))[0][0]


@pytest.mark.parametrize("name", sorted(F32_CONFIGS))
def test_f32_logits_and_40_greedy_tokens_match_llama_cpp(tmp_path, name):
    config = TinyLlama(**{**spm_vocab(), "default_type": "F32", "seed": 3, **F32_CONFIGS[name]})
    path = tmp_path / "f32.gguf"
    write_gguf(path, config)
    model = convert(path, graph=True, all_logits=True)
    ids = GGUFTokenizer(decode_metadata(model)).encode(PROMPT)
    theirs = run_llama_cpp(PYTHON, {"model": str(path), "task": "logits", "tokens": ids, "kv": "f32"}, tmp_path)
    assert relative_rms(_logits(model, config, ids), theirs["logits"]) < 1e-5
    request = {"model": str(path), "task": "greedy", "tokens": ids, "n_new": 40, "kv": "f32"}
    generated = run_llama_cpp(PYTHON, request, tmp_path)["generated"].tolist()
    ours = Generator(model, accuracy_level=0).generate(ids, max_new_tokens=40, stop_at_eos=False).tokens
    assert ours == generated


@pytest.mark.parametrize("vocab", ["spm", "llama-bpe", "qwen2", "gpt-2", "default"])
def test_token_ids_match_llama_cpp(tmp_path, vocab):
    """The SentencePiece test vocabulary, and the byte-level one under each pre-tokenizer."""
    words = spm_vocab() if vocab == "spm" else {**bpe_vocab(), "pre": vocab}
    config = TinyLlama(**words, default_type="F32")
    path = tmp_path / "vocab.gguf"
    write_gguf(path, config)
    tokenizer = GGUFTokenizer(decode_metadata(convert(path)))
    theirs = run_llama_cpp(PYTHON, {"model": str(path), "task": "tokenize", "texts": TEXTS}, tmp_path)
    for i, text in enumerate(TEXTS):
        assert tokenizer.encode(text) == theirs[f"ids_{i}"].tolist(), text


def test_q4_0_distances(tmp_path):
    config = TinyLlama(**spm_vocab(), default_type="Q4_0", seed=3)
    path = tmp_path / "q4_0.gguf"
    write_gguf(path, config)
    model = convert(path, graph=True, all_logits=True)
    ids = GGUFTokenizer(decode_metadata(model)).encode(PROMPT)
    exact, _ = forward(read_weights(path), config, np.array(ids))
    theirs = run_llama_cpp(PYTHON, {"model": str(path), "task": "logits", "tokens": ids}, tmp_path)["logits"]
    assert relative_rms(_logits(model, config, ids), exact) < 1e-4
    assert relative_rms(theirs, exact) < 0.05


@pytest.mark.parametrize("reference", [False, True])
def test_to_gguf_round_trip_loads_in_llama_cpp_with_the_same_logits(tmp_path, reference):
    """from-gguf (with the decoder graph) then to-gguf: llama.cpp loads the written file and gives
    the logits it gives for the source file, bit for bit."""
    import onnx  # noqa: PLC0415

    from onnx_struct.convert.to_gguf import to_gguf  # noqa: PLC0415

    types = {"ffn_down": "Q6_K", "attn_v": "Q8_0", "attn_k": "Q4_K", "token_embd": "F32"}
    config = TinyLlama(**spm_vocab(), default_type="Q4_0", types=types, seed=3)
    path = tmp_path / "source.gguf"
    write_gguf(path, config)
    onnx.save(convert(path, graph=True, reference=reference), tmp_path / "model.onnx")
    to_gguf(tmp_path / "model.onnx", tmp_path / "back.gguf")
    ids = [1, 5, 17, 40, 3, 77, 12]
    before = run_llama_cpp(PYTHON, {"model": str(path), "task": "logits", "tokens": ids}, tmp_path)["logits"]
    after = run_llama_cpp(PYTHON, {"model": str(tmp_path / "back.gguf"), "task": "logits", "tokens": ids}, tmp_path)
    np.testing.assert_array_equal(after["logits"], before)
