"""A checked model read from a file, its inline payloads referenced in that file instead of held.

``InferenceSession`` over a model whose payloads are inline (``from-gguf`` writes them so by
default) would otherwise repack the weights while the model's parse holds every payload, 2.1-2.4x
the payload at the peak. Once the model is checked, each main-graph struct value whose payload is
inline becomes the same value with ``external_data`` naming the model's own file at the payload's
offset: the file's bytes and the parse are dropped, and the weights are read range by range from
the file, under the same resolver rules as any external payload (docs/execution.md, "Memory").
"""

from __future__ import annotations

import os
import pathlib

from google.protobuf.unknown_fields import UnknownFieldSet

from onnx_struct.errors import ValidationError
from onnx_struct.payload import external
from onnx_struct.schema import struct_parts, wire_format
from onnx_struct.schema.model import STOCK_CUT_MIN_BYTES, LoadedModel, copy_without_struct_values, resolve_path


def file_backed(loaded: LoadedModel, model_file: str | os.PathLike) -> LoadedModel | None:
    """``loaded`` (checked, read from ``model_file``) with its main graph's inline payloads as
    references into ``model_file``, or None when that does not apply or would not pay: payloads
    under :data:`STOCK_CUT_MIN_BYTES` in all, a model directory other than the file's, a file that
    is no longer what was read, or bytes this reader does not vouch for."""
    data = loaded.serialized
    if data is None or loaded.base_dir is None:
        return None
    try:
        file = resolve_path(model_file)
        info = file.stat()
    except OSError:
        return None
    # The resolver's rules, so that no read is refused later: inside the model directory, one
    # link, and (for the offsets) the size that was read; and a name that is a valid location.
    if file.parent != pathlib.Path(loaded.base_dir) or info.st_nlink != 1 or info.st_size != len(data):
        return None
    try:
        file.name.encode()  # a name that is not UTF-8 (surrogate escapes) cannot be a location
        external.check_location(file.name, "")  # "C:m.onnx", "a\\..\\b.onnx" are names, not locations
    except (UnicodeEncodeError, ValidationError):
        return None
    if len(UnknownFieldSet(loaded.proto)) or len(UnknownFieldSet(loaded.proto.graph)):
        return None  # copy_without_struct_values would copy the payloads with the unknown fields
    values = loaded.proto.graph.struct_initializer
    try:
        payloads = struct_parts.main_value_payloads(data)
    except wire_format.Malformed:
        return None
    if len(payloads) != len(values):
        return None
    inline = [p for v, p in zip(values, payloads, strict=True) if p is not None and not len(v.external_data)]
    if sum(end - start for _, start, end in inline) < STOCK_CUT_MIN_BYTES:
        return None
    proto = copy_without_struct_values(loaded.proto)
    for value, payload in zip(values, payloads, strict=True):
        copy = proto.graph.struct_initializer.add()
        if payload is None or len(value.external_data):
            copy.CopyFrom(value)
            continue
        stripped, start, end = payload
        copy.ParseFromString(stripped)
        copy.ClearField("raw_data")
        for key, text in (("location", file.name), ("offset", str(start)), ("length", str(end - start))):
            copy.external_data.add(key=key, value=text)
    return LoadedModel(proto, loaded.base_dir)


def held_lightly(checked: LoadedModel, model_file: str | os.PathLike | None) -> LoadedModel:
    """What to lower instead of ``checked``, a model its caller alone holds, once it is checked:
    :func:`file_backed` where it applies (``checked`` is then discarded), else ``checked`` without
    the file's bytes."""
    backed = file_backed(checked, model_file) if model_file is not None else None
    if backed is None:
        checked.release_serialized()
        return checked
    checked.discard()
    return backed


def inline_own_file_tensors(model, base_dir: str | os.PathLike, model_file: str | os.PathLike) -> None:
    """Bring back inline every tensor of the lowered ``model`` stored in ``model_file`` (the
    decoder path keeps a leaf of a file-backed value as a reference into it): the session must not
    depend on the model's file once it exists (onnxruntime would map it, and a later rewrite of
    the file would change the outputs or truncate the mapping), and ``lowered`` is then what
    :func:`onnx_struct.lower` makes of the model read whole."""
    name = resolve_path(model_file).name
    for where, tensor in external.model_tensors(model):
        if external.is_external(tensor) and any(e.key == "location" and e.value == name for e in tensor.external_data):
            tensor.raw_data = external.read_tensor_data(tensor, base_dir, f"{where}.external_data")
            del tensor.external_data[:]
            tensor.ClearField("data_location")  # as in a model read whole, not set to DEFAULT
