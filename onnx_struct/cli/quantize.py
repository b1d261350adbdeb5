"""Quantize the MatMul/Gemm weights of an ONNX model into a block format (struct values).

The payload of each replaced weight is computed by the format's own encoder in onnxruntime; the
result is checked with onnx_struct.check_model before it is written.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from onnx_struct import formats
from onnx_struct.check.checker import check_model
from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.passes.quantize import WEIGHT_INPUT, plan, quantize, read_model

INPUT = "input"
HELP = "quantize MatMul/Gemm weights into a block format, e.g. --format Q4_0 (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the float .onnx model")
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument("--format", required=True, help="a registered format with an encoder, e.g. Q4_0, Q8_0")
    parser.add_argument(
        "--group-axis",
        choices=("input", "output"),
        default="input",
        help="axis the blocks group: the input axis K as GGUF does (default), or the output axis N",
    )
    parser.add_argument("--min-elements", type=int, default=4096, help="leave smaller weights as float (default 4096)")
    parser.add_argument(
        "--op-types",
        default="MatMul,Gemm",
        help="comma-separated op types whose weights are quantized (default MatMul,Gemm)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


def run(args: argparse.Namespace) -> int:
    # Options first (exit 2), then the model's content (exit 1, as ValidationErrors from the library).
    op_types = tuple(op.strip() for op in args.op_types.split(",") if op.strip())
    unknown = [op for op in op_types if op not in WEIGHT_INPUT]
    if unknown:
        raise UsageError(
            f"--op-types {unknown} are not supported; the weight input is known for {sorted(WEIGHT_INPUT)}"
        )
    try:
        fmt = formats.get(args.format)
    except KeyError as error:
        raise UsageError(error.args[0] if error.args else f"unknown format {args.format!r}") from None
    if fmt.encoder is None:
        raise UsageError(f"format {fmt.name} has no encoder; quantizing needs one")
    options = {"op_types": op_types, "min_elements": args.min_elements, "group_axis": args.group_axis}
    source = read_model(args.input)
    planned = plan(source, fmt, **options)
    model = quantize(source, fmt, **options)
    check_model(model)
    output = pathlib.Path(args.output)
    data = model.SerializeToString()
    output.write_bytes(data)
    if not args.quiet:
        for name, reason in planned.skipped.items():
            print(f"kept {name}: {reason}", file=sys.stderr)
        print(
            f"{output}: {len(planned.weights)} weights in {planned.format.name}, {len(planned.skipped)} kept, {len(data)} bytes",
            file=sys.stderr,
        )
    return EXIT_OK
