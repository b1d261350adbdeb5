"""Struct parts carried in stock fields, for tools that drop unknown fields (onnx-ir, onnxscript).

:func:`carry` writes a model whose struct parts live where every ONNX tool keeps them: each
struct value becomes a main-graph input (typed by its logical type, so passes and shape
inference see what the nodes consume) whose ``metadata_props`` hold the value's record; the
declarations go into the model's ``metadata_props``; a struct-typed ``ValueInfoProto`` keeps its
type's bytes in its own ``metadata_props`` (its type shown as the Opaque stand-in).
:func:`restore` puts them back: a value is named by its input's name then (a pass that renamed
the input renamed the value), and a value that was consumed and is consumed no longer (a pass
dropped its users) is dropped. Everything else is the tool's: a model without carried parts is
returned as it is.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import onnx
from google.protobuf.message import DecodeError

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer
from onnx_struct.errors import ValidationError
from onnx_struct.schema.model import StructProto, from_onnx, length_delimited
from onnx_struct.schema.opaque import opaque_type
from onnx_struct.schema.walk import graph_parts, iter_overlay, locate, walk_graphs, walk_nodes

# metadata_props keys: of the model (its declarations), of a value's stand-in input (its record),
# of a struct-typed ValueInfoProto (its type's bytes).
TYPES_KEY = "onnx_struct.struct_types"
VALUE_KEY = "onnx_struct.struct_value"
CONSUMED_KEY = "onnx_struct.consumed"
TYPE_KEY = "onnx_struct.struct_type"

_TYPES_FIELD = pb.ModelProto.DESCRIPTOR.fields_by_name["struct_types"].number
_VALUES_FIELD = pb.GraphProto.DESCRIPTOR.fields_by_name["struct_initializer"].number
_TYPE_FIELD = onnx.ValueInfoProto.DESCRIPTOR.fields_by_name["type"].number
_VALUE_INFO_FIELDS = ("input", "output", "value_info")

StandInType = Callable[[int, str], "onnx.TypeProto | None"]


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ValidationError(where, "carried struct parts are not base64", code="invalid") from None


def _parsed(message_class, text: str, where: str):
    """The carried message, parsed: bytes that are not one are refused, never merged as they are."""
    try:
        return message_class.FromString(_bytes(text, where))
    except DecodeError:
        raise ValidationError(
            where, f"carried struct parts are not a {message_class.__name__}", code="invalid"
        ) from None


def _declarations(text: str, where: str) -> bytes:
    """The carried declarations as ``struct_types`` fields only: whatever else the bytes hold
    (a graph, opset imports) is not merged into the model."""
    carried = _parsed(pb.ModelProto, text, where)
    only = pb.ModelProto()
    only.struct_types.extend(carried.struct_types)
    if only.SerializeToString() != carried.SerializeToString():
        raise ValidationError(where, "carried declarations hold fields other than struct_types", code="invalid")
    return only.SerializeToString()


def consumed_names(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of ``graph`` or of its subgraphs reads, and the graph's outputs."""
    names = {name for node in walk_nodes(graph) for name in node.input}
    names.update(output.name for output in graph.output)
    return names


def is_carried(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds struct parts carried by :func:`carry` (not yet restored)."""
    if any(entry.key == TYPES_KEY for entry in model.metadata_props):
        return True
    return any(entry.key == VALUE_KEY for info in model.graph.input for entry in info.metadata_props)


def offset_type_indices(model: onnx.ModelProto, offset: int) -> onnx.ModelProto:
    """A copy of ``model`` whose every declaration index is ``offset`` higher: values' ``type``,
    ``type_index`` references (in declarations and in graph types) and the Opaque stand-ins'
    names, so that its declarations can follow ``offset`` others in one model."""
    overlay = from_onnx(model)
    for _, _, message in iter_overlay(overlay, into_struct_parts=True):
        kind = message.DESCRIPTOR.name
        if kind == "StructTypeProto" and message.WhichOneof("kind") == "type_index":
            message.type_index += offset
        elif kind == "StructProto" and not message.HasField("struct_type") and message.type >= 0:
            message.type += offset
    return onnx.ModelProto.FromString(overlay.SerializeToString())


def carry(model: onnx.ModelProto, stand_in_type: StandInType) -> onnx.ModelProto:
    """``model`` with its struct parts carried in stock fields (see the module's docstring).

    Args:
        model: a stock model with struct parts (unknown fields).
        stand_in_type: the type of a value's stand-in input (its logical type), or None (untyped),
            given the value's index in the main graph's struct values and its path.

    Returns:
        A new stock model without unknown struct fields; ``model`` itself when it has no struct parts.

    Raises:
        ValidationError: a struct value's name is also a main-graph input or initializer
            (``duplicate_name``), or a struct type is not inside a ValueInfoProto (``invalid``).
    """
    overlay = from_onnx(model)
    graphs, typed = graph_parts(overlay)
    values = list(overlay.graph.struct_initializer)
    if not (len(overlay.struct_types) or values or typed):
        return model
    declarations = pb.ModelProto()
    declarations.struct_types.extend(overlay.struct_types)
    overlay.ClearField("struct_types")
    for _, graph in graphs:
        graph.ClearField("struct_initializer")
    stock = onnx.ModelProto.FromString(overlay.SerializeToString())
    _carry_types(stock, typed)
    stock.metadata_props.add(key=TYPES_KEY, value=_text(declarations.SerializeToString()))
    graph = stock.graph
    taken = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used = consumed_names(graph)
    for k, value in enumerate(values):
        where = f"graph.struct_initializer[{k}] ({value.name!r})"
        if value.name in taken:
            raise ValidationError(where, "names a graph input or initializer too", code="duplicate_name")
        info = graph.input.add(name=value.name)
        logical = stand_in_type(k, where)
        if logical is not None:
            info.type.CopyFrom(logical)
        record = StructProto()
        record.CopyFrom(value)
        record.ClearField("name")
        info.metadata_props.add(key=VALUE_KEY, value=_text(record.SerializeToString()))
        info.metadata_props.add(key=CONSUMED_KEY, value="1" if value.name in used else "0")
    return stock


def _carry_types(stock: onnx.ModelProto, typed: list) -> None:
    """Each struct-typed TypeProto's owner (a ValueInfoProto) keeps its type's bytes; the type is
    shown as its Opaque stand-in."""
    owners: dict[tuple, onnx.ValueInfoProto] = {}
    for path, locator, _ in typed:
        cut = max((i for i, (name, _) in enumerate(locator) if name in _VALUE_INFO_FIELDS), default=None)
        if cut is None:
            raise ValidationError(path, "a struct type outside a value_info cannot be carried", code="invalid")
        owner_locator = tuple(locator[: cut + 1])
        if owner_locator not in owners:
            owner = owners[owner_locator] = locate(stock, owner_locator)
            owner.metadata_props.add(key=TYPE_KEY, value=_text(owner.type.SerializeToString()))
    overlay_of = {}
    for _, locator, struct_type_proto in typed:
        overlay_of[tuple(locator)] = struct_type_proto.struct_type
    for locator, struct_type in overlay_of.items():
        locate(stock, locator).opaque_type.CopyFrom(opaque_type(struct_type))


def restore(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the struct parts :func:`carry` carried put back in place.

    Args:
        model: a stock model, as a tool returned it.

    Returns:
        A new stock model with its struct parts (unknown fields); ``model`` itself when it carries none.

    Raises:
        ValidationError: the carried records are not what :func:`carry` writes.
    """
    if not is_carried(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = [entry for entry in out.metadata_props if entry.key == TYPES_KEY]
    kept = [entry for entry in out.metadata_props if entry.key != TYPES_KEY]
    out.ClearField("metadata_props")
    out.metadata_props.extend(kept)
    for entry in types:  # carry writes one; declarations of merged models are joined before
        out.MergeFromString(_declarations(entry.value, f"metadata_props ({TYPES_KEY!r})"))
    graph = out.graph
    used = consumed_names(graph)
    records = []
    for i in reversed(range(len(graph.input))):
        info = graph.input[i]
        meta = {entry.key: entry.value for entry in info.metadata_props}
        if VALUE_KEY not in meta:
            continue
        del graph.input[i]
        if meta.get(CONSUMED_KEY) == "1" and info.name not in used:
            continue  # a pass dropped every user of the value
        record = _parsed(StructProto, meta[VALUE_KEY], f"graph.input ({info.name!r}).metadata_props")
        records.append((info.name, record.SerializeToString()))
    # Appended as bytes (the values are unknown fields of onnx's GraphProto), named by their inputs.
    fragment = b"".join(
        length_delimited(_VALUES_FIELD, record + _name_field(name)) for name, record in reversed(records)
    )
    graph.MergeFromString(fragment)
    _restore_types(out)
    return out


_NAME_FIELD = pb.StructProto.DESCRIPTOR.fields_by_name["name"].number


def _name_field(name: str) -> bytes:
    return length_delimited(_NAME_FIELD, name.encode())


def _restore_types(out: onnx.ModelProto) -> None:
    """Every ValueInfoProto that kept its struct type's bytes gets that type back."""
    places = [graph for _, graph in walk_graphs(out.graph)] + list(out.functions)
    for place in places:
        infos = list(place.value_info)
        if isinstance(place, onnx.GraphProto):
            infos += [*place.input, *place.output]
        for info in infos:
            carried = [entry.value for entry in info.metadata_props if entry.key == TYPE_KEY]
            if not carried:
                continue
            kept = [entry for entry in info.metadata_props if entry.key != TYPE_KEY]
            info.ClearField("metadata_props")
            info.metadata_props.extend(kept)
            info.ClearField("type")
            # Merged as bytes: the struct type is an unknown field of onnx's TypeProto.
            struct_type = _parsed(pb.TypeProto, carried[0], f"value_info ({info.name!r}).metadata_props")
            info.MergeFromString(length_delimited(_TYPE_FIELD, struct_type.SerializeToString()))
