"""Raising a model's default-domain opset to its decoder's without onnx's version converter,
where no operator it uses differs between the two versions.

onnx's converter works on a whole model: a model read with its large initializers' data left in
the file (schema/skeleton.py) would have every weight read back first, the peak memory of
quantize then several times the model (docs/semantics.md, "Quantize's memory"). Rule: when every
default-domain operator of the main graph, its subgraphs and the model's local functions has the
same schema at both versions, the opset imports alone are raised (what the converter would do:
it adapts only operators whose schema changed); otherwise the converter decides as before.
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


def _default_import(imports) -> onnx.OperatorSetIdProto | None:
    """The default domain's entry of an opset_import list (the first, as onnx reads it)."""
    return next((o for o in imports if canonical_domain(o.domain) == ""), None)
