"""The writer: leaves -> payload bytes, the exact inverse of :func:`onnx_struct.view`.

``pack(view(x).leaves(), t) == x`` byte for byte when x's unnamed/padding bits are zero, and
``view(pack(leaves, t))`` gives back every leaf that was given.

Accepted leaf values (checked before anything is written, errors name the leaf):

* the shape must equal the leaf's shape exactly (no broadcasting);
* the dtype is the leaf's dtype, or anything numpy converts to it **without loss**: converting
  back gives the same values (so Python ints in [-8, 7] are fine for INT4, 0.1 for FLOAT16 is
  not, 300 for UINT8 is not); a component's values must be integers below ``2**bit_width``;
* a constant leaf may be omitted; if given it must equal the constant;
* unknown paths are errors; **missing non-constant leaves are written as zero bits** (an encoder
  that does not produce a leaf, padding components) - encoders rely on this; but the zero-filled
  bytes may exceed the given leaves' bytes by at most ``MAX_PACK_ZERO_FILL_BYTES`` (256 MiB), so a
  declaration's stated size alone never makes ``pack`` allocate.

Writing is vectorized (:func:`onnx_struct.layout.bit_writes.write_leaf`): full-width byte-aligned leaves
by strided assignment, contiguous 1/2/4-bit rows by packing whole rows, everything else by
scattering each element's (at most nine) byte contributions with ``np.add.at`` in chunks (leaves
never share a bit, so adding disjoint bit patterns into a zeroed byte is the same as OR-ing them).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from onnx_struct.errors import LeafNotFoundError, ValidationError
from onnx_struct.layout.bit_writes import write_leaf
from onnx_struct.layout.leaves import Leaf, read_constant
from onnx_struct.layout.table import TypeTable
from onnx_struct.limits import MAX_PACK_ZERO_FILL_BYTES
from onnx_struct.payload.values import declaration_or_index, layout_and_size, load_declarations
from onnx_struct.schema.builders import make_struct_value
from onnx_struct.schema.model import StructProto, StructTypeProto

__all__ = ["pack", "make_struct_value_from_leaves", "coerce_leaf"]


def pack(leaves: Mapping[str, ArrayLike], struct_type: StructTypeProto | int, model=None) -> bytes:
    """Payload bytes of ``struct_type`` holding ``leaves`` (``{path: array-like}``).

    ``struct_type`` is a declaration or an index into ``model``'s ``struct_types`` (``model``:
    any model form or a list of declarations, also resolving ``type_index``). The result is
    exactly ``size_in_bits / 8`` bytes; bits of omitted leaves and padding are zero.

    >>> pack({"a": [5], "b": [17]}, make_bit_packing([("a", 3), ("b", 5)], 1))
    b'\\x8d'
    """
    table = TypeTable(load_declarations(model, None)[1])
    declaration, _ = declaration_or_index(struct_type, table)
    layout, nbytes = layout_and_size(table, declaration, "struct_type")
    by_path = {leaf.path: leaf for leaf in layout}
    arrays: list[tuple[Leaf, np.ndarray]] = []
    for path, value in leaves.items():
        leaf = by_path.get(path)
        if leaf is None:
            known = ", ".join(repr(p) for p in by_path) or "none"
            raise LeafNotFoundError(f"leaf {path!r}", f"unknown leaf; leaves are: {known}", leaf=path)
        array = coerce_leaf(value, leaf)
        if leaf.kind != "constant":
            arrays.append((leaf, array))
    check_zero_fill(nbytes, arrays, "struct_type")
    out = np.zeros(nbytes, dtype=np.uint8)
    for leaf, array in arrays:
        write_leaf(out, leaf, array)
    return out.tobytes()


def check_zero_fill(nbytes: int, arrays: list[tuple[Leaf, np.ndarray]], where: str) -> None:
    """Refuse to allocate a payload its input does not back: the bits of the non-constant leaves
    not given (written as zeros) may exceed the given ones by at most MAX_PACK_ZERO_FILL_BYTES, so
    the size a declaration states never sizes an allocation by itself (docs/security.md)."""
    given = sum(leaf.count * leaf.bit_width for leaf, _ in arrays) // 8
    if nbytes - given > given + MAX_PACK_ZERO_FILL_BYTES:
        raise ValidationError(
            where,
            f"the payload is {nbytes} bytes but the given leaves fill only {given}: packing would "
            f"zero-fill more than their size plus {MAX_PACK_ZERO_FILL_BYTES} bytes (pass the other leaves)",
            code="limit_exceeded",
            actual=nbytes - given,
            limit=given + MAX_PACK_ZERO_FILL_BYTES,
        )


def make_struct_value_from_leaves(
    name: str,
    leaves: Mapping[str, ArrayLike],
    struct_type: StructTypeProto | int,
    model=None,
    *,
    doc_string: str = "",
) -> StructProto:
    """A StructProto named ``name`` with the inline payload :func:`pack` builds from ``leaves``
    (``struct_type``: an inline declaration, type -1, or an index into ``model``)."""
    return make_struct_value(name, struct_type, pack(leaves, struct_type, model), doc_string=doc_string)


def coerce_leaf(value: ArrayLike, leaf: Leaf) -> np.ndarray:
    """``value`` as an array of the leaf's dtype and shape, or a ValidationError naming the leaf."""
    where = f"leaf {leaf.path!r}"
    try:
        array = np.asarray(value)
    except ValueError as error:  # ragged nested sequences
        raise ValidationError(where, f"value is not an array: {error}", code="leaf_value") from None
    if leaf.kind == "constant":
        expected = read_constant(leaf.constant, leaf.source)
        if array.shape != expected.shape or not _same_values(array, expected):
            raise ValidationError(
                where, f"is a constant and must equal {expected.tolist()!r} if given", code="leaf_value"
            )
        return expected
    if array.shape != leaf.shape:
        raise ValidationError(
            where, f"shape {array.shape} differs from the leaf's shape {leaf.shape}", code="shape_mismatch"
        )
    target = leaf.dtype
    if array.dtype != target:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                converted = array.astype(target)
                exact = _same_values(converted.astype(array.dtype), array)
        except (TypeError, ValueError, OverflowError):
            exact = False
        if not exact:
            raise ValidationError(
                where, f"dtype {array.dtype} does not convert to {target} without loss", code="leaf_value"
            )
        array = converted
    if leaf.kind == "component" and leaf.bit_width < 64 and array.size and int(array.max()) >> leaf.bit_width:
        raise ValidationError(
            where, f"value {int(array.max())} does not fit in {leaf.bit_width} bits", code="leaf_value"
        )
    return array


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # no NaN for this dtype
        return bool(np.array_equal(a, b))
