"""Bounds-checked, vectorized reads of the leaves of a struct payload (``view``, ``StructView``).

A view pairs a payload (inline ``raw_data``, or the exact external range, copied into memory on
the first read of a leaf: a file that changes after the check is a ValidationError, never a
SIGBUS as with a memory map) with the leaf layout of its declaration (:meth:`onnx_struct.layout.table.TypeTable.leaves`).
The payload length is verified against the size function before any byte is read. Leaves are
read by the bit kernels of :mod:`onnx_struct.layout.bits` (zero-copy where the layout allows).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import numpy as np

from onnx_struct.errors import LeafNotFoundError
from onnx_struct.layout.bits import read_leaf
from onnx_struct.layout.leaves import Leaf, some_leaf_paths
from onnx_struct.layout.table import type_table
from onnx_struct.payload.values import (
    ExternalPayload,
    ResolvedValue,
    declaration_or_index,
    layout_and_size,
    resolve_value,
    size_mismatch,
    value_declaration,
)
from onnx_struct.schema.model import StructProto, StructTypeProto

__all__ = ["StructView", "view", "view_buffer", "read_leaf", "value_declaration"]


class StructView(Mapping):
    """Leaves of one struct payload by path: ``v["qs"]``, ``"d" in v``, ``v.leaves()``.

    Arrays returned for byte-aligned full-width leaves are zero-copy, read-only views of the
    payload; other leaves are materialized on each access (nothing is cached).
    """

    def __init__(self, buffer, layout: tuple[Leaf, ...], name: str = "", where: str = "") -> None:
        # ``buffer`` is any buffer, or an ExternalPayload read on the first access to a leaf
        # (so a view used only for its layout, as by ``lower``, reads nothing).
        self._source = buffer if isinstance(buffer, ExternalPayload) else None
        self._array = None if self._source is not None else np.frombuffer(buffer, dtype=np.uint8)
        self._layout = tuple(layout)
        self._by_path = {leaf.path: leaf for leaf in self._layout}
        self.name = name
        self.where = where or (f"struct value {name!r}" if name else "struct view")  # errors' path

    @property
    def _data(self) -> np.ndarray:
        if self._array is None:
            self._array = self._source.read()  # two threads may both read: same bytes, one kept
        return self._array

    @property
    def layout(self) -> tuple[Leaf, ...]:
        """The leaves of the declaration, in payload order (constants where declared)."""
        return self._layout

    @property
    def paths(self) -> list[str]:
        return [leaf.path for leaf in self._layout]

    @property
    def nbytes(self) -> int:
        """Payload length in bytes (= size_in_bits / 8)."""
        return self._source.length if self._array is None else int(self._array.size)

    @property
    def buffer(self) -> np.ndarray:
        """The whole payload as a read-only uint8 array."""
        data = self._data.view()
        data.flags.writeable = False
        return data

    def leaf(self, path: str) -> Leaf:
        """The layout entry of ``path`` (LeafNotFoundError lists the valid paths)."""
        try:
            return self._by_path[path]
        except KeyError:
            # At most five paths of 80 characters: a message's size must not grow with the
            # declaration (docs/security.md).
            shown_path = path if not isinstance(path, str) or len(path) <= 80 else f"{path[:77]}..."
            known = some_leaf_paths(self._by_path)
            raise LeafNotFoundError(self.where, f"no leaf {shown_path!r}; leaves are: {known}", leaf=path) from None

    def __getitem__(self, path: str) -> np.ndarray:
        return read_leaf(self._data, self.leaf(path))

    def __contains__(self, path: object) -> bool:
        return path in self._by_path

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_path)

    def __len__(self) -> int:
        return len(self._by_path)

    def leaves(self) -> dict[str, np.ndarray]:
        """Every leaf (constants included) as ``{path: array}`` in payload order."""
        return {leaf.path: read_leaf(self._data, leaf) for leaf in self._layout}

    def __repr__(self) -> str:
        return f"StructView({self.name!r}, {self.nbytes} bytes, leaves={self.paths})"


# ---------------------------------------------------------------------- entry points
def view(
    value: StructProto | str,
    model=None,
    *,
    base_dir: str | os.PathLike | None = None,
) -> StructView:
    """A :class:`StructView` of a struct value: a StructProto, or the name of one in ``model``.

    ``model`` (any form :func:`onnx_struct.schema.model.load` accepts, or a plain list of declarations)
    supplies ``struct_types`` for
    ``type`` indices and ``type_index`` references, and, when it is a path, the directory external
    payloads are resolved against (``base_dir`` overrides it). The payload length is checked
    against the declaration's size before any byte is read; an external payload's exact range is
    read into memory when a leaf is first read (the file is checked again then).

    Args:
        value: the StructProto, or the name of a struct value of ``model``.
        model (ModelLike | list[StructTypeProto] | None): the model (any form) or a list of declarations.
        base_dir: the directory external payloads are read from (default: the model file's).

    Returns:
        A read-only StructView of the value's payload.

    Raises:
        ValidationError: no value of that name, an invalid declaration, a payload of another
            size than the declaration's, or an external location the model-directory rules refuse.

    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> from onnx_struct import add_struct_types, add_struct_values, make_struct_value
    >>> from onnx_struct import make_constant_field, make_field, make_structure, make_tensor_type
    >>> values = make_field("values", make_tensor_type(TensorProto.INT4, [128]))
    >>> decl = make_structure([values, make_constant_field("scale", np.float32(0.125))], name="L")
    >>> model = helper.make_model(helper.make_graph([], "g", [], []))
    >>> (index,) = add_struct_types(model, decl)
    >>> add_struct_values(model, make_struct_value("weight", index, raw_data=bytes(64)))
    >>> v = view("weight", model)
    >>> v["values"].dtype, v["values"].shape, v["scale"]
    (dtype(int4), (128,), array(0.125, dtype=float32))
    """
    return view_of(resolve_value(value, model, base_dir))


def view_of(resolved: ResolvedValue) -> StructView:
    """The view of an already resolved value (nothing is read)."""
    return StructView(resolved.payload, resolved.leaves, resolved.proto.name, resolved.where)


def view_buffer(buffer, struct_type: StructTypeProto | int, model=None, *, name: str = "") -> StructView:
    """A view of raw bytes (any buffer) under a declaration, or an index into ``model``'s types.

    The buffer length must equal the declaration's size in bytes.

    Args:
        buffer (bytes | memoryview | numpy.ndarray): the payload bytes (bytes, memoryview, numpy array, ...); not copied when contiguous.
        struct_type: the declaration, or its index in ``model.struct_types``.
        model (ModelLike | list[StructTypeProto] | None): what resolves indices and
            references.
        name: the name messages give the buffer (default ``buffer``).

    Returns:
        A read-only StructView of ``buffer``.

    Raises:
        ValidationError: the declaration is invalid or its size differs from the buffer's.
    """
    table = type_table(model)
    where = f"struct value {name!r}" if name else "buffer"
    declaration, _ = declaration_or_index(struct_type, table, f"{where}.type")
    layout, nbytes = layout_and_size(table, declaration, where)
    if isinstance(buffer, np.ndarray):
        # A strided array is read as its elements' bytes in C order (reshape(-1) would not copy a
        # strided 1-D array, which view() refuses), copied only when needed.
        data = np.ascontiguousarray(buffer).reshape(-1).view(np.uint8)
    else:
        data = memoryview(buffer).cast("B")
    if len(data) != nbytes:
        raise size_mismatch(where, len(data), nbytes)
    return StructView(data, layout, name)
