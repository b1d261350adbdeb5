"""The one graph walker: every place of a model where a graph or a struct part can be.

:func:`iter_overlay` walks the overlay messages (struct parts included) with paths and locators;
:func:`graph_parts` is its common question (the graphs and the struct-typed TypeProtos, outside
struct parts), asked by the checker and by ``install()``'s hooks. :func:`walk_graphs` walks the
subgraphs of a stock ``onnx.GraphProto`` (node attributes ``g`` and ``graphs``, read by
:func:`subgraphs` only), for code that works on plain ONNX after lowering or before quantizing;
:func:`walk_scoped` walks its nodes with the names defined before each, :func:`walk_graph_pairs`
two graphs with the same nodes side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import onnx

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer


def _overlay_fields(descriptor) -> tuple:
    """(name, repeated, has_name, is_struct_part) of the fields of ``descriptor`` that hold overlay messages."""
    cached = _OVERLAY_FIELDS.get(descriptor.full_name)
    if cached is None:
        cached = tuple(
            (
                f.name,
                f.is_repeated,
                "name" in f.message_type.fields_by_name,
                f.message_type.name in ("StructTypeProto", "StructProto"),
            )
            for f in descriptor.fields
            if f.message_type is not None and f.message_type.file is pb.DESCRIPTOR
        )
        _OVERLAY_FIELDS[descriptor.full_name] = cached
    return cached


_OVERLAY_FIELDS: dict[str, tuple] = {}


def iter_overlay(message, path: str = "", *, into_struct_parts: bool = False, main_nodes=None):
    """Yield ``(path, locator, message)`` for ``message`` and the overlay messages below it.

    Only fields typed with overlay messages are followed: onnx's own messages (tensors with large
    raw_data among them) can never contain struct parts, so they are never touched. A child whose
    overlay fields are all empty (a node without attributes, a plain tensor TypeProto) can hold no
    struct part and is skipped, which keeps a walk over a large graph cheap. ``locator`` is the
    tuple of (field name, index or None) steps from ``message``, valid in stock onnx messages too
    (field names are identical). With ``into_struct_parts=False`` StructTypeProto/StructProto
    subtrees are not entered. ``main_nodes`` (``message`` being a model): the indices of the only
    nodes of its main graph that may have attributes (:class:`onnx_struct.schema.wire.Scan` finds
    them at C speed), so that the others are not read one by one.
    """
    stack = [(path, (), message)]
    while stack:
        where, locator, current = stack.pop()
        yield where, locator, current
        children = []
        for name, repeated, has_name, struct_part in _overlay_fields(current.DESCRIPTOR):
            if struct_part and not into_struct_parts:
                continue
            prefix = f"{where}.{name}" if where else name
            if repeated:
                items = getattr(current, name)
                if not len(items):
                    continue
                may_hold = _struct_part_probe(items[0].DESCRIPTOR, into_struct_parts)
                if main_nodes is not None and locator == _MAIN_GRAPH and name == "node":
                    holders = [(i, item) for i, item in picked(items, main_nodes) if _holds(item, may_hold)]
                elif isinstance(may_hold, str):  # the hot case, nodes: one repeated field read inline
                    holders = [(i, item) for i, item in enumerate(items) if getattr(item, may_hold)]
                else:
                    holders = [(i, item) for i, item in enumerate(items) if may_hold(item)]
                for i, item in holders:  # e.g. nodes with attributes
                    label = item.name if has_name else ""
                    children.append(
                        (f"{prefix}[{i}] ({label!r})" if label else f"{prefix}[{i}]", (*locator, (name, i)), item)
                    )
            elif current.HasField(name):
                item = getattr(current, name)
                probe = _struct_part_probe(item.DESCRIPTOR, into_struct_parts)
                if getattr(item, probe) if isinstance(probe, str) else probe(item):
                    children.append((prefix, (*locator, (name, None)), item))
        stack.extend(reversed(children))


def _struct_part_probe(descriptor, into_struct_parts: bool):
    """A cheap predicate: can a message of this type hold a struct part below it?

    GraphProtos and struct parts always can; any other message only through one of its
    overlay-typed fields (a struct_type TypeProto counts even when not entering struct parts).
    A message type with a single such field, repeated (NodeProto: attribute), gets the field's
    name instead of a function: the caller reads it inline, the walk's hottest line.
    """
    key = (descriptor.full_name, into_struct_parts)
    probe = _PROBES.get(key)
    if probe is None:
        if descriptor.name in ("GraphProto", "StructTypeProto", "StructProto"):
            probe = _always
        else:
            fields = [
                (name, repeated)
                for name, repeated, _, struct_part in _overlay_fields(descriptor)
                if not struct_part or into_struct_parts or descriptor.name == "TypeProto"
            ]
            if len(fields) == 1 and fields[0][1]:
                probe = fields[0][0]  # the hot case (nodes): the one repeated field, non-empty
            else:
                probe = lambda m: any(len(getattr(m, n)) if r else m.HasField(n) for n, r in fields)  # noqa: E731
        _PROBES[key] = probe
    return probe


_MAIN_GRAPH = (("graph", None),)


def _holds(message, may_hold) -> bool:
    return bool(getattr(message, may_hold)) if isinstance(may_hold, str) else may_hold(message)


def _always(message) -> bool:
    return True


_PROBES: dict[tuple[str, bool], object] = {}


def locate(message, locator):
    """Follow a locator from :func:`iter_overlay` in another message with the same field names."""
    for name, index in locator:
        message = getattr(message, name) if index is None else getattr(message, name)[index]
    return message


def graph_parts(proto, main_nodes=None) -> tuple[list, list]:
    """(graphs, struct-typed TypeProtos) below ``proto``, outside struct parts, with paths:
    ``[(path, GraphProto)]`` and ``[(path, locator, TypeProto)]`` (``main_nodes``: see :func:`iter_overlay`)."""
    graphs, struct_type_protos = [], []
    for path, locator, message in iter_overlay(proto, into_struct_parts=False, main_nodes=main_nodes):
        name = message.DESCRIPTOR.name
        if name == "GraphProto":
            graphs.append((path, message))
        elif name == "TypeProto" and message.WhichOneof("value") == "struct_type":
            struct_type_protos.append((path, locator, message))
    return graphs, struct_type_protos


# How a subgraph's path is spelled: (path of the graph, node index, node, attribute index,
# attribute, index in the attribute's ``graphs`` or None for its ``g``) -> path of the subgraph.
Label = Callable[[str, int, onnx.NodeProto, int, onnx.AttributeProto, int | None], str]


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[int, onnx.AttributeProto, int | None, onnx.GraphProto]]:
    """The graphs in ``node``'s attributes, in document order: ``(attribute index, attribute,
    index in its graphs list or None for its g, graph)``. The one place that reads an attribute's
    graphs (tests/test_walk.py holds every other module to it).

    Args:
        node: a stock (or overlay) NodeProto.

    Returns:
        An iterator over the node's subgraphs, not theirs.
    """
    for k, attribute in enumerate(node.attribute):
        if attribute.HasField("g"):
            yield k, attribute, None, attribute.g
        for j, sub in enumerate(attribute.graphs):
            yield k, attribute, j, sub


def by_name(where: str, i: int, node: onnx.NodeProto, k: int, attribute: onnx.AttributeProto, j: int | None) -> str:
    """``graph.node[3].attribute ('body')``, ``graph.node[3].attribute ('branches')[1]``."""
    at = f"{where}.node[{i}].attribute ({attribute.name!r})"
    return at if j is None else f"{at}[{j}]"


def by_field(where: str, i: int, node: onnx.NodeProto, k: int, attribute: onnx.AttributeProto, j: int | None) -> str:
    """``graph.node[3].attribute[0].g``, ``graph.node[3].attribute[0].graphs[1]``."""
    at = f"{where}.node[{i}].attribute[{k}]"
    return f"{at}.g" if j is None else f"{at}.graphs[{j}]"


def walk_graphs(
    graph: onnx.GraphProto, path: str = "graph", *, by_index: bool = False, nodes=None, label: Label | None = None
) -> Iterator[tuple[str, onnx.GraphProto]]:
    """``(path, graph)`` for a stock graph (or function) and every graph in its node attributes,
    depth first, in document order.

    Paths name the attribute: ``graph.node[3].attribute ('body')`` and, for a ``graphs`` list,
    ``graph.node[3].attribute ('branches')[1]``; ``by_index=True`` spells the fields instead, as
    the tensor paths of :mod:`onnx_struct.payload.external` do: ``graph.node[3].attribute[0].g``,
    ``graph.node[3].attribute[0].graphs[1]``; ``label`` spells them as the caller's messages do.
    Iterative, so nesting depth costs no stack. ``nodes``: the indices of the only nodes of
    ``graph`` itself that may have attributes (see :func:`iter_overlay`); the others are not read.
    """
    label = label or (by_field if by_index else by_name)
    stack = [(path, graph)]
    while stack:
        where, current = stack.pop()
        yield where, current
        children = []
        for i, node in picked(current.node, nodes if current is graph else None):
            if node.attribute:
                children.extend((label(where, i, node, k, a, j), sub) for k, a, j, sub in subgraphs(node))
        stack.extend(reversed(children))


def walk_scoped(
    graph: onnx.GraphProto, path: str = "graph", outer: Iterable[str] = (), *, label: Label = by_name
) -> Iterator[tuple[str, int, onnx.NodeProto, set[str]]]:
    """``(path of its graph, index, node, names defined before it)`` for every node of ``graph``
    and of its subgraphs, in document order: a node, then the nodes of its subgraphs, then the
    next node (the order onnx's checker reads them in).

    The names defined before a node are ``outer`` (for ``graph`` itself; for a subgraph, the
    names defined before the node holding it), its graph's inputs, initializers and sparse
    initializers, and the outputs of the earlier nodes of its graph. The set is live: read it
    before asking for the next node. Iterative, so nesting depth costs no stack.

    Args:
        graph: a stock graph.
        path: the path of ``graph``; a subgraph's is spelled by ``label``.
        outer: the names visible to ``graph`` from around it.
        label: how a subgraph's path is spelled (:func:`by_name` by default).

    Returns:
        An iterator of ``(path, index, node, defined)``.
    """
    stack = [(path, iter(enumerate(graph.node)), _defined_in(graph, outer))]
    while stack:
        where, nodes, defined = stack[-1]
        step = next(nodes, None)
        if step is None:
            stack.pop()
            continue
        i, node = step
        yield where, i, node, defined
        if node.attribute:
            inner = [(label(where, i, node, k, a, j), sub) for k, a, j, sub in subgraphs(node)]
            for sub_where, sub in reversed(inner):  # the first subgraph on top: walked first
                stack.append((sub_where, iter(enumerate(sub.node)), _defined_in(sub, defined)))
        defined.update(node.output)


def _defined_in(graph: onnx.GraphProto, outer: Iterable[str]) -> set[str]:
    defined = set(outer)
    defined.update(i.name for i in graph.input)
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    return defined


def walk_graph_pairs(
    first: onnx.GraphProto, second: onnx.GraphProto
) -> Iterator[tuple[onnx.GraphProto, onnx.GraphProto]]:
    """``(graph, counterpart)`` for ``first`` and every graph below it, each paired with the graph
    at the same place in ``second`` (node ``i``'s attribute ``k``'s graph ``j``): for two graphs
    with the same nodes, such as a graph and onnx's inference of it. A graph with no counterpart
    is left out, with the graphs below it.

    Args:
        first: a graph.
        second: a graph with the same nodes.

    Returns:
        An iterator of pairs, depth first, in document order.
    """
    stack = [(first, second)]
    while stack:
        mine, theirs = stack.pop()
        yield mine, theirs
        children = []
        for node, other in zip(mine.node, theirs.node, strict=False):
            if node.attribute and other.attribute:
                counterparts = {(k, j): sub for k, _, j, sub in subgraphs(other)}
                children += [(sub, counterparts[k, j]) for k, _, j, sub in subgraphs(node) if (k, j) in counterparts]
        stack.extend(reversed(children))


def picked(items, indices):
    """``(index, item)`` for the given indices of a list or repeated field, as ``enumerate`` gives
    them; every item (``enumerate`` itself) when ``indices`` is None."""
    return enumerate(items) if indices is None else [(i, items[i]) for i in indices]


def walk_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of a stock graph and of its subgraphs."""
    for _, sub in walk_graphs(graph, ""):
        yield from sub.node
