"""A GGUF vocabulary as a Hugging Face ``tokenizers`` tokenizer: ``tokenizer.json``,
``tokenizer_config.json`` and ``chat_template.jinja``, the folder ``transformers``'
``PreTrainedTokenizerFast`` and onnxruntime-genai load.

Built from the parsed :class:`~onnx_struct.llm.tokenizer.vocab.Vocab` (never from a second reading
of the metadata), so the ids are the ones :class:`~onnx_struct.llm.tokenizer.tokenizer.Tokenizer`
gives:

- ``spm`` (``tokenizer.ggml.model`` ``llama``): a BPE model with byte fallback whose merges are
  the vocabulary's pieces ranked by score (SentencePiece's merge order: the pair whose
  concatenation scores highest first), a normalizer that prefixes ``▁`` (where
  ``add_space_prefix``) and escapes spaces, no pre-tokenizer: the text is one word, as llama.cpp's
  SPM session sees it.
- ``bpe`` (``gpt2`` and the byte-level variants): the file's merges by rank, llama.cpp's regex
  list of the pre type as a sequence of ``Split(..., "isolated")`` pre-tokenizers, then GPT-2's
  byte-level mapping.

Control and unknown tokens become special added tokens, user-defined ones plain added tokens (HF
matches both in raw text; ``encode_special_tokens`` leaves the special ones as text, as
llama.cpp's ``parse_special=False`` does). Everything else (other tokenizer models, pre types whose
regexes HF's engine reads differently, pieces a JSON vocabulary cannot hold twice) is refused with
a ValidationError naming it: a tokenizer that gave other ids would be worse than none.
"""

from __future__ import annotations

import json
import os
import pathlib

from onnx_struct.errors import ValidationError
from onnx_struct.llm.tokenizer.pre_types import BYTE_ENCODE, REGEX_LISTS
from onnx_struct.llm.tokenizer.tokenizer import Tokenizer
from onnx_struct.llm.tokenizer.vocab import Attr, Vocab, merge_pairs

SPACE = "\u2581"
# Pre types HF's regex engine (Oniguruma) cannot split as llama.cpp does, refused by name: afmoe
# names a category it lacks (\p{AFMoE_digits}); kimi_k2 is a hand-written splitter in llama.cpp;
# youtu and tiny_aya cut "HelloWorld" in two where llama.cpp's case classes keep it whole;
# deepseek_llm and deepseek_coder's \s differs on U+2003 and U+3000. tests/test_genai_tokenizer.py
# compares every other pre type's splits with ours.
UNEXPRESSIBLE_PRE_TYPES = frozenset({"afmoe", "kimi_k2", "youtu", "tiny_aya", "deepseek_llm", "deepseek_coder"})
_BPE_MODELS = ("gpt2",)  # byte-level BPE tokenizer models built here (hybriddna, whitespace, gemma4: not)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def hf_tokenizer(tokenizer: Tokenizer):
    """The ``tokenizers.Tokenizer`` that gives ``tokenizer``'s ids.

    Args:
        tokenizer: a GGUF vocabulary's tokenizer (``load_tokenizer(model)``).

    Returns:
        A ``tokenizers.Tokenizer``: ``encode(text).ids`` equals ``tokenizer.encode(text,
        special=True)``; with ``encode_special_tokens = True``, ``tokenizer.encode(text)``.

    Raises:
        ValidationError: the tokenizer model or pre type has no exact HF equivalent
            (``unsupported_tokenizer``), or a piece is in the vocabulary twice.
    """
    import tokenizers  # noqa: PLC0415 - optional dependency (the llm extra)

    vocab = tokenizer.vocab
    _check_expressible(vocab)
    ids = _unique_ids(vocab)
    if vocab.model == "spm":
        hf = _spm(tokenizers, vocab, ids)
    else:
        hf = _byte_level_bpe(tokenizers, vocab, ids)
    hf.add_tokens([_added(tokenizers, vocab, i) for i in _added_ids(vocab, special=False)])
    hf.add_special_tokens([_added(tokenizers, vocab, i) for i in _added_ids(vocab, special=True)])
    post = _post_processor(tokenizers, vocab)
    if post is not None:
        hf.post_processor = post
    return hf


def _check_expressible(vocab: Vocab) -> None:
    where = "gguf.kv['tokenizer.ggml.model']"
    if vocab.model == "bpe" and vocab.tokenizer_model not in _BPE_MODELS:
        raise ValidationError(
            where, _no_hf(f"the {vocab.tokenizer_model!r} BPE tokenizer"), code="unsupported_tokenizer"
        )
    if vocab.model not in ("spm", "bpe"):
        raise ValidationError(
            where, _no_hf(f"the {vocab.tokenizer_model!r} tokenizer ({vocab.model})"), code="unsupported_tokenizer"
        )
    if vocab.model == "bpe" and (vocab.pre in UNEXPRESSIBLE_PRE_TYPES or not BYTE_ENCODE[vocab.pre]):
        raise ValidationError(
            "gguf.kv['tokenizer.ggml.pre']",
            _no_hf(f"the pre-tokenizer type {vocab.pre!r}") + " (HF's regex engine splits its regexes differently)",
            code="unsupported_tokenizer",
        )


def _no_hf(what: str) -> str:
    return f"{what} has no exact Hugging Face tokenizers equivalent; no tokenizer.json is written"


def _unique_ids(vocab: Vocab) -> dict[str, int]:
    """piece -> id; a JSON vocabulary holds each piece once, so a repeated piece is refused."""
    if len(vocab.token_to_id) != len(vocab.tokens):
        first = next(i for i, t in enumerate(vocab.tokens) if vocab.token_to_id[t] != i)
        raise ValidationError(
            f"gguf.kv['tokenizer.ggml.tokens'][{first}]",
            f"the piece {vocab.tokens[first]!r} is also token {vocab.token_to_id[vocab.tokens[first]]}; "
            "a tokenizer.json vocabulary holds each piece once",
            code="unsupported_tokenizer",
        )
    return dict(vocab.token_to_id)


def _spm(tokenizers, vocab: Vocab, ids: dict[str, int]):
    from tokenizers import decoders, models, normalizers  # noqa: PLC0415 - optional dependency

    unk = vocab.tokens[vocab.unk] if vocab.unk is not None else None
    model = models.BPE(vocab=ids, merges=_spm_merges(vocab, ids), unk_token=unk, byte_fallback=True, fuse_unk=True)
    hf = tokenizers.Tokenizer(model)
    steps = [normalizers.Prepend(SPACE)] if vocab.add_space_prefix else []
    hf.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    strip = [decoders.Strip(" ", 1, 0)] if vocab.add_space_prefix else []
    hf.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(), *strip])
    return hf


def _spm_merges(vocab: Vocab, ids: dict[str, int]) -> list[tuple[str, str]]:
    """Every split of a piece into two pieces, ranked by the whole piece's score (highest first),
    ties by id: SentencePiece's rule "merge the adjacent pair whose concatenation scores highest"
    as BPE ranks. Byte pieces are never merge results (llama.cpp falls back to them last).

    Normal pieces sharing a score: SentencePiece then merges whichever pair is leftmost in the
    text. A fixed ranking expresses that only for runs of one character with every length from 2
    up (llama's "▁▁" ... "▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁" share a sentinel score): leftmost-first grows one
    chunk from the left to the longest run, which "longest run first, then (run minus one, one)"
    ranks reproduce. Any other tie is refused. Control and user-defined pieces share scores
    harmlessly: the special partition cuts them out of the text before any merge."""
    byte, normal = int(Attr.BYTE), int(Attr.NORMAL)
    candidates = []
    tied: dict[float, list[int]] = {}  # score -> the normal merge results that have it
    for piece, token in ids.items():
        if vocab.attrs[token] & byte or len(piece) < 2:
            continue
        splits = [(piece[:cut], piece[cut:]) for cut in range(1, len(piece))]
        splits = [(left, right) for left, right in splits if left in ids and right in ids]
        if splits and vocab.attrs[token] & normal:
            tied.setdefault(vocab.scores[token], []).append(token)
        candidates += [(token, left, right) for left, right in splits]
    runs = set()  # tied pieces ranked longest first
    for tokens in tied.values():
        if len(tokens) > 1:
            _check_tied_runs(vocab, tokens)
            runs.update(tokens)
    merges = [
        (-vocab.scores[t], -len(vocab.tokens[t]) if t in runs else 0, t, -len(left), left, right)
        for t, left, right in candidates
    ]
    merges.sort()
    return [(left, right) for *_, left, right in merges]


def _check_tied_runs(vocab: Vocab, tokens: list[int]) -> None:
    pieces = sorted((vocab.tokens[t] for t in tokens), key=len)
    char = pieces[0][0]
    lengths = [len(p) for p in pieces]
    if all(p == char * len(p) for p in pieces) and lengths == list(range(2, 2 + len(pieces))):
        return
    first, other = sorted(tokens)[:2]
    raise ValidationError(
        f"gguf.kv['tokenizer.ggml.scores'][{other}]",
        f"pieces {vocab.tokens[first]!r} and {vocab.tokens[other]!r} have the same score; SentencePiece then "
        "merges the leftmost pair first, which a tokenizer.json merge ranking cannot express",
        code="unsupported_tokenizer",
    )


def _byte_level_bpe(tokenizers, vocab: Vocab, ids: dict[str, int]):
    from tokenizers import Regex, decoders, models, pre_tokenizers  # noqa: PLC0415 - optional dependency

    merges = merge_pairs(vocab.merges)
    unk = vocab.tokens[vocab.unk] if vocab.unk is not None else None
    hf = tokenizers.Tokenizer(models.BPE(vocab=ids, merges=merges, unk_token=unk, ignore_merges=vocab.ignore_merges))
    splits = [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in REGEX_LISTS[vocab.pre]]
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]
    )
    hf.decoder = decoders.ByteLevel()
    return hf


def _added_ids(vocab: Vocab, *, special: bool) -> list[int]:
    """The ids llama.cpp's special partition matches: control and unknown tokens (special), or
    user-defined ones (always matched), in id order."""
    hidden = Attr.CONTROL | Attr.UNKNOWN
    return sorted(i for i in vocab.special_tokens if bool(vocab.attrs[i] & hidden) == special)


def _added(tokenizers, vocab: Vocab, token: int):
    attr = vocab.attrs[token]
    return tokenizers.AddedToken(
        vocab.tokens[token],
        special=bool(attr & (Attr.CONTROL | Attr.UNKNOWN)),
        normalized=False,
        lstrip=bool(attr & Attr.LSTRIP),
        rstrip=bool(attr & Attr.RSTRIP),
        single_word=False,
    )


def _post_processor(tokenizers, vocab: Vocab):
    """BOS / EOS around the text where the file says to add them (llama.cpp's add_special)."""
    from tokenizers import processors  # noqa: PLC0415 - optional dependency

    first = [vocab.bos] if vocab.add_bos and vocab.bos is not None else []
    last = [vocab.eos] if vocab.add_eos and vocab.eos is not None else []
    if not first and not last:
        return None
    names = [vocab.tokens[i] for i in first + last]
    single = " ".join([*names[: len(first)], "$A", *names[len(first) :]])
    pair = " ".join(
        [*names[: len(first)], "$A", *names[len(first) :], *names[: len(first)], "$B:1"] + names[len(first) :]
    )
    return processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(vocab.tokens[i], i) for i in dict.fromkeys(first + last)]
    )


def tokenizer_config(tokenizer: Tokenizer, *, context_length: int | None = None) -> dict[str, object]:
    """``tokenizer_config.json``: the special tokens by role and the framing flags, as
    ``PreTrainedTokenizerFast`` reads them.

    Args:
        tokenizer: the GGUF vocabulary's tokenizer.
        context_length: ``model_max_length`` (None: left out).

    Returns:
        The JSON object.
    """
    vocab = tokenizer.vocab
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": bool(vocab.add_bos and vocab.bos is not None),
        "add_eos_token": bool(vocab.add_eos and vocab.eos is not None),
        "clean_up_tokenization_spaces": bool(vocab.clean_spaces),
    }
    config.update(_special_map(vocab))
    if context_length is not None:
        config["model_max_length"] = context_length
    return config


def _special_map(vocab: Vocab) -> dict[str, str]:
    roles = {"bos_token": vocab.bos, "eos_token": vocab.eos, "unk_token": vocab.unk, "pad_token": vocab.pad}
    return {role: vocab.tokens[i] for role, i in roles.items() if i is not None}


def save_pretrained(
    tokenizer: Tokenizer, directory: str | os.PathLike, *, context_length: int | None = None, built=None
) -> list[pathlib.Path]:
    """Write ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and (where
    the GGUF file has one) ``chat_template.jinja`` into ``directory`` (created if absent).

    Args:
        tokenizer: the GGUF vocabulary's tokenizer (``load_tokenizer(model)``).
        directory: the folder to write.
        context_length: ``model_max_length`` in ``tokenizer_config.json`` (None: left out).
        built: :func:`hf_tokenizer`'s result for ``tokenizer`` when the caller has it already.

    Returns:
        The files written.

    Raises:
        ValidationError: as :func:`hf_tokenizer` (nothing is written then).
    """
    hf = built if built is not None else hf_tokenizer(tokenizer)
    folder = pathlib.Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / name for name in TOKENIZER_FILES]
    hf.save(str(written[0]))
    written[1].write_text(json.dumps(tokenizer_config(tokenizer, context_length=context_length), indent=2) + "\n")
    written[2].write_text(json.dumps(_special_map(tokenizer.vocab), indent=2) + "\n")
    template = (tokenizer.metadata or {}).get("tokenizer.chat_template")
    if isinstance(template, str) and template:
        written.append(folder / "chat_template.jinja")
        written[-1].write_text(template)
    return written
