"""Seeded strings that tell tokenizers apart: the differential tokenizer tests feed the same strings to
llama.cpp and to onnx_struct and compare ids.

Each string joins a few fragments drawn from families that exercise a different part of a
tokenizer (the pre-tokenizer regexes' letter / number / whitespace / punctuation classes, SPM's
whitespace escaping, byte fallback, the special-token partition):

- words in many scripts (Latin with contractions and case, Cyrillic, Greek, Arabic, Hebrew,
  Devanagari with its vowel signs, Thai, CJK ideographs, kana, Hangul);
- whitespace runs: spaces, tabs, newlines, ``\\r\\n``, no-break and ideographic spaces;
- digits: single ones, long runs, grouped and decimal numbers;
- punctuation runs, ASCII and Unicode, and contractions (``'s``, ``'LL``, ``'re``);
- emoji: single, with skin tones, ZWJ families, flags, keycaps, variation selectors;
- combining marks (decomposed accents, stacked marks) and invisible format characters;
- code snippets with indentation;
- the vocabulary's own special and user-defined token texts, each spliced into some string.

Leading and trailing whitespace, empty strings and a few long strings are included. The same seed
gives the same strings.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

LATIN_WORDS = (
    "the quick brown fox jumps over lazy dog Hello World HELLO hello tokenizer vocabulary naïve café "
    "résumé Straße façade coöperate jalapeño übermäßig Ångström Łódź São Paulo İstanbul ſ ﬁne ﬀ "
    "a I an of to in is it and or but not you he she we they this that what why how"
).split()
CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "’s", "’ll")
SCRIPT_WORDS = {
    "cyrillic": "Привет мир съешь же ещё этих мягких французских булок ЁЖИК Україна Беларусь".split(),
    "greek": "Γειά σου κόσμε ΑΒΓΔ αβγδ ελληνικά Ἀθῆναι".split(),
    "arabic": "مرحبا بالعالم العربية السلام عليكم ١٢٣ ٤٥٦ كتاب".split(),
    "hebrew": "שלום עולם עברית ספר".split(),
    "devanagari": "नमस्ते दुनिया हिन्दी भाषा क्षत्रिय प्रेम ज्ञान १२३".split(),
    "thai": "สวัสดีชาวโลก ภาษาไทย ขอบคุณ".split(),
    "cjk": "你好世界 中文 漢字 東京 北京大学 龍 𠀋 𪚲 我们 一二三".split(),
    "kana": "こんにちは カタカナ ひらがな ｶﾀｶﾅ ありがとう ー".split(),
    "hangul": "안녕하세요 세계 한국어 ᄀᄁ 각".split(),
    "other": "Ողջույն გამარჯობა ሰላም ᏣᎳᎩ ꦗꦮ 𐍈 ✓ ∑∫ ∞ ≤ ≥ ° ± × ÷ µ".split(),
}
WHITESPACE = (" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", " \n", "\n ", " \t ",
              "\u00a0", "\u3000", "\u2009", "\u202f", "\x0b", "\x0c", "\u2028", " " * 8, " " * 17, "\t \n \r\n  ")  # fmt: skip
PUNCTUATION = (".", ",", "!", "?", "...", ";", ":", "-", "--", "---", "(", ")", "[", "]", "{", "}", "\"", "'", "`",
               "@", "#", "$", "%", "^", "&", "*", "_", "+", "=", "|", "\\", "/", "<", ">", "~", "!!!", "?!", "«", "»",
               "“", "”", "‘", "’", "…", "—", "–", "¿", "¡", "、", "。", "，", "！", "？", "「", "」", "·", "•", "§", "¶", "€",
               "£", "¥", "₹", "<<", ">>", "->", "=>", "::", "//", "/*", "*/", "<!--", "-->", "'''", '"""')  # fmt: skip
EMOJI = ("😀", "😂", "🤖", "🦙", "🔥", "❤️", "❤", "👍🏽", "👋🏿", "🧑🏻‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🏳️‍🌈", "🇺🇸", "🇯🇵", "🇩🇪",
         "1️⃣", "#️⃣", "☺️", "✌🏼", "🙇‍♀️", "🫠", "🪿", "🤌🏾", "⌚", "☕")  # fmt: skip
COMBINING = ("e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "Z\u0351\u0317\u0334\u0353", "\u0301", "i\u0307",
             "ệ", "Tiếng Việt", "a\u200db", "\u200b", "\ufeff", "\u00ad", "\u200e", "x\u20dd", "ﾞ", "\u0e31")  # fmt: skip
CODE = (
    "def f(x):\n    return x + 1\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
    '<html>\n  <body class="main">Hi &amp; bye</body>\n</html>',
    "SELECT name, COUNT(*) FROM users WHERE id >= 42 GROUP BY name;",
    "    if x == 0:\n        pass\n    else:\n        raise ValueError('bad')",
    '#include <stdio.h>\nint main(void) { printf("%d\\n", 0x1F); }',
    "const fn = async (a, b) => { await a?.b ?? c; };",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "\t\tmatrix[i][j] += lhs[i][k] * rhs[k][j];",
)


def _number(rng: random.Random) -> str:
    kind = rng.randrange(7)
    if kind == 0:
        return str(rng.randrange(10))
    if kind == 1:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(2, 40)))
    if kind == 2:
        return f"{rng.randrange(10**9):,}"
    if kind == 3:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 8)}f}"
    if kind == 4:
        return f"0x{rng.randrange(1 << 32):X}"
    if kind == 5:
        return f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(1900, 2100)}"
    return rng.choice(("١٢٣", "१२३४", "１２３", "½", "²", "Ⅻ", "⑤", "3.14159", "1e-9", "007"))


def _latin(rng: random.Random) -> str:
    word = rng.choice(LATIN_WORDS)
    style = rng.randrange(6)
    if style == 0:
        word = word.upper()
    elif style == 1:
        word = word.capitalize()
    if rng.random() < 0.25:
        word += rng.choice(CONTRACTIONS)
    return word


def _script(rng: random.Random) -> str:
    return rng.choice(SCRIPT_WORDS[rng.choice(sorted(SCRIPT_WORDS))])


def _random_codepoint(rng: random.Random) -> str:
    """Any assigned-looking scalar value: the BMP and a few supplementary planes, no surrogates."""
    while True:
        cp = rng.choice((rng.randrange(0x20, 0x3000), rng.randrange(0x3000, 0xD800), rng.randrange(0xE000, 0x10000),
                         rng.randrange(0x10000, 0x20000), rng.randrange(0x20000, 0x2FA20)))  # fmt: skip
        if not 0xD800 <= cp < 0xE000:
            return chr(cp)


FAMILIES: tuple[tuple[float, Callable[[random.Random], str]], ...] = (
    (8, _latin),
    (6, _script),
    (5, lambda rng: rng.choice(WHITESPACE)),
    (4, _number),
    (4, lambda rng: rng.choice(PUNCTUATION)),
    (3, lambda rng: rng.choice(EMOJI)),
    (2, lambda rng: rng.choice(COMBINING)),
    (1, lambda rng: rng.choice(CODE)),
    (1, lambda rng: "".join(_random_codepoint(rng) for _ in range(rng.randint(1, 4)))),
)
_WEIGHTS = [weight for weight, _ in FAMILIES]
SEPARATORS = ("", " ", " ", " ", "  ", "\n", "\t", "")


def _fragment(rng: random.Random) -> str:
    (family,) = rng.choices([make for _, make in FAMILIES], weights=_WEIGHTS)
    return family(rng)


def _string(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.01:
        return ""
    if shape < 0.03:  # a long string (a paragraph of fragments)
        count = rng.randint(100, 400)
    elif shape < 0.08:  # a single fragment, nothing around it
        return _fragment(rng)
    else:
        count = rng.randint(1, 12)
    parts = [_fragment(rng) for _ in range(count)]
    text = "".join(part + rng.choice(SEPARATORS) for part in parts)
    if rng.random() < 0.2:
        text = rng.choice(WHITESPACE) + text
    if rng.random() < 0.2:
        text += rng.choice(WHITESPACE)
    return text


def _splice(rng: random.Random, text: str, piece: str) -> str:
    """``piece`` inserted at a random character offset, bare or with spaces / newlines around it."""
    at = rng.randint(0, len(text))
    before, after = rng.choice(("", "", " ", "\n", "  ")), rng.choice(("", "", " ", "\n", "  "))
    return text[:at] + before + piece + after + text[at:]


def generate_strings(count: int, *, seed: int, special: Sequence[str] = ()) -> list[str]:
    """``count`` strings from ``seed``; every text in ``special`` (a vocabulary's control and
    user-defined token texts) is spliced into at least one of them.

    Args:
        count: How many strings (at least 1).
        seed: The random seed; the same seed and arguments give the same strings.
        special: Token texts to splice in: each one once at a random string (spread over about a
            third of the strings), and more of them at random into a further tenth.

    Returns:
        The strings, valid Unicode (no surrogates).
    """
    rng = random.Random(seed)
    strings = [_string(rng) for _ in range(count)]
    special = [text for text in dict.fromkeys(special) if text]
    if special:
        hosts = max(1, count // 3)
        for i, piece in enumerate(special):
            slot = rng.randrange(hosts) * 3 + i % 3
            strings[slot % count] = _splice(rng, strings[slot % count], piece)
        for _ in range(count // 10):
            slot = rng.randrange(count)
            for _ in range(rng.randint(1, 3)):
                strings[slot] = _splice(rng, strings[slot], rng.choice(special))
    return strings
