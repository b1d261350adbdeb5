"""ONNX model with struct values -> GGUF file: ``to_gguf("model.onnx", "model.gguf")``.

The inverse of ``from-gguf``. Each struct value of the main graph whose declaration is a GGUF
tensor (a registered format of the ``gguf`` family with the registry's own decoder, or a raw
``--keep-unknown`` array recording its GGML type) becomes a GGUF tensor of the same bytes:
a block format's blocks run along the last ONNX axis, as GGUF's run along ``ne0`` (GGUF lists the
dimensions in the reverse order; gguf-py's writer reverses them). The file is written by gguf-py's
``GGUFWriter``, tensor by tensor, so only one payload is in memory at a time.

Two kinds of model, told apart by the GGUF metadata ``from-gguf`` records:

- a model converted from GGUF (with or without its decoder graph, payloads inline or referenced):
  the recorded metadata and tensor names are written back, and the tensor data is the source
  file's, byte for byte;
- any other model (e.g. from ``onnx-struct quantize``): weights only. Tensor names are the graph's
  names of the weights (what the restoring Transpose/Reshape of quantize produce); when every one
  of them follows Hugging Face llama naming they are mapped to llama's GGUF names with gguf-py's
  ``TensorNameMap`` and the file says ``general.architecture = llama``, otherwise they are kept and
  the file names no architecture. llama.cpp needs hyperparameters such a file does not carry.

A struct value that cannot be a GGUF tensor is skipped, with the reason in the result (the CLI
prints each): a format outside the GGUF family, more than 4 dimensions, a weight padded past its
last axis (quantize's zero padding, which a Slice drops), one whose blocks run along the output
axis of its MatMul/Gemm (``--group-axis output``; llama.cpp's matrices block the input axis) or
one whose GGUF name takes 64 bytes or more (ggml refuses a file holding one). A
model in which no struct value qualifies is a ValidationError.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import re
import struct
from typing import BinaryIO

import numpy as np
from onnx import TensorProto

from onnx_struct import limits
from onnx_struct.check.checked import CheckedModel, checked_model
from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import BlockFormat
from onnx_struct.formats.gguf.metadata import RESERVED_PREFIX, VALUE_TYPES_KEY, decode_metadata
from onnx_struct.formats.recognize import registered_decoder
from onnx_struct.layout.table import element_label
from onnx_struct.payload.external_write import DirectoryWriter
from onnx_struct.payload.values import ExternalPayload, value_declaration
from onnx_struct.schema.model import LoadedModel, ModelLike

__all__ = ["GGUFExport", "GGUFTensor", "plan_gguf", "to_gguf"]

ARCHITECTURE_KEY = "general.architecture"
ALIGNMENT_KEY = "general.alignment"
GGML_MAX_NAME = 64  # ggml's: a tensor name and its NUL; ggml refuses a file with a longer name
READER_PREFIX = "GGUF."  # gguf-py's reader names the header's fields so; a key of that name breaks it
RESTORING_OPS = ("Slice", "Transpose", "Reshape")  # what quantize puts between a struct value and its weight


def _gguf():
    try:
        import gguf  # noqa: PLC0415 - optional dependency, imported only when a file is written
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("writing GGUF files needs gguf-py: pip install 'onnx-struct[gguf]'", name="gguf") from error
    return gguf


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    name: str  # the GGUF tensor name
    value: str  # the struct value it comes from
    index: int  # the value's index in graph.struct_initializer
    type_name: str  # GGML type, e.g. "Q4_0"
    shape: tuple[int, ...]  # numpy order (the file lists it reversed)
    nbytes: int


@dataclasses.dataclass
class GGUFExport:
    """What :func:`to_gguf` writes (or would write), and what it leaves out and why."""

    source: str  # "gguf": converted from a GGUF file (its metadata recorded); "onnx": weights only
    names: str  # "recorded" (from-gguf's), "llama" (mapped with TensorNameMap) or "kept" (the graph's)
    architecture: str | None  # general.architecture written, or None
    tensors: list[GGUFTensor]
    metadata: dict[str, tuple[object, str]]  # key -> (value, GGUF value type label as from-gguf records it)
    skipped: list[tuple[str, str]]  # (struct value or metadata key, reason)
    checked: CheckedModel = dataclasses.field(repr=False)  # the model as checked, its table built once

    def summary(self) -> str:
        names = {
            "recorded": "the names recorded from the GGUF file",
            "llama": "names mapped to llama's GGUF names (gguf-py TensorNameMap)",
            "kept": "the ONNX model's names (not llama's naming: kept)",
        }[self.names]
        what = "tensors and metadata of a GGUF file" if self.source == "gguf" else "weights only"
        return f"{len(self.tensors)} tensors, {len(self.metadata)} metadata entries ({what}), {names}"


def to_gguf(
    model: ModelLike | LoadedModel, path: str | os.PathLike, *, base_dir: str | os.PathLike | None = None
) -> GGUFExport:
    """Write the struct weights of ``model`` to the GGUF file ``path`` (see the module docstring).

    Args:
        model: a path, ``onnx.ModelProto``, bytes or loaded model; it is checked first
            (:func:`onnx_struct.check_model`), external payloads resolved from its directory or
            ``base_dir``.
        path: the .gguf file, written as a new file renamed over ``path`` (never through a link).
        base_dir: where external payloads live, for a model not given as a path.

    Returns:
        The :class:`GGUFExport` written: tensors, metadata, and what was skipped and why.

    Raises:
        ValidationError: the model is invalid, no struct value can be a GGUF tensor, or recorded
            GGUF metadata does not fit its recorded type (the path names the entry).
        ImportError: gguf-py is not installed.

    Example::

        to_gguf(onnx_struct.quantize(onnx.load("m.onnx"), "Q4_0"), "m.q4_0.gguf")
    """
    export = plan_gguf(model, base_dir=base_dir)
    target = pathlib.Path(path)
    with DirectoryWriter(target.absolute().parent) as writer:
        write_gguf(export, writer.open(target.name, "OUT", exclusive=True, model_location=False))
        writer.commit("OUT")
    return export


def plan_gguf(model: ModelLike | LoadedModel, *, base_dir: str | os.PathLike | None = None) -> GGUFExport:
    """The :class:`GGUFExport` of ``model`` after checking it; no payload byte is read."""
    gguf = _gguf()
    checked = checked_model(model, base_dir=base_dir)
    loaded = checked.loaded
    props = {entry.key: entry.value for entry in loaded.proto.metadata_props}
    source = "gguf" if VALUE_TYPES_KEY in props else "onnx"
    skipped: list[tuple[str, str]] = []
    table = checked.table
    consumers = _consumers(loaded.proto.graph) if source == "onnx" else {}
    tensors = []
    for index, value in enumerate(loaded.proto.graph.struct_initializer):
        where = element_label(f"graph.struct_initializer[{index}]", value.name)
        declaration = value_declaration(value, table, where)
        typed = _gguf_type(declaration, gguf)
        if isinstance(typed, str):
            skipped.append((value.name, typed))
            continue
        type_name, shape, nbytes = typed
        name = value.name
        if source == "onnx":
            name, problem = _weight_name(value.name, consumers)
            if problem:
                skipped.append((value.name, problem))
                continue
        tensors.append(GGUFTensor(name, value.name, index, type_name, shape, nbytes))
    metadata: dict[str, tuple[object, str]] = {}
    names, architecture = "recorded", None
    if source == "gguf":
        metadata, dropped = _recorded_metadata(props, gguf)
        skipped += dropped
        found = metadata.get(ARCHITECTURE_KEY)
        architecture = found[0] if found else None
    else:
        tensors, names = _map_names(tensors, gguf)
        architecture = "llama" if names == "llama" else None
        if architecture:
            metadata[ARCHITECTURE_KEY] = (architecture, "STRING")
    long = [t for t in tensors if len(t.name.encode()) >= GGML_MAX_NAME]
    skipped += [(t.value, f"its GGUF name {t.name!r} is past ggml's {GGML_MAX_NAME - 1} bytes") for t in long]
    tensors = [t for t in tensors if t not in long]
    if not tensors:
        reasons = "; ".join(f"{name!r}: {reason}" for name, reason in skipped[:3]) or "the model has no struct values"
        if len(skipped) > 3:  # one line, however many values
            reasons += f"; and {len(skipped) - 3} more"
        raise ValidationError("graph.struct_initializer", f"no struct value can be a GGUF tensor ({reasons})")
    _refuse_duplicates(tensors)
    return GGUFExport(source, names, architecture, tensors, metadata, skipped, checked)


def write_gguf(export: GGUFExport, handle: BinaryIO) -> None:
    """Write ``export`` as a GGUF file to the open binary ``handle`` with gguf-py's GGUFWriter."""
    gguf = _gguf()
    writer = gguf.GGUFWriter(None, export.architecture or "")
    if export.architecture is None:  # the writer names one on creation; a file without one claims none
        writer.kv_data[0].pop(ARCHITECTURE_KEY, None)
    for key, (value, label) in export.metadata.items():
        if key == ARCHITECTURE_KEY:  # the writer put it first, as gguf-py writes every file
            continue
        value_type, sub_type = _value_types(label, gguf)
        if key == ALIGNMENT_KEY:
            writer.data_alignment = value  # checked by _recorded_metadata: a power of two
        writer.add_key_value(key, value, value_type, sub_type)
    for tensor in export.tensors:
        qtype = gguf.GGMLQuantizationType[tensor.type_name]
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        byte_shape = (*tensor.shape[:-1], tensor.shape[-1] // block_size * type_size)
        writer.add_tensor_info(tensor.name, byte_shape, np.dtype(np.uint8), tensor.nbytes, raw_dtype=qtype)
    # The writer opens its path itself; given none, it writes to the handle set here (the caller's
    # file, created by DirectoryWriter's rules) as to a file it opened.
    writer.fout = [handle]
    writer.state = gguf.gguf_writer.WriterState.EMPTY
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in export.tensors:  # one payload in memory at a time
        where = element_label(f"graph.struct_initializer[{tensor.index}]", tensor.value)
        payload = export.checked.resolved(tensor.index, where).payload
        data = payload.read() if isinstance(payload, ExternalPayload) else np.frombuffer(payload, np.uint8)
        writer.write_tensor_data(data)
        del data, payload
    handle.flush()


# ---------------------------------------------------------------------------------- tensors


def _gguf_type(declaration, gguf) -> tuple[str, tuple[int, ...], int] | str:
    """(GGML type name, numpy shape, bytes) of a value declared as a GGUF tensor, else why not."""
    if not declaration.HasField("decoder"):
        return _raw_gguf_type(declaration, gguf)
    recognized = registered_decoder(declaration.decoder)
    if recognized is None:
        return "its decoder is not a registered format's"
    fmt, shape = recognized
    if fmt.family != "gguf" or fmt.name not in gguf.GGMLQuantizationType.__members__:
        return f"format {fmt.name} is not a GGUF tensor type"
    if len(shape) > limits.MAX_GGUF_DIMS:
        return f"{len(shape)} dimensions; a GGUF tensor has at most {limits.MAX_GGUF_DIMS}"
    return fmt.name, shape, _nbytes(fmt, shape)


def _nbytes(fmt: BlockFormat, shape: tuple[int, ...]) -> int:
    return fmt.num_blocks(shape) * fmt.bytes_per_block


def _raw_gguf_type(declaration, gguf) -> tuple[str, tuple[int, ...], int] | str:
    """A ``--keep-unknown`` value: raw bytes with its GGML type and shape in the declaration's
    metadata_props (``gguf.type``, ``gguf.shape``), as from-gguf records them."""
    props = {entry.key: entry.value for entry in declaration.metadata_props}
    type_name = props.get("gguf.type")
    if type_name is None:
        return "it has no decoder and records no GGML type"
    if type_name not in gguf.GGMLQuantizationType.__members__:
        return f"GGML type {type_name!r} is unknown to gguf-py"
    try:
        shape = tuple(json.loads(props.get("gguf.shape", "")))
    except (ValueError, TypeError, RecursionError):  # json recurses once per nested array
        return "its recorded gguf.shape is not a JSON list"
    if not shape or len(shape) > limits.MAX_GGUF_DIMS or not all(type(d) is int and d > 0 for d in shape):
        return f"its recorded gguf.shape {list(shape)} is not 1 to {limits.MAX_GGUF_DIMS} positive dimensions"
    block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    n_bytes = math.prod(shape) // block_size * type_size
    array = declaration.array if declaration.HasField("array") else None
    uint8 = array is not None and array.element_type.tensor_type.elem_type == TensorProto.UINT8
    if shape[-1] % block_size or not uint8 or array.dimension != n_bytes:
        return f"its recorded gguf.shape {list(shape)} does not fit {type_name} blocks in its bytes"
    return type_name, shape, n_bytes


def _consumers(graph) -> dict[str, list]:
    """Main-graph value name -> [(node, input index, node index)] of the nodes reading it."""
    readers: dict[str, list] = {}
    for k, node in enumerate(graph.node):
        for i, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, i, k))
    return readers


def _weight_name(value: str, consumers: dict[str, list]) -> tuple[str, str]:
    """(the graph's name of the weight a struct value holds, "" or why it is no GGUF tensor).

    Quantize restores a weight with Slice (padding), Transpose (blocks along the input axis K of
    ``X @ W``) and Reshape (Conv kernels) nodes; the weight's name is the last one's output."""
    name, steps = value, []
    while True:
        readers = consumers.get(name, [])
        if len(readers) != 1 or readers[0][1] != 0 or readers[0][0].op_type not in RESTORING_OPS:
            break
        node = readers[0][0]
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            break
        steps.append(node.op_type)
        name = node.output[0]
    if "Slice" in steps:
        return name, "padded past its last axis (a Slice drops the padding); GGUF has no padded tensors"
    if "Transpose" not in steps:
        for node, i, k in consumers.get(name, []):
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            if i == 1 and (node.op_type == "MatMul" or (node.op_type == "Gemm" and not trans_b)):
                return name, (
                    f"its blocks run along the output axis of the {node.op_type} "
                    f"{element_label(f'graph.node[{k}]', node.name)} (quantize --group-axis output); "
                    "GGUF blocks run along the input axis"
                )
    return name, ""


def _map_names(tensors: list[GGUFTensor], gguf) -> tuple[list[GGUFTensor], str]:
    """The tensors under llama's GGUF names when every name maps with TensorNameMap, else as given."""
    layers = [int(m) for t in tensors for m in re.findall(r"\.(\d{1,9})\.", t.name)]
    # A layer index past the number of weights is no llama layer: such a name maps to nothing,
    # and the map is never built for a count the names alone dictate. Indices of more than 9
    # digits are not read at all (int() refuses text of 4,300 digits and is quadratic below).
    n_blocks = min(max(layers, default=-1) + 1, len(tensors))
    mapping = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_blocks)
    mapped = [mapping.get_name(t.name, try_suffixes=(".weight", ".bias")) for t in tensors]
    if None in mapped or len(set(mapped)) != len(mapped):
        return tensors, "kept"
    return [dataclasses.replace(t, name=m) for t, m in zip(tensors, mapped, strict=True)], "llama"


def _refuse_duplicates(tensors: list[GGUFTensor]) -> None:
    seen: dict[str, str] = {}
    for tensor in tensors:
        if tensor.name in seen:
            raise ValidationError(
                f"graph.struct_initializer[{tensor.index}] ({tensor.value!r})",
                f"a second GGUF tensor named {tensor.name!r} (also {seen[tensor.name]!r}); GGUF names are unique",
            )
        seen[tensor.name] = tensor.value


# ---------------------------------------------------------------------------------- metadata

_INTEGER = {
    "UINT8": np.uint8,
    "INT8": np.int8,
    "UINT16": np.uint16,
    "INT16": np.int16,
    "UINT32": np.uint32,
    "INT32": np.int32,
    "UINT64": np.uint64,
    "INT64": np.int64,
}
_FLOAT = ("FLOAT32", "FLOAT64")


def _recorded_metadata(props: dict[str, str], gguf) -> tuple[dict[str, tuple[object, str]], list[tuple[str, str]]]:
    """(GGUF key -> (value, type label), skipped (key, reason)) from the metadata_props from-gguf
    wrote. A value that does not fit its recorded type is a ValidationError naming the entry; an
    empty array (gguf-py's writer refuses one) or a nested one (from-gguf keeps it flattened) is
    skipped."""
    values = decode_metadata(props)
    types = json.loads(props[VALUE_TYPES_KEY])  # decode_metadata checked it is a JSON object
    out: dict[str, tuple[object, str]] = {}
    skipped = []
    for key, value in values.items():
        label, where = types[key], f"metadata_props[{key!r}]"
        if key.startswith((READER_PREFIX, RESERVED_PREFIX)):  # from-gguf could not read the file back
            raise ValidationError(where, f"keys starting with {READER_PREFIX!r} or {RESERVED_PREFIX!r} are reserved")
        if not isinstance(label, str):
            raise ValidationError(where, f"its recorded GGUF type {label!r} is not a type name")
        depth, base = _label_parts(label)
        if depth > 1:
            skipped.append((key, f"a nested array ({label}) is kept flattened in the model"))
            continue
        if depth == 1 and isinstance(value, list) and not value:
            skipped.append((key, "an empty array: gguf-py's writer cannot write one"))
            continue
        out[key] = (_checked_value(value, depth, base, where), label)
    alignment = out.get(ALIGNMENT_KEY)
    if alignment is not None:
        value = alignment[0]
        if alignment[1] != "UINT32" or value <= 0 or value & (value - 1):
            raise ValidationError(f"metadata_props[{ALIGNMENT_KEY!r}]", f"{value!r} is not a UINT32 power of two")
        if value > limits.MAX_GGUF_ALIGNMENT:
            raise ValidationError(
                f"metadata_props[{ALIGNMENT_KEY!r}]",
                f"{value} is past {limits.MAX_GGUF_ALIGNMENT}, the largest alignment written (docs/security.md)",
            )
    architecture = out.get(ARCHITECTURE_KEY)
    if architecture is not None and architecture[1] != "STRING":
        raise ValidationError(f"metadata_props[{ARCHITECTURE_KEY!r}]", "the architecture is not a STRING")
    del gguf
    return out, skipped


def _fits_float32(value: float) -> bool:
    """Whether the writer can pack ``value`` as a float32 (NaN and infinities can; a finite value
    past float32's range cannot)."""
    try:
        struct.pack("<f", value)
    except OverflowError:
        return False
    return True


def _label_parts(label: str) -> tuple[int, str]:
    depth = 0
    while label.startswith("ARRAY[") and label.endswith("]"):
        depth, label = depth + 1, label[6:-1]
    return depth, label


def _checked_value(value: object, depth: int, base: str, where: str) -> object:
    """``value`` as the GGUF writer packs a ``base`` (or an array of it): numbers in range."""
    items = value if depth else [value]
    if depth and not isinstance(value, list):
        raise ValidationError(where, f"expected an array of {base}, got {type(value).__name__}")
    if base == "STRING":
        ok = all(isinstance(v, str) for v in items)
    elif base == "BOOL":
        ok = all(isinstance(v, bool) for v in items)
    elif base in _FLOAT:
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items)
        items = [float(v) for v in items] if ok else items
        ok = ok and (base == "FLOAT64" or all(_fits_float32(v) for v in items))
    elif base in _INTEGER:
        info = np.iinfo(_INTEGER[base])
        ok = all(type(v) is int and info.min <= v <= info.max for v in items)
    else:
        raise ValidationError(where, f"unknown GGUF value type {base!r}")
    if not ok:
        raise ValidationError(where, f"a value does not fit the recorded GGUF type {base}")
    return items if depth else items[0]


def _value_types(label: str, gguf):
    depth, base = _label_parts(label)
    element = gguf.GGUFValueType[base]
    return (gguf.GGUFValueType.ARRAY, element) if depth else (element, None)
