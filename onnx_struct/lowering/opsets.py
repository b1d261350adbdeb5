"""The one opset-upgrade policy: which operators differ between two opset versions, and raising a
model's default-domain opset with onnx's version converter.

``lower()`` and the quantize pass both need a model's default-domain opset raised to a decoder's
(onnxruntime resolves a function's operators at the model's opset). Both convert through
:func:`convert_default_opset`; what they do when onnx's converter fails is theirs to decide:
``lower()`` raises a ValidationError naming the operators that differ, the quantize pass keeps the
model as it was (lowering or running the model then reports the mismatch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import onnx
import onnx.defs
from onnx import helper

from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import element_label
from onnx_struct.schema.walk import walk_nodes


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


def reconcile_opsets(
    model: onnx.ModelProto,
    decoders: list[tuple[str, onnx.FunctionProto]],
    decoder_domains: Iterable[str],
    logical_inputs: Callable[[], list[onnx.ValueInfoProto]],
) -> onnx.ModelProto:
    """One version per domain for the graph and every function (``decoders``: the lowered model's
    decoder functions with their paths; the model's own functions are added here): onnxruntime
    resolves a function's operators at the *model's* opset, so a function must import the same
    version or use only operators whose schema is the same at both (checked per operator). The
    graph is converted when operators it uses differ (``logical_inputs``: the decoded values'
    types, shown to the converter); returns the model, converted or not."""
    model_opsets = {canonical_domain(o.domain): o.version for o in model.opset_import}
    if model.ir_version < 3 and not model_opsets:
        # Before IR 3 the default domain is implicit, at version 1; the lowered model's IR needs it
        # spelled out (and so does onnx's version converter).
        model_opsets = {"": 1}
        model.ir_version = 3
        model.opset_import.append(helper.make_opsetid("", 1))
    participants = decoders + [(element_label(f"functions[{i}]", f.name), f) for i, f in enumerate(model.functions)]
    target = dict(model_opsets)
    for _, fn in participants:
        for opset in fn.opset_import:
            domain = canonical_domain(opset.domain)
            target[domain] = max(target.get(domain, 0), opset.version)
    # Functions first, edited in place: a graph conversion below copies the model's own functions.
    for where, fn in participants:
        for opset in fn.opset_import:
            domain = canonical_domain(opset.domain)
            if opset.version != target[domain]:
                differing = differing_ops(fn.node, domain, opset.version, target[domain])
                if differing:
                    raise ValidationError(
                        where,
                        f"imports opset {opset.version} of domain {domain or 'ai.onnx'!r}, but the lowered model "
                        f"needs {target[domain]} (another part imports it) and operators "
                        f"{', '.join(differing)} differ between the two versions",
                        code="opset_conflict",
                    )
                opset.version = target[domain]
    main_nodes = list(walk_nodes(model.graph))
    for domain, version in model_opsets.items():
        if version != target[domain]:
            differing = differing_ops(main_nodes, domain, version, target[domain])
            if differing:
                model = _upgrade_graph(model, domain, version, target[domain], differing, logical_inputs)
    for domain in decoder_domains:
        target.setdefault(domain, 1)
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in target.items())
    return model


def _upgrade_graph(model, domain: str, have: int, want: int, differing: list[str], logical_inputs) -> onnx.ModelProto:
    if domain != "":
        raise ValidationError(
            "graph",
            f"the graph imports opset {have} of {domain!r}, a decoder needs {want}, and operators "
            f"{', '.join(differing)} differ between them",
            code="opset_conflict",
        )
    # The converter needs every consumed name defined: the decoded names are shown to it as
    # graph inputs of their logical types, then removed again.
    functions = list(model.functions)
    del model.functions[:]
    decoded = logical_inputs()
    model.graph.input.extend(decoded)
    try:
        converted = convert_default_opset(model, want)
    except OpsetConversionError as error:
        raise ValidationError(
            "graph",
            f"a decoder needs opset {want}, the graph imports {have} (operators {', '.join(differing)} "
            f"differ) and onnx's version converter failed: {str(error).splitlines()[0] if str(error) else error}",
            code="opset_conflict",
        ) from None
    del converted.graph.input[len(converted.graph.input) - len(decoded) :]
    converted.functions.extend(functions)
    return converted
