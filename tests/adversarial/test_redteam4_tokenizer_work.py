"""Red team 4: the WPM, UGM and RWKV sessions stay linear in the text whatever the vocabulary.

At each position those sessions try every piece length sharing the position's first bytes, and
UGM's normalizer walks the precompiled charsmap's trie as far as the text follows it. A hostile
vocabulary made that work the vocabulary's size per character (on the code before the bound):

- 2,000 pieces ``aa`` + ``b`` * k (WPM; ``aaa`` + ``b`` * k for UGM and RWKV): 16,000 ``a`` took
  19 s (WPM), 11 s (UGM), 5 s (RWKV), quadratic in the text;
- a charsmap whose trie loops on ``a`` without a leaf: each offset walks the rest of the text,
  16,000 ``a`` took 37 s.

Now each position is charged what it tries and a fragment past ``MAX_TOKENIZE_STEPS_PER_CHAR``
lookups a character is refused (``limit_exceeded``); the same shape with 40 lengths, and
llama.cpp's own vocabularies (tests/test_tokenizer_*.py), still tokenize.
"""

from __future__ import annotations

import struct

import pytest

import onnx_struct
from adversarial.bounded import run_bounded
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer
from onnx_struct.llm.tokenizer.vocab import load_vocab

UGM_BASE = ["<pad>", "</s>", "<unk>", "\u2581", "a", "\u2581a"]


def _metadata(model: str, lengths: int) -> dict[str, object]:
    """A vocabulary of ``lengths`` pieces sharing one prefix, none of which the text ``a...`` matches."""
    if model == "bert":
        tokens = ["[UNK]", "\u2581", "a", "\u2581a"] + ["aa" + "b" * k for k in range(1, lengths)]
        return {"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.unknown_token_id": 0}
    if model == "rwkv":
        tokens = ["a", "aa"] + ["aaa" + "b" * k for k in range(1, lengths)]
        return {"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": tokens}
    tokens = UGM_BASE + ["aaa" + "b" * k for k in range(1, lengths)]
    return _ugm(tokens)


def _ugm(tokens: list[str], charsmap: bytes | None = None) -> dict[str, object]:
    metadata = {
        "tokenizer.ggml.model": "t5",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": [1] * len(tokens),
    }
    if charsmap is not None:
        metadata["tokenizer.ggml.precompiled_charsmap"] = charsmap
    return metadata


def _looping_charsmap() -> bytes:
    """An XCDA whose node for ``a`` leads back to itself and is no leaf: the walk follows any run
    of ``a`` to its end and matches nothing (written by hand from llama.cpp's xcda_array_view)."""
    root = 0x100  # the root's base: the child for byte c is at root ^ c
    xcda = [0] * (root ^ 0x61 | 1) + [0]
    xcda[0] = root << 10
    # label 'a' (low byte, no leaf bit 8), base 0x61: index ^ 'a' ^ 0x61 is the node itself again
    xcda[root ^ 0x61] = (0x61 << 10) | 0x61
    return struct.pack("<I", 4 * len(xcda)) + struct.pack(f"<{len(xcda)}I", *xcda) + b"x\0"


@pytest.mark.parametrize("model", ["bert", "t5", "rwkv"])
def test_thousands_of_lengths_under_one_prefix_are_refused(model):
    tokenizer = Tokenizer(load_vocab(_metadata(model, 2000)))
    with pytest.raises(onnx_struct.ValidationError, match="MAX_TOKENIZE_STEPS_PER_CHAR") as caught:
        tokenizer.encode("a" * 1000, add_bos=False)
    assert (caught.value.path, caught.value.code) == ("tokenize(text)", "limit_exceeded")


@pytest.mark.parametrize("model", ["bert", "t5", "rwkv"])
def test_forty_lengths_under_one_prefix_still_tokenize(model):
    # every 'a' is its own piece (RWKV: pairs 'aa'), the long pieces never match
    ids = Tokenizer(load_vocab(_metadata(model, 40))).encode("a" * 1000, add_bos=False)
    assert len(ids) == (500 if model == "rwkv" else 1000)


def test_a_charsmap_trie_looping_on_a_byte_is_refused():
    tokenizer = Tokenizer(load_vocab(_ugm(UGM_BASE, _looping_charsmap())))
    assert tokenizer.encode("a" * 20, add_bos=False)  # short texts stay within the fixed slack
    with pytest.raises(onnx_struct.ValidationError, match="MAX_TOKENIZE_STEPS_PER_CHAR") as caught:
        tokenizer.encode("a" * 2000, add_bos=False)
    assert (caught.value.path, caught.value.code) == ("tokenize(text)", "limit_exceeded")


CHILD = """
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(S.__file__).resolve().parents[1] / "tests"))
from adversarial.test_redteam4_tokenizer_work import UGM_BASE, _looping_charsmap, _metadata, _ugm
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer
from onnx_struct.llm.tokenizer.vocab import load_vocab
metadata = _ugm(UGM_BASE, _looping_charsmap()) if ARG == "charsmap" else _metadata(ARG, 2000)
Tokenizer(load_vocab(metadata)).encode("a" * 1_000_000, add_bos=False)
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["bert", "t5", "rwkv", "charsmap"])
def test_a_million_characters_on_a_hostile_vocabulary_end_within_seconds(case):
    # At the bound (MAX_TOKENIZE_STEPS_PER_CHAR) a hostile vocabulary costs 10-20 CPU s per million
    # characters on the 2-core machine (the charsmap loop 18.9-19.5 s on 2026-12-07, so 20 s was
    # the edge); the unbounded walk took 37 s for 16,000 characters, hours for a million.
    outcome = run_bounded(CHILD, case, cpu_seconds=45, memory_mib=1024)
    outcome.assert_validation_error("tokenize(text)", contains="MAX_TOKENIZE_STEPS_PER_CHAR")
