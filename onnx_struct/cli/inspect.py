"""Show the physical layout of a model's struct declarations and values (no payload is read).

onnx-struct inspect model.onnx                     # declarations as trees, then struct values
onnx-struct inspect model.onnx --value weight      # one struct value
onnx-struct inspect model.onnx --json              # the same data, structured
onnx-struct inspect model.onnx --svg q4.svg --type Q4_0   # byte/bit diagram of one declaration
"""

from __future__ import annotations

import argparse
import sys

from onnx_struct.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, io_error_dict, located, print_json
from onnx_struct.cli.output import write_output
from onnx_struct.errors import ValidationError
from onnx_struct.tools.describe import describe, format_text
from onnx_struct.tools.svg import layout_svg

INPUT = "path"
HELP = "show declarations (bit offsets, sizes) and struct values, or draw one layout as SVG"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the .onnx file")
    parser.add_argument("--value", metavar="NAME", help="describe only this struct value")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    parser.add_argument("--svg", metavar="OUT", help="write an SVG diagram of the declaration chosen by --type")
    parser.add_argument("--type", metavar="NAME|INDEX", help="the declaration to draw (a struct_types index or name)")


def _names_nothing(error: ValidationError) -> bool:
    """The error says --value or --type names nothing in the model: a usage error (exit 2)."""
    return error.code in ("unknown_value", "unknown_type_index") or error.path == "--type"


def run(args: argparse.Namespace) -> int:
    if (args.svg is None) != (args.type is None):
        print("onnx-struct inspect: --svg and --type go together", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _run(args)
    except OSError as error:  # exit 2 with the one stderr line from cli.main; --json also gets an object
        if args.json:
            print_json({"path": args.path, "error": io_error_dict(error)})
        raise


def _run(args: argparse.Namespace) -> int:
    try:
        if args.svg is not None:
            svg = layout_svg(args.path, args.type)
            write_output(args.svg, lambda handle: handle.write(svg.encode("utf-8")), models=[args.path])
            print(f"{args.svg}: layout of {args.type} written")
            return EXIT_OK
        description = describe(args.path, args.value)
    except ValidationError as error:
        if isinstance(error, OSError):  # a FIFO or directory given as the model: I/O, exit 2
            raise
        code = EXIT_USAGE if _names_nothing(error) else EXIT_INVALID
        if args.json:
            print_json({"path": args.path, "error": error.to_dict()})
        print(located(args.path, error), file=sys.stderr)  # the one line, as every failure has
        return code
    if args.json:
        print_json({"path": args.path, **description})
    else:
        text = format_text(description)
        if not description["struct_types"] and not description["struct_values"]:
            # a plain ONNX model: a line that says so, not an empty one (after its metadata, if any)
            text = "\n".join(filter(None, [text, f"{args.path}: no struct parts (no struct_types, no struct values)"]))
        print(text)
    errors = [
        entry["error"] for entry in description["struct_types"] + description["struct_values"] if "error" in entry
    ]
    if errors:  # the exit status's reason, once (each entry's error is in the description)
        print(f"{args.path}: {len(errors)} entries have errors; the first: {errors[0]}", file=sys.stderr)
    return EXIT_INVALID if errors else EXIT_OK
