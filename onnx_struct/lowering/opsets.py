"""The one opset-upgrade policy: which operators differ between two opset versions, and raising a
model's default-domain opset with onnx's version converter.

``lower()`` and the quantize pass both need a model's default-domain opset raised to a decoder's
(onnxruntime resolves a function's operators at the model's opset). Both convert through
:func:`convert_default_opset`; what they do when onnx's converter fails is theirs to decide:
``lower()`` raises a ValidationError naming the operators that differ, the quantize pass keeps the
model as it was (lowering or running the model then reports the mismatch).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
import onnx.defs


class OpsetConversionError(Exception):
    """onnx's version converter failed; ``str()`` is the first line of its own message."""


def canonical_domain(domain: str) -> str:
    """``""`` for the default domain however it is spelled (``"ai.onnx"`` is the same domain)."""
    return "" if domain == "ai.onnx" else domain


def differing_ops(nodes: Iterable[onnx.NodeProto], domain: str, have: int, want: int) -> list[str]:
    """Operators of ``domain`` among ``nodes`` whose schema differs between the two versions."""
    differing = set()
    for op in {n.op_type for n in nodes if canonical_domain(n.domain) == domain}:
        try:
            a = onnx.defs.get_schema(op, have, domain).since_version
            b = onnx.defs.get_schema(op, want, domain).since_version
        except onnx.defs.SchemaError:
            continue  # not a standard operator (e.g. a local function): nothing to compare
        if a != b:
            differing.add(op)
    return sorted(differing)


def convert_default_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """``model`` converted to ``version`` of the default domain by onnx's version converter (a
    new model; ``model`` is not changed). Raises :class:`OpsetConversionError` when the converter
    fails, whatever it raises (RuntimeError and assorted others)."""
    from onnx import version_converter  # noqa: PLC0415 - heavy, and needed only when an opset differs

    try:
        return version_converter.convert_version(model, version)
    except Exception as error:  # noqa: BLE001 - the converter's failures have no common type
        text = str(error)
        raise OpsetConversionError(text.splitlines()[0] if text else "") from None
