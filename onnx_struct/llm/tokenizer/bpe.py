"""llama.cpp's BPE session (``llm_tokenizer_bpe_session``) and its ``hybriddna`` and ``whitespace``
variants.

One raw-text fragment is cut into words by the pre type's regex list (``regex_split``), each word
byte-encoded as GPT-2 does (or kept as UTF-8 where the pre type says so), then merged: the pair of
adjacent symbols with the lowest merge rank first, the leftmost of equal ranks, until no pair has
a rank. With ``ignore_merges`` a word that is itself a token is that token. A final symbol that
is no token falls back to its bytes: each byte's own token where one exists (byte-encoded), or
``<0xXX>`` (UTF-8 vocabularies), bytes without a token dropped, as llama.cpp drops them.
"""

from __future__ import annotations

import heapq

from onnx_struct.llm.tokenizer.pre_types import BYTE_ENCODE, REGEX_LISTS
from onnx_struct.llm.tokenizer.regex_split import Splitter, is_whitespace, tolower
from onnx_struct.llm.tokenizer.vocab import Vocab, merge_rank

CACHE_WORDS = 65536  # words whose merge result a session remembers (cleared when full)
DNA_MARKER = "\ue000"  # hybriddna's k-mer suffix (llama.cpp's dna_kmer_marker)


def _byte_chars() -> list[str]:
    """GPT-2's byte -> character map (llama.cpp's unicode_byte_to_utf8_map)."""
    chars: dict[int, str] = {}
    for ch in (*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)):
        chars[ch] = chr(ch)
    extra = 0
    for ch in range(256):
        if ch not in chars:
            chars[ch] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS = _byte_chars()
CHAR_BYTES = {c: b for b, c in enumerate(BYTE_CHARS)}
_BYTE_TABLE = {b: c for b, c in enumerate(BYTE_CHARS)}


def byte_encode(word: str) -> str:
    """A word's UTF-8 bytes as GPT-2's characters."""
    return word.encode("utf-8").decode("latin-1").translate(_BYTE_TABLE)


class BpeSession:
    """``tokenize(text)``: the ids of one raw-text fragment, as llm_tokenizer_bpe_session gives them."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self.splitter = Splitter(REGEX_LISTS[vocab.pre])
        self.byte_encode = BYTE_ENCODE[vocab.pre]
        self.token_to_id = vocab.token_to_id
        self.ranks = vocab.merges
        self.ignore_merges = vocab.ignore_merges
        self._cache: dict[str, list[int]] = {}

    def tokenize(self, text: str) -> list[int]:
        out: list[int] = []
        for word in self.splitter.split(text):
            if self.byte_encode:
                word = byte_encode(word)
            ids = self._cache.get(word)
            if ids is None:
                ids = self._word(word)
                if len(self._cache) >= CACHE_WORDS:
                    self._cache.clear()
                self._cache[word] = ids
            out.extend(ids)
        return out

    def _word(self, word: str) -> list[int]:
        whole = self.token_to_id.get(word)
        if whole is not None and (self.ignore_merges or (self.vocab.pre == "gemma4" and not word.strip("\n"))):
            return [whole]  # gemma4: a run of newlines that is a token is that token
        out: list[int] = []
        for symbol in self._merge(word):
            token = self.token_to_id.get(symbol)
            if token is not None:
                out.append(token)
                continue
            for byte in symbol.encode("utf-8"):
                piece = chr(byte) if self.byte_encode else f"<0x{byte:02X}>"
                # a single byte past ASCII is no UTF-8 text, so no token's text: llama.cpp drops it
                token = self.token_to_id.get(piece) if (byte < 0x80 or not self.byte_encode) else None
                if token is not None:
                    out.append(token)
        return out

    def _merge(self, word: str) -> list[str]:
        symbols = list(word)
        n = len(symbols)
        if n < 2:
            return symbols
        following = list(range(1, n)) + [-1]
        preceding = list(range(-1, n - 1))
        ranks = self.ranks
        queue = []
        for i in range(n - 1):
            rank = merge_rank(ranks, symbols[i], symbols[i + 1])
            if rank is not None:
                queue.append((rank, i, i + 1, symbols[i] + symbols[i + 1]))
        heapq.heapify(queue)
        while queue:
            _, left, right, text = heapq.heappop(queue)
            a, b = symbols[left], symbols[right]
            if not a or not b or a + b != text:
                continue  # outdated: one side has changed since the pair was queued
            symbols[left], symbols[right] = text, ""
            following[left] = following[right]
            if following[right] >= 0:
                preceding[following[right]] = left
            for x, y in ((preceding[left], left), (left, following[left])):
                if x >= 0 and y >= 0:
                    rank = merge_rank(ranks, symbols[x], symbols[y])
                    if rank is not None:
                        heapq.heappush(queue, (rank, x, y, symbols[x] + symbols[y]))
        return [s for s in symbols if s]


class HybridDnaSession(BpeSession):
    """``hybriddna``: text between ``<dna>`` and ``</dna>`` as upper-cased 6-mers (the last padded
    with ``A``; one not in the vocabulary is ``<oov>``), the rest as BPE."""

    def tokenize(self, text: str) -> list[int]:
        begin, end_tag, oov = (self.token_to_id.get(t) for t in ("<dna>", "</dna>", "<oov>"))
        if begin is None or end_tag is None or oov is None:
            return super().tokenize(text)
        out: list[int] = []
        pos = 0
        while pos < len(text):
            start = text.find("<dna>", pos)
            if start < 0:
                out += super().tokenize(text[pos:])
                break
            if start > pos:
                out += super().tokenize(text[pos:start])
            out.append(begin)
            content = start + len("<dna>")
            stop = text.find("</dna>", content)
            seq = text[content : len(text) if stop < 0 else stop]
            seq = "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in seq)
            for i in range(0, len(seq), 6):
                kmer = seq[i : i + 6].ljust(6, "A")
                out.append(self.token_to_id.get(kmer + DNA_MARKER, oov))
            if stop < 0:
                break
            out.append(end_tag)
            pos = stop + len("</dna>")
        return out


class WhitespaceSession(BpeSession):
    """``whitespace``: whitespace dropped, each run between as BPE (lower-cased where the vocabulary
    says so, by llama.cpp's one-to-one ``unicode_tolower``)."""

    def tokenize(self, text: str) -> list[int]:
        out: list[int] = []
        segment: list[str] = []
        for c in text:
            if is_whitespace(ord(c)):
                if segment:
                    out += super().tokenize("".join(segment))
                    segment = []
            else:
                segment.append(chr(tolower(ord(c))) if self.vocab.lowercase else c)
        if segment:
            out += super().tokenize("".join(segment))
        return out
