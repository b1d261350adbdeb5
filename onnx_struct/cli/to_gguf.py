"""Write the struct weights of an ONNX model to a GGUF file llama.cpp loads (gguf-py's writer).

A model converted by `onnx-struct from-gguf` (with or without --graph, inline or --reference) gets
its recorded GGUF metadata and tensor names back, and the tensor bytes of the source file. Any
other model (e.g. from `onnx-struct quantize`) gives weights only: the graph's weight names,
mapped to llama's GGUF names when they all follow Hugging Face llama naming (the output says
which). A struct value that cannot be a GGUF tensor is skipped with its reason on stderr: a
format outside GGUF's, more than 4 dimensions, a weight quantize padded, or blocks along the
output axis of a MatMul (quantize --group-axis output). No struct value qualifying is exit 1.

onnx-struct to-gguf model.onnx model.gguf
"""

from __future__ import annotations

import argparse
import sys

from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.cli.output import refuse_inputs, write_output
from onnx_struct.convert.to_gguf import plan_gguf, write_gguf

INPUT = "input"
HELP = "write a model's struct weights to a .gguf file (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the .onnx model with struct values")
    parser.add_argument("output", help="the .gguf file to write")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success (skipped weights still)")


def run(args: argparse.Namespace) -> int:
    # OUT is not the input nor a file it references (a --reference model's .gguf): before any work
    output = refuse_inputs(args.output, [], [args.input])
    try:
        export = plan_gguf(args.input)
    except ImportError as error:
        if error.name != "gguf":  # only the optional dependency's absence is the user's to fix
            raise
        raise UsageError(str(error)) from None
    write_output(output, lambda handle: write_gguf(export, handle), models=[args.input])
    for name, reason in export.skipped:
        print(f"onnx-struct to-gguf: skipped {name!r}: {reason}", file=sys.stderr)
    if not args.quiet:
        print(f"{output}: {export.summary()}, {output.stat().st_size} bytes", file=sys.stderr)
    return EXIT_OK
