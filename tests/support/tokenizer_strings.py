"""Generated test strings for tokenizers: mixed scripts, whitespace runs, digits, punctuation,
emoji, combining marks, code and contractions, reproducible from a seed (the 46 strings of
llama.cpp's test set are weak at telling pre-tokenizers apart)."""

from __future__ import annotations

import random

PARTS = [
    "Hello", "world", "the", "ÉCOLE", "café", "naïve", "Straße", "İstanbul", "ǅemal", "ᾈ",
    "你好", "世界", "日本語", "カタカナ", "ひらがな", "한국어", "Привет", "мир", "Ελληνικά", "עברית",
    "العربية", "हिन्दी", "ไทย", "ქართული", "Ⅻ", "½", "²³", "١٢٣", "𝔘𝔫𝔦", "e\u0301", "a\u0308\u0323",
    "🦙", "👍🏽", "🇫🇷", "❤️", "∑", "≠", "€", "$", "¥", "©", "™", "…", "—", "–", "«", "»", "“", "”",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "n't", "’s",
    "0", "7", "42", "123", "2024", "1234567", "3.14", "1,000", "0x1F",
    "def", "f(x)", "==", "!=", "->", "=>", "{}", "[]", "()", "<>", "</s>", "<|x|>", "#", "//", "/*", "*/",
    ";", ":", ",", ".", "!", "?", "@", "%", "^", "&", "*", "_", "-", "+", "=", "|", "\\", "`", "~", '"',
]  # fmt: skip
SPACES = [
    " ",
    " ",
    " ",
    "  ",
    "   ",
    "    ",
    "\t",
    "\n",
    "\n\n",
    " \n",
    "\r\n",
    "\u00a0",
    "\u3000",
    "\u2009",
    "\u200b",
    "",
]


def generated_strings(n: int, seed: int = 0) -> list[str]:
    """``n`` strings of 1-12 parts joined by spaces of every kind (some with leading/trailing ones)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 12)):
            pieces.append(rng.choice(PARTS))
            pieces.append(rng.choice(SPACES))
        text = "".join(pieces)
        if rng.random() < 0.2:
            text = rng.choice(SPACES) + text
        if rng.random() < 0.3:
            text = text.rstrip()
        out.append(text)
    return out
