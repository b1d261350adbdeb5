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
        # an id past the vocabulary is never a candidate (llama.cpp's n_tokens check)
        self._scores = {piece: float(vocab.scores[i]) for piece, i in self._ids.items() if 0 <= i < n}
        self._longest = max((len(piece) for piece in self._scores), default=0)
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
        scores, longest = self._scores, self._longest
        start = list(range(n))  # a symbol's first character (fixed), its length (0: merged away)
        size = [1] * n
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        # llama.cpp's queue: highest score first, then lowest left index. Entries whose symbols
        # changed since are skipped when popped (their recorded length no longer matches).
        queue: list[tuple[float, int, int, int]] = []

        def candidate(left: int, right: int) -> tuple[float, int, int, int] | None:
            total = size[left] + size[right]
            if total > longest:  # no piece is that long
                return None
            score = scores.get(text[start[left] : start[left] + total])
            return None if score is None else (-score, left, right, total)

        for i in range(1, n):
            entry = candidate(i - 1, i)
            if entry is not None:
                queue.append(entry)
        heapq.heapify(queue)
        pop, push = heapq.heappop, heapq.heappush
        while queue:
            _, left, right, total = pop(queue)
            if size[left] == 0 or size[right] == 0 or size[left] + size[right] != total:
                continue
            size[left] = total
            size[right] = 0
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
            before = prev[left]
            if before >= 0 and (entry := candidate(before, left)) is not None:
                push(queue, entry)
            if after >= 0 and (entry := candidate(left, after)) is not None:
                push(queue, entry)
        return self._emit(text, start, size, nxt)

    def _emit(self, text: str, start: list[int], size: list[int], nxt: list[int]) -> list[int]:
        ids, out = self._ids, []
        i = 0
        while i != -1:
            piece = text[start[i] : start[i] + size[i]]
            found = ids.get(piece)
            if found is not None:
                out.append(found)
            else:  # only single characters get here: every merged symbol is a piece
                out.extend(self._fallback(piece, start[i]))
            i = nxt[i]
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
