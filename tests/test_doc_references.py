"""Every module path named in the package's comments and docstrings, and in docs/*.md, exists.

A docstring that names ``onnx_struct.check.foo`` or ``payload/bar.py`` sends the reader to a place;
after a move the name goes stale silently. This test resolves each dotted ``onnx_struct.x.y`` name
(a module, or an attribute of the longest importable module prefix) and each ``dir/file.py`` path
(a file of the repository whose path ends with it) and lists the ones that do not.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"\bonnx_struct(?:\.\w+)+")
FILE_PATH = re.compile(r"(?<![\w/.-])(?:\w+/)+\w+\.py\b")

# A string constant of the package spelled like a module path (a private domain, a metadata key, an
# external-data location) is a name, not a reference: found in the code as a quoted literal.
LITERAL = re.compile(r'f?"(onnx_struct(?:\.\w+)+)[."{]')
# File names spelled like a module path: schemas/onnx_struct.proto, docs/api/onnx_struct.md; and the
# protobuf package's message names (onnx_struct.ModelProto), quoted from protobuf's messages.
FILE_SUFFIXES = ("proto", "md")
# Other projects' trees named by their project (bitsandbytes/backends/utils.py).
FOREIGN_ROOTS = ("bitsandbytes/", "onnx/", "onnxruntime/", "llama.cpp/", "ggml/", "gguf-py/")


def _sources() -> list[Path]:
    package = [p for p in sorted((ROOT / "onnx_struct").rglob("*.py")) if "_pb2" not in p.name]
    return package + sorted((ROOT / "docs").glob("*.md"))


def _literals() -> set[str]:
    found: set[str] = set()
    for source in (ROOT / "onnx_struct").rglob("*.py"):
        found.update(m.group(1) for m in LITERAL.finditer(source.read_text(encoding="utf-8")))
    return found


def _is_reference(dotted: str, literals: set[str]) -> bool:
    last = dotted.rsplit(".", 1)[1]
    return not (
        dotted in literals
        or any(dotted.startswith(lit + ".") for lit in literals)
        or last in FILE_SUFFIXES
        or (dotted.count(".") == 1 and last.endswith("Proto"))
    )


def _repo_files() -> list[str]:
    # Walked, not asked of git: the fast tier starts no child process (tests/support/tiers.py).
    skip = {".git", "node_modules", "site", "__pycache__"}
    return [
        p.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("*.py")
        if not skip.intersection(p.relative_to(ROOT).parts[:-1])
        and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
    ]


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                # A submodule not imported by its package is still a module.
                try:
                    obj = importlib.import_module(f"{obj.__name__}.{name}")
                except (ImportError, AttributeError):
                    return False
            else:
                obj = getattr(obj, name)
        return True
    return False


def _file_exists(path: str, files: list[str]) -> bool:
    return path.startswith(FOREIGN_ROOTS) or any(f == path or f.endswith("/" + path) for f in files)


def _references() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    dotted, paths = [], []
    for source in _sources():
        text = source.read_text(encoding="utf-8")
        where = str(source.relative_to(ROOT))
        dotted += [(where, m.group()) for m in DOTTED.finditer(text)]
        paths += [(where, m.group()) for m in FILE_PATH.finditer(text)]
    return dotted, paths


def test_scanner_finds_references() -> None:
    dotted, paths = _references()
    # The package names itself and its files in many places: an empty scan means a broken regex.
    assert len({name for _, name in dotted}) > 50
    assert len({name for _, name in paths}) > 50


def test_resolver_refuses_missing_names() -> None:
    assert _resolves("onnx_struct.check.checker.check_model")
    assert _resolves("onnx_struct.limits")
    assert not _resolves("onnx_struct.check.no_such_module")
    assert not _resolves("onnx_struct.limits.NO_SUCH_BOUND")
    literals = _literals()
    assert not _is_reference("onnx_struct.local", literals)  # check/function_models.py's domain
    assert _is_reference("onnx_struct.parallel", literals)
    files = _repo_files()
    assert _file_exists("schema/model.py", files)
    assert not _file_exists("schema/no_such_file.py", files)


@pytest.mark.parametrize("kind", ["dotted", "path"])
def test_named_modules_exist(kind: str) -> None:
    dotted, paths = _references()
    if kind == "dotted":
        literals = _literals()
        missing = sorted(
            {(where, name) for where, name in dotted if _is_reference(name, literals) and not _resolves(name)}
        )
    else:
        files = _repo_files()
        missing = sorted({(where, p) for where, p in paths if not _file_exists(p, files)})
    assert not missing, "\n".join(f"{where}: {name}" for where, name in missing)
