"""The BPE variants (``whitespace``, ``hybriddna``) and a hand-made byte-level ``gpt2`` file,
written by the test, against llama.cpp through llama-cpp-python: generated strings (and DNA
spans) tokenized with add_special/parse_special off and on, the ids detokenized: identical.

Slow tier, llama_cpp marker (tests/test_tokenizer_llama_cpp.py says how it is found).
"""

from __future__ import annotations

import pytest
from support.llama_cpp_runner import llama_cpp_encodings, llama_cpp_python
from support.text_generator import generate_strings

from onnx_struct.llm.tokenizer.bpe import byte_encode
from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.llama_cpp]
MODES = [[False, False], [True, True]]
MERGES = ["l o", "l d", "h e", "he l", "hel lo", "w o", "wo r", "wor ld", "1 2", "12 3"]
WORDS = ["he", "hel", "hello", "wo", "wor", "world", "12", "123", "lo", "ld"]
DNA_MARKER = "\ue000"


def _write(path, model, pre, tokens, types=None, flags=()):
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types or [1] * len(tokens))
    writer.add_token_merges(MERGES)
    for key, value in flags:
        writer.add_bool(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def _compare(path, texts, tmp_path):
    python = llama_cpp_python()
    if python is None:
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")
    expected_ids, expected_text = llama_cpp_encodings(python, path, texts, MODES, tmp_path)
    tokenizer = load_tokenizer(path)
    for (add_special, special), theirs in zip(MODES, expected_ids, strict=True):
        ours = [tokenizer.encode(t, add_bos=None if add_special else False, special=special) for t in texts]
        wrong = [(t, a, b) for t, a, b in zip(texts, theirs, ours, strict=True) if a != b]
        assert not wrong, f"{len(wrong)} differ, first: {wrong[0]}"
    for special, theirs in zip((False, True), expected_text, strict=True):
        ours = [tokenizer.decode_bytes(i, special=special) for i in expected_ids[0]]
        assert ours == theirs


def _chars(texts):
    return sorted({c for t in texts for c in t if not c.isspace()})


@pytest.mark.parametrize("lowercase", [None, True])
def test_whitespace_model(tmp_path, lowercase):
    texts = generate_strings(1000, seed=4) + ["Hello World", "HELLO  world\t12 3"]
    flags = () if lowercase is None else (("tokenizer.ggml.normalizer.lowercase", lowercase),)
    path = tmp_path / "whitespace.gguf"
    _write(path, "whitespace", "whitespace", _chars(texts) + WORDS, flags=flags)
    _compare(path, texts, tmp_path)


def test_byte_level_gpt2_file(tmp_path):
    texts = generate_strings(1000, seed=5)
    tokens = sorted({byte_encode(c) for c in _chars(texts)} | set(WORDS) | {"\u0120"})
    path = tmp_path / "gpt2.gguf"
    _write(path, "gpt2", "gpt-2", tokens)
    _compare(path, texts, tmp_path)


@pytest.mark.parametrize("tag_type", [1, 4])  # normal: the session cuts the spans; user-defined: the partition
def test_hybriddna_model(tmp_path, tag_type):
    kmers = ["ACGTAC", "GGGGGG", "TTAAAA", "CAAAAA"]
    base = ["<dna>", "</dna>", "<oov>"]
    texts = ["x<dna>acgtacGGGGGGtt</dna>y", "<dna>cNNNNNN", "hello <dna>ACGTAC</dna> world", "no dna here"]
    texts += generate_strings(200, seed=6)
    tokens = _chars(texts) + WORDS + base + [k + DNA_MARKER for k in kmers]
    tokens = list(dict.fromkeys(tokens))
    types = [tag_type if t in base else 1 for t in tokens]
    path = tmp_path / "dna.gguf"
    _write(path, "hybriddna", "default", tokens, types=types)
    _compare(path, texts, tmp_path)
