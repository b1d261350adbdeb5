"""The sessions other than BPE against llama.cpp itself (llama-cpp-python), in the slow tier: for
a tiny vocabulary of each model written here as a vocabulary-only GGUF file (spm with and without
the space prefix, wpm lowercased and cased, ugm with a precompiled charsmap built here and
user-defined pieces and without either, rwkv, plamo2), and for llama.cpp's own vocabulary files of
these models (llama-spm, phi-3, baichuan: spm; bert-bge: wpm; nomic-bert-moe: ugm), generated
strings (whitespace runs, tabs and newlines, CJK, emoji, combining marks, digits, code) tokenized
by ``Llama(path, vocab_only=True).tokenize(text, add_bos=False, special=False)``, by the session
with llama.cpp's framing (tests/support/tiny_vocabs.encode_raw) and by ``load_tokenizer(path)``
end to end, identical.

llama.cpp runs in the interpreter ONNX_STRUCT_LLAMA_CPP_PYTHON names (one process per vocabulary,
strings in and ids out as JSON); skipped where it does not import llama_cpp.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import zlib

import pytest
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

PYTHON = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON", sys.executable)
PEER = pathlib.Path(__file__).parent / "support" / "llama_cpp_tokenize.py"
SESSIONS = {"spm": SpmSession, "wpm": WpmSession, "ugm": UgmSession, "rwkv": RwkvSession, "plamo2": Plamo2Session}
TINY_CASES = 1000
REAL_CASES = 3000
REAL_VOCABS = ["llama-spm", "phi-3", "baichuan", "bert-bge", "nomic-bert-moe"]

pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]


def _has_llama_cpp() -> bool:
    try:
        return subprocess.run([PYTHON, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module", autouse=True)
def _llama_cpp_available():
    if not _has_llama_cpp():
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")


def llama_cpp_ids(path: pathlib.Path, texts: list[str], workdir: pathlib.Path) -> list[list[int]]:
    """llama.cpp's ids for ``texts`` (add_bos and special false), from its own interpreter."""
    request, result = workdir / "request.json", workdir / "result.json"
    request.write_text(json.dumps({"texts": texts}), encoding="utf-8")
    done = subprocess.run(
        [PYTHON, str(PEER), str(path), str(request), str(result)], capture_output=True, text=True, timeout=900
    )
    if done.returncode:
        raise RuntimeError(f"llama.cpp failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(result.read_text(encoding="utf-8"))["ids"]


def _compare(metadata, path, texts, workdir) -> None:
    theirs = llama_cpp_ids(path, texts, workdir)
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
def test_tiny_vocabulary_matches_llama_cpp(tmp_path, name):
    metadata = tiny_metadata()[name]
    path = tmp_path / f"{name}.gguf"
    write_vocab_gguf(path, metadata)
    _compare(metadata, path, generated_strings(TINY_CASES, seed=zlib.crc32(name.encode())), tmp_path)


@pytest.mark.parametrize("name", REAL_VOCABS)
def test_llama_cpp_vocabulary_file_matches_llama_cpp_on_generated_strings(tmp_path, name):
    from support.llama_cpp_source import llama_cpp_source  # noqa: PLC0415

    source = llama_cpp_source(fetch=True)
    if source is None:
        pytest.skip("llama.cpp's source is not at hand")
    path = source / "models" / f"ggml-vocab-{name}.gguf"
    _compare(None, path, generated_strings(REAL_CASES, seed=11), tmp_path)
