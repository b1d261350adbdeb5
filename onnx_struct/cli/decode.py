"""Decode one struct value of a model with its root decoder and save the logical value as .npy."""

from __future__ import annotations

import argparse

import numpy as np

from onnx_struct.cli import EXIT_OK
from onnx_struct.runtime.codec import decode

INPUT = "model"
HELP = "decode a struct value to a .npy file (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx model")
    parser.add_argument("name", help="the struct value's name")
    parser.add_argument("-o", "--output", required=True, help="the .npy file to write")
    parser.add_argument(
        "--runtime",
        choices=("onnxruntime", "reference"),
        default="onnxruntime",
        help="where the decoder runs (default onnxruntime; reference: onnx's ReferenceEvaluator)",
    )


def run(args: argparse.Namespace) -> int:
    value = decode(args.name, args.model, runtime=args.runtime)
    np.save(args.output, value, allow_pickle=False)
    print(f"{args.name}: {value.dtype} {list(value.shape)} -> {args.output}")
    return EXIT_OK
