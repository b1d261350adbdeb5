"""Bounds-checked, vectorized reads of the leaves of a struct payload (``view``, ``StructView``).

A view pairs a payload (inline ``raw_data``, or the exact external range, copied into memory on
the first read of a leaf: a file that changes after the check is a ValidationError, never a
SIGBUS as with a memory map) with the leaf layout of its declaration (:meth:`onnx_struct.layout.TypeTable.leaves`).
The payload length is verified against the size function before any byte is read. Leaves are
read by the bit kernels of :mod:`onnx_struct.layout.bits` (zero-copy where the layout allows).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from onnx_struct.errors import LeafNotFoundError, ValidationError
from onnx_struct.layout.bits import read_leaf
from onnx_struct.layout.leaves import Leaf
from onnx_struct.layout.table import TypeTable
from onnx_struct.payload import external
from onnx_struct.schema.model import LoadedModel, StructProto, StructTypeProto, load

__all__ = ["StructView", "view", "view_buffer", "read_leaf", "value_declaration"]


class StructView(Mapping):
    """Leaves of one struct payload by path: ``v["qs"]``, ``"d" in v``, ``v.leaves()``.

    Arrays returned for byte-aligned full-width leaves are zero-copy, read-only views of the
    payload; other leaves are materialized on each access (nothing is cached).
    """

    def __init__(self, buffer, layout: tuple[Leaf, ...], name: str = "") -> None:
        # ``buffer`` is any buffer, or an ExternalPayload read on the first access to a leaf
        # (so a view used only for its layout, as by ``lower``, reads nothing).
        self._source = buffer if isinstance(buffer, ExternalPayload) else None
        self._array = None if self._source is not None else np.frombuffer(buffer, dtype=np.uint8)
        self._layout = tuple(layout)
        self._by_path = {leaf.path: leaf for leaf in self._layout}
        self.name = name

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
            known = ", ".join(repr(p) for p in self._by_path) or "none"
            where = f"struct value {self.name!r}" if self.name else "struct view"
            raise LeafNotFoundError(where, f"no leaf {path!r}; leaves are: {known}", leaf=path) from None

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

    ``model`` (any form :func:`onnx_struct.model.load` accepts, or a plain list of declarations)
    supplies ``struct_types`` for
    ``type`` indices and ``type_index`` references, and, when it is a path, the directory external
    payloads are resolved against (``base_dir`` overrides it). The payload length is checked
    against the declaration's size before any byte is read; an external payload's exact range is
    read into memory when a leaf is first read (the file is checked again then).

    >>> v = view("weight", "model.onnx")
    >>> v["values"].dtype, v["scale"]
    (dtype(int4), array(0.125, dtype=float32))
    """
    loaded, struct_types = load_declarations(model, base_dir)
    if isinstance(value, str):
        if loaded is None:
            raise ValidationError("graph.struct_initializer", f"struct value {value!r} named without a model")
        index = next((i for i, v in enumerate(loaded.struct_values) if v.name == value), None)
        if index is None:
            loaded.struct_value(value)  # raises the "no struct value named ..." error with the known names
        proto = loaded.struct_values[index]
        where = f"graph.struct_initializer[{index}] ({value!r})"
    else:
        proto = value
        where = f"struct value {value.name!r}" if value.name else "struct value"
    directory = pathlib.Path(base_dir) if base_dir is not None else (loaded.base_dir if loaded else None)
    table = TypeTable(struct_types)
    declaration = value_declaration(proto, table, where)
    layout, nbytes = layout_and_size(table, declaration, where)
    buffer = _payload(proto, nbytes, directory, where)
    return StructView(buffer, layout, proto.name)


def view_buffer(buffer, struct_type: StructTypeProto | int, model=None, *, name: str = "") -> StructView:
    """A view of raw bytes (any buffer) under a declaration, or an index into ``model``'s types.

    The buffer length must equal the declaration's size in bytes.
    """
    table = TypeTable(load_declarations(model, None)[1])
    where = f"struct value {name!r}" if name else "buffer"
    if isinstance(struct_type, int):
        declaration = table.declaration(struct_type, f"{where}.type")
    else:
        declaration = struct_type
    layout, nbytes = layout_and_size(table, declaration, where)
    data = memoryview(buffer).cast("B") if not isinstance(buffer, np.ndarray) else buffer.reshape(-1).view(np.uint8)
    if len(data) != nbytes:
        raise ValidationError(
            where, f"payload is {len(data)} bytes; the type requires {nbytes}", expected=nbytes, actual=len(data)
        )
    return StructView(data, layout, name)


def load_declarations(model, base_dir) -> tuple[LoadedModel | None, Sequence[StructTypeProto]]:
    """(the loaded model or None, its declarations); ``model`` may also be a list of declarations."""
    if model is None:
        return None, ()
    if isinstance(model, (list, tuple)):
        return None, model
    loaded = load(model, base_dir)
    return loaded, list(loaded.struct_types)  # a list: callers pass it on as a list of declarations


def value_declaration(value: StructProto, table: TypeTable, where: str) -> StructTypeProto:
    """The concrete root declaration of a struct value (inline ``struct_type`` or ``type`` index)."""
    if value.HasField("struct_type"):
        if value.type != -1:
            raise ValidationError(f"{where}.type", f"type must be -1 when struct_type is present, not {value.type}")
        return value.struct_type
    if value.type == -1:
        raise ValidationError(f"{where}.type", "type is -1 but struct_type is absent")
    return table.declaration(value.type, f"{where}.type")


def layout_and_size(table: TypeTable, declaration: StructTypeProto, where: str) -> tuple[tuple[Leaf, ...], int]:
    kind = declaration.WhichOneof("kind")
    if kind not in ("array", "structure", "bit_packing"):
        raise ValidationError(
            where, f"the root of a struct value must be a concrete declaration, not {kind or 'unset'}"
        )
    bits = table.size(declaration, where)  # iterative and memoized: no RecursionError to catch
    if bits % 8:
        raise ValidationError(where, f"size {bits} bits is not a whole number of bytes", size_in_bits=bits)
    return table.leaves(declaration, where), bits // 8


class ExternalPayload:
    """A verified external range, read into memory (a copy, never a memory map) on first use."""

    def __init__(self, file: pathlib.Path, offset: int, length: int, where: str) -> None:
        self.file, self.offset, self.length, self.where = file, offset, length, where

    def read(self) -> np.ndarray:
        return external.read_range(self.file, self.offset, self.length, f"{self.where}.external_data")


def _payload(value: StructProto, nbytes: int, base_dir: pathlib.Path | None, where: str):
    if len(value.external_data):
        located = external.external_payload_range(value, nbytes, base_dir, where)
        if located is None:
            raise ValidationError(
                f"{where}.external_data",
                "external payload but no base directory (load the model from a path or pass base_dir)",
            )
        return ExternalPayload(located[0], located[1], nbytes, where)
    data = value.raw_data  # each access copies the payload out of the message: read it once
    if len(data) != nbytes:
        raise ValidationError(
            where,
            f"payload is {len(data)} bytes; the type requires {nbytes}",
            expected=nbytes,
            actual=len(data),
        )
    return data
