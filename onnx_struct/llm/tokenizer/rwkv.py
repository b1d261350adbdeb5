"""RWKV's "world" tokenizer as llama.cpp's ``llm_tokenizer_rwkv_session`` does it.

Each token's text is an escaped byte string (``\\t``, ``\\n``, ``\\r``, ``\\xNN``, ``\\`` before
any other character standing for it); :func:`token_bytes` unescapes it. The fragment's UTF-8
bytes are cut greedily from the left into the longest token; a byte no token starts with is the
unknown token. llama.cpp would loop forever where a byte begins tokens but no token is a prefix
of the remaining text (its walk then restarts at offset 0); here that byte is unknown too.
"""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.vocab import Vocab
from onnx_struct.llm.tokenizer.work import budget, priced, refuse

_SHORT = priced((2, 1))  # the lengths tried where no piece of 3 bytes or more starts, and their cost
_ESCAPES = {ord("t"): 0x09, ord("n"): 0x0A, ord("r"): 0x0D}


def _hex_digit(c: int) -> int:
    # llama.cpp's reading of a (signed) char: 'a' to 0x7F as letters, anything else as c - '0',
    # wrapped to a byte
    return (c - ord("a") + 10) & 0xFF if ord("a") <= c < 0x80 else (c - ord("0")) & 0xFF


def token_bytes(text: str) -> bytes:
    """A token's bytes from its escaped text (llama.cpp's ``llama_unescape_rwkv_token``).

    Args:
        text: the token's text as the vocabulary holds it.

    Returns:
        The bytes it stands for.
    """
    out = bytearray()
    escaping, remaining, acc = False, 0, 0
    for c in text.encode("utf-8", "surrogatepass"):
        if remaining:
            acc = ((acc << 4) + _hex_digit(c)) & 0xFF
            remaining -= 1
            if not remaining:
                out.append(acc)
                acc = 0
        elif escaping:
            if c == ord("x"):
                remaining = 2
            else:
                out.append(_ESCAPES.get(c, c))
            escaping = False
        elif c == ord("\\"):
            escaping = True
        else:
            out.append(c)
    return bytes(out)


class RwkvSession:
    """llama.cpp's RWKV session over one vocabulary; build once, tokenize many fragments."""

    def __init__(self, vocab: Vocab) -> None:
        """Unescape every token and index them by their first bytes.

        Args:
            vocab: the vocabulary (model ``rwkv``).
        """
        pieces: dict[bytes, int] = {}
        for i, text in enumerate(vocab.tokens):
            pieces[token_bytes(text)] = i  # the last of duplicates, as llama.cpp's trie
        pieces.pop(b"", None)  # an empty token is the trie's root: never matched
        self._pieces = pieces
        self._first = {piece[0] for piece in pieces}
        by_prefix: dict[bytes, set[int]] = {}
        for piece in pieces:
            if len(piece) >= 3:
                by_prefix.setdefault(piece[:3], set()).add(len(piece))
        # the lengths tried at a position, longest first, and what trying them costs
        self._tries = {key: priced((*sorted(lengths, reverse=True), 2, 1)) for key, lengths in by_prefix.items()}
        self._unk = vocab.unk

    def tokenize(self, text: str) -> list[int]:
        """The ids of one raw-text fragment, as llama.cpp's session returns them.

        Args:
            text: the fragment.

        Returns:
            The token ids.

        Raises:
            ValidationError: (``untokenizable``) a byte no token covers and the vocabulary has no
                unknown token; (``limit_exceeded``) the vocabulary makes the text take more than
                ``MAX_TOKENIZE_STEPS_PER_CHAR`` lookups a byte.
        """
        data = text.encode("utf-8", "surrogatepass")
        pieces, tries_at = self._pieces, self._tries
        out: list[int] = []
        position, n = 0, len(data)
        limit = left = budget(n)
        while position < n:
            found = None
            if data[position] in self._first:
                tries, cost = tries_at.get(data[position : position + 3], _SHORT)
                left -= cost
                if left < 0:
                    refuse("rwkv", n, limit - left)
                for length in tries:
                    if position + length <= n:
                        found = pieces.get(data[position : position + length])
                        if found is not None:
                            position += length
                            break
            if found is None:
                if self._unk is None:
                    raise ValidationError(
                        f"tokenize(text)[{position}]",
                        f"byte 0x{data[position]:02X} begins no token and there is no unknown token",
                        code="untokenizable",
                    )
                found = self._unk
                position += 1
            out.append(found)
        return out
