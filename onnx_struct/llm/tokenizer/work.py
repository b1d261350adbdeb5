"""The work one WPM, UGM or RWKV session may spend on a fragment: linear in its length, whatever
the vocabulary.

Those sessions try, at each position, every piece length sharing the position's first bytes (and
UGM's normalizer walks the charsmap's trie as far as the text follows it). A hostile vocabulary
(thousands of lengths under one prefix, a trie that loops on one byte) makes each position cost
as much as the vocabulary: the text's time becomes its length times the vocabulary's size. Each
session charges what a position costs and refuses past ``MAX_TOKENIZE_STEPS_PER_CHAR`` per
character.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NoReturn

from onnx_struct.errors import limit_exceeded
from onnx_struct.limits import MAX_TOKENIZE_STEPS_PER_CHAR

# Work every fragment may spend whatever its length: an odd vocabulary still tokenizes short texts.
SLACK = 1 << 16
# A lookup costs one step (a dict lookup of a fresh slice, about 0.1 µs) and one more per this many
# bytes it copies and hashes; a step of a walk in Python (UGM's charsmap trie) costs WALK_STEP.
BYTES_PER_STEP = 16
WALK_STEP = 4


def budget(chars: int) -> int:
    """The steps a fragment of ``chars`` characters (or bytes) may take."""
    return MAX_TOKENIZE_STEPS_PER_CHAR * chars + SLACK


def lookup_cost(lengths: Iterable[int]) -> int:
    """The steps of trying pieces of each of ``lengths`` at one position."""
    lengths = tuple(lengths)
    return len(lengths) + sum(lengths) // BYTES_PER_STEP


def priced(lengths: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """``lengths`` (the piece lengths a session tries at a position, in its order) with their cost."""
    return lengths, lookup_cost(lengths)


def refuse(model: str, chars: int, spent: int) -> NoReturn:
    """Raise the refusal of a fragment whose tokenization outgrew its budget.

    Args:
        model: the session's model (``wpm``, ``ugm``, ``rwkv``).
        chars: the fragment's characters (or bytes) the budget was given for.
        spent: the steps spent when it ran out.

    Raises:
        ValidationError: always (``limit_exceeded``, path ``tokenize(text)``).
    """
    raise limit_exceeded(
        "tokenize(text)",
        f"the {model} vocabulary makes this {chars}-character text take more than "
        f"MAX_TOKENIZE_STEPS_PER_CHAR={MAX_TOKENIZE_STEPS_PER_CHAR} lookups per character "
        "(its pieces share a prefix in too many lengths, or its charsmap's trie loops)",
        spent,
        budget(chars),
    )
