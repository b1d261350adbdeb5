"""Hostile input to the tokenizer (issue 41's tokenizer items): refused with a ValidationError
naming the argument, never a TypeError from deep inside, and never a silently dropped token.

- (4) a str with lone surrogates (and CLI text that is not UTF-8, which Python's argv holds as
  surrogates): ``encode(text)`` refuses it;
- (16) ids outside the vocabulary in ``decode`` / ``token_to_piece`` / a streamer: refused naming
  the index;
- (17) a BPE vocabulary with a duplicated piece: encoding takes llama.cpp's token_to_id (the last
  id), decoding gives each id its own piece, so no generated token disappears;
- a text past ``MAX_TOKENIZE_CHARS``: refused before any work; a long text within it finishes
  in bounded time; a GGUF whose array claims more elements than the file holds: refused.
"""

from __future__ import annotations

import struct
import time

import pytest

import onnx_struct
from onnx_struct.limits import MAX_TOKENIZE_CHARS
from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer
from onnx_struct.llm.tokenizer.vocab import load_vocab


def _bpe(tokens, pre="gpt-2"):
    return Tokenizer(
        load_vocab(
            {
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.pre": pre,
                "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.merges": [],
            }
        )
    )


@pytest.mark.parametrize("text", ["a\ud800b", "\udcff", "ok \udfff"])
def test_lone_surrogates_are_refused(text):
    with pytest.raises(onnx_struct.ValidationError, match="lone surrogate") as caught:
        _bpe(["a", "b"]).encode(text)
    assert (caught.value.path, caught.value.code) == ("encode(text)", "bad_argument")


def test_a_text_that_is_not_a_str_is_refused():
    with pytest.raises(onnx_struct.ValidationError) as caught:
        _bpe(["a"]).encode(b"abc")
    assert caught.value.path == "encode(text)"


@pytest.mark.parametrize("bad", [-1, 2, 10**12, True, 1.0, "0"])
def test_ids_outside_the_vocabulary_are_refused_naming_the_index(bad):
    tok = _bpe(["a", "b"])
    with pytest.raises(onnx_struct.ValidationError) as caught:
        tok.decode([0, bad])
    assert (caught.value.path, caught.value.code) == ("decode(ids)[1]", "bad_argument")
    with pytest.raises(onnx_struct.ValidationError):
        tok.token_to_piece(bad)
    with pytest.raises(onnx_struct.ValidationError):
        tok.streamer().push(bad)


def test_a_duplicated_piece_drops_no_generated_token():
    tok = _bpe(["x", "y", "x"])
    assert tok.encode("x", add_bos=False) == [2]
    assert tok.decode([0, 1, 0, 2]) == "xyxx"


def test_a_text_past_the_limit_is_refused_before_any_work():
    with pytest.raises(onnx_struct.ValidationError) as caught:
        _bpe(["a"]).encode("a" * (MAX_TOKENIZE_CHARS + 1))
    assert (caught.value.path, caught.value.code) == ("encode(text)", "limit_exceeded")


def test_a_long_text_finishes_in_bounded_time():
    tok = _bpe(["a", "b", " ", "\u0120"], pre="llama-bpe")
    text = ("ab " * 50_000) + ("\u00e9" * 50_000)
    start = time.perf_counter()
    tok.encode(text, add_bos=False)
    assert time.perf_counter() - start < 5


def test_a_gguf_array_longer_than_the_file_is_refused(tmp_path):
    key = b"tokenizer.ggml.tokens"
    body = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    body += struct.pack("<IIQ", 9, 8, 2**40)  # ARRAY of 2^40 STRINGs, no bytes for them
    path = tmp_path / "short.gguf"
    path.write_bytes(body)
    with pytest.raises(onnx_struct.ValidationError) as caught:
        read_gguf_metadata(path)
    assert caught.value.path == "gguf.kv[0] ('tokenizer.ggml.tokens')"
    assert caught.value.code == "file_too_short"
