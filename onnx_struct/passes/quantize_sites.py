"""Where a model keeps its weights, and who reads them: every FLOAT tensor quantize may replace.

A weight is an initializer or a ``Constant`` node of the main graph, a subgraph or a model-local
function body. Its readers are resolved as onnx resolves names: in its graph, in subgraphs that do
not define the name again, and through function calls into the body (the body's nodes are the
readers, never the call). One site is one tensor, however many nodes read it.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Literal

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_struct.schema.walk import subgraphs, walk_graphs

Owner = onnx.GraphProto | onnx.FunctionProto
FunctionKey = tuple[str, str, str]  # (domain, name, overload)
MAIN = "graph"


@dataclasses.dataclass
class Use:
    """One node reading a weight (through any number of function calls)."""

    node: onnx.NodeProto
    position: int  # the input slot
    where: str  # the graph or function holding ``node``
    via_call: bool  # reached through a function's formal input (the body is shared by other call sites)


@dataclasses.dataclass
class Site:
    """One weight: where it is defined and every node that reads it."""

    name: str  # the name it has in its scope
    kind: Literal["initializer", "constant"]
    owner: Owner  # the graph or function that defines it
    where: str  # ``graph`` for the main graph, a node path for a subgraph, ``function 'd.F'``
    tensor: onnx.TensorProto | None  # None: a Constant whose value is not a tensor (sparse, ref_attr_name, ints...)
    node: onnx.NodeProto | None = None  # the Constant node
    uses: list[Use] = dataclasses.field(default_factory=list)
    pinned: str = ""  # why its name must stay as it is: "a graph output", ...
    function: FunctionKey | None = None  # the model-local function defining it

    @property
    def label(self) -> str:
        """The name, with its scope unless it is the main graph: how reports name the weight."""
        return self.name if self.where == MAIN else f"{self.name} (in {self.where})"

    @property
    def elements(self) -> int:
        return math.prod(self.tensor.dims) if self.tensor is not None else 0  # math.prod: no wrap-around


def function_key(item: onnx.NodeProto | onnx.FunctionProto) -> FunctionKey:
    """The (domain, name, overload) a call node names, or a function is known by."""
    name = item.op_type if isinstance(item, onnx.NodeProto) else item.name
    return (item.domain, name, item.overload)


def function_label(key: FunctionKey) -> str:
    return f"function '{key[0]}.{key[1]}'" if key[0] else f"function '{key[1]}'"


def find_sites(model: onnx.ModelProto) -> list[Site]:
    """Every weight of ``model`` with its readers, main-graph initializers first, in document order."""
    functions = {function_key(f): f for f in model.functions}
    sites: list[Site] = []
    for where, graph in _graphs(model.graph, MAIN):
        for tensor in graph.initializer:
            sites.append(Site(tensor.name, "initializer", graph, where, tensor))
        sites.extend(_constants(graph, where, None))
    for key, function in functions.items():
        sites.extend(_constants(function, function_label(key), key))
    for site in sites:
        site.uses, site.pinned = _readers(site.owner, site.name, site.where, functions, site.node)
    return sites


def _graphs(graph: onnx.GraphProto, where: str) -> Iterator[tuple[str, onnx.GraphProto]]:
    """``graph`` and every graph below it, with its path."""
    return walk_graphs(graph, where, label=_site_path)


def _subgraphs(node: onnx.NodeProto, at: str, i: int) -> Iterator[tuple[str, onnx.GraphProto]]:
    """The graphs in the attributes of node ``i`` of the graph at ``at``, with their paths."""
    return ((_site_path(at, i, node, k, attribute, j), sub) for k, attribute, j, sub in subgraphs(node))


def _site_path(where: str, i: int, node: onnx.NodeProto, k: int, attribute: onnx.AttributeProto, j: int | None) -> str:
    """``main graph.node[2] (If 'cond') then_branch``: the path of a subgraph in messages."""
    at = f"{where}.node[{i}]"
    label = f"{at} ({node.op_type} {node.name!r})" if node.name else f"{at} ({node.op_type})"
    return f"{label} {attribute.name}" if j is None else f"{label} {attribute.name}[{j}]"


def _constants(owner: Owner, where: str, function: FunctionKey | None) -> list[Site]:
    sites = []
    for node in owner.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            sites.append(Site(node.output[0], "constant", owner, where, constant_tensor(node), node, function=function))
    return sites


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor of a ``Constant`` node's ``value``, ``value_float`` or ``value_floats``; None for
    any other attribute (its value is not a float weight: ints, strings, sparse, a function attribute)."""
    if len(node.attribute) != 1 or node.attribute[0].ref_attr_name:
        return None
    attribute = node.attribute[0]
    if attribute.name == "value":
        return attribute.t
    if attribute.name == "value_float":
        return numpy_helper.from_array(np.array(attribute.f, np.float32), node.output[0])
    if attribute.name == "value_floats":
        return numpy_helper.from_array(np.array(attribute.floats, np.float32), node.output[0])
    return None


def _defines(graph: onnx.GraphProto, name: str) -> bool:
    """Whether ``graph`` defines ``name`` itself (hiding an outer value of that name)."""
    if any(v.name == name for v in graph.input) or any(t.name == name for t in graph.initializer):
        return True
    return any(name in node.output for node in graph.node)


def _readers(owner: Owner, name: str, where: str, functions: dict, defining: onnx.NodeProto | None):
    """The nodes reading ``name`` in ``owner`` (below it and through function calls), and why the
    name is pinned ("" if it is not)."""
    uses: list[Use] = []
    pinned: list[str] = []
    stack = [(owner, name, where, False)]
    while stack:
        scope, wanted, at, via_call = stack.pop()
        outputs = scope.output if isinstance(scope, onnx.FunctionProto) else [o.name for o in scope.output]
        if wanted in outputs:
            pinned.append("an output of the main graph" if at == MAIN else f"an output of {at}")
        for i, node in enumerate(scope.node):
            if node is defining:
                continue
            for position, used in enumerate(node.input):
                if used != wanted:
                    continue
                callee = functions.get(function_key(node))
                if callee is None:
                    uses.append(Use(node, position, at, via_call))
                elif position < len(callee.input):
                    stack.append((callee, callee.input[position], function_label(function_key(node)), True))
            for sub_where, sub in _subgraphs(node, at, i):
                if not _defines(sub, wanted):
                    stack.append((sub, wanted, sub_where, via_call))
    return uses, "; ".join(dict.fromkeys(pinned))


def graphs_below(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and its subgraphs (to rename a value in the scope that sees it)."""
    for _, sub in _graphs(graph, ""):
        yield sub


def call_sites(model: onnx.ModelProto, key: FunctionKey) -> list[tuple[onnx.NodeProto, FunctionKey | None]]:
    """Every node calling the local function ``key``, with the function it sits in (None: a graph)."""
    found = []
    for _, graph in _graphs(model.graph, MAIN):
        found += [(node, None) for node in graph.node if function_key(node) == key]
    for function in model.functions:
        for _, graph in walk_graphs(function, ""):
            found += [(node, function_key(function)) for node in graph.node if function_key(node) == key]
    return found
