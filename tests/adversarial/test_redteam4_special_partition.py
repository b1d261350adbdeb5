"""Red team 4: the special-token partition is no longer the fragments times the special tokens.

llama.cpp's ``tokenizer_st_partition`` takes each special token in turn and searches every raw
fragment left so far. In Python that was a loop over every fragment for every token: a vocabulary
of 20,000 user-defined tokens (matched in any text, ``special=False``) over 100,000 characters
cut at every 12th took 15 s, 400,000 characters more than 300 s; gemma-3's own 6,414 special
tokens over a chat of 40,000 ``<start_of_turn>`` took 12 s. Now each token's occurrences are found
in the whole text and only the fragments they start in are cut.

The oracle is the per-fragment algorithm itself (:func:`reference_partition`, llama.cpp's as it
was transcribed before), compared on random vocabularies with LSTRIP / RSTRIP tokens; llama.cpp's
own ids are compared in tests/test_tokenizer_llama_cpp.py.
"""

from __future__ import annotations

import random

import pytest

import onnx_struct
from adversarial.bounded import run_bounded
from onnx_struct.llm.tokenizer.special import SpecialPartition
from onnx_struct.llm.tokenizer.vocab import Attr

_SPACE = " \t\n\v\f\r"


def reference_partition(tokens, attrs, order, text, special):
    """llama.cpp's partition, fragment by fragment (the independent transcription)."""
    fragments = [text] if text else []
    chosen = order if special else [i for i in order if not attrs[i] & (Attr.CONTROL | Attr.UNKNOWN)]
    for token in chosen:
        piece, attr, out = tokens[token], attrs[token], []
        for fragment in fragments:
            if isinstance(fragment, int) or piece not in fragment:
                out.append(fragment)
                continue
            position = 0
            while (match := fragment.find(piece, position)) >= 0:
                left = fragment[position:match]
                if attr & Attr.LSTRIP:
                    left = left.rstrip(_SPACE)
                if left:
                    out.append(left)
                out.append(token)
                position = match + len(piece)
                if attr & Attr.RSTRIP:
                    while position < len(fragment) and fragment[position] in _SPACE:
                        position += 1
            if position < len(fragment):
                out.append(fragment[position:])
        fragments = out
    return fragments


class _Vocab:
    def __init__(self, tokens, attrs):
        self.tokens, self.attrs = tokens, attrs
        self.special_tokens = sorted(range(len(tokens)), key=lambda i: -len(tokens[i].encode()))


ATTRS = [
    Attr.CONTROL,
    Attr.USER_DEFINED,
    Attr.UNKNOWN,
    Attr.USER_DEFINED | Attr.LSTRIP,
    Attr.CONTROL | Attr.RSTRIP,
    Attr.USER_DEFINED | Attr.LSTRIP | Attr.RSTRIP,
]


@pytest.mark.parametrize("alphabet", ["ab <>\n", "ab <\t", "aaa b"])
def test_the_partition_is_llama_cpps_on_random_vocabularies(alphabet):
    rng = random.Random(alphabet)
    for _ in range(1500):
        texts = sorted({"".join(rng.choices(alphabet, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 8))})
        attrs = [int(rng.choice(ATTRS)) for _ in texts]
        vocab = _Vocab(texts, attrs)
        text = "".join(rng.choices(alphabet, k=rng.randint(0, 40)))
        for special in (True, False):
            expected = reference_partition(texts, attrs, vocab.special_tokens, text, special)
            assert SpecialPartition(vocab).partition(text, special) == expected, (texts, attrs, text, special)


CHILD = """
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer
from onnx_struct.llm.tokenizer.vocab import load_vocab
base = [chr(c) for c in range(32, 127)]
user = ["<LONGTOKEN>"] + [f"<{i}>" for i in range(20_000)]
tokens = base + user
metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [1] * len(base) + [4] * len(user), "tokenizer.ggml.merges": []}
ids = Tokenizer(load_vocab(metadata)).encode("<LONGTOKEN>x" * 20_000)
assert len(ids) == 40_000, len(ids)
raise S.ValidationError("done", "partitioned")
"""


@pytest.mark.slow
def test_twenty_thousand_user_tokens_over_many_fragments_end_within_seconds():
    run_bounded(CHILD, cpu_seconds=10, memory_mib=512).assert_validation_error("done")


def test_numpy_integer_ids_decode_as_the_ints_they_are():
    np = pytest.importorskip("numpy")
    from onnx_struct.llm.tokenizer.tokenizer import Tokenizer  # noqa: PLC0415
    from onnx_struct.llm.tokenizer.vocab import load_vocab  # noqa: PLC0415

    tok = Tokenizer(
        load_vocab(
            {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "c"], "tokenizer.ggml.merges": []}
        )
    )
    for dtype in ("uint8", "int32", "int64", "uint64"):
        assert tok.decode(np.array([2, 0, 1], dtype=dtype)) == "cab"
        assert tok.token_to_piece(np.array(1, dtype=dtype)[()]) == b"b"
    with pytest.raises(onnx_struct.ValidationError):
        tok.decode(np.array([3], dtype="uint64"))
    with pytest.raises(onnx_struct.ValidationError):
        tok.decode(np.array([1.0]))
