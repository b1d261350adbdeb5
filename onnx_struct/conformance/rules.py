"""The checker's rules, enumerated from its code: every ``code`` a ValidationError is raised with
in a module ``check_model`` imports (directly or not), read from the source with ``ast``.

Following the checker's import graph rather than a list means a code added to any module the
checker reaches shows up here, and tests/test_conformance.py fails until the suite has a case
for it (or it is listed in :data:`NOT_FROM_A_MODEL_FILE` with the reason no model file reaches it).
"""

from __future__ import annotations

import ast
import functools
import pathlib

CHECKER_MODULE = "onnx_struct.check.checker"
PACKAGE_DIR = pathlib.Path(__file__).resolve().parent.parent

# Codes of modules the checker imports that no model file in a suite directory can make
# check_model(path) raise, each with why; every other code needs an invalid case.
NOT_FROM_A_MODEL_FILE = {
    "invalid": "the default for a fault without a specific code; no checker rule raises it",
    "file_not_found": "the model path itself does not exist (a call error, not a model)",
    "not_regular_file": "the model or its payload is a FIFO or a device: not portable suite data",
    "hard_link": "a payload file with a second hard link: archives and copies do not keep links",
    "file_outside_model_dir": "a location resolving outside the directory needs a symbolic link (not portable)",
    "no_base_dir": "a model loaded from bytes has no directory; every suite model is a file",
    "no_model": "a struct value named without a model: an API argument, not a model",
    "unknown_value": "no struct value of a name: an API argument (view, decode), not a model",
    "undefined_input": "raised by struct-aware shape inference (infer_shapes, check_model(full_check=True)); "
    "the checker cases are the rules of check_model(path)",
    "nesting_too_deep": "raised on a RecursionError: protobuf's depth limit refuses deep messages, and type_index "
    "chains (20,000 declarations tried) are walked without recursion",
}


def _module_path(name: str) -> pathlib.Path | None:
    relative = pathlib.Path(*name.split("."))
    for candidate in (relative.with_suffix(".py"), relative / "__init__.py"):
        if (PACKAGE_DIR.parent / candidate).is_file():
            return PACKAGE_DIR.parent / candidate
    return None


def _imported(name: str, path: pathlib.Path, tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "onnx_struct"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            if base.split(".")[0] != "onnx_struct":
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if _module_path(submodule) else base)
    return found


@functools.cache
def checker_modules() -> dict[str, ast.AST]:
    """Every module of the package ``check_model``'s module imports, transitively (deferred
    imports included), with its syntax tree."""
    trees: dict[str, ast.AST] = {}
    pending = [CHECKER_MODULE]
    while pending:
        name = pending.pop()
        path = _module_path(name)
        if name in trees or path is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        trees[name] = tree
        parts = name.split(".")
        pending += [".".join(parts[:i]) for i in range(2, len(parts))]  # the packages Python runs first
        pending += sorted(_imported(name, path, tree))
    return trees


def raised_codes() -> dict[str, list[str]]:
    """code -> the modules (of :func:`checker_modules`) that give it: a ``code="..."`` keyword or
    an exception class's ``DEFAULT_CODE``."""
    codes: dict[str, set[str]] = {}
    for name, tree in checker_modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "code" and isinstance(node.value, ast.Constant):
                codes.setdefault(node.value.value, set()).add(name)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id == "DEFAULT_CODE" for t in node.targets):
                    codes.setdefault(node.value.value, set()).add(name)
    return {code: sorted(modules) for code, modules in sorted(codes.items()) if isinstance(code, str)}


def checker_rules() -> list[str]:
    """The codes the suite must have an invalid case for: :func:`raised_codes` less
    :data:`NOT_FROM_A_MODEL_FILE`."""
    return [code for code in raised_codes() if code not in NOT_FROM_A_MODEL_FILE]
