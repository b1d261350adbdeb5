"""The physical layout of a model's declarations and struct values, as data and as a text tree.

:func:`describe` reads no payload byte: it walks the declarations (fields, arrays, bit-packing
components, constants, referenced declarations) with each element's bit offset and size, and
lists each struct value's size and where its payload lives (inline, or external file + offset).
The CLI prints it as a tree (``onnx-struct inspect``) or as JSON (``--json``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onnx_struct.check.inference import LogicalTypes
from onnx_struct.errors import ValidationError
from onnx_struct.layout import dtypes
from onnx_struct.layout.table import TypeTable, element_label, read_constant, type_size
from onnx_struct.limits import MAX_DESCRIBED_DEPTH, MAX_DESCRIBED_NODES, MAX_DESCRIBED_TREE_NODES
from onnx_struct.payload import external
from onnx_struct.schema.model import LoadedModel, StructTypeProto, load

__all__ = ["describe", "describe_declaration", "format_text"]


def describe(model, value: str | None = None) -> dict[str, Any]:
    """JSON-ready description: ``{"struct_types": [...], "struct_values": [...]}``.

    Each declaration is ``{"index", "name", "size_bits", "tree"}`` (or ``"error"``), plus
    ``"logical_type"`` (its decoder's output type, e.g. ``FLOAT[8, 64]``, inferred without running
    anything; ``"logical_type_error"`` when it cannot be) when it has a decoder, and
    ``"doc_string"`` / ``"metadata_props"`` when set. Each value is ``{"name", "type",
    "type_index", "size_bytes", "location", "tree"}`` (``type`` a display string, ``type_index``
    absent for an inline declaration), plus ``"logical_type"`` and ``"doc_string"`` likewise, with
    ``location`` ``{"kind": "inline"}`` or ``{"kind": "external", "location", "offset",
    "length"}``. ``"metadata_props"`` holds the model's (a model converted from GGUF keeps the
    GGUF metadata there). With ``value`` only that struct value (and no model-level declaration
    list or metadata) is described.
    """
    loaded = model if isinstance(model, LoadedModel) else load(model)
    table = TypeTable(loaded.struct_types)  # sizes and failures memoized across all entries
    types = LogicalTypes(loaded, table)
    out: dict[str, Any] = {"struct_types": [], "struct_values": []}
    total = [MAX_DESCRIBED_NODES]
    if value is None:
        # An onnx.ModelProto has them itself: loaded.proto would serialize every payload to parse them.
        owner = model if isinstance(model, onnx.ModelProto) else loaded.proto
        out["metadata_props"] = {entry.key: entry.value for entry in owner.metadata_props}
        for i, declaration in enumerate(loaded.struct_types):
            entry: dict[str, Any] = {"index": i, "name": declaration.name}
            try:
                entry["size_bits"] = table.size_of_index(i, TypeTable.path(i))
                table.leaf_shape_of_index(i, TypeTable.path(i))  # leaf limits, as check_model applies them
                entry["tree"] = describe_declaration(declaration, table, TypeTable.path(i), total)
                if declaration.HasField("decoder"):
                    _add_logical_type(entry, lambda i=i: types.of_index(i))
            except ValidationError as error:
                entry["error"] = str(error)
            _add_annotations(entry, declaration)
            out["struct_types"].append(entry)
    for i, proto in enumerate(loaded.struct_values):
        if value is not None and proto.name != value:
            continue
        entry = _describe_value(proto, i, table, with_tree=value is not None, total=total)
        if "error" not in entry:
            where = element_label(f"graph.struct_initializer[{i}]", proto.name)
            _add_logical_type(entry, lambda proto=proto, where=where: types.of_value(proto, where))
        if proto.doc_string:
            entry["doc_string"] = proto.doc_string
        out["struct_values"].append(entry)
    if value is not None and not out["struct_values"]:
        loaded.struct_value(value)  # raises "no struct value named ..." listing the known names
    return out


def _add_logical_type(entry: dict[str, Any], infer) -> None:
    """``entry["logical_type"]`` from ``infer()`` (None: no decoder, nothing added); a decoder onnx
    cannot type is the checker's finding, shown as ``logical_type_error`` without failing the entry."""
    try:
        logical = infer()
    except ValidationError as error:
        entry["logical_type_error"] = str(error)
        return
    if logical is not None:
        entry["logical_type"] = type_label(logical)


def type_label(type_proto) -> str:
    """``FLOAT[8, 64]`` for a tensor type (``?`` for an unknown dimension); other types by kind."""
    if type_proto.WhichOneof("value") != "tensor_type":
        return str(type_proto.WhichOneof("value"))
    tensor = type_proto.tensor_type
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
    return dtypes.type_name(tensor.elem_type) + (f"[{', '.join(dims)}]" if dims else "")


def _add_annotations(entry: dict[str, Any], declaration: StructTypeProto) -> None:
    if declaration.doc_string:
        entry["doc_string"] = declaration.doc_string
    if len(declaration.metadata_props):
        entry["metadata_props"] = {prop.key: prop.value for prop in declaration.metadata_props}


def _describe_value(proto, index: int, table: TypeTable, with_tree: bool, total: list[int]) -> dict[str, Any]:
    """Size and location of one value; its declaration's tree when inline (or ``with_tree``)."""
    where = element_label(f"graph.struct_initializer[{index}]", proto.name)
    entry: dict[str, Any] = {"name": proto.name}
    try:
        if proto.HasField("struct_type"):
            declaration, path = proto.struct_type, f"{where}.struct_type"
            entry["type"] = "inline"
        else:
            declaration = table.declaration(proto.type, f"{where}.type")
            path = TypeTable.path(proto.type)
            entry["type"] = element_label(path, declaration.name)
            entry["type_index"] = proto.type
        bits = table.size(declaration, path)
        table.leaf_shape(declaration, path)
        entry["size_bytes"] = bits // 8 if bits % 8 == 0 else bits / 8
        if proto.HasField("struct_type") or with_tree:
            entry["tree"] = describe_declaration(declaration, table, path, total)
    except ValidationError as error:
        entry["error"] = str(error)
    if len(proto.external_data):
        try:
            ref = external.parse_external_data(proto.external_data, f"{where}.external_data")
            entry["location"] = {
                "kind": "external",
                "location": ref.location,
                "offset": ref.offset,
                "length": ref.length,
            }
        except ValidationError as error:
            entry["location"] = {"kind": "external", "error": str(error)}
    else:
        entry["location"] = {"kind": "inline", "length": len(proto.raw_data)}
    return entry


def describe_declaration(
    declaration: StructTypeProto, table: TypeTable, path: str, total: list[int] | None = None
) -> dict[str, Any]:
    """The tree of one concrete declaration, offsets in bits from the start of its first instance
    (array and bit-packing nodes show their first element / record and the repeat count).
    ``total`` is a node budget shared by the trees of one description (decremented here)."""
    size = table.size(declaration, path)  # validates references, cycles and sizes first
    budget = [min(MAX_DESCRIBED_TREE_NODES, total[0]) if total is not None else MAX_DESCRIBED_TREE_NODES]
    start = budget[0]
    node = _declaration_node(declaration, table, path, 0, budget, name=declaration.name, size=size)
    if total is not None:
        total[0] -= start - budget[0]
    return node


def _declaration_node(
    declaration, table: TypeTable, path: str, offset: int, budget: list[int], name: str = "", depth: int = 0, *, size
):
    budget[0] -= 1
    kind = declaration.WhichOneof("kind")
    node: dict[str, Any] = {"name": name, "kind": kind, "bit_offset": offset, "size_bits": size}
    if budget[0] <= 0:
        node["truncated"] = True
        return node
    if kind == "structure":
        node["type"] = "structure"
        children = []
        position = offset
        fields = declaration.structure.field
        for i, field in enumerate(fields):
            if budget[0] <= 0:  # the budget bounds a structure's own fields too, not only references
                node["truncated_children"] = len(fields) - i
                break
            where = element_label(f"{path}.structure.field[{i}]", field.name)
            if field.WhichOneof("content") == "constant":
                budget[0] -= 1
                children.append(_constant_node(field.name, field.constant, position))
                continue
            child = _type_node(field.type, table, f"{where}.type", position, budget, field.name, depth)
            children.append(child)
            position += child["size_bits"]
        node["children"] = children
    elif kind == "array":
        array = declaration.array
        element = _type_node(array.element_type, table, f"{path}.array.element_type", offset, budget, "element", depth)
        node.update(type=f"array[{array.dimension}]", dimension=array.dimension, stride_bits=element["size_bits"])
        node["children"] = [element]
    elif kind == "bit_packing":
        packing = declaration.bit_packing
        record = sum(c.bit_width for c in packing.component)
        node.update(type=f"bit_packing[{packing.dimension}]", dimension=packing.dimension, stride_bits=record)
        children, position = [], offset
        for i, component in enumerate(packing.component):
            budget[0] -= 1
            if budget[0] <= 0:  # 8,000 components under 200 references printed 1.6M lines
                node["truncated_children"] = len(packing.component) - i
                break
            children.append(
                {
                    "name": component.name,
                    "kind": "component",
                    "type": f"u{component.bit_width}",
                    "bit_offset": position,
                    "size_bits": component.bit_width,
                }
            )
            position += component.bit_width
        node["children"] = children
    elif kind == "type_index":
        return _reference_node(declaration.type_index, table, path, offset, budget, name, depth)
    return node


def _type_node(type_proto, table: TypeTable, path: str, offset: int, budget: list[int], name: str, depth: int):
    size = type_size(type_proto, path, table.size_of_index)
    if type_proto.WhichOneof("value") == "struct_type":
        return _reference_node(type_proto.struct_type.type_index, table, path, offset, budget, name, depth)
    tensor = type_proto.tensor_type
    dims = [d.dim_value for d in tensor.shape.dim]
    budget[0] -= 1
    return {
        "name": name,
        "kind": "tensor",
        "type": tensor_label(tensor.elem_type, dims),
        "elem_type": dtypes.type_name(tensor.elem_type),
        "shape": dims,
        "bit_offset": offset,
        "size_bits": size,
    }


def _reference_node(index: int, table: TypeTable, path: str, offset: int, budget: list[int], name: str, depth: int):
    declaration = table.declaration(index, path)
    node: dict[str, Any] = {
        "name": name,
        "kind": "reference",
        "type": element_label(TypeTable.path(index), declaration.name),
        "type_index": index,
        "bit_offset": offset,
        "size_bits": table.size_of_index(index, path),
    }
    budget[0] -= 1
    if budget[0] <= 0 or depth >= MAX_DESCRIBED_DEPTH:
        node["truncated"] = True
    else:
        node["children"] = [
            _declaration_node(
                declaration, table, TypeTable.path(index), offset, budget, depth=depth + 1, size=node["size_bits"]
            )
        ]
    return node


def _constant_node(name: str, tensor, offset: int) -> dict[str, Any]:
    node: dict[str, Any] = {
        "name": name,
        "kind": "constant",
        "type": f"constant {tensor_label(tensor.data_type, list(tensor.dims))}",
        "bit_offset": offset,
        "size_bits": 0,
    }
    try:
        node["value"] = _preview(read_constant(tensor, "constant"))
    except ValidationError:  # an unreadable constant is the checker's finding, not ours
        node["value"] = "?"
    return node


def _preview(array: np.ndarray, limit: int = 8) -> str:
    flat = array.reshape(-1)
    items = [str(x.item() if hasattr(x, "item") else x) for x in flat[:limit]]
    text = ", ".join(items) + (", ..." if flat.size > limit else "")
    return text if array.ndim == 0 else f"[{text}]"


def tensor_label(elem_type: int, dims) -> str:
    return dtypes.type_name(elem_type) + (f"[{', '.join(str(d) for d in dims)}]" if dims else "")


# ---------------------------------------------------------------------- text
def format_text(description: dict[str, Any]) -> str:
    """The description as aligned tree lines (declarations, then struct values)."""
    lines: list[str] = []
    if description.get("metadata_props"):
        lines.append("metadata_props:")
        lines.extend(f"  {key} = {_clip(value)}" for key, value in description["metadata_props"].items())
    if description["struct_types"]:
        lines.append("struct_types:")
    for entry in description["struct_types"]:
        title = f"struct_types[{entry['index']}]" + (f" {entry['name']!r}" if entry["name"] else "")
        if "error" in entry:
            lines.append(f"{title}  error: {entry['error']}")
            lines.extend(_annotation_lines(entry))
            continue
        lines.append(f"{title}: {_kind(entry['tree'])}, {_size(entry['size_bits'])}{_decodes_to(entry)}")
        lines.extend(_annotation_lines(entry))
        lines.extend(_tree_lines(entry["tree"].get("children", [])))
    if description["struct_values"]:
        lines.append("struct values:")
    for entry in description["struct_values"]:
        location = entry["location"]
        if location["kind"] == "inline":
            where = f"inline ({location['length']} bytes)"
        elif "error" in location:
            where = f"external: error: {location['error']}"
        else:
            length = "to end of file" if location["length"] is None else f"length {location['length']}"
            where = f"external {location['location']!r} offset {location['offset']} {length}"
        size = f"{entry['size_bytes']} bytes" if "size_bytes" in entry else f"error: {entry.get('error')}"
        declared = entry.get("type", "?")
        if "tree" in entry:
            declared = f"{'inline' if declared == 'inline' else declared + ' ='} {_kind(entry['tree'])}"
        lines.append(f"{entry['name']!r}: {declared}, {size}, {where}{_decodes_to(entry)}")
        lines.extend(_annotation_lines(entry))
        if "tree" in entry:
            lines.extend(_tree_lines(entry["tree"].get("children", [])))
    return "\n".join(lines)


def _clip(text: str, limit: int = 100) -> str:
    """One line of at most ``limit`` characters (GGUF token lists run to megabytes)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"


def _decodes_to(entry) -> str:
    if "logical_type" in entry:
        return f", decodes to {entry['logical_type']}"
    if "logical_type_error" in entry:
        return f", decodes to ? ({entry['logical_type_error']})"
    return ""


def _annotation_lines(entry) -> list[str]:
    lines = [f"  doc: {_clip(entry['doc_string'])}"] if entry.get("doc_string") else []
    lines.extend(f"  metadata: {key} = {_clip(value)}" for key, value in entry.get("metadata_props", {}).items())
    return lines


def _size(bits: int) -> str:
    return f"{bits} bits ({bits // 8} bytes)" if bits % 8 == 0 else f"{bits} bits"


def _kind(node) -> str:
    """``structure``, ``array[100] of 144-bit elements``, ``bit_packing[4] of 14-bit records``."""
    if node["kind"] == "array":
        return f"{node['type']} of {node['stride_bits']}-bit elements"
    if node["kind"] == "bit_packing":
        return f"{node['type']} of {node['stride_bits']}-bit records"
    return node.get("type", node["kind"])


def _tree_lines(children) -> list[str]:
    rows: list[tuple[str, str, str, str]] = []

    def walk(nodes, prefix: str) -> None:
        for i, node in enumerate(nodes):
            last = i == len(nodes) - 1
            branch = "└── " if last else "├── "
            kind = node.get("type", node["kind"])
            if node["kind"] == "constant":
                kind += f" = {node.get('value', '?')}"
            if node.get("truncated"):
                kind += " (not expanded)"
            if node.get("truncated_children"):
                kind += f" ({node['truncated_children']} more parts not shown)"
            grandchildren = node.get("children", [])
            if node["kind"] == "reference" and grandchildren:  # show the referenced declaration's parts
                target = grandchildren[0]
                kind += f" = {_kind(target)}"
                grandchildren = target.get("children", [])
            offset = node["bit_offset"]
            where = f"@ bit {offset} (byte {offset // 8}.{offset % 8})"
            rows.append((prefix + branch + (node["name"] or ""), kind, where, f"{node['size_bits']} bits"))
            walk(grandchildren, prefix + ("    " if last else "│   "))

    walk(children, "")
    widths = [max((len(r[k]) for r in rows), default=0) for k in range(4)]
    return ["  " + "  ".join(r[k].ljust(widths[k]) for k in range(4)).rstrip() for r in rows]
