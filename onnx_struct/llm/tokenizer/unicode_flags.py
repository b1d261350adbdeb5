"""The code point properties llama.cpp's WordPiece preprocessing reads (its ``unicode-data.cpp``).

- categories, whitespace and the simple lowercase: llama.cpp's own tables, as data
  (``unicode_data``, read through ``regex_split``); an unassigned code point (``Cn``) is in no
  category (llama.cpp's UNDEFINED), so not \\p{C};
- "NFD": the first code point of the character's canonical decomposition, one code point to one,
  as llama.cpp's ``scripts/gen-unicode-data.py`` derives its table; derived here from Python's
  ``unicodedata``, so a code point assigned after Python's Unicode version is left as is.
"""

from __future__ import annotations

import functools
import unicodedata

from onnx_struct.llm.tokenizer import unicode_data
from onnx_struct.llm.tokenizer.regex_split import category, tolower

WHITESPACE = unicode_data.WHITESPACE


@functools.lru_cache(maxsize=65536)
def category_class(char: str) -> str:
    """The one-letter class of ``char``'s general category ("L", "N", "M", "P", "S", "Z", "C"),
    "" where llama.cpp holds it undefined."""
    letter = category(ord(char))
    return "" if letter == "U" else letter


@functools.lru_cache(maxsize=65536)
def to_lower(char: str) -> str:
    """``char``'s simple lowercase mapping, llama.cpp's ``unicode_tolower`` (itself where none)."""
    return chr(tolower(ord(char)))


@functools.lru_cache(maxsize=65536)
def nfd_first(char: str) -> str:
    """The first code point of ``char``'s canonical decomposition (llama.cpp's one-to-one NFD)."""
    return unicodedata.normalize("NFD", char)[0]
