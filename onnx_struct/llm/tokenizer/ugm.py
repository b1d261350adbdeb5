"""Unigram (``tokenizer.ggml.model`` t5) as llama.cpp's ``llm_tokenizer_ugm_session`` does it.

Normalization, over the fragment's UTF-8 bytes: at each offset, a prefix matching a user-defined
piece is kept as is (llama.cpp's trie returns the longest prefix shared with any user-defined
piece); else the longest prefix the precompiled charsmap maps (an XOR-compressed double array,
XCDA, over bytes, with NUL-terminated replacement strings) is replaced; else one UTF-8 character
is kept (an invalid byte becomes U+FFFD). Spaces are then escaped to U+2581, a run of them merged
into one before each word with ``remove_extra_whitespaces``, one prefixed with
``add_space_prefix`` (appended instead with ``treat_whitespace_as_suffix``).

Tokenization is the Viterbi search over the normalized bytes: at each character, every normal,
user-defined (score 0) or unused piece starting there extends the best path to its end when it
scores higher (the first found keeps a tie); a character no one-character piece covers may be the
unknown token, scored ``min(normal scores) - 10``. Consecutive unknown tokens on the best path are
one.
"""

from __future__ import annotations

import bisect
import struct

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.vocab import Attr, Vocab
from onnx_struct.llm.tokenizer.work import BYTES_PER_STEP, WALK_STEP, budget, priced, refuse

SPACE = "\u2581".encode()
UNKNOWN_PENALTY = 10.0
FLT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
_LEAD_LENGTH = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)  # llama.cpp's unicode_len_utf8
REPLACEMENT = "\ufffd".encode()
_SHORT = priced((1, 2))  # the lengths tried where no piece of 3 bytes or more starts, and their cost
CHARSMAP = "gguf.kv['tokenizer.ggml.precompiled_charsmap']"


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _utf8_length(data: bytes, offset: int) -> int:
    """Bytes of the valid UTF-8 character at ``offset``, 0 where none starts there
    (llama.cpp's unicode_cpt_from_utf8 checks the lead and continuation bits only)."""
    lead = data[offset]
    if lead < 0x80:
        return 1
    if not lead & 0x40:
        return 0
    size = 2 if not lead & 0x20 else 3 if not lead & 0x10 else 4 if not lead & 0x08 else 0
    if size == 0 or offset + size > len(data):
        return 0
    if any(data[offset + k] & 0xC0 != 0x80 for k in range(1, size)):
        return 0
    return size


class Charsmap:
    """The precompiled charsmap: the XCDA over bytes and its replacement strings.

    Raises:
        ValidationError: the blob is shorter than its header or its XCDA size (as llama.cpp
            refuses it on loading).
    """

    def __init__(self, blob: bytes) -> None:
        self.xcda: tuple[int, ...] = ()
        self.replacements = b""
        if not blob:
            return
        if len(blob) < 4:
            raise ValidationError(CHARSMAP, "shorter than its 4-byte XCDA size", code="bad_tokenizer")
        (size,) = struct.unpack_from("<I", blob)
        if size + 4 >= len(blob):
            raise ValidationError(CHARSMAP, f"its XCDA size {size} leaves no replacement strings", code="bad_tokenizer")
        count = size // 4
        self.xcda = struct.unpack_from(f"<{count}I", blob, 4)
        self.replacements = blob[4 + size :]

    def _node(self, index: int) -> int:
        if index >= len(self.xcda):
            raise ValidationError(
                CHARSMAP, f"XCDA index {index} is past its {len(self.xcda)} entries", code="bad_tokenizer"
            )
        return self.xcda[index]

    @staticmethod
    def _base(node: int) -> int:
        return (node >> 10) << ((node & (1 << 9)) >> 6)

    def longest(self, data: bytes, offset: int, steps: int | None = None) -> tuple[int, bytes, int]:
        """(bytes matched, replacement, bytes walked) of the longest prefix of ``data[offset:]`` the
        map holds; (0, b"", walked) where none. The walk follows the text as far as the trie does
        (a hostile one loops on a byte: the caller charges what was walked); past ``steps`` bytes
        walked (None: no end but the text's) it stops, and the caller refuses the text.

        Raises:
            ValidationError: the XCDA walks out of its array or to an unterminated replacement.
        """
        if not self.xcda:
            return 0, b"", 0
        matched, value, walked = 0, 0, 0
        index = self._base(self._node(0))
        end = len(data) if steps is None else min(len(data), offset + max(steps, 0) + 1)
        for position in range(offset, end):
            c = data[position]
            if c == 0:
                break
            index ^= c
            node = self._node(index)
            walked += 1
            if node & ((1 << 31) | 0xFF) != c:
                break
            leaf = (node >> 8) & 1
            index ^= self._base(node)
            if leaf:
                matched = position - offset + 1
                value = self._node(index) & ((1 << 31) - 1)
        if not matched:
            return 0, b"", walked
        if value >= len(self.replacements):
            raise ValidationError(CHARSMAP, f"replacement offset {value} is past its strings", code="bad_tokenizer")
        end = self.replacements.find(b"\0", value)
        if end < 0:
            raise ValidationError(CHARSMAP, f"the replacement at {value} is not NUL-terminated", code="bad_tokenizer")
        return matched, self.replacements[value:end], walked


class UgmSession:
    """llama.cpp's UGM session over one vocabulary; build once, tokenize many fragments."""

    def __init__(self, vocab: Vocab) -> None:
        """Index the matchable pieces (normal, user-defined, unused) and the charsmap.

        Args:
            vocab: the vocabulary (model ``ugm``).

        Raises:
            ValidationError: the precompiled charsmap is malformed.
        """
        self._charsmap = Charsmap(vocab.precompiled_charsmap)
        pieces: dict[bytes, int] = {}
        user_defined: set[bytes] = set()
        normal, user, matched = (
            int(Attr.NORMAL),
            int(Attr.USER_DEFINED),
            int(Attr.NORMAL | Attr.USER_DEFINED | Attr.UNUSED),
        )
        scores = vocab.scores
        low = min((float(scores[i]) for i, a in enumerate(vocab.attrs) if a & normal), default=FLT_MAX)
        for i, (text, attr) in enumerate(zip(vocab.tokens, vocab.attrs, strict=False)):
            if attr & matched:
                piece = text.encode("utf-8", "surrogatepass")
                pieces[piece] = i  # the last of duplicates, as the trie
                if attr & user:
                    user_defined.add(piece)
        self._pieces = pieces
        # user-defined pieces score 0, "to make them more likely to be selected"
        self._score = {piece: 0.0 if vocab.attrs[i] & user else float(scores[i]) for piece, i in pieces.items()}
        # pieces of 3 bytes or more, by their first 3 bytes: the lengths to try at a position
        by_prefix: dict[bytes, set[int]] = {}
        for piece in pieces:
            if len(piece) >= 3:
                by_prefix.setdefault(piece[:3], set()).add(len(piece))
        # the lengths tried at a position, shortest first, and what trying them costs
        self._tries = {key: priced((1, 2, *sorted(lengths))) for key, lengths in by_prefix.items()}
        self._user_defined = sorted(user_defined)
        self._user_longest = max((len(p) for p in user_defined), default=0)
        self._unknown_score = _f32(low - UNKNOWN_PENALTY)  # float arithmetic, as llama.cpp's
        self._unk = vocab.unk
        self._space = SPACE if vocab.escape_whitespaces else b" "
        self._prepend = not vocab.treat_whitespace_as_suffix and vocab.add_space_prefix
        self._append = vocab.treat_whitespace_as_suffix and vocab.add_space_prefix
        self._merge = vocab.remove_extra_whitespaces

    def _user_prefix(self, data: bytes, offset: int) -> int:
        """The longest prefix of ``data[offset:]`` shared with a user-defined piece (llama.cpp's
        naive_trie::get_longest_prefix: the walk's depth, whether or not a piece ends there)."""
        if not self._user_defined:
            return 0
        window = data[offset : offset + self._user_longest]
        at = bisect.bisect_left(self._user_defined, window)
        best = 0
        for k in (at - 1, at):
            if 0 <= k < len(self._user_defined):
                other = self._user_defined[k]
                n = 0
                for a, b in zip(window, other, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
        return best

    def normalize(self, text: str) -> bytes:
        """The normalized bytes of one fragment (llama.cpp's ``normalize``).

        Args:
            text: the fragment.

        Returns:
            The normalized UTF-8 bytes, spaces escaped.

        Raises:
            ValidationError: the precompiled charsmap is malformed where the text reaches it;
                (``limit_exceeded``) its trie makes the text take more than
                ``MAX_TOKENIZE_STEPS_PER_CHAR`` steps a byte.
        """
        data = text.encode("utf-8", "surrogatepass")
        out = bytearray()
        space, merge = self._space, self._merge
        prepended = in_word = False
        offset, n = 0, len(data)
        limit = left = budget(n)
        user_cost = 1 + self._user_longest // BYTES_PER_STEP if self._user_defined else 0
        while offset < n:
            consumed = self._user_prefix(data, offset)
            left -= user_cost
            if consumed:
                chunk = data[offset : offset + consumed]
            else:
                consumed, chunk, walked = self._charsmap.longest(data, offset, left // WALK_STEP)
                left -= walked * WALK_STEP
                if not consumed:
                    consumed = _utf8_length(data, offset)
                    chunk = data[offset : offset + consumed] if consumed else REPLACEMENT
                    consumed = consumed or 1
            if left < 0:  # a walk stops one byte past what is left
                refuse("ugm", n, limit - left)
            for c in chunk:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (self._prepend and not prepended) or merge:
                            out += space
                            prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not merge:
                        out += space
            offset += consumed
        if self._append:
            out += space
        return bytes(out)

    def tokenize(self, text: str) -> list[int]:
        """The ids of one raw-text fragment, as llama.cpp's session returns them.

        Args:
            text: the fragment.

        Returns:
            The token ids.

        Raises:
            ValidationError: the charsmap is malformed, or the best path needs the unknown token
                and the vocabulary has none (``untokenizable``).
        """
        data = self.normalize(text)
        n = len(data)
        if n == 0:
            return []
        unk = self._unk if self._unk is not None else -1
        pieces, score_of, tries_at = self._pieces, self._score, self._tries
        unknown = self._unknown_score
        limit = left = budget(n)
        best = [float("-inf")] * (n + 1)  # llama.cpp's -DBL_MAX: lower than any path
        best[0] = 0.0
        token = [unk] * (n + 1)
        start = [0] * (n + 1)
        offset = 0
        while offset < n:
            char = min(_LEAD_LENGTH[data[offset] >> 4], n - offset)
            here = best[offset]
            whole_char = False
            candidates, cost = tries_at.get(data[offset : offset + 3], _SHORT)
            left -= cost
            if left < 0:
                refuse("ugm", n, limit - left)
            for length in candidates:
                end = offset + length
                if end > n:
                    break
                piece = data[offset:end]
                found = pieces.get(piece)
                if found is None:
                    continue
                if length == char:
                    whole_char = True
                challenger = here + score_of[piece]
                if challenger > best[end]:
                    best[end], token[end], start[end] = challenger, found, offset
            if not whole_char:
                end = offset + char
                challenger = here + unknown
                if challenger > best[end]:
                    best[end], token[end], start[end] = challenger, unk, offset
            offset += char
        out: list[int] = []
        position, previous_unknown = n, False
        while True:
            current = token[position]
            is_unknown = current == unk
            if not (previous_unknown and is_unknown):
                out.append(current)
            if start[position] == 0:
                break
            previous_unknown = is_unknown
            position = start[position]
        out.reverse()
        if -1 in out:
            raise ValidationError(
                "tokenize(text)", "the text needs the unknown token and there is none", code="untokenizable"
            )
        return out
