"""A long run of digits under the superbpe pre-tokenizer (found by the tokenizer fuzz target,
tests/fuzz/findings/tokenizer/superbpe-digit-run.json: ``"12" * 10000`` after a few characters
took 15 s): its regex ``(?=(\\d{3})+(?!\\d))`` reads from each position to the end of the run,
quadratic as a regex; the cuts (a number in triples from the right) are now found in one pass.
The bound is asserted in a child under a CPU limit; the cuts are checked against the regex."""

from __future__ import annotations

import random
import re

import pytest

from adversarial.bounded import run_bounded
from onnx_struct.llm.tokenizer.regex_split import SUPERBPE_DIGITS, _Regex

DIGITS = """
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(S.__file__).resolve().parents[1] / "tests"))
from support.llm import bpe_vocab
v = bpe_vocab()
tok = S.load_tokenizer({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "superbpe",
                        "tokenizer.ggml.tokens": v["tokens"], "tokenizer.ggml.token_type": v["token_types"],
                        "tokenizer.ggml.merges": v["merges"]})
ids = tok.encode("S" + "12" * 100_000)  # 200,000 digits: hours as a regex, a fraction of a second now
assert tok.decode(ids) == "S" + "12" * 100_000
raise S.ValidationError("done", "tokenized")
"""


@pytest.mark.slow
def test_two_hundred_thousand_digits_split_within_seconds():
    run_bounded(DIGITS, cpu_seconds=10, memory_mib=1000).assert_validation_error("done")


def _regex_cuts(text: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The regex run as llama.cpp runs it: each piece alone, empty matches only separating."""
    pattern, out = re.compile(SUPERBPE_DIGITS, re.ASCII), []
    for start, end in pieces:
        position = start
        for match in pattern.finditer(text, start, end):
            if match.start() > position:
                out.append((position, match.start()))
            position = match.start()
        if position < end:
            out.append((position, end))
    return out


def test_the_one_pass_cuts_are_the_regex_cuts():
    split = _Regex(SUPERBPE_DIGITS).split
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice("0123456789a \u0661") for _ in range(rng.randint(0, 25)))
        bounds = [0, *sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 3)))), len(text)]
        pieces = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        assert split(text, "", text, pieces) == _regex_cuts(text, pieces), (text, pieces)
