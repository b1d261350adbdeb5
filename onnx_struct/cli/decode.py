"""Decode one struct value of a model with its root decoder and save the logical value as .npy.

The array is written in .npy format to exactly the path given with -o (numpy's own np.save would
append ".npy" to a name without it; onnx-struct does not).
"""

from __future__ import annotations

import argparse

import numpy as np

from onnx_struct.cli import EXIT_OK, EXIT_USAGE, fail
from onnx_struct.cli.output import write_output
from onnx_struct.errors import ValidationError
from onnx_struct.runtime.codec import decode

INPUT = "model"
HELP = "decode a struct value to a .npy file (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx model")
    parser.add_argument("name", help="the struct value's name")
    parser.add_argument("-o", "--output", required=True, help="the file to write (.npy format, at exactly this path)")
    parser.add_argument(
        "--runtime",
        choices=("onnxruntime", "reference"),
        default="onnxruntime",
        help="where the decoder runs (default onnxruntime; reference: onnx's ReferenceEvaluator)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        value = decode(args.name, args.model, runtime=args.runtime)
    except ValidationError as error:
        if error.code != "unknown_value" or isinstance(error, OSError):
            raise
        return fail(args, error, EXIT_USAGE, with_input=True)  # NAME names nothing: usage, as inspect --value
    # A handle: np.save given a name appends ".npy" to it.
    write_output(args.output, lambda handle: np.save(handle, value, allow_pickle=False), models=[args.model])
    print(f"{args.name}: {value.dtype} {list(value.shape)} -> {args.output}")
    return EXIT_OK
