"""Names in a graph: the names a lowered model gives what it adds (``<value>::<leaf path>`` for
leaves and the shortening of declaration-level names it repeats once per value, shared by lower()
and the quantized rewrite, which must not take those names); the names a graph reads and holds,
and a name not yet taken, for every rewrite that adds values (lowering, quantize)."""

from __future__ import annotations

import functools
import hashlib

import onnx

from onnx_struct.limits import MAX_LOWERED_NAME_CHARS
from onnx_struct.schema.walk import walk_graphs

SEPARATOR = "::"


def leaf_tensor_name(value_name: str, leaf_path: str) -> str:
    """The lowered name of a leaf: ``"<value or input name>::<leaf path>"`` (``"w::"`` for a root
    whose single leaf has the empty path; a leaf path over MAX_LOWERED_NAME_CHARS shortened)."""
    return f"{value_name}{SEPARATOR}{short_name(leaf_path)}"


@functools.lru_cache(maxsize=256)  # a leaf path is shortened once, not once per value
def short_name(name: str) -> str:
    """``name``, or when longer than MAX_LOWERED_NAME_CHARS its first 64 characters, ``~`` and 16
    hex digits of its hash."""
    if len(name) <= MAX_LOWERED_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{name[:64]}~{digest}"


def read_names(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` or of its subgraphs reads, and their outputs (a subgraph
    reads the outer scope by name, its outputs included).

    Args:
        graph: a stock or overlay graph.

    Returns:
        The names read.
    """
    names: set[str] = set()
    for _, current in walk_graphs(graph, ""):
        names.update(output.name for output in current.output)
        for node in current.node:
            names.update(node.input)
    return names


def graph_names(graph: onnx.GraphProto | onnx.FunctionProto) -> set[str]:
    """Every name ``graph`` and its subgraphs define, read or declare: inputs, outputs,
    value_info, initializers (sparse and struct ones too), node inputs, outputs and node names.
    A new value takes none of them: a subgraph would see it in place of its own.

    Args:
        graph: a stock or overlay graph, or a function.

    Returns:
        The names taken.
    """
    names: set[str] = set()
    for _, current in walk_graphs(graph, ""):
        if isinstance(current, onnx.FunctionProto):
            names.update(current.input)
            names.update(current.output)
        else:
            names.update(v.name for v in (*current.input, *current.output, *current.value_info))
            names.update(t.name for t in current.initializer)
            names.update(t.values.name for t in current.sparse_initializer)
            names.update(v.name for v in getattr(current, "struct_initializer", ()))  # an overlay graph's
        for node in current.node:
            names.update(node.input)
            names.update(node.output)
            names.add(node.name)
    names.discard("")  # an absent optional input, an unnamed node: no name
    return names


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``... whichever is not in ``taken`` (then added to it).

    Args:
        name: the name wanted.
        taken: the names in use; the result is added to it.

    Returns:
        The name given.
    """
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate
