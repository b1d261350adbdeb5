"""WordPiece (``tokenizer.ggml.model`` bert) as llama.cpp's ``llm_tokenizer_wpm_session`` does it.

Preprocessing (BERT's normalizer as llama.cpp has it): with ``strip_accents`` each code point is
replaced by the first of its canonical decomposition and marks (\\p{M}) are dropped; whitespace
ends a word; NUL, U+FFFD and control characters (\\p{C}) are dropped; with ``lowercase`` each code
point takes its simple lowercase; punctuation (\\p{P}), ASCII symbols and CJK ideographs are words
of their own. Each word, prefixed with U+2581 (the converter writes BERT's word-initial pieces
with it and its ``##`` continuations without), is cut greedily into the longest pieces from the
left; a word with a position no piece starts at becomes the one unknown token.
"""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.unicode_flags import WHITESPACE, category_class, nfd_first, to_lower
from onnx_struct.llm.tokenizer.vocab import Vocab
from onnx_struct.llm.tokenizer.work import budget, priced, refuse

WORD_START = "\u2581"
# llama.cpp's is_chinese_char ranges (0x2B920, not 0x2B820, as HF's Rust code has it)
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


_ONE_CHARACTER = priced((1,))  # a position no longer piece starts at: only one-character pieces


def is_chinese_char(cp: int) -> bool:
    """Whether ``cp`` is a CJK ideograph, a word of its own (llama.cpp's ranges)."""
    return any(lo <= cp <= hi for lo, hi in _CJK)


def preprocess(text: str, *, lowercase: bool, strip_accents: bool) -> list[str]:
    """The words of ``text`` after BERT's normalization, as llama.cpp's ``preprocess``.

    Args:
        text: one raw-text fragment.
        lowercase: the normalizer's ``lowercase`` option.
        strip_accents: the normalizer's ``strip_accents`` option.

    Returns:
        The non-empty words, in order.
    """
    words: list[str] = []
    word: list[str] = []
    for char in text:
        if strip_accents:
            char = nfd_first(char)
        cp = ord(char)
        if cp in WHITESPACE:
            if word:
                words.append("".join(word))
                word = []
            continue
        kind = category_class(char)
        if cp == 0 or cp == 0xFFFD or kind == "C" or (strip_accents and kind == "M"):
            continue
        if lowercase:
            char = to_lower(char)
        if kind == "P" or (cp < 0x7F and kind == "S") or is_chinese_char(cp):
            if word:
                words.append("".join(word))
                word = []
            words.append(char)
        else:
            word.append(char)
    if word:
        words.append("".join(word))
    return words


class WpmSession:
    """llama.cpp's WPM session over one vocabulary; build once, tokenize many fragments."""

    def __init__(self, vocab: Vocab) -> None:
        """Index the pieces by length for the longest-match search.

        Args:
            vocab: the vocabulary (model ``wpm``).
        """
        self._ids = vocab.token_to_id
        # at a position only the lengths of pieces sharing its first two characters are tried,
        # longest first (then the one-character pieces)
        by_prefix: dict[str, set[int]] = {}
        for piece in self._ids:
            if len(piece) >= 2:
                by_prefix.setdefault(piece[:2], set()).add(len(piece))
        # the lengths tried at a position (the one-character pieces last) and what trying them costs
        self._tries = {key: priced((*sorted(lengths, reverse=True), 1)) for key, lengths in by_prefix.items()}
        self._unk = vocab.unk
        self._lowercase = vocab.lowercase
        self._strip_accents = vocab.strip_accents

    def tokenize(self, text: str) -> list[int]:
        """The ids of one raw-text fragment, as llama.cpp's session returns them.

        Args:
            text: the fragment.

        Returns:
            The token ids (the unknown id for a word no pieces cover).

        Raises:
            ValidationError: (``untokenizable``) a word no pieces cover and the vocabulary has no
                unknown token (llama.cpp would emit LLAMA_TOKEN_NULL, -1); (``limit_exceeded``) the
                vocabulary makes the text take more than ``MAX_TOKENIZE_STEPS_PER_CHAR`` lookups a
                character.
        """
        out: list[int] = []
        left = [budget(len(text)), len(text), budget(len(text))]  # steps left, characters, budget
        for word in preprocess(text, lowercase=self._lowercase, strip_accents=self._strip_accents):
            pieces = self._word(WORD_START + word, left)
            if pieces:
                out.extend(pieces)
            elif self._unk is not None:
                out.append(self._unk)
            else:
                raise ValidationError(
                    "tokenize(text)",
                    f"no pieces cover the word {word[:40]!r} and there is no unknown token",
                    code="untokenizable",
                )
        return out

    def _word(self, word: str, left: list[int]) -> list[int]:
        ids, tries_at, n = self._ids, self._tries, len(word)
        out, i = [], 0
        while i < n:
            tries, cost = tries_at.get(word[i : i + 2], _ONE_CHARACTER)
            left[0] -= cost
            if left[0] < 0:
                refuse("wpm", left[1], left[2] - left[0])
            for length in tries:
                if i + length > n:
                    continue
                found = ids.get(word[i : i + length])
                if found is not None:
                    out.append(found)
                    i += length
                    break
            else:
                return []  # a position no piece starts at: the whole word is unknown
        return out
