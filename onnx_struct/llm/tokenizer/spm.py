"""SentencePiece (``tokenizer.ggml.model`` llama) as llama.cpp's ``llm_tokenizer_spm_session`` does it.

The text (already space-prefixed and with ' ' escaped to U+2581 by the framing) starts as one
symbol per character. Every pair of neighbouring symbols whose concatenation is a piece is a
candidate; the candidate of the highest piece score is merged first, a tie going to the leftmost
pair, and the merged symbol's new neighbours become candidates, until no pair is a piece. Each
symbol left is its piece, or else its UTF-8 bytes as the byte pieces ``<0xNN>`` (or the one-byte
piece itself). A character with neither maps to the unknown id, never silently dropped.

llama.cpp also keeps a ``rev_merge`` map to split a symbol that is no piece back into the pair
that formed it; a merged symbol is always a piece (a pair is merged only when its concatenation
is one), so that path never runs and is not needed here.
"""

from __future__ import annotations

import heapq

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.vocab import Vocab


class SpmSession:
    """llama.cpp's SPM session over one vocabulary; build once, tokenize many fragments."""

    def __init__(self, vocab: Vocab) -> None:
        """Index the vocabulary: pieces to ids and scores, the byte pieces.

        Args:
            vocab: the vocabulary (model ``spm``).
        """
        self._ids = vocab.token_to_id
        n = len(vocab.tokens)
        # A piece's score is looked up by its id (no second dict of the whole vocabulary: 0.06 s
        # for 262,144 tokens); an id past the vocabulary is never a candidate (llama.cpp's n_tokens check).
        self._score = list(map(float, vocab.scores[:n]))
        ids = self._ids.values()
        in_range = not self._ids or (min(ids) >= 0 and max(ids) < len(self._score))  # in C
        self._candidates = self._ids if in_range else {p: i for p, i in self._ids.items() if 0 <= i < len(self._score)}
        self._longest = max(map(len, self._candidates), default=0)
        self._unk = vocab.unk
        # byte_to_token: "<0xNN>", else the one-byte piece (only ASCII bytes can be a one-character str)
        self._bytes: list[int | None] = []
        for b in range(256):
            found = self._ids.get(f"<0x{b:02X}>")
            if found is None and b < 0x80:
                found = self._ids.get(chr(b))
            self._bytes.append(found)

    def tokenize(self, text: str) -> list[int]:
        """The ids of one raw-text fragment, as llama.cpp's session returns them.

        Args:
            text: the fragment, already prefixed and escaped by the framing.

        Returns:
            The token ids.

        Raises:
            ValidationError: (``untokenizable``) a character has no piece, no byte pieces, and
                the vocabulary no unknown token.
        """
        n = len(text)
        if n == 0:
            return []
        score, longest = self._score, self._longest
        # Symbol i starts at character i and spans size[i] characters (0: merged into its left
        # neighbour); the symbols tile the text, so the right neighbour of i is i + size[i].
        size = [1] * n
        prev = list(range(-1, n - 1))
        # llama.cpp's queue: highest score first, then lowest left index. An entry is
        # (-score, left, total length); it is stale, and skipped, once its pair has changed
        # (both symbols only grow, so the recorded total then no longer matches).
        get = self._candidates.get
        queue = [(-score[found], i, 2) for i in range(n - 1) if (found := get(text[i : i + 2])) is not None]
        if longest < 2:
            queue = []
        heapq.heapify(queue)
        pop, push = heapq.heappop, heapq.heappush
        while queue:
            _, left, total = pop(queue)
            grown = size[left]
            right = left + grown
            if not grown or right >= n or grown + size[right] != total:
                continue
            size[left] = total
            size[right] = 0
            after = left + total
            if after < n:
                prev[after] = left
                pair = total + size[after]
                if pair <= longest and (found := get(text[left : left + pair])) is not None:
                    push(queue, (-score[found], left, pair))
            before = prev[left]
            if before >= 0:
                pair = size[before] + total
                if pair <= longest and (found := get(text[before : before + pair])) is not None:
                    push(queue, (-score[found], before, pair))
        ids, out = self._ids, []
        i = 0
        while i < n:
            piece = text[i : i + size[i]]
            found = ids.get(piece)
            if found is not None:
                out.append(found)
            else:  # only single characters get here: every merged symbol is a piece
                out.extend(self._fallback(piece, i))
            i += size[i]
        return out

    def _fallback(self, char: str, position: int) -> list[int]:
        pieces = [self._bytes[b] for b in char.encode("utf-8", "surrogatepass")]
        if None not in pieces:
            return pieces  # type: ignore[return-value]
        if self._unk is None:
            raise ValidationError(
                f"tokenize(text)[{position}]",
                f"{char!r} has no piece, no byte pieces and the vocabulary no unknown token",
                code="untokenizable",
            )
        return [self._unk]
