"""Leaves: the affine bit layouts of a concrete root's tensors, components and constants.

A *leaf* is a tensor-typed field (or a tensor array element), a bit-packing component, or a
constant field. Every non-constant leaf is an affine bit layout: element ``idx`` starts at bit
``bit_offset + sum(idx[k] * strides[k])`` and is ``bit_width`` bits wide. A :class:`LeafShape`
is what enumerating a declaration's leaves would produce (count, path characters, rank, span),
computed without enumerating them and checked against the leaf limits (docs/security.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Literal

import numpy as np
import onnx

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.layout import dtypes
from onnx_struct.layout.sizes import checked, element_label
from onnx_struct.limits import (
    MAX_LEAF_PATH_CHARS,
    MAX_LEAF_RANK,
    MAX_LEAF_SPAN,
    MAX_LEAVES,
    MAX_SAMPLE_PATH_CHARS,
    MAX_SAMPLE_PATHS,
)
from onnx_struct.schema.model import StructTypeProto


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


def _sample(paths) -> tuple[str, ...]:
    out = []
    for path in paths:
        if len(out) == MAX_SAMPLE_PATHS:
            break
        out.append(path if len(path) <= MAX_SAMPLE_PATH_CHARS else path[: MAX_SAMPLE_PATH_CHARS - 3] + "...")
    return tuple(out)


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
            itemsize = max(itemsize, dtypes.uint_for_bits(component.bit_width).itemsize)
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
                sample.extend(_sample([name][: MAX_SAMPLE_PATHS - len(sample)]))
                continue
            inner = _type_leaf_shape(field.type, shape_of_index)
            count += inner.count
            # every nested path gets "name." in front; an unnamed one becomes just "name"
            chars += inner.chars + inner.count * len(name) + (inner.count - inner.unnamed)
            rank, span = max(rank, inner.rank), max(span, inner.span)
            room = MAX_SAMPLE_PATHS - len(sample)
            sample.extend(_sample(f"{name}.{p}" if p else name for p in inner.sample[:room]))
        shape = LeafShape(count, chars, 0, rank, span, tuple(sample))
        where = path
    elif kind == "type_index":
        return shape_of_index(declaration.type_index)
    else:
        raise ValidationError(
            path, "declaration has no kind: the unconstrained category has no leaves", code="not_concrete"
        )
    # Messages are formatted only for a refusal: this runs once per declaration, 20,000 times
    # for the largest models the limits allow.
    if shape.count > MAX_LEAVES:
        raise limit_exceeded(
            path, f"declaration has more than {MAX_LEAVES} leaves ({shape.count})", shape.count, MAX_LEAVES
        )
    if shape.chars > MAX_LEAF_PATH_CHARS:
        reason = f"its leaf paths total more than {MAX_LEAF_PATH_CHARS} characters ({shape.chars})"
        raise limit_exceeded(path, reason, shape.chars, MAX_LEAF_PATH_CHARS)
    if shape.rank > MAX_LEAF_RANK:
        reason = f"a leaf would have more than {MAX_LEAF_RANK} dimensions ({shape.rank})"
        raise limit_exceeded(where, reason, shape.rank, MAX_LEAF_RANK)
    if shape.span > MAX_LEAF_SPAN:
        reason = (
            "a leaf would have more elements than numpy can describe (its dimensions, a zero one counted "
            f"as 1, times its element's bytes exceed {MAX_LEAF_SPAN})"
        )
        raise limit_exceeded(where, reason, shape.span, MAX_LEAF_SPAN)
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
        dtype=dtypes.uint_for_bits(width),
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


def some_leaf_paths(paths) -> str:
    """At most five of ``paths`` (an iterable of leaf paths), each shortened to 80 characters, for a
    message: a message's size must not grow with the declaration (docs/security.md)."""
    shown = [p if len(p) <= 80 else f"{p[:77]}..." for p in itertools.islice(paths, 5)]
    known = ", ".join(repr(p) for p in shown) or "none"
    total = len(paths) if hasattr(paths, "__len__") else None
    if total is not None and total > len(shown):
        known += f", ... ({total} leaves)"
    return known
