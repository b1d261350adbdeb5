"""TypeTable: a model's declarations with memoized sizes, leaf shapes and leaves.

Sizes (:mod:`onnx_struct.layout.sizes`) are memoized per model-level declaration, and reference
chains are resolved with an explicit stack (for sizes and for leaves), so a chain tens of
thousands long or a 60-level diamond of shared references costs linear time and no recursion.
Leaves (:mod:`onnx_struct.layout.leaves`) are listed by one walk, or found one at a time by path
(:class:`LeafLookup`). The public entry points are :func:`size_in_bits` and :func:`type_table`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from onnx_struct.errors import ValidationError
from onnx_struct.layout.leaves import (
    Leaf,
    LeafShape,
    checked_leaf_shape,
    component_leaf,
    constant_leaf,
    read_constant,
    tensor_leaf,
)
from onnx_struct.layout.sizes import (
    UINT64_MAX,
    declaration_size,
    element_label,
    iter_references,
    reference_targets,
    type_size,
)
from onnx_struct.schema.model import StructTypeProto, load

__all__ = [
    "UINT64_MAX",
    "Leaf",
    "LeafLookup",
    "LeafShape",
    "TypeTable",
    "element_label",
    "read_constant",
    "size_in_bits",
    "type_size",
    "type_table",
]


# A model with references and no declaration at all: a tool rebuilt the ModelProto around the
# graph, which keeps the graph's unknown fields (struct values, struct types of its values) only.
LOST_DECLARATIONS = (
    "the model's declarations were lost (a tool rebuilt the ModelProto around its graph, as "
    "onnx.helper.make_model(model.graph) does: the graph's unknown fields are kept, the model's are not); "
    "copy them back with onnx_struct.set_struct_types"
)


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
        # index -> (leaves, size in bytes, path) of struct_types[index] as a value's root
        # (payload/values.py): values of one declaration share them.
        self.root_layouts: dict[int, tuple] = {}
        self._plans: dict[tuple[int, str], tuple] = {}  # (id(structure), path) -> its fields with leaves

    @staticmethod
    def path(index: int) -> str:
        return f"struct_types[{index}]"

    def declaration(self, index: int, path: str) -> StructTypeProto:
        if not 0 <= index < len(self.declarations):
            reason = f"type index {index} is out of range ({len(self.declarations)} struct_types)"
            if not self.declarations:  # what a model rebuilt around its graph keeps (docs/ecosystem.md)
                reason += f": {LOST_DECLARATIONS}"
            raise ValidationError(
                path,
                reason,
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
            # A fresh traceback each time: re-raising the one remembered object would append this
            # call's frames to its traceback on every root, growing it with the number of roots.
            raise errors[index].with_traceback(None)
        in_progress: set[int] = set()
        stack = [(index, False)]
        count = len(self.declarations)
        try:
            while stack:
                current, references_done = stack.pop()
                if current in values:
                    continue
                if current in errors:
                    raise errors[current].with_traceback(None)
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
                    raise errors[target].with_traceback(None)
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
                for what, name, content, source, position in self._structure_plan(current, where):
                    linked = (name, names)
                    if what == "constant":
                        pending.append(constant_leaf(_joined(linked), content, source))
                    elif what == "tensor":
                        pending.append(tensor_leaf(_joined(linked), content, source, offset + position, shape, strides))
                    else:
                        target, target_path = content
                        pending.append((target, target_path, linked, offset + position, shape, strides))
                stack.extend(reversed(pending))

    def _structure_plan(self, structure: StructTypeProto, where: str) -> list[tuple]:
        """The fields of ``structure`` that hold leaves, as (kind, name, content, source path, bit
        position in the structure), once per (declaration, path): a declaration reached N times
        with N fields, most of them without leaves, must not cost N x N labels and sizes per
        listing (docs/security.md)."""
        key = (id(structure), where)
        known = self._plans.get(key)
        if known is not None:
            return known[1]
        shapes, sizes = self._shapes, self._sizes.__getitem__
        plan, position = [], 0
        for i, field in enumerate(structure.structure.field):
            field_path = element_label(f"{where}.structure.field[{i}]", field.name)
            if field.WhichOneof("content") == "constant":
                plan.append(("constant", field.name, field.constant, field_path, 0))
                continue
            type_path = f"{field_path}.type"
            if field.type.WhichOneof("value") == "tensor_type":
                plan.append(("tensor", field.name, field.type.tensor_type, type_path, position))
            else:
                index, target, target_path = self._target(field.type)
                if shapes[index].count:
                    plan.append(("struct", field.name, (target, target_path), None, position))
            position += type_size(field.type, type_path, sizes)
        self._plans[key] = (structure, plan)  # the declaration held: its id is not reused
        return plan


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

    Args:
        struct_type: the declaration, or its index in ``model.struct_types``.
        model (ModelLike | list[StructTypeProto] | None): what resolves indices and references (None: ``struct_type`` refers to nothing).

    Returns:
        The size in bits (a multiple of 8 for a root declaration).

    Raises:
        ValidationError: the size overflows uint64, a reference is invalid or cyclic, or an
            element has no fixed size; the message names the path.

    >>> from onnx import TensorProto
    >>> from onnx_struct import make_array
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
