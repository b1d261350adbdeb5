"""Quantize the MatMul/Gemm (and on request Gather, Conv) weights of an ONNX model into a block
format (struct values).

The payload of each replaced weight is computed by the format's own encoder in onnxruntime; the
result is checked with onnx_struct.check_model and loaded (lowered) into an onnxruntime session
before it is written: a format onnxruntime cannot decode is refused (exit 1) unless
--allow-reference-only. The summary on stderr names every weight replaced, every weight kept
(with the reason), every float initializer of another op type, and what share of the float
elements each op type leaves unquantized.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from onnx_struct.check.checker import check_model
from onnx_struct.cli import EXIT_OK, UsageError
from onnx_struct.cli.output import write_output
from onnx_struct.passes.quantize import WEIGHT_INPUT, Plan, plan, quantize, read_model
from onnx_struct.passes.quantize_plan import DEFAULT_OP_TYPES, resolve_format

INPUT = "input"
HELP = "quantize MatMul/Gemm (and Gather, Conv) weights into a block format, e.g. --format Q4_0 (exit 0 ok, 1 invalid, 2 usage/I-O)"


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
    parser.add_argument("--min-elements", type=int, default=4096, help="leave smaller weights as float (default 4096)")
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
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")


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
    options = {"op_types": op_types, "min_elements": args.min_elements, "group_axis": args.group_axis}
    options["pad"] = not args.no_pad
    source = read_model(args.input)
    planned = plan(source, fmt, **options)
    model = quantize(source, fmt, **options, allow_reference_only=args.allow_reference_only)
    check_model(model)
    output = pathlib.Path(args.output)
    data = model.SerializeToString()
    write_output(output, lambda handle: handle.write(data), models=[args.input])
    if not args.quiet:
        for line in report(planned, op_types):
            print(line, file=sys.stderr)
        print(
            f"{output}: {len(planned.weights)} weights in {planned.format.name}, {len(planned.skipped)} kept, {len(data)} bytes",
            file=sys.stderr,
        )
    return EXIT_OK


def report(planned: Plan, op_types: tuple[str, ...]) -> list[str]:
    """One line per weight replaced, kept or of another op type, then the coverage by op type."""
    lines = []
    for w in planned.weights:
        how = f"stored as {list(w.stored_shape)}"
        if w.pad:
            how += f", its grouped axis padded from {w.stored_shape[-1] - w.pad} to {w.stored_shape[-1]} with zeros"
        lines.append(f"quantized {w.name} {list(w.shape)}: {how}")
    lines += [f"kept {name}: {reason}" for name, reason in planned.skipped.items()]
    lines += [f"not considered {name}: {reason}" for name, reason in planned.other.items()]
    done, total = planned.coverage()
    if total:
        lines.append(f"coverage: {done} of {total} float initializer elements quantized ({_percent(done, total)})")
        for op, count in planned.not_quantized_by_op().items():
            if not count:
                continue
            why = ""
            if op in WEIGHT_INPUT and op not in op_types:
                why = f": {op} is not in --op-types (add it: --op-types {','.join((*op_types, op))})"
            elif op == "-":
                op = "read by no node"
            lines.append(f"not quantized: {op} ({_percent(count, total)} of the float elements){why}")
    return lines


def _percent(part: int, whole: int) -> str:
    share = 100 * part / whole
    return f"{share:.0f}%" if share >= 1 or share == 0 else f"{share:.2g}%"
