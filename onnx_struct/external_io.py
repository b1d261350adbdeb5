"""Saving models with struct payloads in external files, and loading them back.

The analogue of ``onnx.save(model, path, save_as_external_data=True)`` for struct values: every
struct payload of at least ``size_threshold`` bytes is written to an external file and its
StructProto gets ``external_data`` (``location``, ``offset``, ``length``); smaller ones are kept
(or brought back) inline. Stock tensors are handed to onnx's own external-data machinery with the
same threshold and file, so a model mixing initializers and struct values is saved in one go.

Payloads already external in the source model are read through :func:`onnx_struct.view` (size
checked, memory-mapped); a source file that is also a destination is copied to memory first so
re-saving a model over itself is safe.
"""

from __future__ import annotations

import os
import pathlib
import re

import onnx
from onnx.external_data_helper import load_external_data_for_model

from onnx_struct import external
from onnx_struct.errors import ValidationError
from onnx_struct.model import LoadedModel, ModelLike, from_onnx, load, to_onnx
from onnx_struct.view import view

__all__ = ["save_with_external_data", "load_with_external_data"]


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
        location: the shared data file, relative to the model's directory (default
            ``<model file name>.data``); ignored with ``one_file_per_value``.
        size_threshold: payloads (and tensors) of fewer bytes stay inline.
        one_file_per_value: one file per struct value, named after the value (sanitized), at
            offset 0; tensors then also get one file each (onnx's ``all_tensors_to_one_file=False``).
        align: offsets of struct payloads in the shared file are multiples of ``align`` bytes;
            the gaps are zero bytes. (Tensors appended by onnx are not aligned.)
        convert_tensors: also move large stock tensors out (onnx's machinery); False keeps them inline.

    The input model is not modified. Example::

        save_with_external_data(model, "out/model.onnx", align=64)
        view("weight", "out/model.onnx")  # memory-maps out/model.onnx.data
    """
    if align < 1:
        raise ValidationError("align", f"alignment must be a positive number of bytes, not {align}")
    if size_threshold < 0:
        raise ValidationError("size_threshold", f"threshold must be non-negative, not {size_threshold}")
    source = load(model)
    stock = to_onnx(source.proto)  # a copy; the caller's model is never modified
    if source.base_dir is not None:
        # Stock tensors already external may live in the very file rewritten below: read them now.
        try:
            load_external_data_for_model(stock, str(source.base_dir))
        except (ValueError, OSError) as error:  # onnx's own messages name the tensor
            raise ValidationError("graph.initializer", f"external tensor data cannot be read: {error}") from None
    proto = from_onnx(stock)
    path = pathlib.Path(path)
    directory = path.resolve().parent
    shared = location if location is not None else f"{path.name}.data"
    if not one_file_per_value:
        external.check_location(shared, "location")

    values = list(proto.graph.struct_initializer)
    file_names = _value_file_names(proto, values) if one_file_per_value else {}
    destinations = {directory / (file_names.get(i) or shared) for i in range(len(values))}
    payloads = [_payload(source, value, i, destinations) for i, value in enumerate(values)]

    if not one_file_per_value:
        (directory / shared).write_bytes(b"")  # fresh file: onnx appends tensors to an existing one
    handle = None
    try:
        for i, (value, payload) in enumerate(zip(values, payloads, strict=True)):
            del value.external_data[:]
            if len(payload) < size_threshold:
                value.raw_data = bytes(payload)
                continue
            value.ClearField("raw_data")
            if one_file_per_value:
                name, offset = file_names[i], 0
                (directory / name).write_bytes(payload)
            else:
                if handle is None:
                    handle = open(directory / shared, "r+b")  # noqa: SIM115 - closed in finally
                name = shared
                end = handle.seek(0, os.SEEK_END)
                offset = end + (-end % align)
                handle.write(bytes(offset - end))  # zero padding up to the aligned offset
                handle.write(payload)
            for key, entry in (("location", name), ("offset", offset), ("length", len(payload))):
                value.external_data.add(key=key, value=str(entry))
    finally:
        if handle is not None:
            handle.close()

    stock = to_onnx(proto)
    if convert_tensors:
        onnx.save_model(
            stock,
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=not one_file_per_value,
            location=shared,
            size_threshold=size_threshold,
        )
    else:
        onnx.save_model(stock, path)
    if not one_file_per_value and (directory / shared).stat().st_size == 0:
        (directory / shared).unlink()  # nothing went external


def load_with_external_data(path: str | os.PathLike, *, inline_struct_payloads: bool = False) -> onnx.ModelProto:
    """``onnx.load(path)`` (tensors' external data loaded); with ``inline_struct_payloads`` every
    external struct payload is also read (size-checked) into ``raw_data``. Without it the struct
    values stay external and :func:`onnx_struct.view` memory-maps them from ``path``'s directory."""
    stock = onnx.load(path)
    if not inline_struct_payloads:
        return stock
    overlay = from_onnx(stock)
    loaded = LoadedModel(overlay, pathlib.Path(path).resolve().parent)
    for value in overlay.graph.struct_initializer:
        if len(value.external_data):
            data = view(value, loaded).buffer.tobytes()
            del value.external_data[:]
            value.raw_data = data
    return to_onnx(overlay)


def _payload(source: LoadedModel, value, index: int, destinations: set[pathlib.Path]):
    """The verified payload bytes of ``value`` (a memoryview of an mmap when external)."""
    if not len(value.external_data):
        return value.raw_data
    buffer = view(value.name, source).buffer  # size-checked, memory-mapped
    ref = external.parse_external_data(value.external_data, f"graph.struct_initializer[{index}].external_data")
    if (
        source.base_dir is not None
        and (pathlib.Path(source.base_dir).resolve() / ref.location).resolve() in destinations
    ):
        return buffer.tobytes()  # the destination will be truncated: copy first
    return memoryview(buffer)


def _value_file_names(proto, values) -> dict[int, str]:
    """Distinct, safe file names per struct value, not clashing with onnx's per-tensor files."""
    taken = {t.name for t in proto.graph.initializer}
    names: dict[int, str] = {}
    for i, value in enumerate(values):
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", value.name).lstrip(".") or "struct_value"
        name, n = f"{stem}.bin", 1
        while name in taken:
            name, n = f"{stem}.{n}.bin", n + 1
        taken.add(name)
        names[i] = name
    return names
