"""The ``onnx-struct`` command: one module per subcommand, registered in COMMANDS.

Exit codes for every subcommand: 0 success (``check``: valid), 1 the model is invalid or the
operation failed on its content, 2 usage or I/O errors. Errors are reported in one place,
:func:`main`: one line on stderr, ``onnx-struct COMMAND: INPUT: message`` (with ``--json`` also a
JSON object on stdout). A ValidationError exits 1, an OSError or :class:`UsageError` 2; anything
else is a bug and keeps its traceback.

Notes: docs/modules.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import warnings
from collections.abc import Sequence

import onnx.checker

from onnx_struct._version import __version__

# Subcommand name -> module defining add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "check": "onnx_struct.cli.check",
    "inspect": "onnx_struct.cli.inspect",
    "from-gguf": "onnx_struct.cli.from_gguf",
    "to-gguf": "onnx_struct.cli.to_gguf",
    "quantize": "onnx_struct.cli.quantize",
    "lower": "onnx_struct.cli.lower",
    "decode": "onnx_struct.cli.decode",
    "generate": "onnx_struct.cli.generate",
    "tokenize": "onnx_struct.cli.tokenize",
    "chat": "onnx_struct.cli.chat",
    "conformance": "onnx_struct.cli.conformance",
    "export": "onnx_struct.cli.export",
}

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Options that do not fit together or name nothing known (exit 2, like argparse's errors)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; with ``command`` (a name of COMMANDS) only that subcommand's module is
    imported and its parser built: ``onnx-struct generate`` does not import the checker or
    quantize for the other subcommands' options (0.1 s of a start). Without it, every one's
    (``--help`` lists them all)."""
    parser = argparse.ArgumentParser(
        prog="onnx-struct",
        description="Check, inspect, decode and convert ONNX models with structured byte buffers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        if command is not None and name != command:
            continue
        module = importlib.import_module(module_name)
        # Raw: the descriptions hold examples, one per line, that argparse would run together.
        sub = subparsers.add_parser(
            name, help=module.HELP, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(run=module.run, input_arg=module.INPUT)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    with warnings.catch_warnings():  # restored on return: main() may run inside another program
        warnings.showwarning = _warning_line(args)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.run(args)
    except UsageError as error:
        return fail(args, error, EXIT_USAGE)
    except OSError as error:  # its message names the file (a NotRegularFileError is one too)
        return fail(args, error, EXIT_USAGE)
    except onnx.checker.ValidationError as error:  # onnx_struct's ValidationError, or onnx's own (external data)
        return fail(args, error, EXIT_INVALID, with_input=True)
    except KeyboardInterrupt:
        return 130


def _warning_line(args: argparse.Namespace):
    """Python's warnings printed as the command's other messages are, one line on stderr
    (``onnx-struct generate: warning: ...``), not as Python's two lines with the source line."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = one_line(message).removeprefix("onnx_struct: ")  # the command names itself
        print(f"onnx-struct {args.command}: warning: {text}", file=file or sys.stderr)

    return show


def one_line(text: object) -> str:
    """``text`` on one line: onnx's checker messages continue on further lines ("==> Context: ...")."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def located(path: object, text: object) -> str:
    """``path: text`` on one line, without repeating ``path`` when the message already starts
    with it (a parse error names the file it read)."""
    line, path = one_line(text), str(path)
    return line if line.startswith((f"{path}:", f"{path} ")) else f"{path}: {line}"


def fail(args: argparse.Namespace, error: object, code: int, *, with_input: bool = False) -> int:
    """Print ``error`` as the command's one line on stderr and return ``code``."""
    message = located(getattr(args, args.input_arg), error) if with_input else one_line(error)
    print(f"onnx-struct {args.command}: {message}", file=sys.stderr)
    return code


def print_json(document: dict) -> None:
    """Print ``document`` as RFC 8259 JSON: a float NaN or infinity (which json writes as the
    non-JSON ``NaN`` / ``Infinity``) is the string "NaN", "Infinity" or "-Infinity"."""
    json.dump(_json_safe(document), sys.stdout, indent=2, allow_nan=False)
    print()


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def io_error_dict(error: OSError) -> dict:
    """An OSError as ``--json`` prints it: ``{"code": "io_error", "message", "errno"}`` (an I/O
    failure is not a ValidationError; its code is not among docs/errors.md's)."""
    return {"code": "io_error", "message": one_line(error), "errno": error.errno}


if __name__ == "__main__":
    sys.exit(main())
