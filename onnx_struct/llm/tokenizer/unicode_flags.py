"""The code point properties llama.cpp's tokenizers read (its ``unicode-data.cpp``), derived as
llama.cpp's ``scripts/gen-unicode-data.py`` derives them from the Unicode database.

- categories: the general category's class (\\p{L}, \\p{N}, \\p{M}, \\p{P}, \\p{S}, \\p{C}, \\p{Z});
  an unassigned code point (``Cn``) is in none of them (llama.cpp's UNDEFINED), so not \\p{C};
- whitespace: Unicode's White_Space property (PropList.txt), as llama.cpp lists it;
- lowercase: the *simple* lowercase mapping of UnicodeData.txt (one code point to one);
- "NFD": the first code point of the character's canonical decomposition (llama.cpp keeps one
  code point per code point).

Python's ``unicodedata`` is the database here; where its Unicode version differs from the one
llama.cpp's tables were generated from, newly assigned code points may differ.
"""

from __future__ import annotations

import functools
import unicodedata

WHITESPACE = frozenset(
    [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)
# full lowercase mappings of more than one code point whose simple mapping is one (SpecialCasing.txt)
_SIMPLE_LOWER = {"\u0130": "i"}


@functools.lru_cache(maxsize=65536)
def category_class(char: str) -> str:
    """The one-letter class of ``char``'s general category ("L", "N", ...), "" where unassigned."""
    category = unicodedata.category(char)
    return "" if category == "Cn" else category[0]


@functools.lru_cache(maxsize=65536)
def to_lower(char: str) -> str:
    """``char``'s simple lowercase mapping (itself where it has none)."""
    if char in _SIMPLE_LOWER:
        return _SIMPLE_LOWER[char]
    lower = char.lower()
    return lower if len(lower) == 1 else char


@functools.lru_cache(maxsize=65536)
def nfd_first(char: str) -> str:
    """The first code point of ``char``'s canonical decomposition (llama.cpp's one-to-one NFD)."""
    return unicodedata.normalize("NFD", char)[0]
