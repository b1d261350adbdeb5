"""What lowering has to do: whether a model has struct parts at all (which struct values its graph
reads: :func:`onnx_struct.lowering.names.read_names`).

A model, or a part of it, with nothing to lower is left as it is (docs/semantics.md, "Drop-in
behaviour"): a model without struct parts is returned untouched, and a struct value no node (of
any graph, subgraphs included) and no graph output reads is not lowered, so neither its decoder
nor its weights are prepared.
"""

from __future__ import annotations

from onnx_struct.schema.model import LoadedModel
from onnx_struct.schema.walk import graph_parts


def has_struct_parts(loaded: LoadedModel) -> bool:
    """True when ``loaded`` declares struct types, holds struct values (in any graph) or types
    anything with a struct type; False for a model stock onnx reads whole."""
    if len(loaded.struct_types) or len(loaded.struct_values):
        return True
    graphs, struct_typed = graph_parts(loaded.proto)
    return bool(struct_typed) or any(len(graph.struct_initializer) for _, graph in graphs)
