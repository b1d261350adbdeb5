"""The public API documents its calls Google style: Args (every parameter), Returns, Raises.

Checked for every function in ``onnx_struct.__all__``, the functions of ``onnx_struct.formats``
(with quantize, plan and the GGUF converter its reference pages show) and the public methods of InferenceSession (its constructor's arguments in the class docstring or
``__init__``'s). Private helpers are not held to it.
"""

from __future__ import annotations

import inspect
import re

import pytest

import onnx_struct
from onnx_struct import convert as tools_gguf
from onnx_struct import formats
from onnx_struct.formats import gguf
from onnx_struct.passes import quantize

SECTION = re.compile(r"^(Args|Returns|Yields|Raises):\s*$", re.MULTILINE)


def _public_callables() -> list[tuple[str, object]]:
    found = []
    for name in onnx_struct.__all__:
        obj = getattr(onnx_struct, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
    for name in ("get", "names", "format_of_decoder", "register", "register_formats"):
        found.append((f"formats.{name}", getattr(formats, name)))
    # The functions the formats reference pages document (docs/api/formats.md, docs/api/gguf.md).
    found += [("quantize", quantize.quantize), ("plan", quantize.plan)]
    found += [("tools.gguf.convert", tools_gguf.convert), ("formats.gguf.decode_metadata", gguf.decode_metadata)]
    session = onnx_struct.InferenceSession
    found.append(("InferenceSession", session))
    for name, member in vars(session).items():
        if not name.startswith("_") and inspect.isfunction(member):
            found.append((f"InferenceSession.{name}", member))
    return found


def _sections(doc: str) -> dict[str, str]:
    parts = SECTION.split(doc)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _parameters(obj: object) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    names = []
    for parameter in inspect.signature(target).parameters.values():
        if parameter.name == "self":
            continue
        prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
        names.append(prefix + parameter.name)
    return names


def _returns_something(obj: object) -> bool:
    if inspect.isclass(obj):
        return False
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None", inspect.Signature.empty)


def test_the_list_is_complete() -> None:
    names = {name for name, _ in _public_callables()}
    assert {"check_model", "view", "InferenceSession", "InferenceSession.run", "formats.get"} <= names


def test_a_missing_parameter_is_seen() -> None:
    def sample(a: int, b: int) -> int:
        """Sum.

        Args:
            a: the first.

        Returns:
            The sum.

        Raises:
            Nothing.
        """
        return a + b

    sections = _sections(inspect.getdoc(sample))
    assert [p for p in _parameters(sample) if not re.search(rf"^\s*{re.escape(p)}\b", sections["Args"], re.M)] == ["b"]


@pytest.mark.parametrize("name, obj", _public_callables(), ids=[name for name, _ in _public_callables()])
def test_public_docstring_sections(name: str, obj: object) -> None:
    doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        doc += "\n" + (inspect.getdoc(obj.__init__) or "")
    sections = _sections(doc)
    parameters = _parameters(obj)
    if parameters:
        assert "Args" in sections, f"{name}: no Args section"
        missing = [p for p in parameters if not re.search(rf"^\s*{re.escape(p)}\b", sections["Args"], re.M)]
        assert not missing, f"{name}: Args does not document {missing}"
    if _returns_something(obj):
        assert "Returns" in sections or "Yields" in sections, f"{name}: no Returns section"
    # A call that raises nothing of its own says so in a sentence instead of an empty section.
    assert "Raises" in sections or re.search(r"\bRaises\s+nothing\b", doc), f"{name}: no Raises section"
