"""The documentation site (mkdocs.yml): the quick starts' code runs, the strict build passes, and
the API reference covers every public name and the live CLI help.

The quick starts run without mkdocs; the build tests skip when mkdocs is not installed
(``pip install ".[docs]"``; CI installs it and builds the site in .ci/run).
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from onnx_struct.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
QUICK_STARTS = sorted(DOCS.glob("quickstart-*.md"))
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# The reference pages and the modules whose __all__ each must cover.
REFERENCE = {
    "api/onnx_struct": "onnx_struct",
    "api/formats": "onnx_struct.formats",
    "api/gguf": "onnx_struct.convert",
}


def _env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports this checkout's onnx_struct."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def python_code(page: Path) -> str:
    """The page's ```python blocks as one program, each line at its line number in the page (so a
    failure's traceback points into the page); every other line blank."""
    text = page.read_text(encoding="utf-8")
    lines = [""] * (text.count("\n") + 1)
    for block in PYTHON_BLOCK.finditer(text):
        first = text.count("\n", 0, block.start(1))
        for offset, line in enumerate(block.group(1).splitlines()):
            lines[first + offset] = line
    return "\n".join(lines)


def test_there_are_three_quick_starts_with_code():
    assert [p.name for p in QUICK_STARTS] == [
        "quickstart-converter.md",
        "quickstart-quantization.md",
        "quickstart-runtime.md",
    ]
    for page in QUICK_STARTS:
        assert len(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))) >= 3, page.name


def test_python_code_keeps_the_page_line_numbers(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\ntext\n```python\ny = x\n```\n```bash\nrm -rf /\n```\n")
    assert python_code(page).splitlines()[3] == "x = 1"
    assert python_code(page).splitlines()[8] == "y = x"
    assert "rm" not in python_code(page)


@pytest.mark.parametrize("page", QUICK_STARTS, ids=lambda p: p.stem)
def test_quick_start_runs(page, tmp_path, monkeypatch):
    # Each page is one program, run in an empty directory (the pages write model files there).
    monkeypatch.chdir(tmp_path)
    code = compile(python_code(page), str(page), "exec")
    exec(code, {"__name__": f"quickstart_{page.stem}"})
    assert any(tmp_path.glob("*.onnx")), "every quick start saves a model"


def test_every_docs_page_is_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", config, re.M))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages == listed


# ---------------------------------------------------------------------- the strict build
needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason='mkdocs and mkdocstrings are not installed (pip install ".[docs]")',
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built with ``mkdocs build --strict`` (any warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


@pytest.mark.slow
@needs_mkdocs
@pytest.mark.parametrize(("page", "module_name"), REFERENCE.items())
def test_reference_documents_every_public_name(site, page, module_name):
    ids = set(re.findall(r'id="([^"]+)"', _page(site, page)))
    module = importlib.import_module(module_name)
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        # A name is documented under its public spelling, or (formats.quantize, gguf.convert)
        # under the path of the function it is.
        defined = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
        if f"{module_name}.{name}" not in ids and defined not in ids:
            missing.append(name)
    assert not missing, f"{page}.md does not document {missing}"


@pytest.mark.slow
@needs_mkdocs
def test_cli_page_is_the_live_help(site):
    text = html.unescape(re.sub(r"<[^>]+>", "", _page(site, "api/cli")))
    env = _env(COLUMNS="100")  # the width docs/api/hooks.py renders at
    for command in ["", *COMMANDS]:
        argv = [sys.executable, "-m", "onnx_struct", *([command] if command else []), "--help"]
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=120)
        assert result.stdout.strip() in text, f"onnx-struct {command} --help differs from docs/api/cli.md"


@pytest.mark.slow
@needs_mkdocs
def test_quick_starts_and_design_docs_are_built(site):
    for page in [p.stem for p in QUICK_STARTS] + ["semantics", "security", "errors", "architecture", "formats"]:
        assert (site / page / "index.html").is_file(), page
