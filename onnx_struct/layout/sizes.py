"""The proposal's size function: the exact size in bits of a declaration and of a physical type.

Sizes are computed in bits and checked against uint64 after every operation (:func:`checked`);
the functions here size one declaration given an answer for the ``type_index`` references it
contains, and :class:`onnx_struct.layout.table.TypeTable` memoizes them per model (iteratively,
so reference chains cost no recursion).
"""

from __future__ import annotations

from collections.abc import Iterator

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.layout import dtypes
from onnx_struct.limits import MAX_COMPONENT_BITS
from onnx_struct.schema.model import StructTypeProto

UINT64_MAX = (1 << 64) - 1


def checked(value: int, path: str, what: str = "size", unit: str = " bits") -> int:
    """``value`` if it fits uint64, else a ValidationError: the proposal's arithmetic never wraps."""
    if value > UINT64_MAX:
        raise ValidationError(path, f"{what} overflows uint64 ({value}{unit})", actual=str(value), code="overflow")
    return value


def element_label(path: str, name: str) -> str:
    return f"{path} ({name!r})" if name else path


def iter_references(declaration: StructTypeProto, path: str) -> Iterator[tuple[int, str]]:
    """Every ``type_index`` directly in ``declaration`` (not inside the declarations it names)."""
    kind = declaration.WhichOneof("kind")
    if kind == "type_index":
        yield declaration.type_index, f"{path}.type_index"
    elif kind == "array":
        yield from _type_references(declaration.array.element_type, f"{path}.array.element_type")
    elif kind == "structure":
        for i, field in enumerate(declaration.structure.field):
            if field.WhichOneof("content") == "type":
                yield from _type_references(
                    field.type, f"{element_label(f'{path}.structure.field[{i}]', field.name)}.type"
                )


def reference_targets(declaration: StructTypeProto) -> list[int]:
    """The indices :func:`iter_references` yields, without building their paths."""
    kind = declaration.WhichOneof("kind")
    if kind == "type_index":
        return [declaration.type_index]
    if kind == "array":
        types = [declaration.array.element_type]
    elif kind == "structure":
        types = [f.type for f in declaration.structure.field if f.WhichOneof("content") == "type"]
    else:
        return []
    return [
        t.struct_type.type_index
        for t in types
        if t.WhichOneof("value") == "struct_type" and t.struct_type.WhichOneof("kind") == "type_index"
    ]


def _type_references(type_proto, path: str) -> Iterator[tuple[int, str]]:
    if type_proto.WhichOneof("value") == "struct_type" and type_proto.struct_type.WhichOneof("kind") == "type_index":
        yield type_proto.struct_type.type_index, f"{path}.struct_type.type_index"


def declaration_size(declaration: StructTypeProto, path: str, size_of_index) -> int:
    """size() of one declaration; ``size_of_index`` answers for the references it contains."""
    kind = declaration.WhichOneof("kind")
    if kind == "array":
        element = type_size(declaration.array.element_type, f"{path}.array.element_type", size_of_index)
        return checked(declaration.array.dimension * element, f"{path}.array")
    if kind == "bit_packing":
        packing = declaration.bit_packing
        record = 0
        for i, component in enumerate(packing.component):
            where = element_label(f"{path}.bit_packing.component[{i}]", component.name)
            if component.bit_width == 0:
                raise ValidationError(where, "component width is zero", code="bad_component")
            if component.bit_width > MAX_COMPONENT_BITS:
                raise limit_exceeded(
                    where,
                    f"component width {component.bit_width} exceeds {MAX_COMPONENT_BITS} bits",
                    component.bit_width,
                    MAX_COMPONENT_BITS,
                )
            record += component.bit_width
        return checked(packing.dimension * record, f"{path}.bit_packing")
    if kind == "structure":
        total = 0
        for i, field in enumerate(declaration.structure.field):
            where = element_label(f"{path}.structure.field[{i}]", field.name)
            content = field.WhichOneof("content")
            if content is None:
                raise ValidationError(
                    where, "field has neither type nor constant (exactly one is required)", code="bad_field"
                )
            if content == "type":
                total = checked(total + type_size(field.type, f"{where}.type", size_of_index), f"{path}.structure")
        return total
    if kind == "type_index":
        return size_of_index(declaration.type_index)
    raise ValidationError(
        path, "declaration has no kind: the unconstrained category has no static size", code="not_concrete"
    )


def type_size(type_proto, path: str, size_of_index) -> int:
    """size() of a TypeProto used as a physical element (static tensor or type_index)."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        tensor = type_proto.tensor_type
        width = dtypes.bit_width(tensor.elem_type)
        if width is None:
            raise ValidationError(
                f"{path}.tensor_type",
                f"element type {dtypes.type_name(tensor.elem_type)} is not a fixed-width physical leaf",
                code="not_physical",
            )
        if not tensor.HasField("shape"):
            raise ValidationError(
                f"{path}.tensor_type",
                "tensor shape is missing (a physical leaf needs a static shape)",
                code="bad_shape",
            )
        dims = []
        for k, dim in enumerate(tensor.shape.dim):
            if dim.WhichOneof("value") != "dim_value" or dim.dim_value < 0:
                raise ValidationError(
                    f"{path}.tensor_type.shape.dim[{k}]",
                    "dimension is not a concrete non-negative integer",
                    code="bad_shape",
                )
            dims.append(dim.dim_value)
        if 0 in dims:  # 0 bits in any order: [2^62, 0] overflowed on the way where [0, 2^62] did not
            return 0
        total = width
        for d in dims:  # checked at each step: no product is ever wider than 128 bits
            total = checked(total * d, f"{path}.tensor_type")
        return total
    if which == "struct_type":
        kind = type_proto.struct_type.WhichOneof("kind")
        if kind == "type_index":
            return size_of_index(type_proto.struct_type.type_index)
        if kind is None:
            raise ValidationError(
                f"{path}.struct_type",
                "the unconstrained struct category has no static size and is not allowed here",
                code="not_concrete",
            )
        raise ValidationError(
            f"{path}.struct_type",
            f"a concrete declaration ({kind}) may not be nested in a TypeProto; declare it in "
            "ModelProto.struct_types and reference it with type_index",
            code="misplaced_declaration",
        )
    if which is None:
        raise ValidationError(path, "type has no value", code="not_physical")
    raise ValidationError(
        path, f"{which} is not a physical type (only static tensors and type_index are)", code="not_physical"
    )
