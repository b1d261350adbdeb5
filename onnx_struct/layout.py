"""The proposal's size function and the leaf layout every view, writer and decoder binding uses.

Sizes are computed in bits, checked against uint64 after every operation, and memoized per
model-level declaration; reference chains are resolved with an explicit stack (for sizes and for
leaves), so a chain tens of thousands long or a 60-level diamond of shared references costs linear
time and no recursion.

A *leaf* is a tensor-typed field (or a tensor array element), a bit-packing component, or a
constant field. Every non-constant leaf is an affine bit layout: element ``idx`` starts at bit
``bit_offset + sum(idx[k] * strides[k])`` and is ``bit_width`` bits wide.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import onnx

from onnx_struct import dtypes
from onnx_struct.errors import ValidationError
from onnx_struct.limits import MAX_COMPONENT_BITS, MAX_LEAVES
from onnx_struct.model import StructTypeProto, load

UINT64_MAX = (1 << 64) - 1


def checked(value: int, path: str, what: str = "size", unit: str = " bits") -> int:
    """``value`` if it fits uint64, else a ValidationError: the proposal's arithmetic never wraps."""
    if value > UINT64_MAX:
        raise ValidationError(path, f"{what} overflows uint64 ({value}{unit})", actual=str(value))
    return value


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One leaf of a concrete root: where its elements are, how wide, and as which dtype."""

    path: str
    kind: Literal["tensor", "component", "constant"]
    elem_type: int  # ONNX element type; 0 for bit-packing components
    bit_width: int  # bits per element; 0 for constants
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bits, one per dimension
    bit_offset: int  # of the first element, from the start of the payload
    source: str  # proto path of the element that declares the leaf
    constant: onnx.TensorProto | None = None

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    def shifted(self, prefix: str, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> Leaf:
        """This leaf as seen from an enclosing element at ``offset`` inside arrays ``shape``."""
        path = join_path(prefix, self.path)
        if self.kind == "constant":  # constants are not broadcast over enclosing arrays
            return dataclasses.replace(self, path=path)
        return dataclasses.replace(
            self,
            path=path,
            bit_offset=offset + self.bit_offset,
            shape=shape + self.shape,
            strides=strides + self.strides,
        )


def join_path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def leaf_name(name: str | bytes, where: str, what: str) -> str:
    """A field or component name as a leaf path part. proto2 does not validate UTF-8 on parse, so
    a hostile name arrives as bytes; it can name no leaf (the checker reports it too)."""
    if not isinstance(name, str):
        raise ValidationError(where, f"{what} name is not valid UTF-8")
    return name


def element_label(path: str, name: str) -> str:
    return f"{path} ({name!r})" if name else path


class TypeTable:
    """The model-level declarations with memoized sizes and leaf layouts."""

    def __init__(self, struct_types: Sequence[StructTypeProto] = ()) -> None:
        self.declarations = list(struct_types)
        self._sizes: dict[int, int] = {}
        self._leaves: dict[int, tuple[Leaf, ...]] = {}

    @staticmethod
    def path(index: int) -> str:
        return f"struct_types[{index}]"

    def declaration(self, index: int, path: str) -> StructTypeProto:
        if not 0 <= index < len(self.declarations):
            raise ValidationError(path, f"type index {index} is out of range ({len(self.declarations)} struct_types)")
        return self.declarations[index]

    # ------------------------------------------------------------------ sizes
    def size_of_index(self, index: int, path: str = "type_index") -> int:
        """Size in bits of ``struct_types[index]``, resolving its references without recursion."""
        self.declaration(index, path)
        if index in self._sizes:
            return self._sizes[index]
        in_progress: set[int] = set()
        stack = [(index, False)]
        while stack:
            current, references_done = stack.pop()
            if current in self._sizes:
                continue
            if references_done:
                in_progress.discard(current)
                self._sizes[current] = declaration_size(
                    self.declarations[current], self.path(current), self._sizes.__getitem__
                )
                continue
            in_progress.add(current)
            stack.append((current, True))
            for target, ref_path in iter_references(self.declarations[current], self.path(current)):
                self.declaration(target, ref_path)
                if target in in_progress:
                    raise ValidationError(ref_path, f"cyclic type reference to {self.path(target)}")
                if target not in self._sizes:
                    stack.append((target, False))
        return self._sizes[index]

    def size(self, declaration: StructTypeProto, path: str) -> int:
        """Size in bits of any declaration whose references point into this table."""
        for target, ref_path in iter_references(declaration, path):
            self.size_of_index(target, ref_path)
        return declaration_size(declaration, path, self._sizes.__getitem__)

    # ------------------------------------------------------------------ leaves
    def leaves(self, declaration: StructTypeProto, path: str) -> tuple[Leaf, ...]:
        """Leaves of a concrete root, in payload order, with unique paths."""
        self.size(declaration, path)  # validates the whole reachable graph first (no cycles)
        # Referenced declarations first, deepest first: building each then only looks up the
        # leaves of its direct references, so nesting depth costs no recursion.
        for index in self._uncached_references(declaration, path):
            self._leaves_of_index(index)
        leaves = self._relative_leaves(declaration, path)
        seen: set[str] = set()
        for leaf in leaves:
            if leaf.path in seen:
                raise ValidationError(leaf.source, f"leaf path {leaf.path!r} is not unique in {path}")
            seen.add(leaf.path)
        return leaves

    def _uncached_references(self, declaration: StructTypeProto, path: str) -> list[int]:
        """Indices reachable from ``declaration`` whose leaves are not cached, references before
        referrers (an iterative post-order walk; the graph is known to be acyclic)."""
        order: list[int] = []
        queued: set[int] = set()
        stack = [(None, iter_references(declaration, path))]
        while stack:
            owner, references = stack[-1]
            for target, _ in references:
                if target not in queued and target not in self._leaves:
                    queued.add(target)
                    stack.append((target, iter_references(self.declarations[target], self.path(target))))
                    break
            else:
                stack.pop()
                if owner is not None:
                    order.append(owner)
        return order

    def _leaves_of_index(self, index: int) -> tuple[Leaf, ...]:
        if index not in self._leaves:
            self._leaves[index] = self._relative_leaves(self.declarations[index], self.path(index))
        return self._leaves[index]

    def _relative_leaves(self, declaration: StructTypeProto, path: str) -> tuple[Leaf, ...]:
        kind = declaration.WhichOneof("kind")
        out: list[Leaf] = []
        if kind == "array":
            array = declaration.array
            element = type_size(array.element_type, f"{path}.array.element_type", self._sizes.__getitem__)
            inner = self._type_leaves(array.element_type, f"{path}.array.element_type", "")
            out.extend(leaf.shifted("", 0, (array.dimension,), (element,)) for leaf in inner)
        elif kind == "bit_packing":
            packing = declaration.bit_packing
            record = sum(c.bit_width for c in packing.component)
            offset = 0
            for i, component in enumerate(packing.component):
                source = element_label(f"{path}.bit_packing.component[{i}]", component.name)
                out.append(
                    Leaf(
                        path=leaf_name(component.name, source, "component"),
                        kind="component",
                        elem_type=0,
                        bit_width=component.bit_width,
                        dtype=dtypes.unsigned_dtype_for_bits(component.bit_width),
                        shape=(packing.dimension,),
                        strides=(record,),
                        bit_offset=offset,
                        source=source,
                    )
                )
                offset += component.bit_width
        elif kind == "structure":
            offset = 0
            for i, field in enumerate(declaration.structure.field):
                field_path = element_label(f"{path}.structure.field[{i}]", field.name)
                name = leaf_name(field.name, field_path, "field")
                if field.WhichOneof("content") == "constant":
                    out.append(constant_leaf(name, field.constant, field_path))
                    continue
                inner = self._type_leaves(field.type, f"{field_path}.type", name)
                _check_leaf_count(len(out) + len(inner), path)  # before building, not after
                out.extend(leaf.shifted("", offset, (), ()) for leaf in inner)
                offset += type_size(field.type, f"{field_path}.type", self._sizes.__getitem__)
        elif kind == "type_index":
            out.extend(self._leaves_of_index(declaration.type_index))
        _check_leaf_count(len(out), path)
        return tuple(out)

    def _type_leaves(self, type_proto, path: str, name: str) -> tuple[Leaf, ...]:
        if type_proto.WhichOneof("value") == "struct_type":
            nested = self._leaves_of_index(type_proto.struct_type.type_index)
            return tuple(leaf.shifted(name, 0, (), ()) for leaf in nested)
        tensor = type_proto.tensor_type
        dims = tuple(d.dim_value for d in tensor.shape.dim)
        width = dtypes.bit_width(tensor.elem_type)
        strides = tuple(width * math.prod(dims[k + 1 :]) for k in range(len(dims)))
        leaf = Leaf(
            path=name,
            kind="tensor",
            elem_type=tensor.elem_type,
            bit_width=width,
            dtype=dtypes.np_dtype(tensor.elem_type),
            shape=dims,
            strides=strides,
            bit_offset=0,
            source=f"{path}.tensor_type",
        )
        return (leaf,)


def _check_leaf_count(count: int, path: str) -> None:
    if count > MAX_LEAVES:
        raise ValidationError(path, f"declaration has more than {MAX_LEAVES} leaves")


def constant_leaf(name: str, tensor: onnx.TensorProto, path: str) -> Leaf:
    return Leaf(
        path=name,
        kind="constant",
        elem_type=tensor.data_type,
        bit_width=0,
        dtype=dtypes.np_dtype(tensor.data_type) if dtypes.bit_width(tensor.data_type) else np.dtype(object),
        shape=tuple(tensor.dims),
        strides=(),
        bit_offset=0,
        source=path,
        constant=tensor,
    )


# ---------------------------------------------------------------------- the size function
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
                raise ValidationError(where, "component width is zero")
            if component.bit_width > MAX_COMPONENT_BITS:
                raise ValidationError(where, f"component width {component.bit_width} exceeds {MAX_COMPONENT_BITS} bits")
            record += component.bit_width
        return checked(packing.dimension * record, f"{path}.bit_packing")
    if kind == "structure":
        total = 0
        for i, field in enumerate(declaration.structure.field):
            where = element_label(f"{path}.structure.field[{i}]", field.name)
            content = field.WhichOneof("content")
            if content is None:
                raise ValidationError(where, "field has neither type nor constant (exactly one is required)")
            if content == "type":
                total = checked(total + type_size(field.type, f"{where}.type", size_of_index), f"{path}.structure")
        return total
    if kind == "type_index":
        return size_of_index(declaration.type_index)
    raise ValidationError(path, "declaration has no kind: the unconstrained category has no static size")


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
            )
        if not tensor.HasField("shape"):
            raise ValidationError(
                f"{path}.tensor_type", "tensor shape is missing (a physical leaf needs a static shape)"
            )
        total = width
        for k, dim in enumerate(tensor.shape.dim):
            if dim.WhichOneof("value") != "dim_value" or dim.dim_value < 0:
                raise ValidationError(
                    f"{path}.tensor_type.shape.dim[{k}]", "dimension is not a concrete non-negative integer"
                )
            total = checked(total * dim.dim_value, f"{path}.tensor_type")
        return total
    if which == "struct_type":
        kind = type_proto.struct_type.WhichOneof("kind")
        if kind == "type_index":
            return size_of_index(type_proto.struct_type.type_index)
        if kind is None:
            raise ValidationError(
                f"{path}.struct_type", "the unconstrained struct category has no static size and is not allowed here"
            )
        raise ValidationError(
            f"{path}.struct_type",
            f"a concrete declaration ({kind}) may not be nested in a TypeProto; declare it in "
            "ModelProto.struct_types and reference it with type_index",
        )
    if which is None:
        raise ValidationError(path, "type has no value")
    raise ValidationError(path, f"{which} is not a physical type (only static tensors and type_index are)")


# ---------------------------------------------------------------------- public entry points
def type_table(model=None) -> TypeTable:
    """A TypeTable for ``model`` (any model form, a list of declarations, a table, or None)."""
    if model is None:
        return TypeTable()
    if isinstance(model, TypeTable):
        return model
    if isinstance(model, (list, tuple)):
        return TypeTable(model)
    return TypeTable(load(model).struct_types)


def size_in_bits(struct_type: StructTypeProto | int, model=None) -> int:
    """The proposal's size function: exact payload size in bits of a declaration.

    ``struct_type`` is a declaration or an index into ``model.struct_types``; ``model`` (any
    model form, or a list of declarations) resolves ``type_index``. Overflow of uint64, cycles,
    invalid references and unsized elements raise :class:`ValidationError`.

    >>> size_in_bits(make_array(TensorProto.INT4, 128))
    512
    """
    table = type_table(model)
    try:
        if isinstance(struct_type, int):
            return table.size_of_index(struct_type, "struct_type")
        return table.size(struct_type, "struct_type")
    except RecursionError:
        raise ValidationError("struct_type", "declaration nests too deeply") from None


def read_constant(tensor: onnx.TensorProto, path: str) -> np.ndarray:
    """A constant field's value, after checking that its data matches its dims (so a hostile
    ``dims`` can never make numpy allocate more than the tensor actually carries)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise ValidationError(path, "constants are stored in the type; external data is not allowed")
    count = 1
    for k, dim in enumerate(tensor.dims):
        if dim < 0:
            raise ValidationError(f"{path}.dims[{k}]", f"negative dimension {dim}")
        count = checked(count * dim, path, "element count", unit="")
    width = dtypes.bit_width(tensor.data_type)
    if tensor.HasField("raw_data"):
        if width is None:
            raise ValidationError(path, f"{dtypes.type_name(tensor.data_type)} constant cannot use raw_data")
        if len(tensor.raw_data) != (count * width + 7) // 8:
            raise ValidationError(
                path, f"raw_data holds {len(tensor.raw_data)} bytes for {count} elements of {width} bits"
            )
    else:
        try:
            field = onnx.helper.tensor_dtype_to_field(tensor.data_type)
        except (KeyError, ValueError, TypeError):
            raise ValidationError(path, f"constant has unsupported data_type {tensor.data_type}") from None
        stored = len(getattr(tensor, field))
        per_element = 2 if tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
        packed = width is not None and width < 8
        if (packed and stored * (8 // width) < count) or (not packed and stored != count * per_element):
            raise ValidationError(path, f"constant holds {stored} values in {field} for {count} elements")
    try:
        return onnx.numpy_helper.to_array(tensor)
    except Exception as error:  # onnx raises assorted types for inconsistent tensors
        raise ValidationError(path, f"constant tensor is not readable: {error}") from None
