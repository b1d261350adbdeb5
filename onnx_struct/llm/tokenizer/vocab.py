"""A GGUF vocabulary as llama.cpp's ``llama_vocab::impl::load`` reads it: the data every tokenizer
model (``spm``, ``bpe``, ``wpm``, ``ugm``, ``rwkv``, ``plamo2``) works from.

``load_vocab(metadata)`` builds a :class:`Vocab` from decoded GGUF metadata; each model module
builds its session from a :class:`Vocab` alone.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Mapping

import numpy as np

from onnx_struct.errors import ValidationError

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
    # BPE ranks by merge line "LEFT RIGHT" (the file's own strings: a pair's rank is merge_rank's);
    # empty for other models
    merges: dict[str, int]
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


# tokenizer.ggml.model -> (vocabulary type, llama.cpp's default special ids, flags set for the type)
_MODELS: dict[str, tuple[str, dict[str, int | None], dict[str, bool]]] = {
    "llama": (
        "spm",
        {"bos": 1, "eos": 2, "unk": 0},
        {"add_space_prefix": True, "clean_spaces": False, "add_bos": True, "add_eos": False},
    ),
    "bert": (
        "wpm",
        {"bos": 101, "unk": 100, "sep": 102, "pad": 0, "mask": 103},
        {"add_space_prefix": False, "clean_spaces": True, "add_bos": True, "add_eos": False, "add_sep": True},
    ),
    "gpt2": ("bpe", {"bos": 11, "eos": 11}, {}),
    "hybriddna": ("bpe", {"bos": 11, "eos": 11}, {}),
    "whitespace": ("bpe", {"bos": 11, "eos": 11}, {}),
    "gemma4": ("bpe", {}, {}),
    "t5": ("ugm", {"eos": 1, "unk": 2, "pad": 0}, {"add_bos": False, "add_eos": True}),
    "rwkv": ("rwkv", {}, {"add_space_prefix": False, "clean_spaces": False, "add_bos": False, "add_eos": False}),
    "plamo2": ("plamo2", {"bos": 1, "eos": 2, "unk": 0, "pad": 3}, {}),
}
# metadata key -> Vocab field of each special id llama.cpp reads (the deprecated prefix/suffix/
# middle keys last: they override the fim ones)
_SPECIAL_KEYS = {
    "bos": "bos",
    "eos": "eos",
    "eot": "eot",
    "eom": "eom",
    "unknown": "unk",
    "seperator": "sep",
    "padding": "pad",
    "mask": "mask",
    "fim_pre": "fim_pre",
    "fim_suf": "fim_suf",
    "fim_mid": "fim_mid",
    "fim_pad": "fim_pad",
    "fim_rep": "fim_rep",
    "fim_sep": "fim_sep",
    "prefix": "fim_pre",
    "suffix": "fim_suf",
    "middle": "fim_mid",
}
_TYPE_ATTRS = {
    TYPE_UNKNOWN: Attr.UNKNOWN,
    TYPE_UNUSED: Attr.UNUSED,
    TYPE_NORMAL: Attr.NORMAL,
    TYPE_CONTROL: Attr.CONTROL,
    TYPE_USER_DEFINED: Attr.USER_DEFINED,
    TYPE_BYTE: Attr.BYTE,
}
# token texts llama.cpp takes for a special id the file does not give (the first found; here the
# lowest id, where llama.cpp's hash-map order picks one), each made a control token
_TEXT_IDS = {
    "eot": (
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
        "_<EOT>", "[EOT]", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>",
    ),
    "eom": ("<|eom_id|>",),
    "fim_pre": (
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>",
        "<|code_prefix|>", "<|prefix|>",
    ),
    "fim_suf": (
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>", "<SUF>", "\u2581<SUF>",
        "<|code_suffix|>", "<|suffix|>",
    ),
    "fim_mid": (
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>",
        "<|code_middle|>", "<|middle|>",
    ),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}  # fmt: skip
# token texts that end generation (llama.cpp's special_eog_ids, built from the texts)
EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
))  # fmt: skip
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")  # gpt-oss: user-defined
DNA_MARKER = "\ue000"


def load_vocab(metadata: Mapping[str, object]) -> Vocab:
    """The vocabulary of decoded GGUF metadata, as ``llama_vocab::impl::load`` builds it.

    Args:
        metadata: GGUF key -> value (``decode_metadata``'s result, or gguf-py's values).

    Returns:
        The :class:`Vocab`: tokens, scores, attributes, merges, special ids (llama.cpp's defaults
        per model, then the file's), the end-of-generation set and the tokenizer flags.

    Raises:
        ValidationError: the tokenizer model is missing, unknown, ``no_vocab``/``none`` (no
            tokenizer) or ``test``; the pre-tokenizer is unknown; a key llama.cpp reads holds the
            wrong type or too few entries (the path names the key).
    """
    from onnx_struct.llm.tokenizer.pre_types import BPE_DEFAULT_FLAGS, resolve_pre  # noqa: PLC0415 - one layer

    name = metadata.get("tokenizer.ggml.model")
    if name is None:
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.model']", "missing: the file has no tokenizer", code="missing_metadata"
        )
    if not isinstance(name, str):
        raise ValidationError("gguf.kv['tokenizer.ggml.model']", f"{name!r} is not a string")
    if name in ("no_vocab", "none"):
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.model']",
            f"{name!r}: the file has no vocabulary to tokenize with",
            code="unsupported_tokenizer",
        )
    if name not in _MODELS:
        known = ", ".join(sorted(_MODELS))
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.model']",
            f"tokenizer model {name!r} is not one llama.cpp reads ({known}; 'test' is its test stub)",
            code="unsupported_tokenizer",
        )
    model, defaults, type_flags = _MODELS[name]
    specials: dict[str, int | None] = {field: None for field in set(_SPECIAL_KEYS.values())}
    specials.update(defaults)
    flags: dict[str, bool] = {}
    pre_name = metadata.get("tokenizer.ggml.pre")
    lowercase = True
    merges: dict[str, int] = {}
    pre = "default"
    if model == "bpe":
        if name == "gemma4":
            pre_name = "gemma4"
        flags.update(BPE_DEFAULT_FLAGS)
        pre, pre_flags = resolve_pre(pre_name)
        for key, value in pre_flags.items():
            if key == "bos":
                specials["bos"] = None
            elif key == "lowercase":
                lowercase = bool(value)
            else:
                flags[key] = bool(value)
        if "tokenizer.ggml.merges" in metadata or pre != "kimi_k2":
            merges = _merges(metadata)
    else:
        flags.update(type_flags)
    flags["add_space_prefix"] = _flag(metadata, "tokenizer.ggml.add_space_prefix", flags.get("add_space_prefix", False))
    flags["remove_extra_whitespaces"] = _flag(metadata, "tokenizer.ggml.remove_extra_whitespaces", False)

    tokens = _strings(metadata, "tokenizer.ggml.tokens")
    n = len(tokens)
    # The passes over every token iterate in C (map, all, numpy): a 262,144-token vocabulary's
    # Python loops took 0.2 s of a start, these take milliseconds.
    tokens = list(tokens) if all(tokens) else [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    scores = _numbers(metadata, "tokenizer.ggml.scores", n)
    types = _integers(metadata, "tokenizer.ggml.token_type", n)
    type_attrs = {t: int(a) for t, a in _TYPE_ATTRS.items()}
    attrs = list(map(type_attrs.get, types, itertools.repeat(0))) if types is not None else [int(Attr.NORMAL)] * n
    token_to_id = {t: i for i, t in enumerate(tokens)}  # the last of duplicated pieces, as llama.cpp's map
    if name == "hybriddna" and "<oov>" in token_to_id:  # k-mers decode without their marker
        tokens = [
            t[: -len(DNA_MARKER)] if i > token_to_id["<oov>"] and len(t) > 1 and t.endswith(DNA_MARKER) else t
            for i, t in enumerate(tokens)
        ]

    for field, value in specials.items():
        if value is not None and value >= n:
            specials[field] = None  # llama.cpp: a default id out of range is disabled
    for key, field in _SPECIAL_KEYS.items():
        value = _token_key(metadata, f"tokenizer.ggml.{key}_token_id")
        if value is not None and value < n:  # llama.cpp keeps the default for an id past the vocabulary
            specials[field] = value
    for key in ("add_bos", "add_eos", "add_sep"):
        flags[key] = _flag(metadata, f"tokenizer.ggml.{key}_token", flags.get(key, False))
    if pre == "gemma4":
        flags["add_bos"] = True  # llama.cpp overrides it for Gemma 4
    lowercase = _flag(metadata, "tokenizer.ggml.normalizer.lowercase", lowercase)
    strip_accents = _flag(metadata, "tokenizer.ggml.normalizer.strip_accents", lowercase)
    charsmap = _charsmap(metadata) if model == "ugm" else b""

    for field, texts in _TEXT_IDS.items():
        if specials[field] is None:
            found = min((token_to_id[t] for t in texts if t in token_to_id), default=None)
            if found is not None:
                specials[field] = found
                attrs[found] |= Attr.CONTROL
    control, unused = int(Attr.CONTROL), int(Attr.UNUSED)
    for i in ids_with(attrs, control):
        if "unused" in tokens[i]:
            attrs[i] |= unused
    eog = _eog(specials, token_to_id, tokens, attrs)
    for text in _ALWAYS_RENDERED:
        if text in token_to_id:
            attrs[token_to_id[text]] = int(Attr.USER_DEFINED)

    matched = int(Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN)
    special_ids = ids_with(attrs, matched)
    # longest text first (llama.cpp's std::sort leaves equal lengths in no set order: here by id)
    special_ids.sort(key=lambda i: -len(tokens[i].encode("utf-8")))
    _name_attrs(metadata, token_to_id, attrs, special_ids)
    return Vocab(
        model=model,
        tokenizer_model=name,
        pre=pre,
        tokens=tokens,
        scores=scores,
        attrs=attrs,
        token_to_id=token_to_id,
        merges=merges,
        eog=frozenset(eog),
        lowercase=lowercase,
        strip_accents=strip_accents,
        precompiled_charsmap=charsmap,
        special_tokens=special_ids,
        **specials,
        **{k: v for k, v in flags.items() if k in _FLAG_FIELDS},
    )


def ids_with(attrs: list[int], mask: int) -> list[int]:
    """The ids whose attributes have a bit of ``mask``, in order (numpy: 5 ms for 262,144 tokens)."""
    return np.flatnonzero(np.fromiter(attrs, np.int64, len(attrs)) & int(mask)).tolist()


_FLAG_FIELDS = {
    "add_bos",
    "add_eos",
    "add_sep",
    "add_space_prefix",
    "ignore_merges",
    "clean_spaces",
    "remove_extra_whitespaces",
    "escape_whitespaces",
    "treat_whitespace_as_suffix",
}


def _eog(specials: dict[str, int | None], token_to_id: dict[str, int], tokens: list[str], attrs: list[int]) -> set[int]:
    """llama.cpp's special_eog_ids: the fim pad/rep/sep ids, every token with an end-of-generation
    text, eos/eot/eom; then ``<|end|>`` dropped beside ``<|return|>`` + ``<|call|>`` (gpt-oss) or
    ``<|calls|>`` + ``<|flush|>`` (solar-open), ``</s>`` beside ``<|tool_response>`` or
    ``<|plamo:eos|>`` (a normal token there)."""
    eog = {specials[f] for f in ("fim_pad", "fim_rep", "fim_sep") if specials[f] is not None}
    for text in EOG_TEXTS:
        if text in token_to_id:
            eog.add(token_to_id[text])
            attrs[token_to_id[text]] |= Attr.CONTROL
    eog |= {specials[f] for f in ("eos", "eot", "eom") if specials[f] is not None}
    texts = {tokens[i]: i for i in eog}
    has_call = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
        eog.discard(texts["<|end|>"])
        attrs[texts["<|end|>"]] = int(Attr.USER_DEFINED)
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        eog.discard(texts["</s>"])
        attrs[texts["</s>"]] = int(Attr.NORMAL)
    return eog


def _name_attrs(
    metadata: Mapping[str, object], token_to_id: dict[str, int], attrs: list[int], specials: list[int]
) -> None:
    """The attributes llama.cpp sets by the file's names: ``<mask>`` takes the whitespace before it
    (jina v2 de/es/code, nomic-bert-moe, jina-bert-v3), phi-3's special tokens and ``</s>`` the
    whitespace after them (not ``<unk>``, ``<s>``, ``<|endoftext|>``), modern-bert's ``[MASK]`` the
    whitespace before it."""
    pre = metadata.get("tokenizer.ggml.pre")
    pre = pre if isinstance(pre, str) else ""
    arch = metadata.get("general.architecture")
    arch = arch if isinstance(arch, str) else ""
    model_name = metadata.get("general.name")
    model_name = model_name.lower() if isinstance(model_name, str) else ""
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in token_to_id:
            attrs[token_to_id["<mask>"]] |= Attr.LSTRIP
    elif "phi-3" in model_name or "phi3" in model_name:
        for i in specials:
            attrs[i] |= Attr.RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if text not in token_to_id:
                raise ValidationError(
                    "gguf.kv['tokenizer.ggml.tokens']", f"a phi-3 vocabulary without {text!r} (llama.cpp refuses it)"
                )
            i = token_to_id[text]
            attrs[i] = attrs[i] | Attr.RSTRIP if on else attrs[i] & ~Attr.RSTRIP
    elif "modern-bert" in model_name and "[MASK]" in token_to_id:
        attrs[token_to_id["[MASK]"]] |= Attr.LSTRIP


def _all_of(values: list, kinds: tuple[type, ...], types: set[type] | None = None) -> bool:
    """Every value an instance of ``kinds`` and none a bool: first by the set of the values' exact
    types (``types``, or one pass in C: a 262,144-token vocabulary's lists in milliseconds, where
    the loop below took 0.1 s each), element by element only when another type is among them."""
    if (set(map(type, values)) if types is None else types) <= set(kinds):
        return True
    return all(isinstance(v, kinds) and not isinstance(v, bool) for v in values)


def _strings(metadata: Mapping[str, object], key: str) -> list[str]:
    value = metadata.get(key)
    if not isinstance(value, list) or not value or not _all_of(value, (str,)):
        raise ValidationError(
            f"gguf.kv[{key!r}]", "missing or not a non-empty array of strings", code="missing_metadata"
        )
    return value


def _numbers(metadata: Mapping[str, object], key: str, n: int) -> list[float]:
    value = metadata.get(key)
    if value is None:
        return [0.0] * n
    types = set(map(type, value)) if isinstance(value, list) else None
    if types is None or not _all_of(value, (int, float), types):
        raise ValidationError(f"gguf.kv[{key!r}]", "must be an array of numbers (FLOAT32 or INT32)")
    if len(value) < n:
        raise ValidationError(f"gguf.kv[{key!r}]", f"must hold one score per token ({n})", code="missing_metadata")
    return value[:n] if types == {float} else [float(v) for v in value[:n]]


def _integers(metadata: Mapping[str, object], key: str, n: int) -> list[int] | None:
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not _all_of(value, (int,)):
        raise ValidationError(f"gguf.kv[{key!r}]", "must be an array of integers (INT32)")
    if len(value) < n:
        raise ValidationError(f"gguf.kv[{key!r}]", f"must hold {n} integers, one per token", code="missing_metadata")
    return value[:n]


def _flag(metadata: Mapping[str, object], key: str, default: bool) -> bool:
    """A BOOL key: any other type is refused, as llama.cpp refuses a key of the wrong type (the
    truth of the string "false" would silently be True)."""
    value = metadata.get(key, default)
    if not isinstance(value, bool):
        raise ValidationError(f"gguf.kv[{key!r}]", f"{value!r} is not a boolean")
    return value


def _token_key(metadata: Mapping[str, object], key: str) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"gguf.kv[{key!r}]", f"{value!r} is not a token id (UINT32)")
    return value


def _merges(metadata: Mapping[str, object]) -> dict[str, int]:
    """BPE ranks: line i "LEFT RIGHT" (cut at the first space after the first character) has rank
    i; the first of repeated pairs keeps its rank, a line without a space pairs nothing (llama.cpp
    stores it as the pair of empty strings, which no two symbols form). Keyed by the line itself:
    a pair is one line and a line one pair (:func:`merge_rank`), and the file's strings are kept
    instead of two new ones and a tuple per merge (10 MiB for 49k merges)."""
    lines = metadata.get("tokenizer.ggml.merges")
    if not isinstance(lines, list) or not _all_of(lines, (str,)):
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.merges']", "missing or not an array of strings", code="missing_metadata"
        )
    ranks: dict[str, int] = {}
    for i, line in enumerate(lines):
        if line.find(" ", 1) > 0:
            ranks.setdefault(line, i)
    return ranks


def merge_pairs(ranks: Mapping[str, int]) -> list[tuple[str, str]]:
    """The merges as (left, right) pairs, by rank (each line cut as :func:`_merges` cuts it)."""
    lines = sorted(ranks, key=ranks.__getitem__)
    return [(line[: line.find(" ", 1)], line[line.find(" ", 1) + 1 :]) for line in lines]


def merge_rank(ranks: Mapping[str, int], left: str, right: str) -> int | None:
    """The rank of merging ``left`` and ``right`` (two non-empty symbols), or None. The line
    ``left + " " + right`` is cut back into this pair exactly when ``left`` has no space after its
    first character; otherwise no line names the pair."""
    if left.find(" ", 1) >= 0:
        return None
    return ranks.get(f"{left} {right}")


def _charsmap(metadata: Mapping[str, object]) -> bytes:
    value = metadata.get("tokenizer.ggml.precompiled_charsmap")
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    elif isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and -128 <= v < 256 for v in value
    ):
        data = bytes(v & 0xFF for v in value)
    else:
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.precompiled_charsmap']", "must be an array of bytes (INT8/UINT8)"
        )
    if len(data) < 4 or int.from_bytes(data[:4], "little") + 4 >= len(data):
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.precompiled_charsmap']",
            "its header's blob size runs past its end (llama.cpp refuses it)",
        )
    return data
