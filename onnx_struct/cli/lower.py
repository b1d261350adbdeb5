"""Lower a model with struct parts to a plain ONNX model (decoders as model-local functions).

Leaves of external payloads are referenced in place when OUT is written to the same directory as
IN (the locations are relative to it); otherwise they are read into the lowered model.
"""

from __future__ import annotations

import argparse
import pathlib

from onnx_struct.cli import EXIT_OK
from onnx_struct.cli.output import write_model_with_external_tensors, write_output
from onnx_struct.limits import PROTOBUF_LIMIT
from onnx_struct.lowering.lower import lower
from onnx_struct.payload import external
from onnx_struct.schema.model import model_directory, resolve_path

INPUT = "input"
HELP = "lower struct values to leaf initializers + decoder calls (exit 0 ok, 1 invalid, 2 usage/I-O)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the .onnx model with struct parts")
    parser.add_argument("output", help="the plain .onnx model to write")
    parser.add_argument(
        "--compact",
        action="store_true",
        help="also list leaf initializers as graph inputs so onnxruntime does not constant-fold the decoders",
    )
    parser.add_argument(
        "--execution",
        choices=("decode", "quantized"),
        default="decode",
        help="quantized: MatMul/Gemm/Gather weights in a registered block format stay quantized "
        "(DequantizeLinear -> MatMulNBits, GatherBlockQuantized; docs/execution.md); decode (default): "
        "every struct value through its decoder",
    )


def run(args: argparse.Namespace) -> int:
    source, output = pathlib.Path(args.input), pathlib.Path(args.output)
    # Kept references stay valid only if the output's directory is the one they are looked up in.
    directory = model_directory(source)
    same_directory = directory.resolved_file_directory is None and directory == resolve_path(output.absolute().parent)
    model = lower(source, compact=args.compact, keep_external=same_directory, execution=args.execution)
    if not same_directory:  # the stock tensors' references too would name files the output has not
        external.load_external_tensors(model, directory)
    if model.ByteSize() > PROTOBUF_LIMIT:
        write_model_with_external_tensors(model, output, models=[source])
    else:
        data = model.SerializeToString()
        write_output(output, lambda handle: handle.write(data), models=[source])
    print(f"{args.output}: {len(model.graph.initializer)} initializers, {len(model.functions)} decoder functions")
    return EXIT_OK
