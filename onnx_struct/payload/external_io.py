"""Saving models with struct payloads in external files, and loading them back.

The analogue of ``onnx.save(..., save_as_external_data=True)`` for struct values (and stock
initializers, with the same threshold and file). Rule: every byte of the source is in memory
before anything is written, and every file is a new temporary file renamed over its destination,
so re-saving a model over itself keeps its payloads and a symlink destination is refused.

Notes: docs/modules.md.
"""

from __future__ import annotations

import os
import pathlib
import re

import onnx

from onnx_struct import limits
from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.layout.table import TypeTable, element_label
from onnx_struct.payload import external
from onnx_struct.payload.external_write import DirectoryWriter
from onnx_struct.payload.values import resolve_value, value_declaration
from onnx_struct.payload.view import view_of
from onnx_struct.schema.model import LoadedModel, ModelLike, from_onnx, load, resolve_path, to_onnx

__all__ = ["save_with_external_data", "save_plain_with_external_tensors", "load_with_external_data"]


def save_with_external_data(
    model: ModelLike | LoadedModel,
    path: str | os.PathLike,
    *,
    location: str | None = None,
    size_threshold: int = 1024,
    one_file_per_value: bool = False,
    align: int = 1,
    convert_tensors: bool = True,
) -> None:
    """Save ``model`` to ``path`` with large struct payloads (and tensors) in external files.

    Args:
        model: the model (any form: ModelProto, bytes, path, LoadedModel).
        path: the model file to write; external files go to its directory.
        location: the shared data file, relative to the model's directory (default
            ``<model file name>.data``); ignored with ``one_file_per_value``.
        size_threshold: payloads (and tensors) of fewer bytes stay inline.
        one_file_per_value: one file per struct value, named after the value (sanitized), at
            offset 0; tensors then also get one file each (onnx's ``all_tensors_to_one_file=False``).
        align: offsets of struct payloads in the shared file are multiples of ``align`` bytes;
            the gaps are zero bytes. Tensors are appended after them, aligned the same way.
        convert_tensors: also move large stock initializers out; False keeps them inline.

    Raises:
        ValidationError: the model is invalid or cannot be read, or a file name or location
            would leave the model's directory.
        OSError: a file cannot be written.

    The input model is not modified. Example::

        save_with_external_data(model, "out/model.onnx", align=64)
        view("weight", "out/model.onnx")  # reads out/model.onnx.data when a leaf is read
    """
    if align < 1:
        raise ValidationError(
            "align", f"alignment must be a positive number of bytes, not {align}", code="bad_argument"
        )
    if size_threshold < 0:
        raise ValidationError(
            "size_threshold", f"threshold must be non-negative, not {size_threshold}", code="bad_argument"
        )
    source = load(model)
    stock = to_onnx(source.proto)  # a copy; the caller's model is never modified
    if source.base_dir is not None:
        # Every byte is read before anything is written: a destination may be a source file.
        external.load_external_tensors(stock, source.base_dir)
    proto = from_onnx(stock)
    values = list(proto.graph.struct_initializer)
    table = TypeTable(source.struct_types)
    payloads = [_payload(source, value, i, table) for i, value in enumerate(values)]

    path = pathlib.Path(path)
    directory = resolve_path(path.absolute().parent)  # the model file's own name is not resolved
    shared = location if location is not None else f"{path.name}.data"
    if not one_file_per_value:
        external.check_location(shared, "location")
    names = _FileNames({path.name}) if one_file_per_value else None
    with DirectoryWriter(directory) as writer:
        store = _store(writer, shared, align, names)
        for i, (value, payload) in enumerate(zip(values, payloads, strict=True)):
            del value.external_data[:]
            if len(payload) < size_threshold:
                value.raw_data = bytes(payload)
                continue
            value.ClearField("raw_data")
            name, offset = store(payload, f"{_stem(value.name, 'struct_value')}.bin", f"graph.struct_initializer[{i}]")
            for key, entry in (("location", name), ("offset", offset), ("length", len(payload))):
                value.external_data.add(key=key, value=str(entry))
        stock = to_onnx(proto)
        if convert_tensors:
            _move_tensors_out(stock, store, size_threshold)
        writer.open(path.name, "path", exclusive=True).write(stock.SerializeToString())
        writer.commit("path")


def save_plain_with_external_tensors(
    model: onnx.ModelProto,
    path: str | os.PathLike,
    *,
    location: str | None = None,
    size_threshold: int = 1024,
    model_location: bool = True,
) -> None:
    """Save a plain ONNX model of any size (protobuf's 2 GiB included) with its initializers of at
    least ``size_threshold`` bytes in ``location`` (default ``<model file name>.data``), as
    :func:`save_with_external_data` writes them (no symlink followed, nothing truncated in place).
    The tensors are moved out of ``model`` itself: a model over 2 GiB cannot be copied through
    its bytes, as :func:`save_with_external_data` copies its input."""
    path = pathlib.Path(path)
    shared = location if location is not None else f"{path.name}.data"
    external.check_location(shared, "location")  # the model will state it: its rules apply
    with DirectoryWriter(resolve_path(path.absolute().parent)) as writer:
        _move_tensors_out(model, _store(writer, shared, 1, None), size_threshold)
        writer.open(path.name, "path", exclusive=True, model_location=model_location).write(model.SerializeToString())
        writer.commit("path")


def _store(writer: DirectoryWriter, shared: str, align: int, names: _FileNames | None):
    """``store(data, name_hint, where) -> (location, offset)``: ``data`` written to its own file
    (``names`` given) or appended to ``shared`` at the next multiple of ``align``."""

    def store(data, name_hint: str | None, where: str) -> tuple[str, int]:
        if names is not None:
            name = names.claim(name_hint)
            writer.open(name, where).write(data)
            return name, 0
        handle = writer.open(shared, "location")
        end = handle.tell()
        offset = end + (-end % align)
        handle.write(bytes(offset - end))  # zero padding up to the aligned offset
        handle.write(data)
        return shared, offset

    return store


def _move_tensors_out(stock: onnx.ModelProto, store, size_threshold: int) -> None:
    """As onnx does: initializers (of subgraphs too) with raw_data of ``size_threshold`` bytes or
    more, not attribute tensors, become external tensors written by ``store``."""
    for where, tensor in external.graph_tensors(stock.graph, "graph", initializers_only=True):
        if not tensor.HasField("raw_data"):
            continue
        data = tensor.raw_data
        if len(data) < size_threshold:
            continue
        name, offset = store(data, _stem(tensor.name, "tensor"), where)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, entry in (("location", name), ("offset", offset), ("length", len(data))):
            tensor.external_data.add(key=key, value=str(entry))


def load_with_external_data(path: str | os.PathLike, *, inline_struct_payloads: bool = False) -> onnx.ModelProto:
    """``onnx.load(path)`` (tensors' external data loaded, under the same directory rules as
    struct payloads); with ``inline_struct_payloads`` every external struct payload is also read
    (size-checked) into ``raw_data``. Without it the struct values stay external and
    :func:`onnx_struct.view` reads them from ``path``'s directory when a leaf is read.

    Args:
        path: the model file.
        inline_struct_payloads: also read every external struct payload into ``raw_data``.

    Returns:
        The stock model, struct parts as unknown fields.

    Raises:
        ValidationError: the file is missing or not a model, an external location is refused by
            the model-directory rules, or a payload's size differs from its declaration's.
    """
    source = load(path)
    stock = to_onnx(source.proto)
    external.load_external_tensors(stock, source.base_dir)
    if not inline_struct_payloads:
        return stock
    return _inlined(stock, source)


def read_external_payloads(stock: onnx.ModelProto, base_dir: str | os.PathLike) -> onnx.ModelProto:
    """``stock`` with every external struct payload read (size-checked) into ``raw_data`` from
    ``base_dir``, the model's directory, under the model-directory rules: a model written
    elsewhere keeps its payloads (its locations are relative to ``base_dir`` alone).

    Args:
        stock: the model as read (struct parts as unknown fields).
        base_dir: the directory the model was read from.

    Returns:
        ``stock`` itself when no payload is external, else a new model.

    Raises:
        ValidationError: a location refused by the model-directory rules, a missing file, a
            payload whose size differs from its declaration's, or payloads whose total reaches
            :data:`onnx_struct.limits.INLINE_RESULT_LIMIT` with the inline ones (no model could
            hold them inline).
    """
    source = load(stock, base_dir)
    if not any(len(value.external_data) for value in source.struct_values):
        return stock
    # Checked before any is read: past the limit the model they are read into (with the payloads
    # already inline) could not be serialized. A read payload is as large as its declaration says.
    table = TypeTable(source.struct_types)
    total = 0
    for i, value in enumerate(source.struct_values):
        where = element_label(f"graph.struct_initializer[{i}]", value.name)
        total += -(-table.size(value_declaration(value, table, where), where) // 8) if len(value.external_data) else 0
        total += len(value.raw_data)
    if total >= limits.INLINE_RESULT_LIMIT:
        raise limit_exceeded(
            "graph.struct_initializer",
            f"the struct payloads total {total} bytes, too many to hold inline in one model: write "
            "the result in the model's own directory",
            total,
            limits.INLINE_RESULT_LIMIT,
        )
    return _inlined(stock, source, table)


def _inlined(stock: onnx.ModelProto, source: LoadedModel, table: TypeTable | None = None) -> onnx.ModelProto:
    if not any(len(value.external_data) for value in source.struct_values):
        return stock
    overlay = from_onnx(stock)
    table = table if table is not None else TypeTable(source.struct_types)
    for i, value in enumerate(overlay.graph.struct_initializer):
        if len(value.external_data):
            value.raw_data = _payload(source, value, i, table).tobytes()
            del value.external_data[:]
    return to_onnx(overlay)


def _payload(source: LoadedModel, value, index: int, table: TypeTable):
    """The verified payload bytes of ``value``, in memory (external ones read through its view).
    The value itself is resolved at its index (not by name: a second value of one name keeps its own
    bytes) with the model's table, so N values cost linear time."""
    if not len(value.external_data):
        return memoryview(value.raw_data)
    where = element_label(f"graph.struct_initializer[{index}]", value.name)
    return memoryview(view_of(resolve_value(value, source, where=where, table=table)).buffer)


def _stem(name, fallback: str) -> str:
    """A file name from a value's or tensor's name (proto2 hands non-UTF-8 names over as bytes)."""
    text = name if isinstance(name, str) else ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text).lstrip(".")[:200] or fallback


class _FileNames:
    """Distinct file names for ``one_file_per_value``: struct values as ``<name>.bin``, tensors
    as ``<name>`` (onnx's per-tensor naming), never the model file's own name."""

    def __init__(self, taken) -> None:
        self.taken = set(taken)
        self.next_suffix: dict[str, int] = {}  # wanted name -> the next suffix to try

    def claim(self, wanted: str) -> str:
        stem, dot, suffix = wanted.partition(".bin") if wanted.endswith(".bin") else (wanted, "", "")
        # Each wanted name resumes where its last claim stopped: N names sanitized alike cost
        # linear time, not N^2 probes.
        name, n = wanted, self.next_suffix.get(wanted, 1)
        if n > 1:
            name = f"{stem}.{n - 1}{dot}{suffix}"
        while name in self.taken:
            name, n = f"{stem}.{n}{dot}{suffix}", n + 1
        self.next_suffix[wanted] = n
        self.taken.add(name)
        return name
