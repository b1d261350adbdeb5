"""Quantize the MatMul/Gemm weights of an ONNX model into a block format (struct values).

The payload of each replaced weight is computed by the format's own encoder in onnxruntime; the
result is checked with onnx_struct.check_model before it is written.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from onnx_struct.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from onnx_struct.errors import ValidationError

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
    from onnx_struct.checker import check_model  # noqa: PLC0415
    from onnx_struct.external_io import load_with_external_data  # noqa: PLC0415
    from onnx_struct.formats.quantize import plan, quantize  # noqa: PLC0415 - keep `onnx-struct --help` fast

    op_types = tuple(op.strip() for op in args.op_types.split(",") if op.strip())
    try:  # onnx_struct's file rules: a FIFO is refused unopened, external tensors stay in the model's directory
        source = load_with_external_data(args.input)
    except ValidationError as error:
        # An unreadable model is invalid content (exit 1), as in check, lower and decode.
        print(f"onnx-struct quantize: {args.input}: {error}", file=sys.stderr)
        return EXIT_INVALID
    options = {"op_types": op_types, "min_elements": args.min_elements, "group_axis": args.group_axis}
    try:
        planned = plan(source, args.format, **options)
        model = quantize(source, planned.format, **options)
        check_model(model)
    except ValidationError as error:
        print(f"onnx-struct quantize: {error}", file=sys.stderr)
        return EXIT_INVALID
    except (KeyError, ValueError) as error:  # unknown format, format without encoder, bad op type
        print(f"onnx-struct quantize: {error.args[0] if error.args else error}", file=sys.stderr)
        return EXIT_USAGE
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
