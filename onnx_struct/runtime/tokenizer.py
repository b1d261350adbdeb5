"""A ``tokenizers.Tokenizer`` built from a GGUF file's tokenizer metadata, tokenizing as llama.cpp does.

Two ``tokenizer.ggml.model`` vocabularies are built: ``llama`` (llama.cpp's SentencePiece-style
merge by piece score, as a byte-fallback BPE) and ``gpt2`` (byte-level BPE with the
``tokenizer.ggml.pre`` regex of ``default``, ``llama-bpe`` or ``qwen2``). Any other model or
pre-tokenizer is refused, naming the key. BOS is added where ``tokenizer.ggml.add_bos_token``
says so; control tokens are neither matched in text nor decoded. Needs ``tokenizers``
(``pip install 'onnx-struct[llm]'``).

Notes: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.limits import MAX_SPM_MERGE_WORK

SPACE = "\u2581"  # SentencePiece's escaped space
CONTROL, BYTE = 3, 6  # llama.cpp's token types (llama_token_type) of BOS/EOS and of <0xXX> pieces
# tokenizer.ggml.pre -> (split regex, whole words that are tokens skip the merges)
GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
PRE_TOKENIZERS = {
    "default": (GPT2_REGEX, False),
    "gpt-2": (GPT2_REGEX, False),
    "llama-bpe": (LLAMA3_REGEX, True),
    "llama3": (LLAMA3_REGEX, True),
    "qwen2": (QWEN2_REGEX, False),
}


def _tokenizers():
    try:
        import tokenizers  # noqa: PLC0415 - optional dependency, imported when a tokenizer is built
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "tokenizing needs the tokenizers package: pip install 'onnx-struct[llm]'", name="tokenizers"
        ) from error
    return tokenizers


class GGUFTokenizer:
    """Text <-> token ids for a GGUF vocabulary: ``encode(text)``, ``decode(ids)``, ``bos``/``eos``."""

    def __init__(self, metadata: Mapping[str, object]) -> None:
        """Build the tokenizer from decoded GGUF metadata (``decode_metadata(model)``).

        Raises:
            ValidationError: the tokenizer model or pre-tokenizer is not one of those above, or a
                key it needs is missing or malformed (the path names the key).
            ImportError: the ``tokenizers`` package is not installed.
        """
        kind = metadata.get("tokenizer.ggml.model")
        tokens = _strings(metadata, "tokenizer.ggml.tokens")
        types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        if not isinstance(types, list) or len(types) != len(tokens):
            raise ValidationError("gguf.kv['tokenizer.ggml.token_type']", f"must hold {len(tokens)} integers")
        self.bos = _token_id(metadata, "tokenizer.ggml.bos_token_id", len(tokens))
        self.eos = _token_id(metadata, "tokenizer.ggml.eos_token_id", len(tokens))
        self.controls = frozenset(i for i, t in enumerate(types) if t == CONTROL)
        self._piece_bytes: list[bytes] | None = None
        if kind == "llama":
            self._tokenizer = _spm(metadata, tokens)
            self.add_bos = _flag(metadata, "tokenizer.ggml.add_bos_token", True)
            self._piece_bytes = [
                _spm_bytes(piece, t, i) for i, (piece, t) in enumerate(zip(tokens, types, strict=True))
            ]
            self._strip_space = _flag(metadata, "tokenizer.ggml.add_space_prefix", True)
        elif kind == "gpt2":
            self._tokenizer = _byte_bpe(metadata, tokens)
            self.add_bos = _flag(metadata, "tokenizer.ggml.add_bos_token", False)
        else:
            raise ValidationError(
                "gguf.kv['tokenizer.ggml.model']",
                f"tokenizer model {kind!r} is not built (llama and gpt2 are)",
                code="unsupported_tokenizer",
            )
        self.vocab_size = len(tokens)

    def encode(self, text: str, *, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text`` as llama.cpp's ``llama_tokenize(..., parse_special=false)`` gives
        them, with the BOS id first where ``add_bos`` (default: the file's ``add_bos_token``)."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        bos = self.add_bos if add_bos is None else add_bos
        return ([self.bos] if bos and self.bos is not None else []) + ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, control tokens (BOS, EOS, ...) left out; bytes that are not UTF-8
        become U+FFFD, one per invalid sequence (as Python's ``errors="replace"``)."""
        kept = [i for i in ids if i not in self.controls]
        if self._piece_bytes is None:
            return self._tokenizer.decode(kept, skip_special_tokens=False)
        # llama.cpp's detokenize: the pieces' bytes joined (a byte piece <0xXX> is its byte), and
        # the space the tokenizer prefixed removed from the start.
        text = b"".join(self._piece_bytes[i] for i in kept).decode("utf-8", "replace")
        return text[1:] if self._strip_space and text.startswith(" ") else text


def _spm_bytes(piece: str, token_type: int, index: int) -> bytes:
    if token_type == BYTE and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        digits = piece[3:5]
        if not all(c in "0123456789abcdefABCDEF" for c in digits):  # int() would take " 1" or "+1"
            raise ValidationError(f"gguf.kv['tokenizer.ggml.tokens'][{index}]", f"byte piece {piece!r} is not <0xXX>")
        return bytes([int(digits, 16)])
    return piece.replace(SPACE, " ").encode()


def _strings(metadata: Mapping[str, object], key: str) -> list[str]:
    value = metadata.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValidationError(
            f"gguf.kv[{key!r}]", "missing or not a non-empty array of strings", code="missing_metadata"
        )
    return value


def _flag(metadata: Mapping[str, object], key: str, default: bool) -> bool:
    """A BOOL key: any other type is refused, as llama.cpp refuses a key of the wrong type (the
    truth of the string "false" would silently be True)."""
    value = metadata.get(key, default)
    if not isinstance(value, bool):
        raise ValidationError(f"gguf.kv[{key!r}]", f"{value!r} is not a boolean")
    return value


def _token_id(metadata: Mapping[str, object], key: str, n_tokens: int) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n_tokens:
        raise ValidationError(f"gguf.kv[{key!r}]", f"{value!r} is not a token id below {n_tokens}")
    return value


def _spm(metadata: Mapping[str, object], tokens: list[str]):
    tk = _tokenizers()
    scores = metadata.get("tokenizer.ggml.scores")
    if not isinstance(scores, list) or len(scores) != len(tokens):
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.scores']",
            f"must hold one score per token ({len(tokens)})",
            code="missing_metadata",
        )
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores):
        raise ValidationError("gguf.kv['tokenizer.ggml.scores']", "must be an array of numbers (FLOAT32)")
    vocab = {piece: i for i, piece in enumerate(tokens)}  # llama.cpp's token_to_id: the last of duplicates
    merges = [(-float(scores[i]), i, cut, piece[:cut], piece[cut:]) for piece, i, cut in _splits(vocab)]
    # Highest score of the merged piece first. llama.cpp breaks a tie between two different pieces
    # of equal score by position (leftmost); a rank cannot: equal scores go by lower id here.
    merges.sort()
    model = tk.models.BPE(
        vocab=vocab,
        merges=[(left, right) for *_, left, right in merges],
        unk_token=tokens[_unk(metadata, tokens)] if _unk(metadata, tokens) is not None else None,
        byte_fallback=True,
        fuse_unk=True,
    )
    tokenizer = tk.Tokenizer(model)
    space_prefix = _flag(metadata, "tokenizer.ggml.add_space_prefix", True)
    steps = [tk.normalizers.Prepend(SPACE)] if space_prefix else []
    tokenizer.normalizer = tk.normalizers.Sequence([*steps, tk.normalizers.Replace(" ", SPACE)])
    return tokenizer


def _splits(vocab: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """(piece, id, cut) for every split of a piece into two pieces: llama.cpp merges a pair
    whenever its concatenation is a piece of the vocabulary.

    Only cuts whose two lengths are both lengths of some piece can split a piece into two, so
    those alone are tried: the work is linear in the vocabulary's characters where the pieces
    have few distinct lengths (a single long piece costs nothing), where trying every cut was
    quadratic in a piece's length.

    Raises:
        ValidationError: (``limit_exceeded``) the candidate splits and the characters they copy
            exceed ``MAX_SPM_MERGE_WORK``.
    """
    lengths = sorted({len(piece) for piece in vocab})
    present = set(lengths)
    out, work = [], 0
    for piece, i in vocab.items():
        size = len(piece)
        for cut in lengths:
            if cut >= size:
                break
            work += 1
            if size - cut not in present:
                continue
            work += size
            if work > MAX_SPM_MERGE_WORK:
                raise limit_exceeded(
                    "gguf.kv['tokenizer.ggml.tokens']",
                    f"splitting the pieces into pairs of pieces takes more than {MAX_SPM_MERGE_WORK} steps",
                    work,
                    MAX_SPM_MERGE_WORK,
                )
            if piece[:cut] in vocab and piece[cut:] in vocab:
                out.append((piece, i, cut))
    return out


def _unk(metadata: Mapping[str, object], tokens: list[str]) -> int | None:
    value = metadata.get("tokenizer.ggml.unknown_token_id")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(tokens) else None


def _byte_bpe(metadata: Mapping[str, object], tokens: list[str]):
    tk = _tokenizers()
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if not isinstance(pre, str) or pre not in PRE_TOKENIZERS:
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.pre']",
            f"pre-tokenizer {pre!r} is not built ({', '.join(sorted(PRE_TOKENIZERS))} are)",
            code="unsupported_tokenizer",
        )
    regex, whole_words = PRE_TOKENIZERS[pre]
    vocab = {piece: i for i, piece in enumerate(tokens)}
    merges = []
    for i, line in enumerate(_strings(metadata, "tokenizer.ggml.merges")):
        left, sep, right = line.partition(" ")
        if not sep:
            raise ValidationError(f"gguf.kv['tokenizer.ggml.merges'][{i}]", f"{line!r} is not two pieces")
        # tokenizers refuses a merge whose pieces are no token (a bare Exception) and panics on one
        # whose result is none
        missing = next((p for p in (left, right, left + right) if p not in vocab), None)
        if missing is not None:
            raise ValidationError(
                f"gguf.kv['tokenizer.ggml.merges'][{i}]", f"{line!r}: {missing!r} is not a token of the vocabulary"
            )
        merges.append((left, right))
    tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges, ignore_merges=whole_words))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(regex), behavior="isolated"),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = tk.decoders.ByteLevel()
    return tokenizer
