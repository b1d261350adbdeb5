"""The writer: leaves -> payload bytes, the exact inverse of :func:`onnx_struct.view`.

Rule: every leaf is checked before anything is written, and the error names the leaf: its exact
shape; values numpy converts to the leaf's dtype without loss (``cast="round"`` rounds floats,
overflow is still refused); a given constant equal to the constant; no unknown path; a missing
leaf only with ``fill_missing=True``, and then at most ``MAX_PACK_ZERO_FILL_BYTES`` of zero-fill.
Writing is vectorized (:func:`onnx_struct.layout.bit_writes.write_leaf`).

Notes: docs/modules.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Literal

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike

from onnx_struct.errors import LeafNotFoundError, ValidationError
from onnx_struct.layout.bit_writes import write_leaf
from onnx_struct.layout.leaves import Leaf, read_constant, some_leaf_paths
from onnx_struct.layout.table import type_table
from onnx_struct.limits import MAX_PACK_ZERO_FILL_BYTES
from onnx_struct.payload.values import declaration_or_index, layout_and_size
from onnx_struct.schema.builders import make_struct_value
from onnx_struct.schema.model import StructProto, StructTypeProto

__all__ = ["pack", "make_struct_value_from_leaves", "coerce_leaf"]


Cast = Literal["exact", "round"]


def pack(
    leaves: Mapping[str, ArrayLike],
    struct_type: StructTypeProto | int,
    model=None,
    *,
    fill_missing: bool = False,
    cast: Cast = "exact",
) -> bytes:
    """Payload bytes of ``struct_type`` holding ``leaves`` (``{path: array-like}``).

    ``struct_type`` is a declaration or an index into ``model``'s ``struct_types`` (``model``:
    any model form, a list of declarations or their TypeTable, also resolving ``type_index``). The result is
    exactly ``size_in_bits / 8`` bytes. Every non-constant leaf must be given, unless
    ``fill_missing=True`` (then omitted leaves are zero bits). ``cast="round"`` rounds floating
    values into a narrower floating leaf (float32 -> FLOAT16) instead of refusing the loss.

    Args:
        leaves: the arrays by leaf path.
        struct_type: the declaration, or its index in ``model.struct_types``.
        model (ModelLike | list[StructTypeProto] | None): what resolves indices and
            references.
        fill_missing: zero-fill the leaves not given instead of refusing.
        cast: "exact" refuses any value the leaf's type cannot hold; "round" rounds floats.

    Returns:
        The payload, exactly the declaration's size in bytes.

    Raises:
        ValidationError: an invalid declaration, a missing or unknown leaf (LeafNotFoundError),
            a shape or value that does not fit its leaf, or zero-fill past
            ``MAX_PACK_ZERO_FILL_BYTES``.
        TypeError: ``leaves`` is not a mapping.
        ValueError: ``cast`` is neither "exact" nor "round".

    >>> from onnx_struct import make_bit_packing
    >>> pack({"a": [5], "b": [17]}, make_bit_packing([("a", 3), ("b", 5)], 1))
    b'\\x8d'
    """
    if cast not in ("exact", "round"):
        raise ValueError(f"cast must be 'exact' or 'round', not {cast!r}")
    if not isinstance(leaves, Mapping):
        raise TypeError(f"leaves: expected a mapping of leaf paths to arrays, got {type(leaves).__name__}")
    table = type_table(model)
    declaration, _ = declaration_or_index(struct_type, table)
    layout, nbytes = layout_and_size(table, declaration, "struct_type")
    by_path = {leaf.path: leaf for leaf in layout}
    arrays: list[tuple[Leaf, np.ndarray]] = []
    for path, value in leaves.items():
        leaf = by_path.get(path)
        if leaf is None:
            known = some_leaf_paths(by_path)
            raise LeafNotFoundError(f"leaf {path!r}", f"unknown leaf; leaves are: {known}", leaf=path)
        array = coerce_leaf(value, leaf, cast=cast)
        if leaf.kind != "constant":
            arrays.append((leaf, array))
    if not fill_missing:
        missing = [p for p, leaf in by_path.items() if leaf.kind != "constant" and p not in leaves]
        if missing:
            shown = ", ".join(repr(p) for p in missing[:10]) + (
                f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            )
            raise ValidationError(
                "struct_type",
                f"no value given for leaf {shown}; pass every non-constant leaf, or fill_missing=True to write zeros",
                code="missing_leaf",
            )
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
    fill_missing: bool = False,
    cast: Cast = "exact",
) -> StructProto:
    """A StructProto named ``name`` with the inline payload :func:`pack` builds from ``leaves``
    (``struct_type``: an inline declaration, type -1, or an index into ``model``; ``fill_missing``
    and ``cast`` as for :func:`pack`).

    Args:
        name: the value's name.
        leaves: the arrays by leaf path.
        struct_type: an inline declaration, or its index in ``model.struct_types``.
        model (ModelLike | list[StructTypeProto] | None): what resolves indices and
            references.
        doc_string: the value's ``doc_string``.
        fill_missing: as for :func:`pack`.
        cast: as for :func:`pack`.

    Returns:
        The StructProto, with its payload in ``raw_data``.

    Raises:
        ValidationError: as :func:`pack` raises it.
        TypeError: ``leaves`` is not a mapping.
        ValueError: ``cast`` is neither "exact" nor "round".
    """
    payload = pack(leaves, struct_type, model, fill_missing=fill_missing, cast=cast)
    return make_struct_value(name, struct_type, payload, doc_string=doc_string)


def coerce_leaf(value: ArrayLike, leaf: Leaf, *, cast: Cast = "exact") -> np.ndarray:
    """``value`` as an array of the leaf's dtype and shape, or a ValidationError naming the leaf,
    the first offending index and value, and the leaf's range."""
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
        converted = None
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                converted = array.astype(target)
                back = converted.astype(array.dtype)
            lost = ~_equal_elements(back, array)
            if cast == "round" and _is_float(target) and _is_float(array.dtype):
                # rounding is asked for; only a value that became infinite, or NaN (float8 types
                # without infinities overflow to NaN), is still a loss
                wide, source = back.astype(np.float64), array.astype(np.float64)
                lost = (np.isinf(wide) & ~np.isinf(source)) | (np.isnan(wide) & ~np.isnan(source))
                # A type without NaN or infinities (FLOAT4E2M1, FLOAT6) saturates (NaN to -0.0,
                # inf to 6.0): a non-finite value, or one past the type's largest finite one, is a
                # loss there too.
                lost |= ~np.isfinite(source) & np.isfinite(wide)
                lost |= np.isfinite(source) & (np.abs(source) > float(ml_dtypes.finfo(target).max))
            elif array.dtype.kind in "iu" and target.kind in "iu" and array.dtype.kind != target.kind:
                # numpy converts between signed and unsigned modulo 2^bits, and back again: -1 made
                # a UINT64 2^64-1 that converted back to -1, so the round trip did not see it
                lost |= array < 0 if array.dtype.kind == "i" else array > np.uint64(np.iinfo(target).max)
        except (TypeError, ValueError, OverflowError):
            lost = None
        if lost is None or lost.any():
            bits = leaf.bit_width if leaf.kind == "component" else None
            raise ValidationError(where, _loss_reason(array, target, lost, cast, bits), code="leaf_value")
        array = converted
    if leaf.kind == "component" and leaf.bit_width < 64 and array.size and int(array.max()) >> leaf.bit_width:
        index = _first(array.astype(np.uint64) >> np.uint64(leaf.bit_width) != 0)
        raise ValidationError(
            where,
            f"value {int(array.max())} does not fit in {leaf.bit_width} bits: the first out of range is "
            f"{array[index].item()!r} at index {_index(index)}; the range is [0, {2**leaf.bit_width - 1}]",
            code="leaf_value",
        )
    return array


def _loss_reason(array: np.ndarray, target: np.dtype, lost: np.ndarray | None, cast: str, bits: int | None) -> str:
    reason = f"dtype {array.dtype} does not convert to {target} without loss"
    if lost is None or not lost.any():
        return reason
    index = _first(lost)
    first = array[index]  # a numpy scalar, or the object itself (None too) in an object array
    reason += f": the first value that does not is {first.item() if isinstance(first, np.generic) else first!r} at index {_index(index)}"
    limits = _range(target) if bits is None else (0, 2**bits - 1)  # a component: its bit width bounds it
    if limits is not None:
        reason += (
            f"; {target} holds {'integers in' if _is_int(target) else 'finite values in'} [{limits[0]}, {limits[1]}]"
        )
    if _is_float(target) and _is_float(array.dtype) and cast != "round":
        reason += "; pass cast='round' to round to the nearest representable value"
    return reason


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()


def _index(index: tuple[int, ...]) -> str:
    return "()" if not index else str(index[0]) if len(index) == 1 else str(index)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and _finfo(dtype) is not None)


def _is_int(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or (dtype.kind == "V" and _iinfo(dtype) is not None)


def _finfo(dtype):
    try:
        return ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return None


def _iinfo(dtype):
    try:
        return ml_dtypes.iinfo(dtype)
    except (TypeError, ValueError):
        return None


def _range(dtype: np.dtype) -> tuple[object, object] | None:
    if dtype.kind == "b":
        return None
    info = _iinfo(dtype) if _is_int(dtype) else _finfo(dtype) if _is_float(dtype) else None
    if info is None:
        return None
    return (info.min, info.max) if _is_int(dtype) else (float(info.min), float(info.max))


def _equal_elements(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return np.asarray((a == b) | (np.isnan(a) & np.isnan(b)))
    except TypeError:  # no NaN for this dtype
        return np.asarray(a == b)


def _same_values(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # no NaN for this dtype
        return bool(np.array_equal(a, b))
