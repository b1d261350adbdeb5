"""Error codes: every code raised in the package is documented in docs/errors.md with the details
keys its raise sites pass, and every documented code is raised somewhere."""

from __future__ import annotations

import ast
import pathlib
import re

import onnx_struct

PACKAGE = pathlib.Path(onnx_struct.__file__).parent
DOC = PACKAGE.parent / "docs" / "errors.md"
ERROR_CLASSES = {
    "ValidationError": "invalid",
    "LeafNotFoundError": "unknown_leaf",
    "NotRegularFileError": "not_regular_file",
    "ModelFileNotFoundError": "file_not_found",
    "InferenceError": "onnx_checker",
    "ModelValueError": "not_parsable",
    "ModelRuntimeError": "onnx_checker",
}


def documented() -> dict[str, set[str]]:
    """code -> details keys, from the table rows ``| `code` | fault | `key`, `key` |``."""
    table = {}
    for line in DOC.read_text().splitlines():
        row = re.fullmatch(r"\| `([a-z0-9_]+)` \|.*\|([^|]*)\|", line.strip())
        if row:
            assert row.group(1) not in table, f"{row.group(1)} documented twice"
            table[row.group(1)] = set(re.findall(r"`([a-z0-9_]+)`", row.group(2)))
    return table


def raise_sites() -> list[tuple[str, str, set[str]]]:
    """(file:line, code, details keys) of every construction of an error class in the package;
    a call without ``code=`` has its class's default code."""
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in ERROR_CLASSES:
                continue
            keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
            code = keywords.pop("code", None)
            if code is not None and not isinstance(code, ast.Constant):
                continue  # a re-raise passing on another error's code (and details)
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            sites.append((where, code.value if code is not None else ERROR_CLASSES[name], set(keywords)))
    return sites


def test_every_code_is_documented_and_every_documented_code_is_used():
    table = documented()
    sites = raise_sites()
    assert len(sites) > 200  # the scan found the raise sites (not an empty walk)
    used = {code for _, code, _ in sites}
    assert not used - set(table), f"codes raised but not in docs/errors.md: {sorted(used - set(table))}"
    assert not set(table) - used, f"codes in docs/errors.md never raised: {sorted(set(table) - used)}"
    for code in used:
        assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", code), code


def test_each_raise_site_passes_only_the_documented_details_keys():
    table = documented()
    wrong = [
        f"{where} ({code}): {sorted(keys - table.get(code, set()))}"
        for where, code, keys in raise_sites()
        if keys - table.get(code, set())
    ]
    assert not wrong, "details keys not documented for their code:\n" + "\n".join(wrong)
    # every documented key is passed by some site of its code
    passed = {}
    for _, code, keys in raise_sites():
        passed.setdefault(code, set()).update(keys)
    assert {c: k for c, k in table.items() if k - passed.get(c, set())} == {}


def test_default_codes_of_the_error_classes():
    for name, code in ERROR_CLASSES.items():
        assert getattr(onnx_struct.errors, name).DEFAULT_CODE == code
    assert onnx_struct.errors.LeafNotFoundError("p", "r").code == "unknown_leaf"
    assert onnx_struct.errors.ValidationError("p", "r", code="cycle").code == "cycle"
