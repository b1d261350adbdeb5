"""Structured fuzz target for the tokenizers (``onnx_struct.load_tokenizer(metadata)``: bpe, spm,
wpm, ugm, rwkv, plamo2): random texts (ASCII, whitespace runs, combining marks, astral characters,
the vocabulary's own special-token texts and pieces spliced in, byte-token look-alikes, long words)
through ``encode`` and random id lists (in range, out of range, negative, huge, not ints) through
``decode``. Only ValidationError may come out, and what is accepted must hold:

- every id ``encode`` gives is in [0, vocab_size), and encoding the same text again gives the same ids;
- ``decode`` refuses exactly the lists holding an id outside the vocabulary (or a non-int);
- byte-level BPE (every GPT-2 byte character a piece, no U+2581 escape) and SPM with all 256 byte
  pieces represent any text: with ``special=False`` and no added tokens, the pieces of
  ``encode(text)`` joined are ``text``'s bytes, and ``decode`` is that with llama.cpp's
  ``clean_spaces`` applied where the vocabulary sets it. For SPM the space ``encode`` prefixes is
  the one ``decode`` takes off the first piece (llama_detokenize's lstrip), so the text comes back
  whole. A user-defined token with LSTRIP/RSTRIP eats ASCII whitespace beside it by design
  (tokenizer_st_partition), so texts where one matches are not held to the round trip;
- the streamer's pieces put together are ``decode_bytes`` without ``clean_spaces`` (as text);
- no input takes more than ``BUDGET_SECONDS`` (a slow input is reported: quadratic work is a finding).

    python tests/fuzz/targets_tokenizer.py 1000000 [SEED] [--tiny]   # a campaign; prints the escapes
"""

from __future__ import annotations

import dataclasses
import glob
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx_struct  # noqa: E402
from onnx_struct import ValidationError  # noqa: E402
from onnx_struct.llm.tokenizer.bpe import CHAR_BYTES  # noqa: E402
from onnx_struct.llm.tokenizer.pre_types import BYTE_ENCODE, PRE_NAMES  # noqa: E402
from onnx_struct.llm.tokenizer.tokenizer import clean_spaces  # noqa: E402
from onnx_struct.llm.tokenizer.vocab import Attr  # noqa: E402

BUDGET_SECONDS = 1.0  # per input: the package's first encode and its decode, both ways (the checks not counted)
_timed = [0.0]  # seconds spent in those calls for the current input
# llama.cpp's vocabulary files, in the unpacked llama-cpp-python sdist CI names (README, .ci/run)
LLAMA_CPP_VOCABS = os.path.join(
    os.environ.get("ONNX_STRUCT_LLAMA_CPP_SOURCE", ""), "vendor", "llama.cpp", "models", "ggml-vocab-*.gguf"
)

WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c", "\xa0", "\u3000", "\u2028",
              "\x85", "\u200b", " \t \n ", "\u2581", "\u2581\u2581"]  # fmt: skip
MARKS = ["\u0301", "\u0308", "e\u0301", "\u20dd", "\u200d", "\ufeff", "\u0903", "\u05b0", "\u1ab0", "\u0345"]
OTHER = ["é", "ß", "İ", "ﬁ", "Å", "日本語", "한국어", "مرحبا", "नमस्ते", "ไทย", "Ελληνικά", "Ж", "\x00", "\x01",
         "\x7f", "\ufffd", "\uffff", "\ufdd0", "🙂", "𝔘", "\U0010ffff", "\U000e0001", "👩\u200d👩\u200d👧",
         "🇫🇷", "Ġ", "Ċ", "ĠĠ", "'s", "'re", " ?", " ,", " ' ", "...", "1234567", "١٢٣", "$$", "``"]  # fmt: skip
BYTE_LOOKALIKES = ["<0x0A>", "<0xZZ>", "<0x>", "<0xFFF>", "<0x 1>", "<0x+1>", "<0xC3><0xA9>", "<0xF0>", "<unk>",
                   "<s>", "</s>", "<|endoftext|>", "<|im_start|>", "[CLS]", "<pad>", "<|", "|>", "<s", "s>"]  # fmt: skip
ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
HOSTILE_IDS = [-1, -2, -(2**63), 2**31, 2**63, 2**64, 10**100, True, False, 1.0, "0", None]


@dataclasses.dataclass
class Case:
    """One vocabulary under test and what it must round-trip."""

    name: str
    tokenizer: object
    specials: list[str]  # texts of its control, user-defined and unknown tokens
    pieces: list[str]  # some of its normal pieces, as text (U+2581 as a space)
    round_trip: bool  # byte-level BPE or SPM with the 256 byte pieces
    stripping: list[str]  # texts of user-defined tokens with LSTRIP/RSTRIP (they eat whitespace)


def _tiny_metadata() -> dict[str, dict]:
    """The test vocabularies: tests/support/llm.py's spm_vocab() and bpe_vocab() (this one under
    one name of every pre type), and tests/support/tiny_vocabs.py's vocabulary of each model."""
    from support import tiny_vocabs as tv
    from support.llm import bpe_vocab, spm_vocab

    spm = spm_vocab()
    out = {
        "spm_vocab": {
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": spm["tokens"],
            "tokenizer.ggml.scores": spm["token_scores"],
            "tokenizer.ggml.token_type": spm["token_types"],
            "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2,
        }
    }
    bpe = bpe_vocab()
    pre_names: dict[str, str] = {}
    for name, (pre_type, _) in PRE_NAMES.items():
        pre_names.setdefault(pre_type, name)
    for name in sorted(pre_names.values()):
        out[f"bpe_vocab[{name}]"] = {
            "tokenizer.ggml.model": bpe["tokenizer_model"],
            "tokenizer.ggml.pre": name,
            "tokenizer.ggml.tokens": bpe["tokens"],
            "tokenizer.ggml.token_type": bpe["token_types"],
            "tokenizer.ggml.merges": bpe["merges"],
            "tokenizer.ggml.bos_token_id": bpe["bos"],
            "tokenizer.ggml.eos_token_id": bpe["eos"],
            "tokenizer.ggml.add_bos_token": bpe["add_bos"],
        }
    words = {"a": -1.0, "b": -1.0, "ab": -2.0, "▁": -1.0, "▁▁": -2.0, "▁a": -1.5, "é": -3.0, "日本": -2.0}
    out["tiny_spm"] = tv.spm_metadata(words)
    out["tiny_spm_no_bytes"] = tv.spm_metadata(words, byte_pieces=False)
    out["tiny_spm_no_bytes_no_unk"] = tv.spm_metadata(words, byte_pieces=False, unk=False)
    out["tiny_wpm"] = tv.wpm_metadata(["▁hello", "▁hell", "▁wor", "ld", "l", "d", "▁,", "▁日", "▁a", "a"])
    out["tiny_wpm_lower"] = tv.wpm_metadata(["▁hello", "▁a", "##b", "b"], lowercase=True)
    ugm = {"▁": -2.0, "a": -1.0, "b": -1.5, "ab": -1.2, "▁a": -1.1, "日": -3.0, "<": -4.0}
    out["tiny_ugm"] = tv.ugm_metadata(ugm, user_defined=("<x>",))
    charsmap = tv.precompiled_charsmap({"<": "[", "ﬁ": "fi", "Å": "A\u030a"})
    out["tiny_ugm_charsmap"] = tv.ugm_metadata(ugm, charsmap=charsmap, remove_extra_whitespaces=False)
    out["tiny_rwkv"] = tv.rwkv_metadata([b"ab", b"hello", b" world", "é".encode(), b"\n\n"])
    out["tiny_rwkv_no_bytes"] = tv.rwkv_metadata([b"a", b"b", b"ab"], all_bytes=False)
    out["tiny_plamo2"] = tv.plamo2_metadata({"a": -1.0, "b": -1.0, "ab": -1.5, "▁": -2.0, "日本": -2.0})
    return out


def _case(name: str, tokenizer) -> Case:
    vocab = tokenizer.vocab
    special_attrs = Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN
    specials = [vocab.tokens[i] for i, a in enumerate(vocab.attrs) if a & special_attrs][:400]
    normal = [i for i, a in enumerate(vocab.attrs) if a & Attr.NORMAL]
    sample = random.Random(name).sample(normal, min(len(normal), 2000))
    pieces = [vocab.tokens[i].replace("\u2581", " ") for i in sample]
    if vocab.model == "bpe" and not vocab.escape_whitespaces:
        pieces = [bytes(CHAR_BYTES.get(c, 0x3F) for c in p).decode("utf-8", "replace") for p in pieces]
    byte_level = (
        vocab.model == "bpe"
        and vocab.tokenizer_model == "gpt2"
        and not vocab.escape_whitespaces
        and BYTE_ENCODE[vocab.pre]
        and all(c in vocab.token_to_id for c in CHAR_BYTES)
    )
    spm_bytes = vocab.model == "spm" and all(f"<0x{b:02X}>" in vocab.token_to_id for b in range(256))
    stripping = [
        vocab.tokens[i] for i, a in enumerate(vocab.attrs) if a & Attr.USER_DEFINED and a & (Attr.LSTRIP | Attr.RSTRIP)
    ]
    return Case(name, tokenizer, specials, pieces, byte_level or spm_bytes, stripping)


def cases(real: bool = True) -> list[Case]:
    """Every vocabulary, each loaded once: the test ones, and llama.cpp's ggml-vocab-*.gguf if
    ``real`` (and present)."""
    out = [_case(name, onnx_struct.load_tokenizer(m)) for name, m in _tiny_metadata().items()]
    if real:
        from onnx_struct.llm.tokenizer.gguf_metadata import read_gguf_metadata

        for path in sorted(glob.glob(LLAMA_CPP_VOCABS)):
            tokenizer = onnx_struct.load_tokenizer(read_gguf_metadata(path))
            out.append(_case(Path(path).stem.removeprefix("ggml-vocab-"), tokenizer))
    return out


def random_text(rng: random.Random, case: Case) -> str:
    """A text of 0-12 fragments; now and then a very long word."""
    parts = []
    for _ in range(rng.randint(0, 12)):
        kind = rng.random()
        if kind < 0.25:
            parts.append("".join(rng.choice(ASCII) for _ in range(rng.randint(1, 8))))
        elif kind < 0.40:
            parts.append(rng.choice(WHITESPACE))
        elif kind < 0.48:
            parts.append(rng.choice(MARKS))
        elif kind < 0.60:
            parts.append(rng.choice(OTHER))
        elif kind < 0.66:
            code = rng.randrange(0x110000)
            parts.append(chr(code if not 0xD800 <= code < 0xE000 else code + 0x800))
        elif kind < 0.76 and case.specials:
            special = rng.choice(case.specials)
            parts.append(special if rng.random() < 0.8 else special[: rng.randint(0, len(special))])
        elif kind < 0.82:
            parts.append(rng.choice(BYTE_LOOKALIKES))
        elif kind < 0.995 and case.pieces:
            parts.append(rng.choice(case.pieces))
        elif kind < 0.9995:
            parts.append(rng.choice(ASCII[:26]) * rng.randint(20, 400))
        else:  # a very long word: one repeated character, a repeated piece, or random letters
            n = rng.choice([2000, 5000, 20000])
            choice = rng.random()
            if choice < 0.4:
                parts.append(rng.choice("a1 \u2581é日🙂") * n)
            elif choice < 0.7 and case.pieces:
                parts.append((rng.choice(case.pieces) * n)[:n])
            else:
                parts.append("".join(rng.choices(ASCII[:62], k=n)))
    if rng.random() < 0.003:
        parts.insert(rng.randint(0, len(parts)), chr(rng.randrange(0xD800, 0xE000)))  # refused: a lone surrogate
    return "".join(parts)


def random_ids(rng: random.Random, vocab_size: int, encoded: list[int]) -> list:
    kind = rng.random()
    if kind < 0.3:
        return list(encoded)
    ids: list = [rng.randrange(vocab_size) for _ in range(rng.randint(0, 16))]
    if kind < 0.6:
        return ids
    if kind < 0.8:
        ids.insert(rng.randint(0, len(ids)), rng.choice([vocab_size, vocab_size + 1, rng.choice(HOSTILE_IDS)]))
    else:
        ids[rng.randrange(len(ids)) if ids else 0 : 1] = [rng.choice([0, vocab_size - 1])]
    return ids


def _valid_id(token: object, vocab_size: int) -> bool:
    return isinstance(token, int) and not isinstance(token, bool) and 0 <= token < vocab_size


def check_encode(case: Case, text: str, special: bool) -> list[int] | None:
    """Encode ``text``; the ids, or None when refused. Raises AssertionError when a property fails."""
    tok = case.tokenizer
    start = time.perf_counter()
    try:
        ids = tok.encode(text, special=special)
    except ValidationError:
        return None
    finally:
        _timed[0] += time.perf_counter() - start
    assert all(_valid_id(i, tok.vocab_size) for i in ids), f"id out of range: {ids!r:.200}"
    assert tok.encode(text, special=special) == ids, "encode is not deterministic"
    # SPM writes a space as U+2581 and decodes U+2581 as a space: a text holding one cannot come back
    spm_escape = tok.vocab.model == "spm" and "\u2581" in text
    if not special and case.round_trip and not spm_escape and not any(s in text for s in case.stripping):
        raw = tok.encode(text, add_bos=False)
        pieces = b"".join(tok.token_to_piece(i) for i in raw)
        if tok.vocab.add_space_prefix and pieces.startswith(b" "):
            pieces = pieces[1:]  # llama_detokenize's lstrip of the prefixed space
        assert pieces == text.encode("utf-8"), f"pieces {pieces!r:.200} of ids {raw!r:.200}"
        expected = clean_spaces(pieces) if tok.vocab.clean_spaces else pieces
        assert tok.decode(raw) == expected.decode("utf-8", "replace"), "decode(encode(text)) is not the text"
    return ids


def check_decode(case: Case, ids: list, special: bool) -> bool:
    """Decode ``ids``; True if accepted. Raises AssertionError when a property fails."""
    tok = case.tokenizer
    valid = all(_valid_id(i, tok.vocab_size) for i in ids)
    start = time.perf_counter()
    try:
        text = tok.decode(ids, special=special)
    except ValidationError:
        assert not valid, f"a valid id list was refused: {ids!r:.200}"
        return False
    finally:
        _timed[0] += time.perf_counter() - start
    assert valid, f"ids outside the vocabulary were accepted: {ids!r:.200}"
    assert isinstance(text, str)
    streamer = tok.streamer(special=special)
    streamed = "".join(streamer.push(i) for i in ids) + streamer.flush()
    raw = b"".join(tok.token_to_piece(i, special=special) for i in ids)
    shown = next((k for k, i in enumerate(ids) if tok.token_to_piece(i, special=special)), None)
    if tok.vocab.add_space_prefix and shown is not None:
        # decode strips the very first token's space; the streamer the first shown token's
        first = tok.token_to_piece(ids[shown], special=special)
        if first.startswith(b" "):
            if shown == 0:
                raw = raw[1:]
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return True  # the replacement characters of a broken sequence may split differently
            expected = b"".join(
                tok.token_to_piece(i, special=special)[1:] if k == shown else tok.token_to_piece(i, special=special)
                for k, i in enumerate(ids)
            )
            assert streamed == expected.decode("utf-8"), f"streamed {streamed!r:.200}"
            return True
    try:
        assert streamed == raw.decode("utf-8"), f"streamed {streamed!r:.200} != {raw!r:.200}"
    except UnicodeDecodeError:
        pass
    return True


def fuzz_one(case: Case, text: str, ids_seed: int) -> int:
    """Encode ``text`` both ways, decode ids made from it; the number of accepted calls."""
    accepted = 0
    for special in (False, True):
        ids = check_encode(case, text, special)
        accepted += ids is not None
        accepted += check_decode(
            case, random_ids(random.Random(ids_seed + special), case.tokenizer.vocab_size, ids or []), special
        )
    return accepted


def campaign(runs: int, seed: int = 0, *, real: bool = True, corpus: list[Case] | None = None):
    """(accepted calls, escapes and slow inputs as messages, inputs per vocabulary) over ``runs`` inputs."""
    rng = random.Random(seed)
    corpus = corpus if corpus is not None else cases(real)
    accepted, escapes, per_case = 0, [], dict.fromkeys((c.name for c in corpus), 0)
    real = [c for c in corpus if not c.name.startswith(("spm_vocab", "bpe_vocab", "tiny_"))]
    tiny = [c for c in corpus if c not in real]
    for _ in range(runs):
        case = rng.choice(real if real and (rng.random() < 0.5 or not tiny) else tiny)  # half on llama.cpp's files
        text, ids_seed = random_text(rng, case), rng.getrandbits(32)
        per_case[case.name] += 1
        _timed[0] = 0.0
        try:
            accepted += fuzz_one(case, text, ids_seed)
        except Exception as error:  # noqa: BLE001 - an escape is what this looks for
            escapes.append(f"{type(error).__name__}: {error!s:.300} <- {case.name} {text!r:.400} ids_seed={ids_seed}")
        elapsed = _timed[0]
        if elapsed > BUDGET_SECONDS:
            escapes.append(
                f"Slow: {elapsed:.2f} s for {len(text)} chars <- {case.name} {text!r:.200} ids_seed={ids_seed}"
            )
    return accepted, escapes, per_case


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = int(args[0]) if args else 10000
    t0 = time.perf_counter()
    corpus = cases(real="--tiny" not in sys.argv)
    t1 = time.perf_counter()
    accepted, escapes, per_case = campaign(runs, int(args[1]) if len(args) > 1 else 0, corpus=corpus)
    t2 = time.perf_counter()
    print(f"{len(corpus)} vocabularies loaded in {t1 - t0:.1f} s")
    print(
        f"{runs} inputs, {accepted} accepted calls, {len(escapes)} escapes in {t2 - t1:.0f} s ({runs / (t2 - t1):.0f}/s)"
    )
    for line in dict.fromkeys(e.split(" <- ")[0][:120] for e in escapes):
        print(" ", line)
    for line in escapes[:10]:
        print(line)
