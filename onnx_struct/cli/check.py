"""Check a model with struct parts against the proposal's rules and the stock ONNX checker."""

from __future__ import annotations

import argparse
import sys

from onnx_struct.check.checker import validate
from onnx_struct.cli import EXIT_INVALID, EXIT_OK, io_error_dict, located, print_json

INPUT = "path"
HELP = "check a model (exit 0 valid, 1 invalid, 2 usage/I-O error)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the .onnx file")
    parser.add_argument("--full", action="store_true", help="also run struct-aware shape inference")
    parser.add_argument("--json", action="store_true", help="print diagnostics as JSON")


def run(args: argparse.Namespace) -> int:
    if args.full and sys.stderr.isatty():
        # Shape inference of a large model takes a while; say what is running (a TTY only: a log
        # or a pipe gets nothing but the result). The result line follows on its own line.
        print(f"checking {args.path} (rules, onnx.checker, struct-aware shape inference) ...", file=sys.stderr)
    try:
        diagnostics = validate(args.path, full_check=args.full)
        unreadable = [d for d in diagnostics if isinstance(d, OSError)]  # a FIFO or directory: I/O, exit 2
        if unreadable:
            raise unreadable[0]
    except OSError as error:  # exit 2 with the one stderr line from cli.main; --json also gets an object
        if args.json:
            print_json({"path": args.path, "valid": False, "error": io_error_dict(error), "diagnostics": []})
        raise
    if args.json:
        report = {"path": args.path, "valid": not diagnostics, "diagnostics": [d.to_dict() for d in diagnostics]}
        # A file that is no model at all (empty, corrupt, a GGUF file): the "error" key, as for an
        # I/O failure, beside the diagnostic (README: --json output has "error" when it cannot be read).
        unreadable = next((d for d in diagnostics if getattr(d, "code", "") == "not_parsable"), None)
        if unreadable is not None:
            report["error"] = unreadable.to_dict()
        print_json(report)
    elif diagnostics:
        for diagnostic in diagnostics:
            print(located(args.path, diagnostic), file=sys.stderr)
    else:
        print(f"{args.path}: valid")
    return EXIT_INVALID if diagnostics else EXIT_OK
