"""Lowering for execution: quantized weights stay quantized in the lowered model.

``lower(model, execution="quantized")`` runs :func:`rewrite_for_execution` first: struct values
of a registered block format with an affine form that feed ``MatMul`` (through
``Transpose(perm=[1, 0])``), ``Gemm(transB=1)`` or ``Gather(axis=0)`` are replaced, for those
consumers, by the nodes of :mod:`.emit` over their repacked integer codes, never decoded to
float. Other uses keep the decoder call. docs/execution.md has the per-format table.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import helper

from onnx_struct.check.checked import CheckedModel
from onnx_struct.functions.structure import STANDARD_DOMAINS
from onnx_struct.layout.table import element_label
from onnx_struct.lowering.execution.contrib_layouts import GatherLayout
from onnx_struct.lowering.execution.emit import MS_DOMAIN, Emitter
from onnx_struct.lowering.execution.fuse import fuse_sibling_products
from onnx_struct.lowering.execution.recognize import Recognized, recognize
from onnx_struct.lowering.execution.repack import row_forms
from onnx_struct.lowering.names import graph_names, leaf_tensor_name, read_names, unique_name
from onnx_struct.lowering.opsets import differing_ops
from onnx_struct.payload.values import value_declaration
from onnx_struct.schema.model import LoadedModel, copy_without_struct_values
from onnx_struct.schema.walk import subgraphs, walk_nodes

EXECUTION_MODES = ("decode", "quantized")
# DequantizeLinear's block_size attribute and INT4/UINT4 inputs exist from opset 21.
MIN_OPSET = 21


@dataclasses.dataclass
class ExecutionReport:
    """What :func:`rewrite_for_execution` did: consumers rewritten per value, values dropped, and
    why a recognized value still has a decoder call (``kept``: value -> reason)."""

    rewritten: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # value -> "MatMul 'node'", ...
    dropped: list[str] = dataclasses.field(default_factory=list)
    kept: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ExecutionRewrite:
    """What :func:`rewrite_for_execution` produces: the model to lower (the checked model itself
    when nothing was rewritten), the report, and the repacked arrays the model holds placeholders
    for (empty unless asked for)."""

    checked: CheckedModel
    report: ExecutionReport
    arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def rewrite_for_execution(
    checked: CheckedModel, *, accuracy_level: int | None = None, in_memory: bool = False, report_only: bool = False
) -> ExecutionRewrite:
    """A copy of ``checked``'s model whose eligible weight consumers read quantized codes, and a
    report. The checked model itself is returned when nothing is eligible.

    Args:
        checked: the model (checked) and its declaration table, which the copy keeps.
        accuracy_level: emit onnxruntime's ``MatMulNBits`` (that ``accuracy_level``) directly
            instead of the standard ``DequantizeLinear`` + ``MatMul`` it would fuse them into.
        in_memory: the repacked arrays are returned, and the model holds placeholders for them
            (:data:`.emit.IN_MEMORY_LOCATION`), to be handed to onnxruntime in memory.
        report_only: only the report (with ``accuracy_level``): which consumers would be
            rewritten, no payload read or repacked and ``checked`` itself returned.

    Returns:
        The :class:`ExecutionRewrite`. Each weight is read and repacked range of rows by range of
        rows (:mod:`.repack`), once for all its consumers.

    Raises:
        ValueError: ``in_memory`` or ``report_only`` without ``accuracy_level``.
    """
    if in_memory and accuracy_level is None:  # INT4 codes have no numpy array onnxruntime takes
        raise ValueError("arrays (repacked weights handed over in memory) needs accuracy_level (MatMulNBits)")
    if report_only and accuracy_level is None:  # its report assumes MatMulNBits (every consumer replaced)
        raise ValueError("report_only needs accuracy_level (MatMulNBits)")
    arrays: dict[str, np.ndarray] | None = {} if in_memory else None
    loaded = checked.loaded
    report = ExecutionReport()
    opset = next((o.version for o in loaded.proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    candidates = _candidates(checked, report)
    if not candidates:
        return ExecutionRewrite(checked, report)
    # A copy without the struct values: an inline payload is not copied (the kept ones come back
    # at the end).
    proto = copy_without_struct_values(loaded.proto)
    graph = proto.graph
    consumers, pinned = _uses(graph)
    taken = graph_names(loaded.proto.graph)
    # The names lower gives the leaves of a value it keeps decoded (W::scale): the emitted
    # initializers must not take them (else: "'W::scale' is already used").
    table = checked.table
    for name, (_, value, _) in candidates.items():  # the leaves' paths only: no payload is read
        declaration = value_declaration(value, table, name)
        taken.update(leaf_tensor_name(name, leaf.path) for leaf in table.leaves(declaration, name))

    def fresh(prefix: str) -> str:
        return unique_name(prefix, taken)

    emitter = Emitter(fresh, arrays=arrays, accuracy_level=accuracy_level, ranks=_declared_ranks(graph))
    before: dict[int, list] = {}  # node index -> nodes emitted just before it
    removed: set[int] = set()

    first_use: dict[tuple[str, int], int] = {}  # blocksum key -> the first node index that reads it

    def emit_at(index: int, action) -> None:
        start, requests = len(emitter.nodes), len(emitter.blocksum_requests)
        action()
        before.setdefault(index, []).extend(emitter.nodes[start:])
        del emitter.nodes[start:]
        for key in emitter.blocksum_requests[requests:]:
            first_use[key] = min(first_use.get(key, index), index)

    for name, (position, _, recognized) in candidates.items():
        rows, cols = recognized.shape
        done = []
        pending: list[tuple[int, str, object]] = []  # (node index, "matmul" or "gather", action)
        layouts: dict[str, object] = {}

        def as_matmul(j: int, node, done=done, name=name, cols=cols, layouts=layouts) -> None:
            """MatMul(x, W^T) or Gemm(x, W^T): W stored [N, K] = [rows, cols]."""
            # Initializers per consumer: onnxruntime fuses a DequantizeLinear into MatMulNBits
            # only when its weight feeds nothing else (a tied weight is repacked twice).
            layout = layouts["matmul"]
            inputs, minimum = emitter.matmul_weight(name, layout)
            bs = layout.spec.block_size
            nbits = emitter.emits_nbits
            weight = None if nbits else emitter.dequantize(name, inputs, bs)
            # beta = 0: onnxruntime's Gemm (the decoded route) skips C, so an inf in it is not NaN
            has_bias = (
                node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] and _attribute(node, "beta", 1.0) != 0
            )

            def multiply(out: str, node_name: str = "") -> None:
                if nbits:
                    emitter.matmul_nbits(node.input[0], inputs, minimum, layout, out, node_name)
                else:
                    emitter.matmul(node.input[0], weight, minimum, cols, bs, out)

            if node.op_type == "MatMul" and minimum is None and not nbits:
                node.input[1] = weight
            elif not has_bias:
                multiply(node.output[0], node.name)
                removed.add(j)
            else:  # Gemm(A, B, C) with transA=0, alpha=1: the product, then + beta * C
                product = fresh(f"{node.output[0]}::product")
                multiply(product)
                bias = node.input[2]
                beta = _attribute(node, "beta", 1.0)
                if beta != 1.0:
                    bias = emitter.node("Mul", [bias, emitter.constant([beta], "float32")], f"{bias}::scaled")
                emitter.nodes.append(
                    helper.make_node("Sum", [product, bias], [node.output[0]], name=fresh("gemm::add"))
                )
                removed.add(j)
            done.append(f"{node.op_type} {node.name!r}")

        def as_gather(node, done=done, name=name, layouts=layouts) -> None:
            emitter.gather(name, layouts["gather"], node.input[1], node.output[0])
            done.append(f"Gather {node.name!r}")

        for j, slot in list(consumers.get(name, [])):
            node = graph.node[j]
            if node.domain not in STANDARD_DOMAINS:  # a custom Gather or Transpose is not the operator
                continue
            # A 2-D Transpose without perm reverses the axes: perm [1, 0] too.
            if node.op_type == "Transpose" and list(_attribute(node, "perm", [1, 0])) == [1, 0]:
                t = node.output[0]
                if t in pinned:
                    continue
                for k, tslot in list(consumers.get(t, [])):
                    consumer = graph.node[k]
                    if tslot == 1 and _matmul_like(consumer, trans_b=0):
                        pending.append((k, "matmul", lambda k=k, consumer=consumer, f=as_matmul: f(k, consumer)))
                        consumers[t].remove((k, tslot))
                if not consumers.get(t):
                    removed.add(j)
                    consumers[name].remove((j, slot))
            elif slot == 1 and _matmul_like(node, trans_b=1) and node.op_type == "Gemm":
                pending.append((j, "matmul", lambda j=j, node=node, f=as_matmul: f(j, node)))
                consumers[name].remove((j, slot))
            elif slot == 0 and node.op_type == "Gather" and _attribute(node, "axis", 0) in (0, -len(recognized.shape)):
                pending.append((j, "gather", lambda node=node, f=as_gather: f(node)))
                removed.add(j)
                consumers[name].remove((j, slot))
        if pending and report_only:  # what the actions below would record: MatMulNBits replaces each consumer
            for index, _, _ in pending:
                done.append(f"{graph.node[index].op_type} {graph.node[index].name!r}")
                removed.add(index)
        elif pending:  # one pass over the payload fills every layout this value's consumers read
            kinds = {kind for _, kind, _ in pending}
            if "matmul" in kinds:
                layouts["matmul"] = emitter.matmul_layout(recognized.spec, recognized.shape)
            if "gather" in kinds:
                layouts["gather"] = GatherLayout(recognized.spec, recognized.shape)
            resolved = checked.resolved(position, element_label(f"graph.struct_initializer[{position}]", name))
            whole = any(getattr(layout, "whole", False) for layout in layouts.values())
            for r0, r1, form in row_forms(
                recognized.format, recognized.shape, resolved.payload, resolved.where, whole=whole
            ):
                for layout in layouts.values():
                    layout.write(r0, r1, form)
            for index, _, action in pending:
                emit_at(index, action)
            layouts.clear()  # copied into initializers (or handed to ``arrays``): freed before the next value
        if done:
            report.rewritten[name] = done
        if consumers.get(name) or name in pinned:
            report.kept[name] = _why_kept(graph, consumers.get(name, []), name, pinned)
        elif done:
            report.dropped.append(name)

    if not report.rewritten:
        return ExecutionRewrite(checked, report)
    kept_nodes = [node for j, node in enumerate(graph.node) if j not in removed]
    # Subgraphs too: they resolve their operators at the model's opset as well.
    changed = differing_ops(_with_subgraph_nodes(kept_nodes), "", opset, MIN_OPSET) if opset < MIN_OPSET else []
    if changed:  # the graph's own operators would change meaning at opset 21: decode instead
        reason = f"the graph imports opset {opset} and its operators {', '.join(changed)} differ at {MIN_OPSET}"
        return ExecutionRewrite(checked, ExecutionReport(kept=dict.fromkeys(candidates, reason)))
    if report_only:
        return ExecutionRewrite(checked, report)
    for key, blocksum in emitter.blocksum_nodes.items():  # each before the first node that reads it
        ids = {id(node) for node in blocksum}
        for index, emitted in before.items():
            if any(id(node) in ids for node in emitted):
                before[index] = [node for node in emitted if id(node) not in ids]
        before[first_use[key]] = blocksum + before.get(first_use[key], [])
    nodes = []
    for j, node in enumerate(graph.node):
        nodes.extend(before.get(j, []))
        if j not in removed:
            nodes.append(node)
    if arrays is not None:  # the session's route: its arrays are concatenated, not re-read
        nodes = fuse_sibling_products(nodes, emitter.initializers, arrays, fresh, [o.name for o in graph.output])
    # The overlay's messages are not onnx's classes: emitted protos go in through their bytes.
    nodes = [node.SerializeToString() for node in nodes]
    del graph.node[:]
    for data in nodes:
        graph.node.add().ParseFromString(data)
    while emitter.initializers:  # one tensor in two forms at a time, not all of them
        graph.initializer.add().ParseFromString(emitter.initializers.pop(0).SerializeToString())
    dropped = set(report.dropped)
    graph.struct_initializer.extend(v for v in loaded.proto.graph.struct_initializer if v.name not in dropped)
    _set_opset(proto, "", max(opset, MIN_OPSET))
    if any(n.domain == MS_DOMAIN for n in graph.node):
        _set_opset(proto, MS_DOMAIN, 1)
    return ExecutionRewrite(checked.replaced(LoadedModel(proto, loaded.base_dir)), report, arrays or {})


def _candidates(checked: CheckedModel, report: ExecutionReport) -> dict[str, tuple[int, object, Recognized]]:
    """Struct values of a recognized format with a float32 [rows, cols] logical value that the
    graph reads (one no node reads is not prepared: lowering/scope.py), by name: (index, value,
    format)."""
    loaded, table, types = checked.loaded, checked.table, checked.types
    read = read_names(loaded.proto.graph)
    found = {}
    for k, value in enumerate(loaded.struct_values):
        if value.name not in read:
            continue
        where = element_label(f"graph.struct_initializer[{k}]", value.name)
        declaration = value.struct_type if value.HasField("struct_type") else table.declaration(value.type, where)
        recognized = recognize(declaration, table, where)
        if recognized is None:
            continue
        logical = types.of_value(value, where)
        if logical is None or logical.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            report.kept[value.name] = "its logical value is not float32"
            continue
        found[value.name] = (k, value, recognized)
    return found


def _why_kept(graph, readers: list[tuple[int, int]], name: str, pinned: set[str]) -> str:
    """Why a value also keeps its decoder, naming the readers the rewrite did not take."""
    reasons = []
    if readers:
        named = [f"{graph.node[j].op_type} {graph.node[j].name!r} (input {slot})" for j, slot in readers[:3]]
        more = f" and {len(readers) - 3} more" if len(readers) > 3 else ""
        reasons.append(f"also read by {', '.join(named)}{more}")
    if any(o.name == name for o in graph.output):
        reasons.append("a graph output")
    elif name in pinned:
        reasons.append("read by a subgraph")
    return "; ".join(reasons)


def _uses(graph) -> tuple[dict[str, list[tuple[int, int]]], set[str]]:
    """Main-graph consumers of each name (node index, input slot), and the names a subgraph or a
    graph output uses (those keep their value whatever happens to the main graph's consumers)."""
    consumers: dict[str, list[tuple[int, int]]] = {}
    pinned = {o.name for o in graph.output}
    for j, node in enumerate(graph.node):
        for slot, name in enumerate(node.input):
            consumers.setdefault(name, []).append((j, slot))
        for *_, sub in subgraphs(node):
            pinned |= read_names(sub)
    return consumers, pinned


def _declared_ranks(graph) -> dict[str, int]:
    """The rank of every main-graph value whose type the graph declares with a shape (inputs,
    value_info, outputs): a blocksum of such a value reshapes to constant dimensions."""
    ranks = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.HasField("shape"):
            ranks[info.name] = len(tensor.shape.dim)
    return ranks


def _attribute(node, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _with_subgraph_nodes(nodes):
    """``nodes`` and every node of their subgraphs."""
    for node in nodes:
        yield node
        for *_, graph in subgraphs(node):
            yield from walk_nodes(graph)


def _matmul_like(node, trans_b: int) -> bool:
    """MatMul (only when the weight arrives transposed: trans_b=0), or a Gemm with transA=0,
    alpha=1 and the given transB."""
    if node.op_type == "MatMul" and node.domain in STANDARD_DOMAINS:
        return trans_b == 0
    return (
        node.op_type == "Gemm"
        and node.domain in STANDARD_DOMAINS
        and _attribute(node, "transA", 0) == 0
        and _attribute(node, "transB", 0) == trans_b
        and _attribute(node, "alpha", 1.0) == 1.0
    )


def _set_opset(proto, domain: str, version: int) -> None:
    for opset in proto.opset_import:
        if opset.domain == domain or (domain == "" and opset.domain == "ai.onnx"):
            opset.version = max(opset.version, version)
            return
    proto.opset_import.add(domain=domain, version=version)


__all__ = ["EXECUTION_MODES", "ExecutionReport", "ExecutionRewrite", "rewrite_for_execution"]
