"""``onnx-struct quantize``: MatMul/Gemm (on request Gather, Conv) weights into a block format.

The model is quantized by :func:`onnx_struct.passes.quantize_report.quantize_with_report`, checked and
loaded in onnxruntime before it is written: a format onnxruntime cannot decode is refused (exit 1)
unless ``--allow-reference-only``. The report (stderr; ``--json``: stdout) has one line per float
tensor (quantized, kept or not considered, with the reason and the output error on a calibration
input), the coverage by op type, and a warning for every error above ``--warn-above``.

Notes: docs/modules.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from onnx_struct.check.checker import check_model
from onnx_struct.cli import EXIT_OK, UsageError, print_json
from onnx_struct.cli.output import as_usage, refuse_foreign_data, refuse_inputs
from onnx_struct.errors import ValidationError
from onnx_struct.passes.quantize_plan import DEFAULT_OP_TYPES, WEIGHT_INPUT, resolve_format
from onnx_struct.passes.quantize_report import DEFAULT_THRESHOLD, quantize_with_report
from onnx_struct.passes.quantize_write import QuantizeOutput

INPUT = "input"
HELP = "quantize MatMul/Gemm (and Gather, Conv) weights into a block format, e.g. --format Q4_0 (exit 0 ok, 1 invalid, 2 usage/I-O)"


def _count(text: str) -> int:
    """A whole number of elements, 0 or more (argparse: anything else is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the float .onnx model")
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument(
        "--format",
        required=True,
        help="a registered format with an encoder, case-insensitive, e.g. Q4_0, q8_0, MXFP4 (a wrong name lists them)",
    )
    parser.add_argument(
        "--group-axis",
        choices=("input", "output"),
        default="input",
        help="axis the blocks group: the input axis K as GGUF does (default), or the output axis N",
    )
    parser.add_argument(
        "--min-elements", type=_count, default=4096, help="leave smaller weights as float (default 4096)"
    )
    parser.add_argument(
        "--op-types",
        default=",".join(DEFAULT_OP_TYPES),
        help=f"comma-separated op types whose weights are quantized, of {', '.join(WEIGHT_INPUT)} (default MatMul,Gemm)",
    )
    parser.add_argument(
        "--no-pad",
        action="store_true",
        help="keep as float a weight whose grouped axis is not a multiple of the block size (default: pad it with zeros)",
    )
    parser.add_argument(
        "--allow-reference-only",
        action="store_true",
        help="write the model even if onnxruntime cannot run it (e.g. OCP_MXFP4: only a reference decoder runs it)",
    )
    parser.add_argument(
        "--calibration",
        metavar="FILE.npz",
        help="the model's inputs (an .npz, one array per input name) to measure each op's error on (default: random)",
    )
    parser.add_argument(
        "--warn-above",
        type=_fraction,
        default=DEFAULT_THRESHOLD,
        metavar="ERROR",
        help=f"warn about a weight whose op's relative output error exceeds this (default {DEFAULT_THRESHOLD})",
    )
    parser.add_argument(
        "--external",
        action="store_true",
        help="write the struct payloads and large tensors to OUT.data beside OUT (automatic over 2 GiB)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success (warnings still)")


def run(args: argparse.Namespace) -> int:
    # Options first (exit 2), then the model's content (exit 1, as ValidationErrors from the library).
    op_types = tuple(op.strip() for op in args.op_types.split(",") if op.strip())
    known = {op.casefold(): op for op in WEIGHT_INPUT}
    unknown = [op for op in op_types if op.casefold() not in known]
    if unknown:
        raise UsageError(f"--op-types {unknown} are not supported; the weight input is known for {list(WEIGHT_INPUT)}")
    op_types = tuple(known[op.casefold()] for op in op_types)
    try:
        fmt = resolve_format(args.format)
    except (KeyError, ValueError) as error:
        raise UsageError(f"--format: {error.args[0]}") from None
    output = pathlib.Path(args.output)
    parent = output.absolute().parent
    if not parent.is_dir():  # before any work: the output's directory, not the model, is at fault
        raise UsageError(f"OUT {args.output}: the directory {parent} does not exist")
    # OUT is not the input nor a file it references: checked now, before the model is quantized,
    # so that the input is not read again while the result is held (docs/semantics.md, "Quantize")
    refuse_inputs(output, [], [args.input])
    refuse_inputs(output.with_name(f"{output.name}.data"), [], [args.input])
    options = {"op_types": op_types, "min_elements": args.min_elements, "group_axis": args.group_axis}
    options["pad"] = not args.no_pad
    # --external, or a result estimated past protobuf's 2 GiB: its payloads are appended to OUT.data
    # as they are encoded, and OUT is the skeleton (passes/quantize_write.py). OUT.data is replaced
    # only when it is OUT's own (a link is refused by QuantizeOutput): checked before any work with
    # --external, and when the estimate makes the result external otherwise.
    data_file = output.with_name(f"{output.name}.data")
    try:
        destination = QuantizeOutput(
            output,
            external=True if args.external else None,
            check_data=lambda: refuse_foreign_data(output, data_file),
        )
    except ValidationError as error:
        raise as_usage(output, error) from None
    with destination:
        if args.external:
            refuse_foreign_data(output, data_file)
        model, report = quantize_with_report(
            args.input,  # a path: its large weights are read from the file one at a time
            fmt,
            **options,
            allow_reference_only=args.allow_reference_only,
            calibration=args.calibration,
            threshold=args.warn_above,
            output=destination,
        )
        if not report.quantized:  # a model with quantized weights was checked by quantize_with_report
            check_model(model, base_dir=destination.base_dir if destination.streaming else None)
        size = destination.finish(model)  # (refused inputs checked above)
    if args.json:
        print_json({"path": str(output), "bytes": size, **report.to_json()})
    elif not args.quiet:
        for line in report.summary(op_types):
            print(line, file=sys.stderr)
        kept = sum(w.status == "kept" for w in report.weights)
        print(
            f"{output}: {len(report.quantized)} weights in {report.format}, {kept} kept, {size} bytes",
            file=sys.stderr,
        )
    if args.quiet or args.json:
        for text in report.warnings:
            print(f"onnx-struct quantize: warning: {text}", file=sys.stderr)
    return EXIT_OK
