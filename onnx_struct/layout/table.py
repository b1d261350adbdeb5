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
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

import numpy as np
import onnx

from onnx_struct.errors import ValidationError
from onnx_struct.layout import dtypes
from onnx_struct.limits import MAX_COMPONENT_BITS, MAX_LEAF_PATH_CHARS, MAX_LEAF_RANK, MAX_LEAF_SPAN, MAX_LEAVES
from onnx_struct.schema.model import StructTypeProto, load

UINT64_MAX = (1 << 64) - 1


def checked(value: int, path: str, what: str = "size", unit: str = " bits") -> int:
    """``value`` if it fits uint64, else a ValidationError: the proposal's arithmetic never wraps."""
    if value > UINT64_MAX:
        raise ValidationError(path, f"{what} overflows uint64 ({value}{unit})", actual=str(value), code="overflow")
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


def element_label(path: str, name: str) -> str:
    return f"{path} ({name!r})" if name else path


@dataclasses.dataclass(frozen=True)
class LeafShape:
    """What enumerating a declaration's leaves would produce, computed without enumerating them."""

    count: int  # leaves
    chars: int  # characters of all leaf paths
    unnamed: int  # leaves whose path is "" (a tensor or array of tensors at the top)
    rank: int  # most dimensions of a non-constant leaf, enclosing arrays included
    span: int  # most bytes numpy needs to describe a non-constant leaf: elements (each zero
    # dimension counted as 1) times the element's numpy itemsize
    sample: tuple[str, ...] = ()  # the first few leaf paths, shortened, for messages


SAMPLE_PATHS = 5  # leaf paths a LeafShape keeps for messages, each at most SAMPLE_CHARS long
SAMPLE_CHARS = 80


def _sample(paths) -> tuple[str, ...]:
    out = []
    for path in paths:
        if len(out) == SAMPLE_PATHS:
            break
        out.append(path if len(path) <= SAMPLE_CHARS else path[: SAMPLE_CHARS - 3] + "...")
    return tuple(out)


class TypeTable:
    """The model-level declarations with memoized sizes, leaf shapes and failures.

    Every algorithm here visits each declaration once per table: results *and* the first
    ValidationError met for a declaration are remembered (a failure is also remembered for every
    declaration that depends on it), so N roots reaching one cycle or one broken declaration cost
    O(N), not O(N^2). Leaves are listed only for the root that needs them, by one walk that builds
    each leaf's path once; a decoder's inputs are looked up by path without listing any.
    """

    def __init__(self, struct_types: Sequence[StructTypeProto] = ()) -> None:
        self.declarations = list(struct_types)
        self._sizes: dict[int, int] = {}
        self._size_errors: dict[int, ValidationError] = {}
        self._shapes: dict[int, LeafShape] = {}
        self._shape_errors: dict[int, ValidationError] = {}
        self._members: dict[int | None, dict[str, tuple]] = {}
        self._aliases: dict[int, int] = {}

    @staticmethod
    def path(index: int) -> str:
        return f"struct_types[{index}]"

    def declaration(self, index: int, path: str) -> StructTypeProto:
        if not 0 <= index < len(self.declarations):
            raise ValidationError(
                path,
                f"type index {index} is out of range ({len(self.declarations)} struct_types)",
                code="unknown_type_index",
                index=index,
            )
        return self.declarations[index]

    def _memoized(self, index: int, path: str, values: dict, errors: dict, compute):
        """``values[index]``: ``compute(declaration, path, values.__getitem__)`` after the value of
        every declaration it references, by an iterative post-order walk that detects cycles. A
        ValidationError is remembered for the declaration where it occurred and for each one on
        the walk's current path (they all depend on it) and raised again on later calls."""
        self.declaration(index, path)
        if index in values:
            return values[index]
        if index in errors:
            raise errors[index]
        in_progress: set[int] = set()
        stack = [(index, False)]
        count = len(self.declarations)
        try:
            while stack:
                current, references_done = stack.pop()
                if current in values:
                    continue
                if current in errors:
                    raise errors[current]
                if references_done:
                    in_progress.discard(current)
                    values[current] = compute(self.declarations[current], self.path(current), values.__getitem__)
                    continue
                in_progress.add(current)
                stack.append((current, True))
                for target in reference_targets(self.declarations[current]):
                    if not 0 <= target < count or target in errors or target in in_progress:
                        self._reference_failure(current, target, errors, in_progress)
                    if target not in values:
                        stack.append((target, False))
        except ValidationError as error:
            for dependent in in_progress:  # the walk's current path: each depends on the failure
                errors[dependent] = error
            raise
        return values[index]

    def _reference_failure(self, current: int, target: int, errors: dict, in_progress: set[int]) -> None:
        """Raise the finding for ``current``'s reference to ``target``, with the reference's path
        (paths are built only here: the walks themselves handle indices only)."""
        for candidate, ref_path in iter_references(self.declarations[current], self.path(current)):
            if candidate == target:
                self.declaration(target, ref_path)
                if target in errors:
                    raise errors[target]
                raise ValidationError(ref_path, f"cyclic type reference to {self.path(target)}", code="cycle")

    # ------------------------------------------------------------------ sizes
    def size_of_index(self, index: int, path: str = "type_index") -> int:
        """Size in bits of ``struct_types[index]``, resolving its references without recursion."""
        return self._memoized(index, path, self._sizes, self._size_errors, declaration_size)

    def size(self, declaration: StructTypeProto, path: str) -> int:
        """Size in bits of any declaration whose references point into this table."""
        for target, ref_path in iter_references(declaration, path):
            self.size_of_index(target, ref_path)
        return declaration_size(declaration, path, self._sizes.__getitem__)

    # ------------------------------------------------------------------ leaf shapes
    def leaf_shape_of_index(self, index: int, path: str = "type_index") -> LeafShape:
        """The LeafShape of ``struct_types[index]``, checked against the leaf limits (every
        declaration it references is checked too: each is a possible root)."""
        self.size_of_index(index, path)  # sizes first: the graph is then known to be acyclic
        return self._memoized(index, path, self._shapes, self._shape_errors, checked_leaf_shape)

    def leaf_shape(self, declaration: StructTypeProto, path: str) -> LeafShape:
        """The LeafShape of any declaration whose references point into this table."""
        for target, ref_path in iter_references(declaration, path):
            self.leaf_shape_of_index(target, ref_path)  # their sizes first
        declaration_size(declaration, path, self._sizes.__getitem__)  # its own size rules
        return checked_leaf_shape(declaration, path, self._shapes.__getitem__)

    # ------------------------------------------------------------------ leaves
    def leaves(self, declaration: StructTypeProto, path: str) -> tuple[Leaf, ...]:
        """Leaves of a concrete root, in payload order, with unique paths (unique because names
        are non-empty, free of '.', and unique within their structure or bit packing)."""
        self.leaf_shape(declaration, path)  # validates the reachable graph and the leaf limits
        return tuple(self._iter_leaves(declaration, path))

    def leaf_lookup(self, declaration: StructTypeProto, path: str, index: int | None = None) -> LeafLookup:
        """The leaves of a concrete root as a mapping from path to Leaf that finds one leaf by
        walking its path's names (no enumeration): what decoder and encoder bindings need.
        ``index``: the root is ``struct_types[index]`` (its shape is then memoized)."""
        if index is not None:
            shape = self.leaf_shape_of_index(index, path)
        else:
            shape = self.leaf_shape(declaration, path)
        return LeafLookup(self, declaration, path, shape)

    def _resolve(self, index: int) -> int:
        """The first declaration along a chain of type_index aliases (memoized, path-compressed)."""
        chain = []
        while self.declarations[index].WhichOneof("kind") == "type_index" and index not in self._aliases:
            chain.append(index)
            index = self.declarations[index].type_index
        index = self._aliases.get(index, index)
        for alias in chain:
            self._aliases[alias] = index
        return index

    def _target(self, type_proto) -> tuple[int, StructTypeProto, str]:
        index = self._resolve(type_proto.struct_type.type_index)
        return index, self.declarations[index], self.path(index)

    def _iter_leaves(self, declaration: StructTypeProto, path: str) -> Iterator[Leaf]:
        """Every leaf, in payload order, by one iterative walk over the expanded declaration tree
        (subtrees without leaves are skipped). A leaf's path is joined once, from a linked list
        of the names above it, so nesting depth costs no copies of what lies above."""
        shapes, sizes = self._shapes, self._sizes.__getitem__
        # A stack of leaves to yield and of walks: (declaration, its path, the names above it as
        # (name, parent) links, its bit offset, the enclosing shape and strides).
        stack: list = [(declaration, path, None, 0, (), ())]
        while stack:
            item = stack.pop()
            if isinstance(item, Leaf):
                yield item
                continue
            current, where, names, offset, shape, strides = item
            kind = current.WhichOneof("kind")
            if kind == "type_index":
                index = self._resolve(current.type_index)
                stack.append((self.declarations[index], self.path(index), names, offset, shape, strides))
            elif kind == "array":
                array, element_path = current.array, f"{where}.array.element_type"
                element = array.element_type
                shape = (*shape, array.dimension)
                strides = (*strides, type_size(element, element_path, sizes))
                if element.WhichOneof("value") == "tensor_type":
                    yield tensor_leaf(_joined(names), element.tensor_type, element_path, offset, shape, strides)
                else:
                    index, target, target_path = self._target(element)
                    if shapes[index].count:
                        stack.append((target, target_path, names, offset, shape, strides))
            elif kind == "bit_packing":
                packing = current.bit_packing
                record = sum(c.bit_width for c in packing.component)
                shape, strides = (*shape, packing.dimension), (*strides, record)
                position = offset
                for i, component in enumerate(packing.component):
                    source = element_label(f"{where}.bit_packing.component[{i}]", component.name)
                    name = _joined((component.name, names))
                    yield component_leaf(name, component.bit_width, source, position, shape, strides)
                    position += component.bit_width
            elif kind == "structure":
                pending: list = []  # in payload order; pushed reversed so the first pops first
                position = offset
                for i, field in enumerate(current.structure.field):
                    field_path = element_label(f"{where}.structure.field[{i}]", field.name)
                    linked = (field.name, names)
                    if field.WhichOneof("content") == "constant":
                        pending.append(constant_leaf(_joined(linked), field.constant, field_path))
                        continue
                    type_path = f"{field_path}.type"
                    if field.type.WhichOneof("value") == "tensor_type":
                        tensor = field.type.tensor_type
                        pending.append(tensor_leaf(_joined(linked), tensor, type_path, position, shape, strides))
                    else:
                        index, target, target_path = self._target(field.type)
                        if shapes[index].count:
                            pending.append((target, target_path, linked, position, shape, strides))
                    position += type_size(field.type, type_path, sizes)
                stack.extend(reversed(pending))


class LeafLookup(Mapping):
    """The leaves of one concrete root by path, found by walking the path's names through the
    declarations (O(length of the path)); iterating lists them lazily in payload order."""

    def __init__(self, table: TypeTable, declaration: StructTypeProto, path: str, shape: LeafShape) -> None:
        self.table, self.declaration, self.path, self.shape = table, declaration, path, shape
        self._found: dict[str, Leaf | None] = {}
        self._root_members: dict[None, dict[str, tuple]] = {}

    def __len__(self) -> int:
        return self.shape.count

    def __iter__(self) -> Iterator[str]:
        return (leaf.path for leaf in self.table._iter_leaves(self.declaration, self.path))

    def __getitem__(self, leaf_path: str) -> Leaf:
        if leaf_path not in self._found:
            self._found[leaf_path] = self._find(leaf_path) if isinstance(leaf_path, str) else None
        leaf = self._found[leaf_path]
        if leaf is None:
            raise KeyError(leaf_path)
        return leaf

    def preview(self) -> str:
        """The first few leaf paths (shortened) for a message, from the LeafShape: a root's first
        leaf may lie thousands of declarations down, and a message is built per failing binding."""
        listed = ", ".join(repr(p) for p in self.shape.sample) or "none"
        return listed if len(self.shape.sample) == self.shape.count else f"{listed}, ... ({self.shape.count} leaves)"

    def _find(self, leaf_path: str) -> Leaf | None:
        table, sizes = self.table, self.table._sizes.__getitem__
        names = leaf_path.split(".") if leaf_path else []
        current, where, index = self.declaration, self.path, None
        taken, offset, shape, strides = 0, 0, (), ()
        while True:  # each turn consumes a name or an array level (rank <= MAX_LEAF_RANK)
            kind = current.WhichOneof("kind")
            element = None
            if kind == "type_index":
                index = table._resolve(current.type_index)
                current, where = table.declarations[index], table.path(index)
                continue
            if kind == "array":
                array, element_path = current.array, f"{where}.array.element_type"
                element, type_path = array.element_type, element_path
                shape = (*shape, array.dimension)
                strides = (*strides, type_size(element, element_path, sizes))
            elif kind == "bit_packing":
                if taken != len(names) - 1:
                    return None
                member = self._member(index, current, where, names[taken])
                if member is None:
                    return None
                _, source, position, record, component = member
                return component_leaf(
                    leaf_path, component.bit_width, source, offset + position,
                    (*shape, current.bit_packing.dimension), (*strides, record),
                )  # fmt: skip
            elif kind == "structure":
                if taken == len(names):
                    return None
                member = self._member(index, current, where, names[taken])
                if member is None:
                    return None
                taken += 1
                _, field_path, position, _, field = member
                if field.WhichOneof("content") == "constant":
                    return constant_leaf(leaf_path, field.constant, field_path) if taken == len(names) else None
                element, type_path, offset = field.type, f"{field_path}.type", offset + position
            else:
                return None
            if element.WhichOneof("value") == "tensor_type":
                if taken != len(names):
                    return None
                return tensor_leaf(leaf_path, element.tensor_type, type_path, offset, shape, strides)
            index, current, where = table._target(element)

    def _member(self, index: int | None, declaration: StructTypeProto, where: str, name: str) -> tuple | None:
        """(index, path, bit offset, record bits, field or component) of a named member; the
        name table of ``struct_types[index]`` is built once per table (the root's, once here)."""
        cache = self.table._members if index is not None else self._root_members
        members = cache.get(index)
        if members is None:
            members = _member_table(declaration, where, self.table._sizes.__getitem__)
            cache[index] = members
        return members.get(name)


def _member_table(declaration: StructTypeProto, where: str, sizes) -> dict[str, tuple]:
    members: dict[str, tuple] = {}
    if declaration.WhichOneof("kind") == "bit_packing":
        packing = declaration.bit_packing
        record = sum(c.bit_width for c in packing.component)
        position = 0
        for i, component in enumerate(packing.component):
            source = element_label(f"{where}.bit_packing.component[{i}]", component.name)
            members[component.name] = (i, source, position, record, component)
            position += component.bit_width
        return members
    position = 0
    for i, field in enumerate(declaration.structure.field):
        field_path = element_label(f"{where}.structure.field[{i}]", field.name)
        members[field.name] = (i, field_path, position, 0, field)
        if field.WhichOneof("content") == "type":
            position += type_size(field.type, f"{field_path}.type", sizes)
    return members


def _joined(names) -> str:
    """The leaf path of a (name, parent) linked list, outermost name first."""
    parts = []
    while names is not None:
        parts.append(names[0])
        names = names[1]
    return ".".join(reversed(parts))


def checked_leaf_shape(declaration: StructTypeProto, path: str, shape_of_index) -> LeafShape:
    """The LeafShape of one declaration from those of its references, refused when a root of it
    would break a leaf rule (docs/security.md): names, MAX_LEAVES, MAX_LEAF_PATH_CHARS,
    MAX_LEAF_RANK, MAX_LEAF_SPAN."""
    kind = declaration.WhichOneof("kind")
    if kind == "array":
        array = declaration.array
        inner = _type_leaf_shape(array.element_type, shape_of_index)
        span = inner.span * max(array.dimension, 1)
        shape = LeafShape(inner.count, inner.chars, inner.unnamed, inner.rank + 1, span, inner.sample)
        where = f"{path}.array"
    elif kind == "bit_packing":
        packing = declaration.bit_packing
        names: set[str] = set()
        chars = itemsize = 0
        for i, component in enumerate(packing.component):
            chars += len(_checked_name(component.name, names, path, "bit_packing.component", i))
            itemsize = max(itemsize, dtypes.unsigned_dtype_for_bits(component.bit_width).itemsize)
        sample = _sample(c.name for c in packing.component)
        shape = LeafShape(len(packing.component), chars, 0, 1, max(packing.dimension, 1) * itemsize, sample)
        where = f"{path}.bit_packing"
    elif kind == "structure":
        names = set()
        count = chars = rank = 0
        span = 1
        sample: list[str] = []
        for i, field in enumerate(declaration.structure.field):
            name = _checked_name(field.name, names, path, "structure.field", i)
            if field.WhichOneof("content") == "constant":
                count, chars = count + 1, chars + len(name)
                sample.extend(_sample([name][: SAMPLE_PATHS - len(sample)]))
                continue
            inner = _type_leaf_shape(field.type, shape_of_index)
            count += inner.count
            # every nested path gets "name." in front; an unnamed one becomes just "name"
            chars += inner.chars + inner.count * len(name) + (inner.count - inner.unnamed)
            rank, span = max(rank, inner.rank), max(span, inner.span)
            room = SAMPLE_PATHS - len(sample)
            sample.extend(_sample(f"{name}.{p}" if p else name for p in inner.sample[:room]))
        shape = LeafShape(count, chars, 0, rank, span, tuple(sample))
        where = path
    elif kind == "type_index":
        return shape_of_index(declaration.type_index)
    else:
        raise ValidationError(
            path, "declaration has no kind: the unconstrained category has no leaves", code="not_concrete"
        )
    if shape.count > MAX_LEAVES:
        raise ValidationError(
            path,
            f"declaration has more than {MAX_LEAVES} leaves ({shape.count})",
            code="limit_exceeded",
            actual=shape.count,
            limit=MAX_LEAVES,
        )
    if shape.chars > MAX_LEAF_PATH_CHARS:
        raise ValidationError(
            path,
            f"its leaf paths total more than {MAX_LEAF_PATH_CHARS} characters ({shape.chars})",
            code="limit_exceeded",
            actual=shape.chars,
            limit=MAX_LEAF_PATH_CHARS,
        )
    if shape.rank > MAX_LEAF_RANK:
        raise ValidationError(
            where,
            f"a leaf would have more than {MAX_LEAF_RANK} dimensions ({shape.rank})",
            code="limit_exceeded",
            actual=shape.rank,
            limit=MAX_LEAF_RANK,
        )
    if shape.span > MAX_LEAF_SPAN:
        raise ValidationError(
            where,
            "a leaf would have more elements than numpy can describe (its dimensions, a zero one counted "
            f"as 1, times its element's bytes exceed {MAX_LEAF_SPAN})",
            code="limit_exceeded",
            actual=shape.span,
            limit=MAX_LEAF_SPAN,
        )
    return shape


def _type_leaf_shape(type_proto, shape_of_index) -> LeafShape:
    if type_proto.WhichOneof("value") == "struct_type":
        return shape_of_index(type_proto.struct_type.type_index)
    tensor = type_proto.tensor_type
    dims = [d.dim_value for d in tensor.shape.dim]
    span = math.prod(max(d, 1) for d in dims) * dtypes.np_dtype(tensor.elem_type).itemsize
    return LeafShape(1, 0, 1, len(dims), span, ("",))


def _checked_name(name: str | bytes, seen: set[str], path: str, member: str, i: int) -> str:
    """A field or component name usable as a leaf path part (the same rules and messages as the
    checker's): valid UTF-8 (proto2 does not validate it on parse), non-empty, no '.', unique."""
    if type(name) is str and name and "." not in name and name not in seen:  # noqa: E721 - bytes
        seen.add(name)
        return name
    where = element_label(f"{path}.{member}[{i}]", name)
    what = "field" if member == "structure.field" else "component"
    if not isinstance(name, str):
        raise ValidationError(where, f"{what} name is not valid UTF-8", code="invalid_utf8")
    if not name:
        raise ValidationError(where, f"{what} has no name", code="missing_name")
    if "." in name:
        raise ValidationError(where, f"{what} name {name!r} contains '.', the leaf path separator", code="bad_name")
    if name in seen:
        raise ValidationError(where, f"duplicate {what} name", code="duplicate_name")
    seen.add(name)
    return name


def tensor_leaf(path: str, tensor, source: str, offset: int, shape: tuple, strides: tuple) -> Leaf:
    """A tensor-typed field or array element at ``offset`` inside enclosing arrays ``shape``."""
    dims = tuple(d.dim_value for d in tensor.shape.dim)
    width = dtypes.bit_width(tensor.elem_type)
    own = tuple(width * math.prod(dims[k + 1 :]) for k in range(len(dims)))
    return Leaf(
        path=path,
        kind="tensor",
        elem_type=tensor.elem_type,
        bit_width=width,
        dtype=dtypes.np_dtype(tensor.elem_type),
        shape=shape + dims,
        strides=strides + own,
        bit_offset=offset,
        source=f"{source}.tensor_type",
    )


def component_leaf(path: str, width: int, source: str, offset: int, shape: tuple, strides: tuple) -> Leaf:
    return Leaf(
        path=path,
        kind="component",
        elem_type=0,
        bit_width=width,
        dtype=dtypes.unsigned_dtype_for_bits(width),
        shape=shape,
        strides=strides,
        bit_offset=offset,
        source=source,
    )


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
                raise ValidationError(
                    where,
                    f"component width {component.bit_width} exceeds {MAX_COMPONENT_BITS} bits",
                    code="limit_exceeded",
                    actual=component.bit_width,
                    limit=MAX_COMPONENT_BITS,
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
        total = width
        for k, dim in enumerate(tensor.shape.dim):
            if dim.WhichOneof("value") != "dim_value" or dim.dim_value < 0:
                raise ValidationError(
                    f"{path}.tensor_type.shape.dim[{k}]",
                    "dimension is not a concrete non-negative integer",
                    code="bad_shape",
                )
            total = checked(total * dim.dim_value, f"{path}.tensor_type")
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
        raise ValidationError("struct_type", "declaration nests too deeply", code="nesting_too_deep") from None


def read_constant(tensor: onnx.TensorProto, path: str) -> np.ndarray:
    """A constant field's value, after checking that its data matches its dims (so a hostile
    ``dims`` can never make numpy allocate more than the tensor actually carries)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise ValidationError(
            path, "constants are stored in the type; external data is not allowed", code="external_not_allowed"
        )
    count = 1
    for k, dim in enumerate(tensor.dims):
        if dim < 0:
            raise ValidationError(f"{path}.dims[{k}]", f"negative dimension {dim}", code="bad_shape")
        count = checked(count * dim, path, "element count", unit="")
    width = dtypes.bit_width(tensor.data_type)
    if tensor.HasField("raw_data"):
        if width is None:
            raise ValidationError(
                path, f"{dtypes.type_name(tensor.data_type)} constant cannot use raw_data", code="bad_constant"
            )
        if len(tensor.raw_data) != (count * width + 7) // 8:
            raise ValidationError(
                path,
                f"raw_data holds {len(tensor.raw_data)} bytes for {count} elements of {width} bits",
                code="bad_constant",
            )
    else:
        try:
            field = onnx.helper.tensor_dtype_to_field(tensor.data_type)
        except (KeyError, ValueError, TypeError):
            raise ValidationError(
                path, f"constant has unsupported data_type {tensor.data_type}", code="bad_constant"
            ) from None
        stored = len(getattr(tensor, field))
        per_element = 2 if tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128) else 1
        packed = width is not None and width < 8
        if (packed and stored * (8 // width) < count) or (not packed and stored != count * per_element):
            raise ValidationError(
                path, f"constant holds {stored} values in {field} for {count} elements", code="bad_constant"
            )
    try:
        return onnx.numpy_helper.to_array(tensor)
    except Exception as error:  # onnx raises assorted types for inconsistent tensors
        raise ValidationError(path, f"constant tensor is not readable: {error}", code="bad_constant") from None
