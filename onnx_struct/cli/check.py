"""Check a model with struct parts against the proposal's rules and the stock ONNX checker."""

from __future__ import annotations

import argparse
import json
import sys

from onnx_struct.check.checker import validate
from onnx_struct.cli import EXIT_INVALID, EXIT_OK, one_line

INPUT = "path"
HELP = "check a model (exit 0 valid, 1 invalid, 2 usage/I-O error)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the .onnx file")
    parser.add_argument("--full", action="store_true", help="also run struct-aware shape inference")
    parser.add_argument("--json", action="store_true", help="print diagnostics as JSON")


def run(args: argparse.Namespace) -> int:
    diagnostics = validate(args.path, full_check=args.full)
    unreadable = [d for d in diagnostics if isinstance(d, OSError)]  # a FIFO or directory: I/O, exit 2
    if unreadable:
        raise unreadable[0]
    if args.json:
        report = {"path": args.path, "valid": not diagnostics, "diagnostics": [d.to_dict() for d in diagnostics]}
        json.dump(report, sys.stdout, indent=2)
        print()
    elif diagnostics:
        for diagnostic in diagnostics:
            print(f"{args.path}: {one_line(diagnostic)}", file=sys.stderr)
    else:
        print(f"{args.path}: valid")
    return EXIT_INVALID if diagnostics else EXIT_OK
