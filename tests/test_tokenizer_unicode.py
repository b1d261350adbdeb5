"""llama.cpp's code point categories as onnx_struct/llm/tokenizer/unicode_data.py holds them:
regenerated from llama.cpp's src/unicode-data.cpp (slow tier: the source may be fetched) and
spot-checked by hand (fast)."""

from __future__ import annotations

import pathlib

import pytest
from support.llama_cpp_source import llama_cpp_source
from support.llama_cpp_unicode import module_text

from onnx_struct.llm.tokenizer import regex_split

MODULE = pathlib.Path(regex_split.__file__).with_name("unicode_data.py")


@pytest.mark.slow
def test_the_data_module_is_llama_cpp_s_table():
    source = llama_cpp_source(fetch=True)
    if source is None:
        pytest.skip("llama.cpp's source is not at hand")
    assert MODULE.read_text() == module_text(source)


@pytest.mark.parametrize(
    ("char", "category"),
    [("a", "L"), ("é", "L"), ("你", "L"), ("7", "N"), ("½", "N"), ("٣", "N"), ("\u0301", "M"), (",", "P"),
     ("«", "P"), ("$", "S"), ("€", "S"), ("🦙", "S"), (" ", "Z"), ("\n", "C")],
)  # fmt: skip
def test_categories_of_known_code_points(char, category):
    assert regex_split.category(ord(char)) == category


def test_whitespace_and_lowercase():
    assert all(regex_split.is_whitespace(ord(c)) for c in " \t\n\v\f\r\u0085\u00a0\u2009\u3000")
    assert not regex_split.is_whitespace(ord("\u200b"))  # zero-width space: not \s in llama.cpp
    assert regex_split.tolower(ord("A")) == ord("a") and regex_split.tolower(ord("Σ")) == ord("σ")
