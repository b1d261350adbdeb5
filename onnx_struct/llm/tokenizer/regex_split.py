"""llama.cpp's ``unicode_regex_split``: a text cut into words by a list of regexes applied in
sequence, each cutting the pieces the previous one left, its matches and the text between them
both kept as words (HF's ``Split(..., behavior="isolated")``).

Matching is llama.cpp's, not PCRE's. llama.cpp runs a regex that names a category (``\\p{L}``,
``\\p{N}``, ``\\p{P}``, ``\\p{M}``, ``\\p{S}``; ``\\p{Lu}`` and the other letter kinds are all
letters there) over a *collapsed* text: each non-ASCII code point becomes one placeholder
character of its category (whitespace: ``\\v``), and ``\\p{X}`` becomes a class of that placeholder
and the category's ASCII members; ``\\s``, ``\\d`` and ``\\b`` are ASCII only. A regex with no
category but non-ASCII literals runs over the code points, non-ASCII whitespace replaced by ``\\v``.
Both are reproduced here with Python's ``re`` (ASCII mode) on the same transformed text; the
categories are llama.cpp's table (``unicode_data.py``). Where llama.cpp replaces a regex by
hand-written code (``unicode_regex_split_custom_*``): the gpt2, llama3, qwen2, qwen35 and
newline splitters are that same regex (the gpt2 one with the ``|\\s+`` its code adds), measured
equal against llama.cpp; the kimi-k2 and afmoe splitters, which no regex here expresses, are
ported as code.
"""

from __future__ import annotations

import bisect
import functools
import re
import warnings

from onnx_struct.llm.tokenizer import unicode_data

_STARTS = [int(v, 16) for v in unicode_data.RUN_STARTS.split(",")]
_CATEGORIES = unicode_data.RUN_CATEGORIES
_LOWER = dict(tuple(int(v, 16) for v in pair.split(":")) for pair in unicode_data.LOWERCASE.split(","))

# the placeholder of each category in the collapsed text (llama.cpp's k_ucat_cpt); 0xD0 for the others
_PLACEHOLDER = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
# \p{..} -> (placeholder, the category's ASCII members as a class body): llama.cpp's k_ucat_map
_ASCII_MEMBERS = {
    "N": "0-9",
    "L": "A-Za-z",
    "P": "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}",
    "M": "",
    "S": "\\$\\+<-\\>\\^`\\|\\~",
}
_UCAT = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S", "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L"}

# superbpe's second regex: an empty match wherever the ASCII digits from there to the end of their
# run are a positive multiple of 3 (a number cut into triples from the right). Run as a regex, each
# position's lookahead reads to the end of the run: quadratic in the run's length (20,000 digits
# took 15 s); _split_digit_triples finds the same cuts in one pass.
SUPERBPE_DIGITS = "(?=(\\d{3})+(?!\\d))"
GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"


def category(cpt: int) -> str:
    """llama.cpp's category letter of a code point (see ``unicode_data``)."""
    return _CATEGORIES[bisect.bisect_right(_STARTS, cpt) - 1] if cpt < 0x110000 else "U"


def is_whitespace(cpt: int) -> bool:
    return cpt in unicode_data.WHITESPACE


def tolower(cpt: int) -> int:
    """llama.cpp's ``unicode_tolower`` (one code point to one code point)."""
    return _LOWER.get(cpt, cpt)


@functools.lru_cache(maxsize=65536)
def _collapsed_char(cpt: int) -> str:
    if cpt in unicode_data.WHITESPACE:
        return "\x0b"
    return _PLACEHOLDER.get(category(cpt), "\xd0")


def collapse(text: str) -> str:
    """llama.cpp's collapsed text: ASCII kept, every other code point its category's placeholder."""
    table = {ord(c): _collapsed_char(ord(c)) for c in set(text) if ord(c) >= 128}
    return text.translate(table) if table else text


def widen(text: str) -> str:
    """The code points as llama.cpp's std::wregex sees them: non-ASCII whitespace as ``\\v``."""
    table = {ord(c): "\x0b" for c in set(text) if ord(c) >= 128 and ord(c) in unicode_data.WHITESPACE}
    return text.translate(table) if table else text


def _uses_category(regex: str) -> bool:
    return any(f"\\p{{{name}}}" in regex for name in _UCAT)


def _python_regex(regex: str, collapsed: bool) -> str:
    """The ECMAScript regex as Python's ``re`` reads it the same way: ``$`` is the end of the
    piece (``\\Z``: Python's ``$`` would also match before a final newline) and, on collapsed
    text, each category replaced as llama.cpp replaces it (tracking ``[...]`` as it does)."""
    out, inside, i = [], False, 0
    while i < len(regex):
        ch = regex[i]
        if ch == "[" and (i == 0 or regex[i - 1] != "\\"):
            inside = True
        elif inside and ch == "]" and regex[i - 1] != "\\":
            inside = False
        elif collapsed and regex.startswith("\\p{", i):
            close = regex.find("}", i + 3)
            name = regex[i + 3 : close] if 0 <= close <= i + 10 else None
            if name in _UCAT:
                cat = _UCAT[name]
                body = _PLACEHOLDER[cat] + _ASCII_MEMBERS[cat]
                out.append(body if inside else f"[{body}]")
                i = close + 1
                continue
        elif ch == "\\" and i + 1 < len(regex):
            out.append(regex[i : i + 2])
            i += 2
            continue
        elif ch == "$" and not inside:
            out.append("\\Z")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


class _Regex:
    """One regex of a list: how llama.cpp runs it (collapsed, wide, or custom code)."""

    def __init__(self, regex: str) -> None:
        self.custom = None
        if regex == "\\p{Han}+":
            self.custom = _split_kimi_k2
            return
        if regex in ("\\p{AFMoE_digits}", "\\d{1,3}(?=(?:\\d{3})*\\b)"):
            self.custom = _split_afmoe
            return
        if regex == SUPERBPE_DIGITS:
            self.custom = _split_digit_triples
            return
        if regex == GPT2_REGEX:
            regex += "|\\s+"  # unicode_regex_split_custom_gpt2 also matches \s+ (the GPT-2 regex's last branch)
        self.collapsed = _uses_category(regex)
        if self.collapsed and any(ord(c) >= 128 for c in regex):
            raise ValueError(f"regex {regex!r} mixes categories and non-ASCII characters (llama.cpp refuses it)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set" on ECMAScript's '[' in classes
            self.pattern = re.compile(_python_regex(regex, self.collapsed), re.ASCII)

    def split(self, text: str, collapsed: str, wide: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if self.custom is not None:
            return self.custom(text, pieces)
        subject = collapsed if self.collapsed else wide
        out: list[tuple[int, int]] = []
        for start, end in pieces:
            # each piece alone, as llama.cpp's regex_iterator over [start, end): lookaheads and \Z
            # stop at its end
            position = start
            for match in self.pattern.finditer(subject, start, end):
                if match.start() > position:
                    out.append((position, match.start()))
                if match.end() > match.start():  # an empty match only separates the text around it
                    out.append((match.start(), match.end()))
                position = match.end()
            if position < end:
                out.append((position, end))
        return out


class Splitter:
    """A regex list compiled once per vocabulary; ``split(text)`` returns the words."""

    def __init__(self, regexes: tuple[str, ...]) -> None:
        self.regexes = [_Regex(r) for r in regexes]
        self.needs_collapse = any(r.custom is None and r.collapsed for r in self.regexes)
        self.needs_wide = any(r.custom is None and not r.collapsed for r in self.regexes)

    def split(self, text: str) -> list[str]:
        if not text:
            return []
        collapsed = collapse(text) if self.needs_collapse else ""
        wide = widen(text) if self.needs_wide else ""
        pieces = [(0, len(text))]
        for regex in self.regexes:
            pieces = regex.split(text, collapsed, wide, pieces)
        return [text[start:end] for start, end in pieces]


def _split_digit_triples(text: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """SUPERBPE_DIGITS's cuts, each piece alone (its lookahead stops at the piece's end): in a run of
    ASCII digits ending at ``stop``, a cut before each position ``p`` with ``stop - p`` a positive
    multiple of 3; an empty match only separates the text around it."""
    out: list[tuple[int, int]] = []
    for start, end in pieces:
        cuts = []
        i = start
        while i < end:
            if not "0" <= text[i] <= "9":
                i += 1
                continue
            run = i
            while i < end and "0" <= text[i] <= "9":
                i += 1
            first = run + (i - run) % 3  # the first position a whole number of triples before the run's end
            cuts += range(first, i - 2, 3)
        position = start
        for cut in cuts:
            if cut > position:
                out.append((position, cut))
                position = cut
        if position < end:
            out.append((position, end))
    return out


def _split_kimi_k2(text: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """llama.cpp's unicode_regex_split_custom_kimi_k2, step for step."""
    out: list[tuple[int, int]] = []
    for ini, end in pieces:

        def cpt(pos: int, ini: int = ini, end: int = end) -> int:
            return ord(text[pos]) if ini <= pos < end else -1

        def cat(pos: int, ini: int = ini, end: int = end) -> str:
            return category(ord(text[pos])) if ini <= pos < end else ""

        def space(pos: int, ini: int = ini, end: int = end) -> bool:
            return ini <= pos < end and ord(text[pos]) in unicode_data.WHITESPACE

        def letter(pos: int) -> bool:
            return cat(pos) == "L" and not _is_han(cpt(pos))

        prev = ini

        def add(stop: int) -> None:
            nonlocal prev
            if stop > prev:
                out.append((prev, stop))
            prev = stop

        pos = ini
        while pos < end:
            c, flags = cpt(pos), cat(pos)
            if _is_han(c):
                while _is_han(cpt(pos)):
                    pos += 1
                add(pos)
                continue
            leading_ok = not (c in (13, 10) or flags in ("L", "N"))
            if letter(pos) or (leading_ok and letter(pos + 1)):
                has_leading = False
                if leading_ok:
                    has_leading = True
                    pos += 1
                has_letters = False
                while letter(pos):
                    has_letters = True
                    pos += 1
                if has_letters or (not has_leading and letter(pos)):
                    if not has_letters:
                        pos += 1
                    while letter(pos):
                        pos += 1
                    if cpt(pos) == 0x27 and pos + 1 < end:
                        nxt = tolower(cpt(pos + 1))
                        if nxt in (0x73, 0x74, 0x6D, 0x64):  # s t m d
                            pos += 2
                        elif pos + 2 < end:
                            nxt2 = tolower(cpt(pos + 2))
                            if (nxt, nxt2) in ((0x72, 0x65), (0x76, 0x65), (0x6C, 0x6C)):  # re ve ll
                                pos += 3
                    add(pos)
                    continue
                if has_leading:
                    pos -= 1
            if flags == "N":
                first = pos
                while cat(pos) == "N":
                    pos += 1
                    if pos - first >= 3:
                        add(pos)
                        first = pos
                add(pos)
                continue
            probe = pos + 1 if c == 0x20 else pos
            if _punct_like(text, probe, ini, end):
                pos += c == 0x20
                while _punct_like(text, pos, ini, end):
                    pos += 1
                while cpt(pos) in (13, 10):
                    pos += 1
                add(pos)
                continue
            count, last_newline = 0, 0
            while space(pos + count):
                if cpt(pos + count) in (13, 10):
                    last_newline = pos + count + 1
                count += 1
            if last_newline > 0:
                pos = last_newline
                add(pos)
                continue
            if count > 1 and cpt(pos + count) != -1:
                pos += count - 1
                add(pos)
                continue
            if count > 0:
                pos += count
                add(pos)
                continue
            pos += 1
            add(pos)
    return out


def _punct_like(text: str, pos: int, ini: int, end: int) -> bool:
    """[^\\s\\p{L}\\p{N}] as llama.cpp's custom splitters test it (a code point out of the piece: no)."""
    if not ini <= pos < end:
        return False
    cpt = ord(text[pos])
    return cpt not in unicode_data.WHITESPACE and category(cpt) not in ("L", "N")


def _is_han(cpt: int) -> bool:
    return any(first <= cpt <= last for first, last in _HAN)


# llama.cpp's unicode_cpt_is_han ranges (CJK ideographs, extensions A-F, compatibility ideographs)
_HAN = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0x2CEB0, 0x2EBEF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _split_afmoe(text: str, pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """llama.cpp's unicode_regex_split_custom_afmoe: each run of digits cut into a leading 1-2
    (its length mod 3) and groups of 3; the text before a run stays joined to its first group."""
    out: list[tuple[int, int]] = []
    for ini, end in pieces:
        prev, pos = ini, ini
        while pos < end:
            if category(ord(text[pos])) == "N":
                first = pos
                while pos < end and category(ord(text[pos])) == "N":
                    pos += 1
                current = first
                remainder = (pos - first) % 3
                if remainder:
                    current += remainder
                    out.append((prev, current))
                    prev = current
                while current < pos:
                    current += 3
                    if current > prev:
                        out.append((prev, current))
                    prev = current
                continue
            pos += 1
        if prev < end:
            out.append((prev, end))
    return out
