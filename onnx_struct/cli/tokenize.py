"""Tokenize a text with a GGUF vocabulary, as llama.cpp does: its ids and their pieces.

MODEL is a ``.gguf`` file or a model converted from one (``from-gguf``: its metadata holds the
vocabulary). BOS/EOS are added as the file says unless ``--no-bos``; ``--special`` matches
control tokens in the text.

    onnx-struct tokenize model.gguf "Hello world"
    onnx-struct tokenize model.onnx "<|im_start|>user" --special --json
"""

from __future__ import annotations

import argparse
import json
import sys

from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.cli.generate import require_stdout, stdout_gone
from onnx_struct.errors import ValidationError

INPUT = "model"
HELP = "tokenize a text with a GGUF file's vocabulary: ids and pieces (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a .gguf file, or a .onnx converted from one")
    parser.add_argument("text", help="the text to tokenize")
    parser.add_argument("--special", action="store_true", help="match control tokens written in the text")
    parser.add_argument("--no-bos", action="store_true", help="add no BOS/EOS/SEP (llama.cpp's add_special=false)")
    parser.add_argument("--json", action="store_true", help="print a JSON object (ids, pieces) instead of lines")


def run(args: argparse.Namespace) -> int:
    from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer  # noqa: PLC0415 - on use

    require_stdout()
    tokenizer = load_tokenizer(args.model)
    try:
        ids = tokenizer.encode(args.text, add_bos=False if args.no_bos else None, special=args.special)
    except ValidationError as error:
        if error.code == "bad_argument":  # the text given (bytes that are not UTF-8 on the command line)
            raise UsageError(f"text: {error.reason}") from None
        raise
    pieces = [tokenizer.token_to_piece(i, special=True).decode("utf-8", "replace") for i in ids]
    try:
        if args.json:
            print(json.dumps({"ids": ids, "pieces": pieces}, ensure_ascii=False))
        else:
            for token, piece in zip(ids, pieces, strict=True):
                print(f"{token:>8} {json.dumps(piece, ensure_ascii=False)}")
        sys.stdout.flush()
    except BrokenPipeError:
        return stdout_gone()
    return EXIT_OK
