"""Struct-aware shape inference: struct values seen as their logical (decoded) values.

A declaration's *logical type* is its decoder's output type for the leaf types, computed by the
decoder policy's analysis (:mod:`onnx_struct.functions.policy`) from shapes alone.
:func:`infer_shapes` runs onnx's inference on the *logical view* of a model (struct values and
exactly typed struct inputs replaced by inputs of their logical types) and copies the results back
into the struct model, which keeps its struct parts; ``check_model(full_check=True)`` hands the
same view to onnx's full checker.

Notes: docs/modules.md.
"""

from __future__ import annotations

import onnx
import onnx.shape_inference

from onnx_struct import originals
from onnx_struct.check import stock
from onnx_struct.errors import InferenceError, ModelValueError, ValidationError, from_stock
from onnx_struct.functions import bindings
from onnx_struct.functions import policy as decoder_policy
from onnx_struct.functions.models import onnx_elem_type, tensor_type
from onnx_struct.layout import dtypes
from onnx_struct.layout.table import TypeTable, element_label
from onnx_struct.payload.values import constant_tensor
from onnx_struct.schema import utf8
from onnx_struct.schema.model import (
    LoadedModel,
    ModelLike,
    StructProto,
    StructTypeProto,
    accepted_form,
    load,
    to_onnx,
)
from onnx_struct.schema.opaque import OPAQUE_DOMAIN
from onnx_struct.schema.projections import retyped_view, stock_view
from onnx_struct.schema.walk import walk_graph_pairs


class LogicalTypes:
    """Logical types of the declarations of one model, memoized per declaration."""

    def __init__(self, loaded: LoadedModel, table: TypeTable | None = None) -> None:
        self.loaded = loaded
        self.table = table if table is not None else TypeTable(loaded.struct_types)
        self._by_index: dict[int, onnx.TypeProto | None] = {}
        # Inline declarations by their bytes: a value named by many outputs, or typed by both the
        # full check's conflict rule and its logical view, is typed once.
        self._by_inline: dict[bytes, onnx.TypeProto | None] = {}

    def of_declaration(self, declaration: StructTypeProto, where: str) -> onnx.TypeProto | None:
        """The decoder's output type, or None when the declaration has no decoder."""
        if not declaration.HasField("decoder"):
            return None
        return logical_type(declaration, self.table, where)

    def of_index(self, index: int) -> onnx.TypeProto | None:
        if index not in self._by_index:
            declaration = self.table.declaration(index, f"type_index {index}")
            path = element_label(self.table.path(index), declaration.name)
            self._by_index[index] = self.of_declaration(declaration, path)
        return self._by_index[index]

    def of_value(self, value: StructProto, where: str) -> onnx.TypeProto | None:
        if value.HasField("struct_type"):
            key = value.struct_type.SerializeToString()
            if key not in self._by_inline:
                self._by_inline[key] = self.of_declaration(value.struct_type, f"{where}.struct_type")
            return self._by_inline[key]
        return self.of_index(value.type)


def logical_type(declaration: StructTypeProto, table: TypeTable, where: str, bound=None) -> onnx.TypeProto:
    """The type of ``declaration``'s decoder output for its leaves (``where`` names the declaration).

    Inferred by the decoder safety policy's static analysis (``decoder_policy.check_sizes``):
    from the leaf shapes and the constant leaves' values, never by materializing a payload-sized
    tensor. Raises ValidationError naming the decoder when the decoder breaks the policy or onnx
    cannot type it. ``bound``: the decoder's binding to the leaves, if the caller has made it
    (the checker has: binding again would list every leaf).
    """
    decoder = declaration.decoder
    decoder_path = bindings.function_label(f"{where}.decoder", decoder)
    if bound is None:
        bound = bindings.bind_decoder(decoder, table.leaves(declaration, where), f"{where}.decoder")
    inputs, constants = decoder_inputs(bound)
    return decoder_policy.check_sizes(decoder, inputs, constants, decoder_path)[0]


def decoder_inputs(bound) -> tuple[list[tuple[str, onnx.TypeProto]], list[onnx.TensorProto]]:
    """(input name, tensor type) of the bound payload leaves, and the constant leaves as named
    TensorProtos: what a decoder is typed and run with."""
    inputs, constants = [], []
    for name, leaf in bound.items():
        if leaf.kind == "constant":
            constants.append(constant_tensor(leaf, name))
        else:
            inputs.append((name, tensor_type(onnx_elem_type(leaf), leaf.shape)))
    return inputs, constants


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def struct_names(loaded: LoadedModel) -> dict[str, tuple[str, object]]:
    """Main-graph names of struct values and struct-typed graph inputs -> ("value", proto) or
    ("input", type_index or None for the unconstrained category)."""
    names: dict[str, tuple[str, object]] = {}
    for value in loaded.struct_values:
        names.setdefault(value.name, ("value", value))
    for info in loaded.proto.graph.input:
        if info.type.WhichOneof("value") == "struct_type":
            struct_type = info.type.struct_type
            index = struct_type.type_index if struct_type.WhichOneof("kind") == "type_index" else None
            names.setdefault(info.name, ("input", index))
    return names


def _name_types(loaded: LoadedModel, types: LogicalTypes) -> dict[str, onnx.TypeProto]:
    """Logical types of the main graph's struct values and exactly typed struct inputs."""
    out: dict[str, onnx.TypeProto] = {}
    for k, value in enumerate(loaded.struct_values):
        where = element_label(f"graph.struct_initializer[{k}]", value.name)
        logical = types.of_value(value, where)
        if logical is not None:
            out.setdefault(value.name, logical)
    for name, (kind, index) in struct_names(loaded).items():
        if kind == "input" and index is not None and name not in out:
            logical = types.of_index(index)
            if logical is not None:
                out[name] = logical
    return out


def declared_type_conflicts(loaded: LoadedModel, types: LogicalTypes | None = None) -> list[ValidationError]:
    """Main-graph outputs and value_info that name a struct value or exactly typed struct input
    with a type other than its logical type: not a tensor type (a sequence, a map, ...), or a tensor
    type of another element type, rank, or a dimension both give. The logical view retypes them,
    so onnx's full checker cannot see the conflict; the lowered model keeps the declared type and
    onnx and onnxruntime refuse it, so it is refused here. A struct type, or the Opaque
    stand-in of one, names the value itself (other rules)."""
    declared = [
        (field, j, info)
        for field in ("output", "value_info")
        for j, info in enumerate(getattr(loaded.proto.graph, field))
        if info.type.WhichOneof("value") not in (None, "struct_type")
        and not (info.type.WhichOneof("value") == "opaque_type" and info.type.opaque_type.domain == OPAQUE_DOMAIN)
    ]
    struct = struct_names(loaded) if declared else {}
    declared = [entry for entry in declared if entry[2].name in struct]
    if not declared:  # the common case: no logical type is computed again
        return []
    types = types or LogicalTypes(loaded)
    conflicts = []
    by_name: dict[str, onnx.TypeProto | None] = {}
    for field, j, info in declared:
        if info.name not in by_name:
            kind, source = struct[info.name]
            if kind == "value":
                by_name[info.name] = types.of_value(source, element_label("graph.struct_initializer", info.name))
            else:
                by_name[info.name] = types.of_index(source) if source is not None else None
        logical = by_name[info.name]
        if logical is None:
            continue  # no decoder: check_consumers' rule
        declared_type = onnx.TypeProto.FromString(info.type.SerializeToString())
        kind = declared_type.WhichOneof("value")
        if kind != "tensor_type" or _tensor_types_conflict(declared_type.tensor_type, logical.tensor_type):
            conflicts.append(
                ValidationError(
                    element_label(f"graph.{field}[{j}]", info.name),
                    f"declared {_describe(declared_type)}, but {info.name!r} decodes to {_describe(logical)}",
                    code="type_mismatch",
                )
            )
    return conflicts


def _tensor_types_conflict(declared, logical) -> bool:
    if declared.elem_type and logical.elem_type and declared.elem_type != logical.elem_type:
        return True
    if not (declared.HasField("shape") and logical.HasField("shape")):
        return False
    a, b = declared.shape.dim, logical.shape.dim
    return len(a) != len(b) or any(
        x.HasField("dim_value") and y.HasField("dim_value") and x.dim_value != y.dim_value
        for x, y in zip(a, b, strict=True)
    )


def _describe(type_proto: onnx.TypeProto) -> str:
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return _KIND_NAMES.get(kind, kind)
    tensor = type_proto.tensor_type
    name = dtypes.type_name(tensor.elem_type)
    if not tensor.HasField("shape"):
        return f"tensor({name})"
    dims = ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim)
    return f"tensor({name})[{dims}]"


_KIND_NAMES = {
    "sequence_type": "a sequence",
    "map_type": "a map",
    "optional_type": "an optional",
    "sparse_tensor_type": "a sparse tensor",
    "opaque_type": "an opaque type",
}


def logical_view(
    loaded: LoadedModel, stock: onnx.ModelProto, types: LogicalTypes | None = None, name_types=None
) -> onnx.ModelProto:
    """``stock``, a :func:`stock_view` (struct values as Opaque graph inputs) with every struct value, and every
    main-graph input/output/value_info of an exact struct type whose declaration has a decoder,
    typed by its logical type, so that onnx's full checker and shape inference see what the
    nodes consume. Struct parts without a decoder stay Opaque. ``types`` and ``name_types`` (its
    ``_name_types``): what the caller has computed already."""
    types = types or LogicalTypes(loaded)
    name_types = name_types if name_types is not None else _name_types(loaded, types)
    return retyped_view(stock, name_types, types.of_index)


def infer_shapes(
    model: ModelLike, check_type: bool = False, strict_mode: bool = False, data_prop: bool = False
) -> onnx.ModelProto:
    """Struct-aware ``onnx.shape_inference.infer_shapes``; the result keeps its struct parts.

    Each struct value gets a ``graph.value_info`` entry with its logical type; every other name
    gets what onnx infers when the struct values are graph inputs of their logical types.
    Struct-typed graph inputs and outputs keep their struct types. The arguments after
    ``model`` are onnx's.

    A drop-in for ``onnx.shape_inference.infer_shapes``: a model without struct parts is handed to
    it (check/stock.py) and its result returned. ``model`` may also be a path (stock onnx takes
    paths in ``infer_shapes_path`` only).

    Args:
        model: an ``onnx.ModelProto``, serialized bytes, a path, or a LoadedModel.
        check_type: onnx's: check the types of node inputs and outputs.
        strict_mode: onnx's: raise where inference fails instead of leaving the value untyped.
        data_prop: onnx's: propagate constant shape data.

    Returns:
        A new stock model with inferred ``value_info``, struct parts kept.

    Raises:
        ValidationError: the model is invalid; an InferenceError (also
            ``onnx.shape_inference.InferenceError``) where onnx's inference refuses it, a
            ModelValueError (also a ``ValueError``) where stock onnx raises ValueError.
    """
    plain = stock.plain_form(model, paths=False)
    if plain is not None or not accepted_form(model):
        parsed = model if type(model) is onnx.ModelProto else None  # plain is its bytes: not parsed again
        return stock.infer_shapes(model if plain is None else plain, check_type, strict_mode, data_prop, parsed)
    loaded = load(model)
    for k, value in enumerate(loaded.struct_values):
        if not isinstance(value.name, str):  # proto2 leaves it undecoded; the checker's rule and message
            where = element_label(f"graph.struct_initializer[{k}]", value.name)
            raise ValidationError(where, "struct value name is not valid UTF-8", code="invalid_utf8")
    utf8.check_model_utf8(loaded)  # any other string, as check_model finds it
    types = LogicalTypes(loaded)
    value_types = _name_types(loaded, types)
    logical = logical_view(loaded, stock_view(loaded), types, value_types)
    undefined = stock.first_undefined_input(logical.graph, frozenset(), "graph")
    if undefined is not None:  # onnx's inference may crash on it (check/stock.py)
        raise InferenceError(undefined, "names no value defined before the node", code="undefined_input")
    try:
        inferred = originals.infer_shapes(logical, check_type, strict_mode, data_prop)
    except ValueError as error:  # onnx's word for an element type it does not know
        raise unknown_element_type(logical.graph) or from_stock(
            error, "onnx.shape_inference: ", _first_line(error)
        ) from None
    except stock.STOCK_ERRORS as error:  # the checker's: e.g. recursive model-local functions
        raise from_stock(error, "onnx.shape_inference: ", _first_line(error)) from None
    result = type(loaded.proto)()
    result.CopyFrom(loaded.proto)
    names = struct_names(loaded)
    _copy_back(result.graph, inferred.graph, skip=set(names))
    existing = {info.name: info for info in result.graph.value_info}
    for value in loaded.struct_values:
        if value.name in value_types:
            info = existing.get(value.name) or result.graph.value_info.add(name=value.name)
            info.type.ParseFromString(value_types[value.name].SerializeToString())
    return to_onnx(result)


def unknown_element_type(graph: onnx.GraphProto) -> ValidationError | None:
    """The first main-graph input, output, value_info or initializer whose element type onnx does
    not know (onnx raises a bare ValueError for it), as a ValidationError naming it (a
    ModelValueError: a ValueError too)."""
    known = set(onnx.TensorProto.DataType.values())
    for kind in ("input", "output", "value_info"):
        for i, info in enumerate(getattr(graph, kind)):
            type_proto = info.type
            while type_proto.WhichOneof("value") in ("sequence_type", "optional_type"):
                type_proto = getattr(type_proto, type_proto.WhichOneof("value")).elem_type
            which = type_proto.WhichOneof("value")
            if which in ("tensor_type", "sparse_tensor_type"):
                elem_type = getattr(type_proto, which).elem_type
                if elem_type not in known:
                    where = element_label(f"graph.{kind}[{i}]", info.name)
                    return ModelValueError(
                        where, f"element type {elem_type} is not an ONNX element type", code="unknown_element_type"
                    )
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type not in known:
            where = element_label(f"graph.initializer[{i}]", tensor.name)
            return ModelValueError(
                where, f"data_type {tensor.data_type} is not an ONNX element type", code="unknown_element_type"
            )
    return None


def _has_struct_type(type_proto) -> bool:
    """True when an overlay TypeProto is, or contains (in a sequence, map or optional), a struct type."""
    which = type_proto.WhichOneof("value")
    if which == "struct_type":
        return True
    if which in ("sequence_type", "optional_type"):
        return _has_struct_type(getattr(type_proto, which).elem_type)
    if which == "map_type":
        return _has_struct_type(type_proto.map_type.value_type)
    return False


def _copy_back(target, source: onnx.GraphProto, skip: set[str]) -> None:
    """Copy inferred value_info and output types from a stock graph into the overlay graph with
    the same nodes (inference neither adds nor reorders nodes), and so for their subgraphs
    (``skip``: names of ``target`` itself left as they are)."""
    for mine, theirs in walk_graph_pairs(target, source):
        _copy_graph_back(mine, theirs, skip if mine is target else set())


def _copy_graph_back(target, source: onnx.GraphProto, skip: set[str]) -> None:
    existing = {info.name: info for info in target.value_info}
    for info in source.value_info:
        if info.name in skip:
            continue
        entry = existing.get(info.name)
        if entry is None:
            entry = target.value_info.add()
        elif _has_struct_type(entry.type):
            continue
        entry.ParseFromString(info.SerializeToString())
    # Inputs too: onnx types a subgraph's inputs (a Loop or Scan body's) from the node's.
    for field in ("input", "output"):
        for mine, theirs in zip(getattr(target, field), getattr(source, field), strict=False):
            if mine.name == theirs.name and not _has_struct_type(mine.type) and mine.name not in skip:
                mine.type.ParseFromString(theirs.type.SerializeToString())
