"""Tiny vocabularies of each tokenizer model (spm, wpm, ugm, rwkv, plamo2) for the session tests:
as GGUF metadata dicts, as vocabulary-only GGUF files written with gguf-py's GGUFWriter (so
llama.cpp loads them with ``vocab_only=True``), and as :class:`Vocab` objects.

``vocab_from_metadata`` is a test-only reading of the few keys the sessions use, with llama.cpp's
per-model defaults (``llama_vocab::impl::load``); the library's reader is ``load_vocab``.
"""

from __future__ import annotations

import pathlib
import struct
from collections.abc import Mapping

from onnx_struct.llm.tokenizer.vocab import (
    TYPE_BYTE,
    TYPE_CONTROL,
    TYPE_NORMAL,
    TYPE_UNDEFINED,
    TYPE_UNKNOWN,
    TYPE_UNUSED,
    TYPE_USER_DEFINED,
    Attr,
    Vocab,
)

MODELS = {"llama": "spm", "bert": "wpm", "t5": "ugm", "rwkv": "rwkv", "plamo2": "plamo2"}
TYPE_ATTR = {
    TYPE_UNKNOWN: Attr.UNKNOWN,
    TYPE_UNUSED: Attr.UNUSED,
    TYPE_NORMAL: Attr.NORMAL,
    TYPE_CONTROL: Attr.CONTROL,
    TYPE_USER_DEFINED: Attr.USER_DEFINED,
    TYPE_BYTE: Attr.BYTE,
    TYPE_UNDEFINED: Attr.UNDEFINED,
}
# llama.cpp's default special ids per model: (bos, eos, unk, sep, pad)
DEFAULT_IDS = {
    "spm": (1, 2, 0, None, None),
    "wpm": (101, None, 100, 102, 0),
    "ugm": (None, 1, 2, None, 0),
    "rwkv": (None, None, None, None, None),
    "plamo2": (1, 2, 0, None, 3),
}


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def vocab_from_metadata(metadata: Mapping[str, object]) -> Vocab:
    """A :class:`Vocab` from GGUF metadata, for the tests (the keys the sessions read)."""
    model = MODELS[str(metadata["tokenizer.ggml.model"])]
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(metadata["tokenizer.ggml.tokens"])]
    scores = [_f32(float(s)) for s in metadata.get("tokenizer.ggml.scores", [0.0] * len(tokens))]
    types = list(metadata.get("tokenizer.ggml.token_type", [TYPE_NORMAL] * len(tokens)))
    attrs = [int(TYPE_ATTR.get(int(t), Attr.UNDEFINED)) for t in types]
    bos, eos, unk, sep, pad = DEFAULT_IDS[model]
    bos = metadata.get("tokenizer.ggml.bos_token_id", bos)
    eos = metadata.get("tokenizer.ggml.eos_token_id", eos)
    unk = metadata.get("tokenizer.ggml.unknown_token_id", unk)
    sep = metadata.get("tokenizer.ggml.seperator_token_id", sep)
    lowercase = bool(metadata.get("tokenizer.ggml.normalizer.lowercase", True))
    charsmap = metadata.get("tokenizer.ggml.precompiled_charsmap", b"")
    return Vocab(
        model=model,
        tokenizer_model=str(metadata["tokenizer.ggml.model"]),
        pre=str(metadata.get("tokenizer.ggml.pre", "default")),
        tokens=tokens,
        scores=scores,
        attrs=attrs,
        token_to_id={t: i for i, t in enumerate(tokens)},
        merges={},
        bos=bos,
        eos=eos,
        unk=unk,
        sep=sep,
        pad=pad,
        add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", model == "spm")),
        remove_extra_whitespaces=bool(metadata.get("tokenizer.ggml.remove_extra_whitespaces", False)),
        lowercase=lowercase,
        strip_accents=bool(metadata.get("tokenizer.ggml.normalizer.strip_accents", lowercase)),
        precompiled_charsmap=bytes(bytearray(int(b) & 0xFF for b in charsmap)),
    )


def gguf_metadata(path: pathlib.Path) -> dict[str, object]:
    """The tokenizer keys of a GGUF file, decoded with gguf-py's reader."""
    import gguf  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    reader = gguf.GGUFReader(str(path))
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                out[key] = [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
            elif key == "tokenizer.ggml.precompiled_charsmap":
                out[key] = b"".join(bytes(field.parts[i]) for i in field.data)
            else:
                out[key] = np.concatenate([field.parts[i] for i in field.data]).tolist() if len(field.data) else []
        elif kind == gguf.GGUFValueType.STRING:
            out[key] = bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
        else:
            out[key] = field.parts[field.data[0]].tolist()[0]
    return out


def write_vocab_gguf(path: pathlib.Path, metadata: Mapping[str, object]) -> None:
    """A vocabulary-only GGUF file (llama architecture hyper-parameters, no tensors)."""
    import gguf  # noqa: PLC0415

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-vocab")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(4)
    for key, value in metadata.items():
        if key == "tokenizer.ggml.tokens":
            w.add_token_list(list(value))
        elif key == "tokenizer.ggml.scores":
            w.add_token_scores([float(v) for v in value])
        elif key == "tokenizer.ggml.token_type":
            w.add_token_types([int(v) for v in value])
        elif key == "tokenizer.ggml.precompiled_charsmap":
            w.add_precompiled_charsmap(bytes(value))
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            raise TypeError(key)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _byte_pieces() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(256)]


def spm_metadata(pieces: Mapping[str, float], *, byte_pieces: bool = True, unk: bool = True) -> dict[str, object]:
    """An SPM vocabulary: <unk>, <s>, </s>, the 256 byte pieces (optional), then ``pieces`` with
    their scores (control, byte and normal types as llama.cpp's converter writes them)."""
    tokens = ["<unk>" if unk else "<unk-absent>", "<s>", "</s>"]
    types = [TYPE_UNKNOWN if unk else TYPE_NORMAL, TYPE_CONTROL, TYPE_CONTROL]
    scores = [0.0, 0.0, 0.0]
    if byte_pieces:
        tokens += _byte_pieces()
        types += [TYPE_BYTE] * 256
        scores += [0.0] * 256
    for piece, score in pieces.items():
        tokens.append(piece)
        types.append(TYPE_NORMAL)
        scores.append(score)
    out: dict[str, object] = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    if unk:
        out["tokenizer.ggml.unknown_token_id"] = 0
    return out


def wpm_metadata(words: list[str], *, lowercase: bool | None = None) -> dict[str, object]:
    """A WordPiece vocabulary in llama.cpp's form ([PAD], [UNK], [CLS], [SEP], [MASK], then
    ``words``: a word start carries U+2581, a continuation none, as the converter writes BERT's ``##``)."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    types = [TYPE_CONTROL] * 5 + [TYPE_NORMAL] * len(words)
    out: dict[str, object] = {
        "tokenizer.ggml.model": "bert",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.padding_token_id": 0,
        "tokenizer.ggml.unknown_token_id": 1,
        "tokenizer.ggml.bos_token_id": 2,
        "tokenizer.ggml.seperator_token_id": 3,
        "tokenizer.ggml.mask_token_id": 4,
    }
    if lowercase is not None:
        out["tokenizer.ggml.normalizer.lowercase"] = lowercase
    return out


def ugm_metadata(
    pieces: Mapping[str, float],
    *,
    user_defined: tuple[str, ...] = (),
    charsmap: bytes = b"",
    add_space_prefix: bool = True,
    remove_extra_whitespaces: bool = True,
) -> dict[str, object]:
    """A Unigram (T5) vocabulary: <pad>, </s>, <unk>, then the user-defined pieces (score 0),
    then ``pieces`` with their log-probability scores."""
    tokens = ["<pad>", "</s>", "<unk>", *user_defined, *pieces]
    types = [TYPE_CONTROL, TYPE_CONTROL, TYPE_UNKNOWN] + [TYPE_USER_DEFINED] * len(user_defined)
    types += [TYPE_NORMAL] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [0.0] * len(user_defined) + list(pieces.values())
    out: dict[str, object] = {
        "tokenizer.ggml.model": "t5",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.padding_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.unknown_token_id": 2,
        "tokenizer.ggml.add_space_prefix": add_space_prefix,
        "tokenizer.ggml.remove_extra_whitespaces": remove_extra_whitespaces,
    }
    if charsmap:
        out["tokenizer.ggml.precompiled_charsmap"] = charsmap
    return out


def rwkv_escape(data: bytes) -> str:
    """A token's bytes in the RWKV vocabulary's escaped form (the inverse of llama_unescape_rwkv_token)."""
    out = []
    for b in data:
        if b == 0x5C:
            out.append("\\\\")
        elif b == 0x0A:
            out.append("\\n")
        elif b == 0x09:
            out.append("\\t")
        elif b == 0x0D:
            out.append("\\r")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def rwkv_metadata(pieces: list[bytes], *, all_bytes: bool = True) -> dict[str, object]:
    """An RWKV vocabulary: <s> (id 0, as RWKV's), the 256 single bytes (optional), then ``pieces``."""
    raw = [b"<s>"] + ([bytes([b]) for b in range(256)] if all_bytes else [])
    raw += [p for p in dict.fromkeys(pieces) if p not in raw]  # llama.cpp refuses duplicated texts
    tokens = [rwkv_escape(p) for p in raw]
    return {
        "tokenizer.ggml.model": "rwkv",
        "tokenizer.ggml.pre": "rwkv-world",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [TYPE_CONTROL] + [TYPE_NORMAL] * (len(tokens) - 1),
    }


def plamo2_metadata(pieces: Mapping[str, float]) -> dict[str, object]:
    """A PLaMo-2 vocabulary: unk, bos, eos, pad, the 256 byte pieces, then ``pieces`` with scores."""
    tokens = ["<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>", "<|plamo:pad|>", *_byte_pieces(), *pieces]
    types = [TYPE_CONTROL] * 4 + [TYPE_BYTE] * 256 + [TYPE_NORMAL] * len(pieces)
    scores = [0.0] * 260 + list(pieces.values())
    return {
        "tokenizer.ggml.model": "plamo2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.padding_token_id": 3,
    }


# the user-defined ids of a vocabulary, longest first, by id(vocab) (the entry holds the vocabulary,
# so an id is not reused while cached)
_USER_DEFINED: dict[int, tuple[Vocab, list[int]]] = {}


def user_defined_partition(vocab: Vocab, text: str) -> list[str | int]:
    """llama.cpp's special-token partition with parse_special false (the test data's setting):
    user-defined tokens, longest first, split out of the text wherever they occur."""
    cached = _USER_DEFINED.get(id(vocab))
    if cached is not None and cached[0] is vocab:
        specials = cached[1]
    else:
        user = int(Attr.USER_DEFINED)
        found = (i for i, a in enumerate(vocab.attrs) if a & user)
        specials = sorted(found, key=lambda i: -len(vocab.tokens[i].encode()))
        _USER_DEFINED[id(vocab)] = (vocab, specials)
    fragments: list[str | int] = [text] if text else []
    for special in specials:
        piece, out = vocab.tokens[special], []
        for fragment in fragments:
            if isinstance(fragment, int):
                out.append(fragment)
                continue
            parts = fragment.split(piece)
            for k, part in enumerate(parts):
                if k:
                    out.append(special)
                if part:
                    out.append(part)
        fragments = out
    return fragments


def encode_raw(vocab: Vocab, session, text: str) -> list[int]:
    """llama_tokenize(text, add_special=False, parse_special=False) over ``session``: the
    partition, then for SPM the space prefix after a special token or at the start and ' '
    escaped to U+2581."""
    out: list[int] = []
    prev_special = True
    for fragment in user_defined_partition(vocab, text):
        if isinstance(fragment, int):
            out.append(fragment)
            prev_special = True
            continue
        if vocab.model == "spm":
            fragment = (" " if vocab.add_space_prefix and prev_special else "") + fragment
            fragment = fragment.replace(" ", "\u2581")
        out.extend(session.tokenize(fragment))
        prev_special = False
    return out


def precompiled_charsmap(mapping: Mapping[str, str]) -> bytes:
    """A precompiled charsmap (SentencePiece's normalizer blob) mapping each key's UTF-8 bytes to
    its replacement: a 4-byte XCDA size, the XOR-compressed double array, then the NUL-terminated
    replacement strings. Built here from its definition (a node's children sit at
    ``index ^ base(index) ^ byte``, its value at ``index ^ base(index)`` with bit 31 set), not with
    SentencePiece's builder."""
    strings = bytearray()
    trie: dict = {}
    for key, replacement in mapping.items():
        node = trie
        for b in key.encode():
            node = node.setdefault(b, {})
        node[None] = len(strings)
        strings += replacement.encode() + b"\0"
    entries: dict[int, int] = {}
    used = {0}
    pending = [(0, trie)]
    while pending:
        index, node = pending.pop()
        labels = [b for b in node if b is not None]
        offset = 1
        while any(offset ^ c in used for c in labels) or offset in used:
            offset += 1
        used.add(offset)
        base = index ^ offset
        assert base < 1 << 21
        entries[index] = entries.get(index, 0) | (base << 10)
        if None in node:
            entries[offset] = (1 << 31) | node[None]
        for c in labels:
            child = offset ^ c
            used.add(child)
            leaf = 1 << 8 if None in node[c] else 0
            entries[child] = leaf | c
            pending.append((child, node[c]))
    size = (max(entries) | 0xFF) + 1  # every index ^ byte stays inside the array
    array = struct.pack(f"<{size}I", *[entries.get(i, 0) for i in range(size)])
    return struct.pack("<I", len(array)) + array + bytes(strings)
