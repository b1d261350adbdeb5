"""mkdocs hooks of the documentation site (mkdocs.yml ``hooks``).

- docs/api/cli.md gets the live ``--help`` of ``onnx-struct`` and of each subcommand, generated
  at build time from the argparse parsers (``onnx_struct.cli.build_parser``), so the page cannot
  drift from the command; tests/test_docs_site.py checks the built page against ``--help``.
- Sphinx roles in docstrings (``:func:`decode```) are shown as plain code: the docstrings are
  read by mkdocstrings, which does not interpret them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

MARKER = "<!-- onnx-struct --help -->"
ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|exc|obj):(?=<code>)")
WIDTH = "100"  # argparse wraps to $COLUMNS: a fixed width makes the page the same on every machine


def help_texts() -> dict[str, str]:
    """``{"": top-level help, "check": help of check, ...}`` at a fixed width."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        from onnx_struct.cli import COMMANDS, build_parser

        parser = build_parser()
        subparsers = next(a for a in parser._actions if a.dest == "command")  # argparse has no public accessor
        texts = {"": parser.format_help()}
        texts.update((name, subparsers.choices[name].format_help()) for name in COMMANDS)
        return texts
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def render() -> str:
    parts = []
    for name, text in help_texts().items():
        command = f"onnx-struct {name} --help" if name else "onnx-struct --help"
        parts.append(f"## `{command}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def on_config(config, **kwargs):
    # Document the source tree being built (as mkdocstrings' `paths: [.]` does), not whatever
    # onnx_struct happens to be installed.
    root = str(Path(config.config_file_path).parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown


def on_page_content(html: str, page, config, files) -> str:
    return ROLE.sub("", html)
