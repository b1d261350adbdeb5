"""``onnx-struct tokenize MODEL TEXT [--special] [--no-bos] [--json]``, run in-process."""

from __future__ import annotations

import json

import pytest

from onnx_struct.cli import main

NORMAL, CONTROL = 1, 3


@pytest.fixture
def vocab_file(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(["h", "i", "hi", "\u0120", "<s>"])
    writer.add_token_types([NORMAL, NORMAL, NORMAL, NORMAL, CONTROL])
    writer.add_token_merges(["h i"])
    writer.add_bos_token_id(4)
    writer.add_add_bos_token(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def test_ids_and_pieces_are_printed(vocab_file, capsys):
    assert main(["tokenize", str(vocab_file), "hi<s>"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # BOS (the file's add_bos_token), "hi" merged; <s> not matched without --special: '<', 's',
    # '>' have no tokens and are dropped, as llama.cpp drops them
    assert [line.split() for line in lines] == [["4", '"<s>"'], ["2", '"hi"']]


def test_special_no_bos_and_json(vocab_file, capsys):
    assert main(["tokenize", str(vocab_file), "hi<s>", "--special", "--no-bos", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ids": [2, 4], "pieces": ["hi", "<s>"]}


def test_text_that_is_not_utf8_is_refused(vocab_file, capsys):
    # Python's argv holds undecodable bytes as lone surrogates: the text argument's usage error
    # (exit 2, as generate's --prompt), not an invalid model
    assert main(["tokenize", str(vocab_file), "h\udcffi"]) == 2
    assert "lone surrogate" in capsys.readouterr().err
