"""llama.cpp's special-token partition (``tokenizer_st_partition``): a text cut into raw-text
fragments and special token ids before any tokenizer model sees it.

The special tokens (control, user-defined and unknown ones) are taken longest text first; each in
turn is found in every raw fragment left so far, left to right, cutting the fragment around each
occurrence. Control and unknown tokens are matched only with ``special=True``; user-defined ones
always (as HF tokenizers matches added tokens). A token with the LSTRIP attribute takes the ASCII
whitespace before it out of the text to its left, RSTRIP the whitespace after it.
"""

from __future__ import annotations

import bisect

from onnx_struct.llm.tokenizer.vocab import Attr, Vocab

_ASCII_SPACE = " \t\n\v\f\r"  # C's isspace in the "C" locale, as llama.cpp tests a byte


class SpecialPartition:
    """The special tokens of one vocabulary, ready to partition texts."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        order = vocab.special_tokens
        self.texts = {i: vocab.tokens[i] for i in order}
        self.all = order
        matched_only_as_special = int(Attr.CONTROL | Attr.UNKNOWN)  # an int: Flag's & costs 4 us a token
        self.always = [i for i in order if not vocab.attrs[i] & matched_only_as_special]

    def partition(self, text: str, special: bool) -> list[str | int]:
        """``text`` as a list of raw-text fragments (str, never empty) and special token ids (int).

        Fragments are kept as spans of ``text`` (sorted by start) and each token's occurrences are
        found in the whole text, once: a token visits only the fragments its occurrences start in,
        not every fragment (a vocabulary of 20,000 user-defined tokens over 100,000 characters cut
        at every 12th took 15 s that way, the fragments times the tokens in Python).
        """
        if not text:
            return []
        fragments: list[tuple[int, int] | int] = [(0, len(text))]  # raw spans [begin, end), or token ids
        starts = [0]  # where each fragment begins in text (a token: where its text matched)
        for token in self.all if special else self.always:
            piece = self.texts[token]
            found = text.find(piece)
            while found >= 0:
                k = bisect.bisect_right(starts, found) - 1  # -1: in whitespace stripped before the first
                after = starts[k + 1] if k + 1 < len(starts) else len(text)
                fragment = fragments[k] if k >= 0 else None
                # an occurrence in a token, in stripped whitespace or across a fragment's end is none
                if isinstance(fragment, tuple) and found + len(piece) <= fragment[1]:
                    pieces, piece_starts = self._cut(text, fragment, found, token, piece)
                    fragments[k : k + 1] = pieces
                    starts[k : k + 1] = piece_starts
                found = text.find(piece, after)
        return [text[f[0] : f[1]] if isinstance(f, tuple) else f for f in fragments]

    def _cut(
        self, text: str, fragment: tuple[int, int], match: int, token: int, piece: str
    ) -> tuple[list[tuple[int, int] | int], list[int]]:
        """The raw span ``fragment`` cut around every occurrence of ``piece`` in it, left to right
        from ``match`` (its first), with the token's LSTRIP / RSTRIP whitespace dropped."""
        attr = self.vocab.attrs[token]
        position, end = fragment
        out: list[tuple[int, int] | int] = []
        out_starts: list[int] = []
        while match >= 0:
            left_end = match
            if attr & Attr.LSTRIP:
                while left_end > position and text[left_end - 1] in _ASCII_SPACE:
                    left_end -= 1
            if left_end > position:
                out.append((position, left_end))
                out_starts.append(position)
            out.append(token)
            out_starts.append(match)
            position = match + len(piece)
            if attr & Attr.RSTRIP:
                while position < end and text[position] in _ASCII_SPACE:
                    position += 1
            match = text.find(piece, position, end)
        if position < end:
            out.append((position, end))
            out_starts.append(position)
        return out, out_starts
