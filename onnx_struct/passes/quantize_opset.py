"""Raising a model's default-domain opset to its decoder's without onnx's version converter,
where no operator it uses differs between the two versions.

onnx's converter works on a whole model: a model read with its large initializers' data left in
the file (schema/skeleton.py) would have every weight read back first, the peak memory of
quantize then several times the model (docs/semantics.md, "Quantize's memory"). Rule: when every
default-domain operator of the main graph, its subgraphs and the model's local functions has the
same schema at both versions, the opset imports alone are raised (what the converter would do:
it adapts only operators whose schema changed). Otherwise the converter converts the skeleton, its
large initializers still without their data (its adapters rewrite nodes and add small tensors,
they do not read a weight's data): the result is taken when it keeps every left-out initializer
as it was (name, type, dims, still no data), else the whole model is converted as before.
"""

from __future__ import annotations

import onnx

from onnx_struct.lowering.opsets import canonical_domain, differing_ops
from onnx_struct.schema.walk import walk_nodes


def raise_unchanged_opset(model: onnx.ModelProto, version: int) -> bool:
    """Raise ``model``'s default-domain opset import (and each local function's) to ``version`` in
    place, if no operator they use differs between its version and ``version``.

    Args:
        model: a plain model (no struct parts are read), changed in place when True is returned.
        version: the default-domain opset wanted.

    Returns:
        True when the imports were raised; False when an operator differs (or the model imports
        no default domain, or has training graphs): ``model`` is then unchanged and the
        converter is needed.
    """
    model_import = _default_import(model.opset_import)
    if model_import is None or model_import.version >= version or len(model.training_info):
        return False
    if differing_ops(walk_nodes(model.graph), "", model_import.version, version):
        return False
    raised = []
    for function in model.functions:
        function_import = _default_import(function.opset_import)
        if function_import is None or function_import.version >= version:
            continue
        body = onnx.GraphProto()
        body.node.extend(function.node)
        if differing_ops(walk_nodes(body), "", function_import.version, version):
            return False
        raised.append(function_import)
    for opset in (model_import, *raised):
        opset.version = version
    return True


def keeps_data_left_out(converted: onnx.ModelProto, model: onnx.ModelProto, left_out) -> bool:
    """Whether ``converted`` (``model`` after onnx's version converter) keeps each main-graph
    initializer of ``model`` whose data was left in the file (named in ``left_out``) with the same
    type and dims, and still without data, so that the data can be read back into it by name.

    Args:
        converted: the converted model.
        model: the skeleton it was converted from.
        left_out: the names of the initializers whose data is left in the file.

    Returns:
        True when every such initializer is kept as it was, once.
    """
    wanted = {t.name: _form(t) for t in model.graph.initializer if t.name in left_out}
    kept = [t for t in converted.graph.initializer if t.name in wanted]
    return len(kept) == len(wanted) and all(_form(t) == wanted[t.name] and t.ByteSize() == _size(t) for t in kept)


def _form(tensor: onnx.TensorProto) -> tuple:
    return tensor.data_type, tuple(tensor.dims), tensor.data_location


def _size(tensor: onnx.TensorProto) -> int:
    """The serialized size of ``tensor``'s name, type and dims alone (no data, nothing else)."""
    bare = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    if tensor.HasField("data_location"):
        bare.data_location = tensor.data_location
    return bare.ByteSize()


def _default_import(imports) -> onnx.OperatorSetIdProto | None:
    """The default domain's entry of an opset_import list (the first, as onnx reads it)."""
    return next((o for o in imports if canonical_domain(o.domain) == ""), None)
