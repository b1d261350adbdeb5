"""The ``onnx-struct`` command: one module per subcommand, registered in COMMANDS.

Exit codes, for every subcommand: 0 success (for ``check``: valid), 1 the model is invalid or the
operation failed on its content, 2 usage or I/O errors (as argparse and most Python CLIs do).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Subcommand name -> module defining add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "check": "onnx_struct.cli.check",
    "inspect": "onnx_struct.cli.inspect",
    "from-gguf": "onnx_struct.cli.from_gguf",
    "quantize": "onnx_struct.cli.quantize",
    "lower": "onnx_struct.cli.lower",
    "decode": "onnx_struct.cli.decode",
}

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    from onnx_struct import __version__  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="onnx-struct",
        description="Check, inspect, decode and convert ONNX models with structured byte buffers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except OSError as error:
        print(f"onnx-struct {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
