"""The repacked weights of a quantized session, in a temporary external-data file for onnxruntime.

Arrays handed to onnxruntime in memory (``add_external_initializers``) are copied while it loads
the model, with the Python ones still alive: the peak holds both, then the prepacked weights.
From an external-data file onnxruntime reads each initializer, prepacks it and releases it, as it
does for a model its own quantizer saved (figures: docs/benchmarks.md, "Session memory"). So
:class:`~onnx_struct.InferenceSession` writes the
repacked arrays, and every other external tensor of the lowered model (onnxruntime resolves all
of a model's external data in one folder), to one file in a new private temporary directory,
frees the arrays and removes the directory once the session exists (docs/execution.md, "Memory").
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import pathlib
import shutil
import tempfile
from collections.abc import Mapping

import numpy as np
import onnx

from onnx_struct import limits
from onnx_struct.limits import PROTOBUF_LIMIT
from onnx_struct.lowering.in_memory import IN_MEMORY_LOCATION
from onnx_struct.payload.external import (
    is_external,
    is_main_initializer,
    model_tensors,
    read_range,
    tensor_range,
)

FILE_NAME = "weights.bin"
# Offsets onnxruntime can map without reading (allocation granularity: 64 KiB on Windows); the
# gaps are holes in a sparse file.
# Tensors smaller than that are packed at 64 bytes, so the file's size follows the tensors' bytes,
# not their count (holes are written out where a file system has none).
_ALIGN = max(mmap.ALLOCATIONGRANULARITY, 1 << 16)
_SMALL_ALIGN = 64
_CHUNK = 8 << 20  # bytes copied at a time from the model's own external files (RSS while the arrays exist)


@dataclasses.dataclass
class WeightsFile:
    """A written weights file: ``directory`` is the folder to give onnxruntime; the model's
    external references point into it until :meth:`restore`."""

    directory: str
    _originals: list[tuple[onnx.TensorProto, list[tuple[str, str]]]]
    moved: set[str] = dataclasses.field(default_factory=set)  # paths of the tensors now in the file

    def write_model(self, model: onnx.ModelProto) -> str:
        """``model`` saved beside the weights: the path to give onnxruntime, which then resolves
        the file's references in this directory with nothing set on the caller's options."""
        path = os.path.join(self.directory, "model.onnx")
        with open(path, "xb") as file:
            file.write(model.SerializeToString())
        return path

    def restore(self) -> None:
        """Put the model's external references back as they were (placeholders included)."""
        for tensor, entries in self._originals:
            _point(tensor, entries)

    def remove(self) -> None:
        """Delete the directory. onnxruntime keeps what it mapped (POSIX keeps an unlinked file's
        pages); where the OS refuses (a mapped file on Windows) it stays for the OS to clean."""
        shutil.rmtree(self.directory, ignore_errors=True)


def write_weights_file(
    model: onnx.ModelProto,
    arrays: Mapping[str, np.ndarray],
    base_dir: str | os.PathLike | None,
    *,
    copy_all: bool = False,
    directory: str | None = None,
) -> WeightsFile | None:
    """Write every external tensor of ``model`` (the placeholders from ``arrays``, the others
    copied from ``base_dir`` under the model-directory rules) to one new file and point the model
    at it. None, with nothing changed, when the file cannot be written (no temporary directory,
    disk full), an external tensor has no directory to be read from, or (unless ``copy_all``)
    the others hold more than the weights plus 256 MiB: the caller then hands the arrays over in
    memory. ``directory``: an empty private directory to write in (a session cache's entry being
    made, runtime/session_cache.py) instead of a new temporary one; removed on failure."""
    # (where, tensor, None for a placeholder or the (file, offset, length) of a model's own tensor)
    tensors = []
    for where, tensor in model_tensors(model):
        if is_external(tensor):
            own = not is_placeholder(where, tensor, arrays)
            if own and base_dir is None:
                return None
            tensors.append((where, tensor, _source(tensor, base_dir, f"{where}.external_data") if own else None))
    sources = [source for _, _, source in tensors if source is not None]
    allowance = limits.EXTERNAL_COPY_ALLOWANCE + sum(a.nbytes for a in arrays.values())
    if not copy_all and sum(length for _, _, length in sources) > allowance:
        return None
    try:
        directory = directory or tempfile.mkdtemp(prefix="onnx_struct-weights-")
    except OSError:
        return None
    written = WeightsFile(directory, [])
    try:
        with open(os.path.join(directory, FILE_NAME), "xb") as file:  # a new private directory
            offset = 0
            for where, tensor, source in tensors:
                size = arrays[tensor.name].nbytes if source is None else source[2]
                offset += -offset % (_ALIGN if size >= _ALIGN else _SMALL_ALIGN)
                file.seek(offset)
                if source is None:
                    _write_array(file, arrays[tensor.name])
                else:
                    _copy_range(file, source, f"{where}.external_data")
                written._originals.append((tensor, [(e.key, e.value) for e in tensor.external_data]))
                written.moved.add(where)
                _point(tensor, [("location", FILE_NAME), ("offset", str(offset)), ("length", str(size))])
                offset += size
        if model.ByteSize() > PROTOBUF_LIMIT:  # the new entries are longer than the placeholders'
            raise OSError("the model with the weights file's references exceeds protobuf's limit")
    except BaseException as error:
        written.restore()
        written.remove()
        if isinstance(error, OSError):  # not written: the in-memory route
            return None
        raise
    return written


def is_placeholder(where: str, tensor: onnx.TensorProto, arrays: Mapping[str, np.ndarray]) -> bool:
    """One of the lowering's placeholders (main-graph initializers under fresh names); a tensor of
    the model's own that names the same location is a file of the model's directory."""
    location = next((e.value for e in tensor.external_data if e.key == "location"), "")
    return is_main_initializer(where) and tensor.name in arrays and location == IN_MEMORY_LOCATION


def _point(tensor: onnx.TensorProto, entries: list[tuple[str, str]]) -> None:
    del tensor.external_data[:]
    for key, value in entries:
        tensor.external_data.add(key=key, value=value)


def _write_array(file, array: np.ndarray) -> None:
    file.write(memoryview(np.ascontiguousarray(array)).cast("B"))


def _source(tensor: onnx.TensorProto, base_dir: str | os.PathLike, where: str) -> tuple[pathlib.Path, int, int]:
    """(file, offset, length) of a stock external tensor, checked under the model-directory rules
    (a tensor without ``length``: its type's size, as onnxruntime reads it)."""
    return tensor_range(tensor, base_dir, where)


def _copy_range(file, source: tuple[pathlib.Path, int, int], where: str) -> None:
    path, offset, length = source
    for start in range(0, length, _CHUNK):
        file.write(read_range(path, offset + start, min(_CHUNK, length - start), where))
