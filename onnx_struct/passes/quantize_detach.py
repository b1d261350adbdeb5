"""Detach the planned weights from the scopes that defined them, so that each is read from the
main-graph value its struct value decodes to (:func:`detach_weights`).

Struct values live in the main graph only (docs/semantics.md, "Container"). A weight of the main
graph keeps its name. A subgraph's weight becomes a main-graph value the subgraph reads from the
outer scope, as onnx lets any subgraph do; the subgraph's references follow its new name. A
``Constant`` in a model-local function becomes a new formal input of that function, and every
call passes the main-graph value (a function calling it from its own body gets the same input in
turn), since a function body sees nothing but its inputs.
"""

from __future__ import annotations

import onnx

from onnx_struct.lowering.names import graph_names, unique_name
from onnx_struct.passes.quantize_plan import Plan
from onnx_struct.passes.quantize_sites import FunctionKey, Site, call_sites, function_key, graphs_below


def detach_weights(model: onnx.ModelProto, plan: Plan) -> None:
    """Rewrite ``model`` in place (``plan`` was built on it): every planned weight's definition
    (initializer or Constant node) is removed, its Gemm readers' ``transB`` flipped where the plan
    says so, and its readers pointed at ``weight.decoded_name`` in the main graph."""
    functions = {function_key(f): f for f in model.functions}
    threaded: dict[tuple[FunctionKey, str], str] = {}
    # Nodes are changed in place first: removing definitions afterwards leaves them where they are.
    for weight in plan.weights:
        site = plan.sites[weight.label]
        if weight.transpose == "transB":
            for use in site.uses:
                _flip_trans_b(use.node)
        if site.function is not None:
            _thread(model, functions, site.function, site.name, weight.decoded_name, threaded)
        elif weight.decoded_name != site.name:
            _rename(site.owner, site.name, weight.decoded_name)
    for weight in plan.weights:
        _remove_definition(plan.sites[weight.label])


def _flip_trans_b(node: onnx.NodeProto) -> None:
    for attribute in node.attribute:
        if attribute.name == "transB":
            attribute.i = 0 if attribute.i else 1
            return
    node.attribute.append(onnx.helper.make_attribute("transB", 1))


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Point every reader of ``old`` in ``graph`` and below at ``new`` (the plan refused a weight
    that is a graph output; a subgraph defining ``old`` again has none to point)."""
    for sub in graphs_below(graph):
        for node in sub.node:
            for k, name in enumerate(node.input):
                if name == old:
                    node.input[k] = new


def _thread(
    model: onnx.ModelProto,
    functions: dict[FunctionKey, onnx.FunctionProto],
    key: FunctionKey,
    formal: str,
    actual: str,
    threaded: dict[tuple[FunctionKey, str], str],
) -> None:
    """Add ``formal`` as the last input of function ``key`` and pass main-graph value ``actual``
    at every call; a call inside another function passes that function's own new input."""
    function = functions[key]
    function.input.append(formal)
    position = len(function.input) - 1
    threaded[(key, actual)] = formal
    for node, caller in call_sites(model, key):
        if caller is None:  # a graph: the main graph's value is in scope
            argument = actual
        elif (caller, actual) in threaded:
            argument = threaded[(caller, actual)]
        else:
            argument = unique_name(actual, graph_names(functions[caller]))
            _thread(model, functions, caller, argument, actual, threaded)
        node.input.extend([""] * (position - len(node.input)))  # optional inputs the call left out
        node.input.append(argument)


def _remove_definition(site: Site) -> None:
    owner = site.owner
    # By name: a name has one definition in its scope (protobuf does not promise the same Python
    # object for an element read twice).
    if site.kind == "constant":
        index = next(
            i for i, node in enumerate(owner.node) if node.op_type == "Constant" and node.output[:1] == [site.name]
        )
        del owner.node[index]
    else:
        index = next(i for i, tensor in enumerate(owner.initializer) if tensor.name == site.name)
        del owner.initializer[index]
    # A value_info would now describe the wrong orientation (transB) or a name no node produces.
    infos = owner.value_info
    for i in reversed(range(len(infos))):
        if infos[i].name == site.name:
            del infos[i]
