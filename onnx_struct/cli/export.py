"""Export a model converted from a GGUF file for a neighbouring tool.

``genai``: a folder onnxruntime-genai loads as it is (``og.Model(DIR)``): the model lowered with
quantized execution, ``genai_config.json`` from the GGUF metadata, and the tokenizer files.
``tokenizer``: ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and
``chat_template.jinja``, the folder ``transformers.PreTrainedTokenizerFast.from_pretrained``
loads. Both refuse (exit 1, nothing written) a tokenizer HF ``tokenizers`` cannot express exactly.

    onnx-struct export genai model.onnx out/
    onnx-struct export tokenizer model.gguf tok/
"""

from __future__ import annotations

import argparse

from onnx_struct.cli import EXIT_OK, UsageError

INPUT = "model"
HELP = "export for onnxruntime-genai or HF tokenizers: a folder it loads (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=("genai", "tokenizer"), help="what to write")
    parser.add_argument(
        "model", help="genai: a model built by from-gguf --graph; tokenizer: that, any converted model or a .gguf"
    )
    parser.add_argument("directory", help="the folder to write (created if absent)")
    parser.add_argument(
        "--accuracy-level",
        type=int,
        choices=range(5),
        default=4,
        metavar="N",
        help="genai: the MatMulNBits accuracy level, 0-4 (default 4, onnxruntime's and onnx-struct generate's; "
        "0: float32 activations, as generate --accuracy-level 0)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.kind == "genai":
            from onnx_struct.convert.genai import export_genai  # noqa: PLC0415 - on use

            written = export_genai(args.model, args.directory, accuracy_level=args.accuracy_level)
        else:
            from onnx_struct.llm.tokenizer.hf_export import save_pretrained  # noqa: PLC0415 - on use
            from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer  # noqa: PLC0415 - on use

            written = save_pretrained(load_tokenizer(args.model), args.directory)
    except ImportError as error:
        if error.name != "tokenizers":  # only the optional dependency's absence is the user's to fix
            raise
        raise UsageError(f"{error}; install the llm extra (pip install onnx-struct[llm])") from None
    for path in written:
        print(path)
    return EXIT_OK
