"""Generated strings and tiny vocabularies for the session tests against llama.cpp: whitespace
runs, tabs and newlines, CJK, emoji, combining marks, digits, code, and the pieces of each tiny
vocabulary glued together (so merges, ties and longest matches are exercised)."""

from __future__ import annotations

import random

from support.tiny_vocabs import (
    plamo2_metadata,
    precompiled_charsmap,
    rwkv_metadata,
    spm_metadata,
    ugm_metadata,
    wpm_metadata,
)

ATOMS = [
    " ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\r\n", " \t ", "\u3000", "\u00a0", "\u200b",
    "a", "b", "c", "ab", "abc", "the", "The", "THE", "hello", "Hello", "world", "lo", "wor", "ld",
    "é", "e\u0301", "ü", "ß", "İ", "ﬁ", "Ａ", "１", "①", "ǅ",
    "日本", "語", "中文", "한국어", "😀", "👍🏽", "🇫🇷",
    "0", "7", "42", "123", "3.14", "1,000",
    "def f(x):", "return x+1", "{", "}", "()", "[]", "==", "->", "//", "#", "'", '"', "`", "$", "%", "@",
    "!", "?", ".", ",", ";", ":", "-", "_", "~", "^", "*", "+", "=", "<", ">", "|", "/", "\\",
    "\u0000", "\x7f", "\u00ad", "\ufeff", "\u2581", "▁▁", "\U0001F600\u200d", "ק", "مرحبا", "Привет",
]


def generated_strings(count: int, seed: int) -> list[str]:
    """``count`` strings of 0-12 atoms each (reproducible from ``seed``)."""
    rng = random.Random(seed)
    out = ["", " ", "  ", "\n", "   leading", "trailing   ", "a  b   c    d", "\t\tindented\n    code"]
    while len(out) < count:
        out.append("".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 12))))
    return out[:count]


SPM_PIECES = {
    "▁": -1.0, "▁▁": -2.0, "▁▁▁▁": -3.0, "▁▁▁": -3.5, "\t": -4.0, "\n": -4.0, "\n\n": -5.0,
    "a": -1.5, "b": -1.6, "c": -1.7, "e": -1.2, "h": -1.9, "l": -1.8, "o": -1.4, "r": -2.1, "w": -2.2,
    "d": -2.3, "t": -1.3, "T": -3.0, "H": -3.1, "E": -3.2, "x": -3.3, "f": -3.4, "n": -2.4, "u": -2.5,
    "ab": -2.0, "bc": -2.0, "abc": -2.5, "he": -2.2, "ll": -2.6, "lo": -2.6, "hel": -3.0, "hell": -3.2,
    "hello": -3.5, "▁hello": -3.0, "▁the": -2.0, "th": -2.5, "the": -2.7, "▁a": -2.4, "▁b": -2.4,
    "wor": -3.5, "ld": -3.0, "world": -4.0, "▁world": -3.9, "▁▁hello": -4.5, "or": -2.9,
    "日": -5.0, "本": -5.0, "日本": -5.5, "é": -4.0, "ü": -4.5, "😀": -6.0,
    "0": -3.0, "1": -3.0, "2": -3.0, "12": -3.5, "123": -4.0, "42": -4.2, ".": -2.0, ",": -2.0,
    "(": -3.0, ")": -3.0, "()": -3.3, "==": -4.0, "def": -4.0, "▁def": -3.9, "return": -4.5, ":": -3.0,
    "▁▁▁▁return": -5.0, "re": -3.0, "ret": -3.8, "urn": -3.8,
}
WPM_WORDS = [
    "▁the", "▁hello", "▁world", "▁a", "▁b", "▁c", "▁ab", "▁abc", "b", "c", "bc", "lo", "wor", "ld",
    "▁wor", "▁lo", "▁e", "e", "▁u", "u", "▁ss", "▁ß", "ss", "▁i", "i", "▁fi", "▁日", "▁本", "▁語",
    "▁中", "▁文", "▁0", "▁7", "▁42", "2", "3", "▁1", "▁123", "▁3", "14", ".", "▁.", "▁,", "▁!", "▁?",
    "▁(", "▁)", "▁{", "▁}", "▁def", "▁f", "▁x", "▁return", "▁+", "▁=", "▁-", "▁>", "▁:", "▁#", "▁'",
    '▁"', "▁$", "▁%", "▁@", "▁한국어", "▁한", "국", "어", "▁😀", "▁привет", "▁при", "вет",
]
UGM_PIECES = {
    "▁": -2.0, "▁the": -3.0, "▁hello": -5.0, "▁hell": -5.5, "o": -3.5, "▁he": -4.0, "llo": -4.2,
    "▁world": -5.0, "▁wor": -5.2, "ld": -4.1, "a": -3.0, "b": -3.2, "c": -3.4, "ab": -4.0, "bc": -4.1,
    "abc": -6.5, "▁a": -3.5, "▁ab": -4.4, "e": -2.9, "h": -4.9, "l": -3.9, "w": -4.8, "r": -4.0, "d": -4.5,
    "t": -3.3, "T": -5.0, "H": -5.1, "▁T": -5.0, "▁H": -5.5, "fi": -5.0, "▁fi": -5.3, "A": -5.0, "1": -4.0,
    "日本": -7.0, "日": -6.0, "本": -6.0, "😀": -8.0, "▁😀": -8.5, "0": -4.0, "42": -5.0, "4": -4.3,
    "2": -4.4, "123": -6.0, ".": -3.0, ",": -3.0, "(": -4.0, ")": -4.0, "==": -6.0, "=": -4.0,
    "def": -6.0, "▁def": -5.5, "x": -5.0, ":": -4.0, "é": -6.0, "e\u0301": -7.0, "ß": -7.0,
}
UGM_USER_DEFINED = ("<extra>", "▁▁")
UGM_CHARSMAP = {"ﬁ": "fi", "Ａ": "A", "１": "1", "①": "1", "\u3000": " ", "\u00a0": " ", "\t": " ", "\n": " ",
                "e\u0301": "é", "ǅ": "Dž", "\u200b": "", "İ": "i\u0307"}
RWKV_PIECES = [b"the", b"hello", b"hell", b"he", b"world", b"wor", b" ", b"  ", b"    ", b"\t", b"\n\n",
               b"ab", b"abc", b"bc", "日本".encode(), "日".encode(), "😀".encode(), "é".encode(), b"12", b"123",
               b"def", b" def", b"return", b"\\", b"\\n", b"x\x00y"]
PLAMO2_PIECES = {
    "▁": -2.0, " ": -2.0, "  ": -3.0, "the": -3.0, "hello": -5.0, "hell": -5.5, "o": -3.5, "he": -4.0,
    "llo": -4.2, "world": -5.0, "wor": -5.2, "ld": -4.1, "a": -3.0, "b": -3.2, "c": -3.4, "ab": -4.0,
    "bc": -4.1, "abc": -6.5, "e": -2.9, "h": -4.9, "l": -3.9, "w": -4.8, "r": -4.0, "d": -4.5, "t": -3.3,
    "日本": -7.0, "日": -6.0, "本": -6.0, "😀": -8.0, "0": -4.0, "42": -5.0, "123": -6.0, ".": -3.0,
    "\n": -3.0, "\t": -3.5, "def": -6.0, " def": -6.2, "é": -6.0,
}


def tiny_metadata() -> dict[str, dict[str, object]]:
    """One tiny vocabulary of each model, as GGUF metadata, by name."""
    return {
        "spm": spm_metadata(SPM_PIECES),
        "spm-no-prefix": {**spm_metadata(SPM_PIECES), "tokenizer.ggml.add_space_prefix": False},
        "wpm": wpm_metadata(WPM_WORDS),
        "wpm-cased": wpm_metadata(WPM_WORDS + ["▁Hello", "▁The", "▁THE", "▁é", "é"], lowercase=False),
        "ugm": ugm_metadata(UGM_PIECES, user_defined=UGM_USER_DEFINED, charsmap=precompiled_charsmap(UGM_CHARSMAP)),
        "ugm-plain": ugm_metadata(UGM_PIECES, add_space_prefix=False, remove_extra_whitespaces=False),
        "rwkv": rwkv_metadata(RWKV_PIECES),
        "plamo2": plamo2_metadata(PLAMO2_PIECES),
    }
