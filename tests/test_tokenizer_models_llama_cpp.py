"""The sessions other than BPE against llama.cpp itself (llama-cpp-python), in the slow tier: for
a tiny vocabulary of each model written here as a vocabulary-only GGUF file (spm with and without
the space prefix, wpm lowercased and cased, ugm with a precompiled charsmap built here and
user-defined pieces and without either, rwkv, plamo2), generated
strings (whitespace runs, tabs and newlines, CJK, emoji, combining marks, digits, code) tokenized
by ``Llama(path, vocab_only=True).tokenize(text, add_bos=False, special=False)``, by the session
with llama.cpp's framing (tests/support/tiny_vocabs.encode_raw) and by ``load_tokenizer(path)``
end to end, identical. llama.cpp's own vocabulary files of these models (llama-spm, phi-3,
baichuan: spm; bert-bge: wpm; nomic-bert-moe: ugm) are compared in tests/test_tokenizer_llama_cpp.py.

llama.cpp runs in the interpreter ONNX_STRUCT_LLAMA_CPP_PYTHON names (tests/support/llama_cpp_runner.py);
skipped where it does not import llama_cpp.
"""

from __future__ import annotations

import zlib

import pytest
from support.llama_cpp_runner import llama_cpp_encodings, llama_cpp_python
from support.session_cases import generated_strings, tiny_metadata
from support.tiny_vocabs import encode_raw, vocab_from_metadata, write_vocab_gguf

from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata
from onnx_struct.llm.tokenizer.plamo2 import Plamo2Session
from onnx_struct.llm.tokenizer.rwkv import RwkvSession
from onnx_struct.llm.tokenizer.spm import SpmSession
from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer
from onnx_struct.llm.tokenizer.ugm import UgmSession
from onnx_struct.llm.tokenizer.vocab import load_vocab
from onnx_struct.llm.tokenizer.wpm import WpmSession

pytest.importorskip("gguf")

SESSIONS = {"spm": SpmSession, "wpm": WpmSession, "ugm": UgmSession, "rwkv": RwkvSession, "plamo2": Plamo2Session}
TINY_CASES = 1000

pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


@pytest.fixture(scope="module")
def python():
    found = llama_cpp_python()
    if found is None:
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")
    return found


def _compare(python, metadata, path, texts, workdir) -> None:
    (theirs,), _ = llama_cpp_encodings(python, path, texts, [(False, False)], workdir)
    vocab = vocab_from_metadata(metadata) if metadata is not None else load_vocab(read_gguf_metadata(path))
    session = SESSIONS[vocab.model](vocab)
    failed = [(text, ids) for text, ids in zip(texts, theirs, strict=True) if encode_raw(vocab, session, text) != ids]
    assert not failed, f"{len(failed)} of {len(texts)} differ, first: {failed[:3]}"
    # and end to end: the file through load_tokenizer (load_vocab, the partition, the framing)
    tokenizer = load_tokenizer(path)
    failed = [
        (text, ids) for text, ids in zip(texts, theirs, strict=True) if tokenizer.encode(text, add_bos=False) != ids
    ]
    assert not failed, f"load_tokenizer: {len(failed)} of {len(texts)} differ, first: {failed[:3]}"


@pytest.mark.parametrize("name", sorted(tiny_metadata()))
def test_tiny_vocabulary_matches_llama_cpp(python, tmp_path, name):
    metadata = tiny_metadata()[name]
    path = tmp_path / f"{name}.gguf"
    write_vocab_gguf(path, metadata)
    _compare(python, metadata, path, generated_strings(TINY_CASES, seed=zlib.crc32(name.encode())), tmp_path)
