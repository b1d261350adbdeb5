"""llama.cpp's special-token partition (``tokenizer_st_partition``): a text cut into raw-text
fragments and special token ids before any tokenizer model sees it.

The special tokens (control, user-defined and unknown ones) are taken longest text first; each in
turn is found in every raw fragment left so far, left to right, cutting the fragment around each
occurrence. Control and unknown tokens are matched only with ``special=True``; user-defined ones
always (as HF tokenizers matches added tokens). A token with the LSTRIP attribute takes the ASCII
whitespace before it out of the text to its left, RSTRIP the whitespace after it.
"""

from __future__ import annotations

from onnx_struct.llm.tokenizer.vocab import Attr, Vocab

_ASCII_SPACE = " \t\n\v\f\r"  # C's isspace in the "C" locale, as llama.cpp tests a byte


class SpecialPartition:
    """The special tokens of one vocabulary, ready to partition texts."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        order = vocab.special_tokens
        self.texts = {i: vocab.tokens[i] for i in order}
        self.all = order
        self.always = [i for i in order if not vocab.attrs[i] & (Attr.CONTROL | Attr.UNKNOWN)]

    def partition(self, text: str, special: bool) -> list[str | int]:
        """``text`` as a list of raw-text fragments (str, never empty) and special token ids (int)."""
        fragments: list[str | int] = [text] if text else []
        for token in self.all if special else self.always:
            piece = self.texts[token]
            if not any(isinstance(f, str) and piece in f for f in fragments):
                continue
            attr = self.vocab.attrs[token]
            out: list[str | int] = []
            for fragment in fragments:
                if isinstance(fragment, int) or piece not in fragment:
                    out.append(fragment)
                    continue
                position = 0
                while True:
                    match = fragment.find(piece, position)
                    if match < 0:
                        break
                    left = fragment[position:match]
                    if attr & Attr.LSTRIP:
                        left = left.rstrip(_ASCII_SPACE)
                    if left:
                        out.append(left)
                    out.append(token)
                    position = match + len(piece)
                    if attr & Attr.RSTRIP:
                        while position < len(fragment) and fragment[position] in _ASCII_SPACE:
                            position += 1
                if position < len(fragment):
                    out.append(fragment[position:])
            fragments = out
        return fragments
