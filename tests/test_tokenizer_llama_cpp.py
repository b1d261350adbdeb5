"""Every vocabulary file of llama.cpp's test set (``models/ggml-vocab-*.gguf``, those without test
data too) against llama.cpp itself, through llama-cpp-python: 3,000 generated strings (mixed
scripts, whitespace runs, digits, punctuation, emoji, combining marks, code) and strings holding
the vocabulary's special tokens, tokenized with add_special and parse_special both off and both on,
and the ids detokenized (``llama_detokenize``, special tokens hidden and shown): identical.

Slow tier, llama_cpp marker: runs where ONNX_STRUCT_LLAMA_CPP_PYTHON names an interpreter that
imports llama_cpp, with llama.cpp's source at hand (tests/support/llama_cpp_source.py, fetched).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest
from support.llama_cpp_source import llama_cpp_source, vocab_files
from support.tokenizer_strings import generated_strings

from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer
from onnx_struct.llm.tokenizer.vocab import Attr

pytestmark = [pytest.mark.slow, pytest.mark.llama_cpp]
PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)
SCRIPT = pathlib.Path(__file__).parent / "support" / "llama_cpp_roundtrip.py"
N_STRINGS = 3000
MODES = [[False, False], [True, True]]


def _has_llama_cpp() -> bool:
    try:
        return subprocess.run([PYTHON, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def source() -> pathlib.Path:
    if not _has_llama_cpp():
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")
    found = llama_cpp_source(fetch=True)
    if found is None:
        pytest.skip("llama.cpp's source is not at hand")
    return found


def _special_strings(tokenizer, n: int, seed: int) -> list[str]:
    """Strings with the vocabulary's control and user-defined tokens among words and spaces."""
    vocab = tokenizer.vocab
    specials = [vocab.tokens[i] for i in vocab.special_tokens][:2000]
    if not specials:
        return []
    rng = random.Random(seed)
    words = generated_strings(n, seed + 1)
    return [
        "".join(
            rng.choice([rng.choice(specials), w, " ", "\n", " " + rng.choice(specials) + " "]) for w in words[i : i + 4]
        )
        for i in range(n)
    ]


NAMES = [
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
    "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_file_tokenizes_and_detokenizes_as_llama_cpp(source, tmp_path, name):
    (path,) = [p for p in vocab_files(source) if p.name == f"ggml-vocab-{name}.gguf"]
    tokenizer = load_tokenizer(path)
    texts = generated_strings(N_STRINGS, seed=1) + _special_strings(tokenizer, 300, seed=2)
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"texts": texts, "modes": MODES}), encoding="utf-8")
    done = subprocess.run([PYTHON, str(SCRIPT), str(path), str(cases)], capture_output=True, timeout=600, check=True)
    expected = json.loads(done.stdout)
    for (add_special, special), theirs in zip(MODES, expected["ids"], strict=True):
        ours = [tokenizer.encode(t, add_bos=None if add_special else False, special=special) for t in texts]
        wrong = [(t, a, b) for t, a, b in zip(texts, theirs, ours, strict=True) if a != b]
        assert not wrong, f"{len(wrong)} of {len(texts)} differ (add_special={add_special}), first: {wrong[0]}"
    for special, theirs in zip((False, True), expected["text"], strict=True):
        ids = expected["ids"][0]
        ours = [tokenizer.decode(i, special=special) for i in ids]
        wrong = [(i, a, b) for i, a, b in zip(ids, theirs, ours, strict=True) if a != b]
        assert not wrong, f"{len(wrong)} detokenized differently (special={special}), first: {wrong[0]}"


def test_special_strings_use_control_tokens():
    """The special strings' source: control and user-defined tokens (Attr bits as llama.cpp's)."""
    assert Attr.CONTROL == 8 and Attr.USER_DEFINED == 16
