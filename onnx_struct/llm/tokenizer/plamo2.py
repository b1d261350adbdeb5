"""PLaMo-2's tokenizer as llama.cpp's ``llm_tokenizer_plamo2`` does it: a Viterbi search from the
end of the text over a table of every suffix of every piece.

Build: every piece and each of its proper suffixes (by code point) is a "suffix"; they are sorted
by their reversed bytes and numbered, each followed in the table by one row per prefix of it that
is itself a piece or suffix (longest first: its length, its token id or -1, its score times 10^4
rounded, or INVALID for a suffix that is no piece) and a sentinel row (length 1, the UNKNOWN
score). ``(code point, id of the rest)`` maps to a suffix's id, so one step left extends the
suffix matched so far.

Encode: from the last code point to the first, the longest known suffix starting at ``i`` is
found by extending the previous one (or falling back through its shorter rows); each of its rows
is a candidate ``scores[i + length] - score``, the lowest kept. Unknown characters cost
10,000,000 and come out as their UTF-8 byte pieces ``<0xNN>``. A leading BOM is dropped.
"""

from __future__ import annotations

import math
import re

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.vocab import Attr, Vocab

INVALID_SCORE = -20_000_000
UNKNOWN_SCORE = -10_000_000
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>\Z")
# llama.cpp's scores are int32; a score past that range is clamped rather than wrapped
_INT32 = (-(2**31), 2**31 - 1)


def _round(x: float) -> int:
    """std::round (halves away from zero) to int32."""
    value = int(math.copysign(math.floor(abs(x) + 0.5), x))
    return max(_INT32[0], min(_INT32[1], value))


class Plamo2Session:
    """llama.cpp's PLaMo-2 tokenizer over one vocabulary; build once, tokenize many fragments."""

    def __init__(self, vocab: Vocab) -> None:
        """Build the suffix table.

        Args:
            vocab: the vocabulary (model ``plamo2``).

        Raises:
            ValidationError: a byte piece ``<0xNN>`` is missing (llama.cpp refuses such a file).
        """
        byte_ids = [0] * 256
        token_to_id: dict[str, int] = {}
        suffix_score: dict[str, float] = {}
        byte = int(Attr.BYTE)
        for i, text in enumerate(vocab.tokens):
            token_to_id[text] = i
            if vocab.attrs[i] & byte:
                match = _BYTE_PIECE.match(text)
                if match and len(text) == 6:
                    byte_ids[int(match.group(1), 16)] = i
                continue
            suffix_score[text] = float(vocab.scores[i])
            for k in range(1, len(text)):
                suffix_score.setdefault(text[k:], math.nan)
        missing = [b for b in range(256) if byte_ids[b] == 0]
        if missing:
            raise ValidationError(
                "gguf.kv['tokenizer.ggml.tokens']",
                f"byte piece <0x{missing[0]:02X}> is not set ({len(missing)} of 256 missing)",
                code="bad_tokenizer",
            )
        suffixes = sorted([*suffix_score, ""], key=lambda s: s.encode("utf-8", "surrogatepass")[::-1])
        suffix_id: dict[str, int] = {}
        to_suffix: dict[tuple[int, int], int] = {}
        count = 0
        for suffix in suffixes:
            suffix_id[suffix] = count
            if suffix:
                to_suffix[(ord(suffix[0]), suffix_id.get(suffix[1:], 0))] = count
                count += 1 + sum(1 for k in range(len(suffix), 0, -1) if suffix[:k] in suffix_score)
            else:
                count += 1
        rows: list[tuple[int, int, int, int]] = []  # (piece length, token id, score, piece id)
        for suffix in suffixes:
            for k in range(len(suffix), 0, -1):
                piece = suffix[:k]
                score = suffix_score.get(piece)
                if score is None:
                    continue
                value = _round(score * 1e4) if math.isfinite(score) else INVALID_SCORE
                rows.append((k, token_to_id.get(piece, -1), value, suffix_id[piece]))
            rows.append((1, -1, UNKNOWN_SCORE, 0))
        self._rows = rows
        self._to_suffix = to_suffix
        self._bytes = byte_ids

    def tokenize(self, text: str) -> list[int]:
        """The ids of one raw-text fragment, as llama.cpp's encode returns them.

        Args:
            text: the fragment.

        Returns:
            The token ids.
        """
        if text.startswith("\ufeff"):
            text = text[1:]
        n = len(text)
        if n == 0:
            return []
        rows, to_suffix = self._rows, self._to_suffix
        scores = [1 << 60] * (n + 1)
        scores[n] = 0
        lengths = [0] * (n + 1)
        ids = [0] * (n + 1)
        suffix = 0
        for i in range(n - 1, -1, -1):
            c = ord(text[i])
            for p in range(suffix, len(rows)):
                suffix = to_suffix.get((c, rows[p][3]), 0)
                if suffix > 0 or rows[p][2] == UNKNOWN_SCORE:
                    break
            for p in range(suffix, len(rows)):
                length, token, score, _ = rows[p]
                if score > INVALID_SCORE:
                    s = scores[i + length] - score
                    if s < scores[i]:
                        scores[i], lengths[i], ids[i] = s, length, token
                if score == UNKNOWN_SCORE:
                    break
        out: list[int] = []
        position = 0
        while position < n:
            if ids[position] >= 0:
                out.append(ids[position])
            else:
                out.extend(self._bytes[b] for b in text[position].encode("utf-8", "surrogatepass"))
            position += lengths[position]
        return out
