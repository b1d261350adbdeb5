"""Projections of a struct model onto what stock onnx accepts: the serde work of checking.

* :func:`stock_view`: struct types shown as Opaque types, struct values as Opaque graph inputs,
  struct parts dropped (what shape inference and ``lower()`` start from);
* :func:`checker_view`: the model's own bytes plus one node defining every struct value name
  (what ``onnx.checker.check_model`` is given when ``full_check`` is off);
* :func:`retyped_view`: a view whose named values carry given types (the logical view of
  ``check.inference``, which computes the types).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx
import onnx.checker

from onnx_struct.schema.model import (
    LoadedModel,
    StructTypeProto,
    graph_inputs_fragment,
    length_delimited,
    to_onnx,
)
from onnx_struct.schema.opaque import exact_index, opaque_type
from onnx_struct.schema.walk import graph_parts, locate

# The private domain of the one node that defines every struct value name in the checker's view.
VALUES_DOMAIN = "onnx_struct.values"


def stock_view(
    loaded: LoadedModel, struct_type_protos: list | None = None, *, external_initializers: bool = True
) -> onnx.ModelProto:
    """The model as stock onnx can check it: struct types shown as Opaque types, struct values as
    Opaque graph inputs, struct parts dropped. Built by one parse, not by deep copies.

    ``external_initializers``: show stock initializers with external data as graph inputs (what
    the checker and shape inference need, see below); ``lower`` keeps them as initializers."""
    if struct_type_protos is None:
        struct_type_protos = graph_parts(loaded.proto)[1]
    view = _stock_types_view(loaded, struct_type_protos, external_initializers=external_initializers)
    view.DiscardUnknownFields()  # the struct parts (only in the view)
    # Struct values become Opaque graph inputs, appended as one serialized fragment.
    typed: dict[int, bytes] = {}
    entries = []
    for value in loaded.proto.graph.struct_initializer:
        key = value.type if not value.HasField("struct_type") else -1
        if key not in typed:
            reference = value.struct_type if key == -1 else StructTypeProto(type_index=key)
            typed[key] = onnx.TypeProto(opaque_type=opaque_type(reference)).SerializeToString()
        entries.append((value.name, typed[key]))
    view.graph.MergeFromString(graph_inputs_fragment(entries))
    return view


def _stock_types_view(loaded: LoadedModel, struct_type_protos: list, external_initializers: bool) -> onnx.ModelProto:
    """A stock parse of the model with struct-typed TypeProtos shown as Opaque types."""
    stock = loaded.stock_serialized
    view = onnx.ModelProto.FromString(stock) if stock is not None else to_onnx(loaded.proto)
    for _, locator, type_proto in struct_type_protos:
        locate(view, locator).opaque_type.CopyFrom(opaque_type(type_proto.struct_type))
    if external_initializers:
        _external_initializers_as_inputs(view.graph)
    return view


_MODEL_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_MODEL_OPSET_IMPORT = onnx.ModelProto.DESCRIPTOR.fields_by_name["opset_import"].number
_GRAPH_NODE = onnx.GraphProto.DESCRIPTOR.fields_by_name["node"].number


def checker_view(
    loaded: LoadedModel,
    struct_type_protos: list,
    external_initializers: bool,
    check_custom_domain: bool,
    value_names: list[str] | None = None,
) -> bytes | onnx.ModelProto:
    """What ``onnx.checker.check_model`` is given when ``full_check`` is off.

    The model's own bytes without the main graph's struct values (their inline payloads are not
    copied: :attr:`LoadedModel.stock_serialized`), with every struct value name defined as an
    output of one node of a private domain placed first in the main graph: onnx's C++ parser skips
    the other struct parts as unknown fields, nothing is parsed or built per value in Python, and the checker walks one node
    instead of thousands of Opaque graph inputs (half the time at 2,000 values). Where that node
    would itself be a finding (an unregistered operator under ``check_custom_domain``; its
    opset_import before IR 3) this falls back to :func:`stock_view`.
    """
    proto = loaded.proto
    if check_custom_domain or proto.ir_version < 3:
        return stock_view(loaded, struct_type_protos)
    if struct_type_protos or external_initializers:
        body = _stock_types_view(loaded, struct_type_protos, external_initializers).SerializeToString()
    elif loaded.stock_serialized is not None:
        body = loaded.stock_serialized
    else:
        body = proto.SerializeToString()
    if value_names is None:
        value_names = [value.name for value in proto.graph.struct_initializer]
    if not value_names:
        return body
    node = onnx.NodeProto(name="onnx_struct: struct values", op_type="StructValues", domain=VALUES_DOMAIN)
    node.output.extend(value_names)
    opset = onnx.OperatorSetIdProto(domain=VALUES_DOMAIN, version=1)
    # A GraphProto occurrence ahead of the model's own merges into it with its node first:
    # protobuf concatenates repeated fields in wire order.
    view = (
        length_delimited(_MODEL_GRAPH, length_delimited(_GRAPH_NODE, node.SerializeToString()))
        + body
        + length_delimited(_MODEL_OPSET_IMPORT, opset.SerializeToString())
    )
    if len(view) > onnx.checker.MAXIMUM_PROTOBUF:  # inline payloads near the 2 GiB limit
        return stock_view(loaded, struct_type_protos)
    return view


def _external_initializers_as_inputs(graph: onnx.GraphProto) -> None:
    # onnx's checker resolves external tensor files of an in-memory model against the working
    # directory, not the model's; onnx_struct checks those files itself (check_external_tensors),
    # so the view keeps each such name defined, with its type, as a graph input instead.
    declared = {i.name for i in graph.input}
    for i in reversed(range(len(graph.initializer))):
        tensor = graph.initializer[i]
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if tensor.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        del graph.initializer[i]


def retyped_view(
    view: onnx.ModelProto,
    by_name: Mapping[str, onnx.TypeProto],
    of_index: Callable[[int], onnx.TypeProto | None],
) -> onnx.ModelProto:
    """A copy of ``view`` in which every main-graph input, output and value_info named in
    ``by_name`` has that type, and every other one of an exact struct type (an Opaque stand-in
    for ``struct_types[i]``) has ``of_index(i)`` unless that is None."""
    out = onnx.ModelProto()
    out.CopyFrom(view)
    graph = out.graph
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.name in by_name:
            info.type.CopyFrom(by_name[info.name])
            continue
        index = exact_index(info.type)
        if index is not None:
            logical = of_index(index)
            if logical is not None:
                info.type.CopyFrom(logical)
    return out
