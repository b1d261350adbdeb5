"""llama.cpp's own tokenizer test set: every ``.inp`` / ``.out`` case of the vocabularies in its
``models/`` (15 files, 694 cases), tokenized as tests/test-tokenizer-0.cpp tokenizes them
(add_special and parse_special false), through ``load_tokenizer(path to the .gguf)``.

Slow tier: the source comes from ONNX_STRUCT_LLAMA_CPP_SOURCE, the cache, or llama-cpp-python's
sdist fetched from PyPI (tests/support/llama_cpp_source.py).
"""

from __future__ import annotations

import pytest
from support.llama_cpp_source import llama_cpp_source, vocab_cases, vocab_files

from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer

pytestmark = pytest.mark.slow

# vocabulary -> (tokenizer.ggml.model, pre type as llama.cpp resolves it, cases)
EXPECTED = {
    "bert-bge": ("bert", "default", 46),
    "command-r": ("gpt2", "command_r", 46),
    "deepseek-coder": ("gpt2", "deepseek_coder", 46),
    "deepseek-llm": ("gpt2", "deepseek_llm", 46),
    "falcon": ("gpt2", "falcon", 46),
    "gemma-4": ("gemma4", "gemma4", 46),
    "gpt-2": ("gpt2", "gpt2", 46),
    "llama-bpe": ("gpt2", "llama3", 46),
    "llama-spm": ("llama", "default", 46),
    "mpt": ("gpt2", "mpt", 46),
    "phi-3": ("llama", "default", 46),
    "qwen2": ("gpt2", "qwen2", 46),
    "qwen35": ("gpt2", "qwen35", 50),
    "refact": ("gpt2", "refact", 46),
    "starcoder": ("gpt2", "starcoder", 46),
}


@pytest.fixture(scope="module")
def source():
    found = llama_cpp_source(fetch=True)
    if found is None:
        pytest.skip("llama.cpp's source is not at hand")
    return found


def test_the_test_set_is_the_one_counted(source):
    with_data = [p for p in vocab_files(source) if (p.parent / (p.name + ".inp")).exists()]
    names = {p.name.removeprefix("ggml-vocab-").removesuffix(".gguf") for p in with_data}
    assert names == set(EXPECTED)
    assert sum(len(vocab_cases(p)) for p in with_data) == 694


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_case_of_the_vocabulary_tokenizes_as_llama_cpp(source, name):
    path = source / "models" / f"ggml-vocab-{name}.gguf"
    tokenizer = load_tokenizer(path)
    model, pre, count = EXPECTED[name]
    assert (tokenizer.vocab.tokenizer_model, tokenizer.vocab.pre) == (model, pre)
    cases = vocab_cases(path)
    assert len(cases) == count
    wrong = [(text, ids, got) for text, ids in cases if (got := tokenizer.encode(text, add_bos=False)) != ids]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ; first: {wrong[0]}"
    # decoded back: byte-level BPE without clean_spaces is lossless, as HF's decoder is
    # (tests/test-tokenizer-0.py compares llama.cpp's decoding with HF's)
    if tokenizer.vocab.model == "bpe" and not tokenizer.vocab.clean_spaces and pre != "gemma4":
        for text, ids in cases:
            assert tokenizer.decode(ids) == text
