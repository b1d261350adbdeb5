"""A GGUF vocabulary as llama.cpp's ``llama_vocab::impl::load`` reads it: the data every tokenizer
model (``spm``, ``bpe``, ``wpm``, ``ugm``, ``rwkv``, ``plamo2``) works from.

``load_vocab(metadata)`` builds a :class:`Vocab` from decoded GGUF metadata; each model module
builds its session from a :class:`Vocab` alone.
"""

from __future__ import annotations

import dataclasses
import enum

# llama.cpp's llama_token_type (the values of tokenizer.ggml.token_type)
TYPE_UNDEFINED, TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = range(7)


class Attr(enum.IntFlag):
    """llama.cpp's llama_token_attr: what a token is and how special-token matching treats it."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9


@dataclasses.dataclass
class Vocab:
    """Everything a tokenizer session reads, as llama.cpp holds it after loading.

    ``model`` is llama.cpp's vocabulary type: ``"spm"`` (tokenizer.ggml.model ``llama``),
    ``"bpe"`` (``gpt2`` and its variants), ``"wpm"`` (``bert``), ``"ugm"`` (``t5``), ``"rwkv"``,
    ``"plamo2"``; ``tokenizer_model`` is the metadata's own string. ``pre`` is the canonical
    pre-tokenizer type name (see ``pre_types.py``; ``"default"`` where the file names none).
    Token ids index ``tokens``, ``scores`` and ``attrs``.
    """

    model: str
    tokenizer_model: str
    pre: str
    tokens: list[str]
    scores: list[float]
    attrs: list[int]  # Attr bits per token
    token_to_id: dict[str, int]  # the last of duplicated pieces, as llama.cpp's map assignment
    merges: dict[tuple[str, str], int]  # BPE ranks (empty for other models)
    # special ids: None where the vocabulary has none (LLAMA_TOKEN_NULL)
    bos: int | None = None
    eos: int | None = None
    eot: int | None = None
    eom: int | None = None
    unk: int | None = None
    sep: int | None = None
    pad: int | None = None
    mask: int | None = None
    nl: int | None = None  # linefeed_id
    fim_pre: int | None = None
    fim_suf: int | None = None
    fim_mid: int | None = None
    fim_pad: int | None = None
    fim_rep: int | None = None
    fim_sep: int | None = None
    eog: frozenset[int] = frozenset()  # every end-of-generation id
    # tokenizer flags (llama.cpp's names)
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    add_space_prefix: bool = False
    ignore_merges: bool = False
    clean_spaces: bool = False
    remove_extra_whitespaces: bool = False
    escape_whitespaces: bool = True
    treat_whitespace_as_suffix: bool = False
    lowercase: bool = True  # BERT normalizer options (wpm)
    strip_accents: bool = True
    precompiled_charsmap: bytes = b""  # ugm (tokenizer.ggml.precompiled_charsmap)
    # control, user-defined and unknown ids, longest text first: the special-token partition's order
    special_tokens: list[int] = dataclasses.field(default_factory=list)

    def is_byte(self, token: int) -> bool:
        return bool(self.attrs[token] & Attr.BYTE)
