"""The one opset-upgrade policy: which operators differ between two opset versions, and raising a
model's default-domain opset with onnx's version converter.

``lower()`` and the quantize pass both need a model's default-domain opset raised to a decoder's
(onnxruntime resolves a function's operators at the model's opset). Both convert through
:func:`convert_default_opset`; what they do when onnx's converter fails is theirs to decide:
``lower()`` raises a ValidationError naming the operators that differ, the quantize pass keeps the
model as it was (lowering or running the model then reports the mismatch).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import onnx
import onnx.defs
from onnx import helper

from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import element_label
from onnx_struct.schema.walk import walk_nodes, walk_scoped

# onnx's converter fails by C++ assertions: "<file>:<line>: <function>: Assertion `<expr>` failed: <reason>".
_ASSERTION_PREFIX = re.compile(r"^.*?Assertion `.*?` failed: ")


class OpsetConversionError(Exception):
    """onnx's version converter failed; ``str()`` is the first line of its own message."""


def canonical_domain(domain: str) -> str:
    """``""`` for the default domain however it is spelled (``"ai.onnx"`` is the same domain)."""
    return "" if domain == "ai.onnx" else domain


def differing_ops(nodes: Iterable[onnx.NodeProto], domain: str, have: int, want: int) -> list[str]:
    """Operators of ``domain`` among ``nodes`` whose schema differs between the two versions."""
    differing = set()
    for op in {n.op_type for n in nodes if canonical_domain(n.domain) == domain}:
        if not isinstance(op, str):  # not UTF-8 (bytes from the parse): no standard operator
            continue
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

    have = next((o.version for o in model.opset_import if canonical_domain(o.domain) == ""), 1)
    crossed = {op: why for op, (at, why) in UNADAPTED_MEANING_CHANGES.items() if have < at <= version}
    if crossed:
        changed = sorted(
            {n.op_type for n in walk_nodes(model.graph) if canonical_domain(n.domain) == ""} & set(crossed)
        )
        if changed:
            raise OpsetConversionError(f"it would change what {changed[0]} computes ({crossed[changed[0]]})")
    try:
        converted = version_converter.convert_version(model, version)
    except Exception as error:  # noqa: BLE001 - the converter's failures have no common type
        text = str(error).splitlines()[0] if str(error) else ""
        raise OpsetConversionError(_ASSERTION_PREFIX.sub("", text)) from None
    # The converter converts the graph and drops the model's local functions, so the graph's calls
    # would name no function: they are kept, raised to ``version`` too, since onnx's checker refuses
    # a function importing another default-domain version.
    del converted.functions[:]
    converted.functions.extend(_raised_functions(model, version))
    reused = _reused_names(converted.graph) - _reused_names(model.graph)
    if reused:  # e.g. Softmax_12_13 names its Softmax "<output>_intermediate" without asking
        raise OpsetConversionError(f"it gave a second value the name {sorted(reused)[0]!r}")
    # The graph's signature and value_info as they were: the converter's IR drops an elem_type set
    # to 0, which onnx's checker then refuses, and its shape inference leaves a value_info per
    # intermediate and refined output shapes behind.
    for field in ("input", "output", "value_info"):
        del getattr(converted.graph, field)[:]
        getattr(converted.graph, field).extend(getattr(model.graph, field))
    return converted


def _raised_functions(model: onnx.ModelProto, version: int) -> list[onnx.FunctionProto]:
    """Copies of the model's local functions importing at least ``version`` of the default domain
    (each converted only where its operators differ: :func:`_upgrade_function`)."""
    raised = []
    for i, function in enumerate(model.functions):
        copy = onnx.FunctionProto()
        copy.CopyFrom(function)
        for opset in copy.opset_import:
            if canonical_domain(opset.domain) == "" and opset.version < version:
                try:
                    _upgrade_function(element_label(f"functions[{i}]", copy.name), copy, "", opset.version, version)
                except ValidationError as error:
                    raise OpsetConversionError(str(error)) from None
                opset.version = version
        raised.append(copy)
    return raised


# Operators whose meaning changed at an opset where onnx's converter does not adapt them (the
# converted model would compute other values): a model using one is not converted across that
# opset. op -> (the opset, what changes).
UNADAPTED_MEANING_CHANGES = {
    # Resize_10_11 keeps Resize-11's default coordinate_transformation_mode; Resize-10 (and
    # Upsample, converted through it) maps coordinates as asymmetric does.
    "Resize": (11, "at opset 11 its coordinate mapping becomes half_pixel, from asymmetric"),
    "Upsample": (11, "it becomes a Resize whose coordinate mapping is half_pixel, from asymmetric"),
    # Registered as compatible, but Hardmax-13 takes the maximum along one axis, not over the
    # input flattened to 2-D from that axis (Softmax and LogSoftmax, which changed alike, are adapted).
    "Hardmax": (13, "at opset 13 it works along one axis, not over the input flattened from it"),
}


def _reused_names(graph: onnx.GraphProto) -> set[str]:
    """Names a node defines that a graph input, initializer or earlier node of its graph, or of a
    graph enclosing it, already defines (subgraphs too: the converter adapts their nodes as well)."""
    reused: set[str] = set()
    for _, _, node, defined in walk_scoped(graph):
        own: set[str] = set()
        for name in node.output:
            if name and (name in defined or name in own):
                reused.add(name)
            own.add(name)
    return reused


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
                _upgrade_function(where, fn, domain, opset.version, target[domain])
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


def _upgrade_function(where: str, fn: onnx.FunctionProto, domain: str, have: int, want: int) -> None:
    """``fn``'s body raised in place from ``have`` to ``want`` of ``domain``: unchanged when its
    operators (subgraphs included) have the same schema at both, else converted by onnx's version
    converter, which knows which schema changes are compatible (most steps only add types: a format
    decoder written at 21 runs unchanged in a model at 23-27) and adapts the others. A
    ValidationError when it cannot be done without changing what the function computes."""
    body = helper.make_model(
        helper.make_graph(
            list(fn.node),
            fn.name or "function",
            # Untyped: the converter adapts nodes, it needs no types for that.
            [helper.make_value_info(name, onnx.TypeProto()) for name in fn.input],
            [helper.make_value_info(name, onnx.TypeProto()) for name in fn.output],
        ),
        opset_imports=list(fn.opset_import),
        ir_version=onnx.IR_VERSION,
    )
    nodes = list(walk_nodes(body.graph))
    differing = differing_ops(nodes, domain, have, want)
    if not differing:
        return

    def refuse(reason: str) -> ValidationError:
        return ValidationError(
            where,
            f"imports opset {have} of domain {domain or 'ai.onnx'!r}, but the lowered model needs {want} "
            f"(another part imports it), operators {', '.join(differing)} differ between the two "
            f"versions, and {reason}",
            code="opset_conflict",
        )

    if domain != "":
        raise refuse("onnx's version converter converts only the default domain")
    if any(a.ref_attr_name for node in nodes for a in node.attribute):
        raise refuse("its nodes refer to the function's attributes, which onnx's version converter drops")
    try:
        graph = convert_default_opset(body, want).graph
    except OpsetConversionError as error:
        raise refuse(
            f"onnx's version converter failed: {error}" if str(error) else "onnx's version converter failed"
        ) from None
    # An adapter may add an initializer (Pad_10_11 holds the pads there); a function has Constants.
    converted = [helper.make_node("Constant", [], [t.name], value=t) for t in graph.initializer]
    converted += graph.node
    problem = _changed_beyond(fn, converted, differing)
    if problem:
        raise refuse(f"onnx's version converter {problem}")
    del fn.node[:]
    fn.node.extend(converted)


def _changed_beyond(fn: onnx.FunctionProto, converted, differing: list[str]) -> str:
    """What the converter did to ``fn``'s body besides adapting the ``differing`` operators, or ""
    (then the converted nodes get back the ``metadata_props`` its IR drops). The converter works on
    onnx's in-memory IR, which keeps what an operator means but not every field of a node: a node
    it had no reason to touch must come back the same."""
    by_outputs = {tuple(node.output): node for node in fn.node}
    outputs = [name for node in converted for name in node.output if name]
    if len(by_outputs) != len(fn.node) or len(set(outputs)) != len(outputs):
        return "cannot tell its nodes apart by their outputs"
    if set(outputs) & set(fn.input):
        return f"gave a value the name of the input {sorted(set(outputs) & set(fn.input))[0]!r}"
    for node in converted:
        source = by_outputs.get(tuple(node.output))
        if source is None:
            continue  # a node an adapter added (a Constant holding a former attribute, ...)
        if source.metadata_props and not node.metadata_props:
            node.metadata_props.extend(source.metadata_props)
        if canonical_domain(source.domain) == "" and source.op_type in differing:
            continue
        if node != source:
            return f"changed node {source.op_type!r} (outputs {list(source.output)}), which needs no adapting"
    return ""


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
