"""The one value resolver: a struct value (or a bare declaration) -> where it is, its declaration,
its size, its leaves and its payload bytes.

``check``, ``view``, ``pack``, ``decode``/``encode`` and ``lower`` all resolve values here, so the
same fault is reported with the same path, message, ``code`` and ``details`` whichever entry
point meets it first. Paths follow the checker: a value of the model is
``graph.struct_initializer[k] ('name')``; a StructProto that is not an element of the given model
is ``struct value 'name'``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import Leaf, TypeTable, element_label
from onnx_struct.payload import external, file_identity
from onnx_struct.schema.model import LoadedModel, ModelDirectory, StructProto, StructTypeProto, load

__all__ = [
    "ResolvedValue",
    "resolve_value",
    "load_declarations",
    "find_value",
    "value_where",
    "value_declaration",
    "declaration_or_index",
    "layout_and_size",
    "value_payload",
    "size_mismatch",
    "constant_tensor",
    "ExternalPayload",
]

CONCRETE = ("array", "structure", "bit_packing")


class ExternalPayload:
    """A verified external range, read into memory (a copy, never a memory map) on first use."""

    def __init__(self, file: pathlib.Path, offset: int, length: int, where: str) -> None:
        self.file, self.offset, self.length, self.where = file, offset, length, where

    def read(self) -> np.ndarray:
        return external.read_range(self.file, self.offset, self.length, f"{self.where}.external_data")


@dataclasses.dataclass(frozen=True)
class ResolvedValue:
    """One struct value, resolved: everything an entry point needs before reading a leaf."""

    where: str  # e.g. "graph.struct_initializer[2] ('w')": the prefix of every error about it
    proto: StructProto  # its raw_data may be empty when read lazily: use payload
    declaration: StructTypeProto  # the concrete root declaration
    declaration_path: str  # e.g. "struct_types[0] ('q4')" or "<where>.struct_type"
    table: TypeTable
    size_bits: int
    leaves: tuple[Leaf, ...]
    payload: bytes | ExternalPayload  # inline raw_data, or the verified external range (unread)
    loaded: LoadedModel | None
    base_dir: pathlib.Path | None

    @property
    def nbytes(self) -> int:
        return self.size_bits // 8


def load_declarations(model, base_dir=None) -> tuple[LoadedModel | None, Sequence[StructTypeProto]]:
    """(the loaded model or None, its declarations); ``model`` may also be a list of declarations."""
    if model is None:
        return None, ()
    if isinstance(model, (list, tuple)):
        return None, model
    loaded = load(model, base_dir)
    return loaded, list(loaded.struct_types)  # a list: callers pass it on as a list of declarations


def _loaded(model, base_dir) -> LoadedModel | None:
    return None if model is None or isinstance(model, (list, tuple)) else load(model, base_dir)


def find_value(loaded: LoadedModel | None, name: str) -> tuple[int, StructProto, memoryview | None]:
    """(index, proto, inline payload or None) of the struct value named ``name`` (the error lists
    the known names). A payload that is not None is the value's ``raw_data`` as a zero-copy view of
    the model's bytes (an ``onnx.ModelProto`` read through its unknown fields; the proto's own
    ``raw_data`` is then empty): see :meth:`LoadedModel.find_value`."""
    if loaded is None:
        raise ValidationError(
            "graph.struct_initializer", f"struct value {name!r} named without a model", code="no_model", name=name
        )
    return loaded.find_value(name)  # raises "no struct value named ..." with the known names


def value_where(value: StructProto, loaded: LoadedModel | None) -> str:
    """The checker's path of ``value`` when it is an element of ``loaded`` (identity, so a copy
    that happens to share a name is not mislabelled), else ``struct value 'name'``."""
    if loaded is not None:
        for k, candidate in enumerate(loaded.struct_values):
            if candidate is value:
                return element_label(f"graph.struct_initializer[{k}]", value.name)
    return f"struct value {value.name!r}" if value.name else "struct value"


def value_declaration(value: StructProto, table: TypeTable, where: str) -> StructTypeProto:
    """The concrete root declaration of a struct value (inline ``struct_type`` or ``type`` index)."""
    if value.HasField("struct_type"):
        if value.type != -1:
            raise ValidationError(
                f"{where}.type",
                f"type must be -1 when struct_type is present, not {value.type}",
                code="type_conflict",
                actual=value.type,
            )
        return value.struct_type
    if value.type == -1:
        raise ValidationError(f"{where}.type", "type is -1 but struct_type is absent", code="missing_type")
    return table.declaration(value.type, f"{where}.type")


def declaration_path(value: StructProto, declaration: StructTypeProto, table: TypeTable, where: str) -> str:
    path = f"{where}.struct_type" if value.HasField("struct_type") else table.path(value.type)
    return element_label(path, declaration.name)


def declaration_or_index(
    struct_type: StructTypeProto | int, table: TypeTable, where: str = "struct_type"
) -> tuple[StructTypeProto, str]:
    """(declaration, its path) of an inline declaration or an index into ``table``: the path is
    ``struct_types[i] ('name')`` for an index, ``<where> ('name')`` for an inline declaration."""
    if isinstance(struct_type, int):
        declaration = table.declaration(struct_type, where)
        return declaration, element_label(table.path(struct_type), declaration.name)
    if not isinstance(struct_type, StructTypeProto):
        raise TypeError(f"{where}: expected a StructTypeProto or an index, got {type(struct_type).__name__}")
    return struct_type, element_label(where, struct_type.name)


def layout_and_size(table: TypeTable, declaration: StructTypeProto, where: str) -> tuple[tuple[Leaf, ...], int]:
    """(leaves, size in bytes) of a root declaration: concrete and a whole number of bytes."""
    kind = declaration.WhichOneof("kind")
    if kind not in CONCRETE:
        raise ValidationError(
            where,
            f"the root of a struct value must be a concrete declaration, not {kind or 'unset'}",
            code="not_concrete",
            kind=kind or "unset",
        )
    bits = table.size(declaration, where)  # iterative and memoized: no RecursionError to catch
    check_whole_bytes(bits, where)
    return table.leaves(declaration, where), bits // 8


def check_whole_bytes(size_bits: int, where: str) -> None:
    if size_bits % 8:
        raise ValidationError(
            where,
            f"payload size {size_bits} bits is not a whole number of bytes",
            code="not_byte_aligned",
            size_bits=size_bits,
        )


def size_mismatch(where: str, actual: int, expected: int) -> ValidationError:
    """The one payload-length error (inline payloads and buffers)."""
    return ValidationError(
        where,
        f"payload is {actual} bytes; the type requires {expected}",
        code="size_mismatch",
        expected=expected,
        actual=actual,
    )


def value_payload(
    value: StructProto,
    size_bits: int,
    base_dir: os.PathLike | str | None,
    where: str,
    *,
    read: bool = True,
    inline: memoryview | None = None,
) -> bytes | memoryview | ExternalPayload | None:
    """The payload of ``value`` verified against ``size_bits``: its inline bytes, or its external
    range (only ``stat`` touches the file). Without ``base_dir`` an external payload is an error
    when ``read``, else only its entries are checked and None is returned."""
    check_whole_bytes(size_bits, where)
    nbytes = size_bits // 8
    if len(value.external_data):
        located = external.external_payload_range(value, nbytes, base_dir, where)
        if located is None:
            if not read:
                return None
            raise ValidationError(
                f"{where}.external_data",
                "external payload but no base directory (load the model from a path or pass base_dir)",
                code="no_base_dir",
            )
        return ExternalPayload(located[0], located[1], nbytes, where)
    # raw_data copies the payload out of the message on each access: read it once, or not at all
    # when the load already holds it as a view (``inline``)
    data = value.raw_data if inline is None else inline
    if len(data) != nbytes:
        raise size_mismatch(where, len(data), nbytes)
    return data


def resolve_value(
    value: StructProto | str,
    model=None,
    base_dir: str | os.PathLike | None = None,
    *,
    where: str | None = None,
    table: TypeTable | None = None,
) -> ResolvedValue:
    """Resolve a StructProto, or the name of a struct value in ``model`` (any model form, or a
    list of declarations), down to its verified payload; no payload byte is read.

    ``where``: the value's path when the caller already knows it (a walk over the model's values
    passes ``graph.struct_initializer[k] (...)``, sparing a search per value). ``table``: the
    model's TypeTable when the caller has one (a walk over many values: each declaration's layout
    is then computed once, not once per value)."""
    walked = table is not None  # a walk over a checked model's values: its files were checked with it
    loaded, declarations = load_declarations(model, base_dir) if table is None else (_loaded(model, base_dir), ())
    if isinstance(value, str):
        k, proto, inline = find_value(loaded, value)
        where = element_label(f"graph.struct_initializer[{k}]", value)
    elif isinstance(value, StructProto):
        proto, inline = value, None
        where = where or value_where(proto, loaded)
    else:
        raise TypeError(f"expected a StructProto or the name of a struct value, got {type(value).__name__}")
    if base_dir is not None:  # a ModelDirectory (a session passes its model's) keeps its second root
        directory = base_dir if isinstance(base_dir, ModelDirectory) else ModelDirectory(base_dir)
    else:
        directory = loaded.base_dir if loaded else None
    if loaded is not None and directory is not None:  # links the model identifies, before resolving
        file_identity.admit_recorded_links(loaded.proto.metadata_props, directory)
    table = table if table is not None else TypeTable(declarations)
    declaration = value_declaration(proto, table, where)
    leaves, nbytes, label = _root_layout(proto, declaration, table, where)
    payload = value_payload(proto, nbytes * 8, directory, where, inline=inline)
    if isinstance(payload, ExternalPayload) and loaded is not None and not walked:
        # view and decode of one value read no other: the file it names is the file the model records
        at = f"{where}.external_data"
        location = external.parse_external_data(proto.external_data, at).location
        file_identity.check_referenced_files(loaded.proto.metadata_props, directory, {location: at})
    return ResolvedValue(
        where=where,
        proto=proto,
        declaration=declaration,
        declaration_path=label,
        table=table,
        size_bits=nbytes * 8,
        leaves=leaves,
        payload=payload,
        loaded=loaded,
        base_dir=directory,
    )


def _root_layout(proto, declaration, table: TypeTable, where: str) -> tuple[tuple[Leaf, ...], int, str]:
    """(leaves, size in bytes, declaration path) of a value's root. For ``struct_types[i]`` they
    are computed once per table, so N values of one declaration cost its fields' work once (not N
    times), with the leaves' sources under the declaration's path; a failure is raised as the
    value's."""
    if proto.HasField("struct_type"):
        leaves, nbytes = layout_and_size(table, declaration, where)
        return leaves, nbytes, declaration_path(proto, declaration, table, where)
    known = table.root_layouts.get(proto.type)
    if known is None:
        label = declaration_path(proto, declaration, table, where)
        try:
            leaves, nbytes = layout_and_size(table, declaration, label)
        except ValidationError:
            layout_and_size(table, declaration, where)  # the same failure, named from the value
            raise
        known = table.root_layouts[proto.type] = (leaves, nbytes, label)
    return known


def constant_tensor(leaf: Leaf, name: str) -> TensorProto:
    """A constant leaf's tensor (always inline: types hold no external data) under ``name``."""
    tensor = TensorProto()
    tensor.CopyFrom(leaf.constant)
    tensor.name = name
    return tensor
