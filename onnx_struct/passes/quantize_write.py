"""Where quantize's result goes: OUT alone, or OUT plus OUT.data written while the weights are
encoded, so a result past protobuf's 2 GiB is never one message in memory.

:class:`QuantizeOutput` decides before the first weight is encoded, from the result's estimated
size (:data:`onnx_struct.limits.INLINE_RESULT_LIMIT`) or on request (``--external``). Streaming, each
struct value's payload is appended to the data file as soon as it is encoded and the value keeps
only its ``external_data``; the data of each large float initializer kept as it was is copied
from the input file in chunks, never held whole. Until :meth:`QuantizeOutput.finish` the data file
is a new temporary file in OUT's directory (:class:`onnx_struct.payload.external_write.DirectoryWriter`),
and the locations name it, so quantize's own checks and its report read the payloads under the
model-directory rules (``base_dir``); ``finish`` renames the locations to ``OUT.data``, writes the
skeleton as OUT and renames both files into place. Payloads sit at page-aligned offsets, as a
memory-mapping runtime prefers.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import onnx

from onnx_struct import limits
from onnx_struct.payload.external import check_location
from onnx_struct.payload.external_write import DirectoryWriter
from onnx_struct.schema.model import StructProto, from_onnx

__all__ = ["QuantizeOutput"]

ALIGN = 4096  # a page: onnxruntime maps external data at page-aligned offsets instead of copying it
COPY_CHUNK = 64 << 20  # bytes of a kept initializer copied per read
MOVED_TENSOR_BYTES = 1 << 16  # inline initializers of at least this many bytes move to the data file


class QuantizeOutput:
    """OUT (and OUT.data) for one quantize run; a context manager that removes what it wrote
    unless :meth:`finish` completed.

    Args:
        output: the model file to write (refused at once, a ValidationError, when it is a link or
            a directory, or OUT.data is).
        external: True: stream to OUT.data; False: one inline file; None (default): stream when
            the result's estimate reaches :data:`onnx_struct.limits.INLINE_RESULT_LIMIT`.
    """

    def __init__(self, output: str | os.PathLike, *, external: bool | None = None) -> None:
        self.output = pathlib.Path(output)
        self.location = f"{self.output.name}.data"
        self.external = external
        self.base_dir = self.output.absolute().parent
        self._writer = DirectoryWriter(self.base_dir)
        self._data = None
        self._temporary = ""
        self._offset = 0
        # A destination that cannot be written (a link, a directory) is refused before any work,
        # OUT.data first: a refusal after OUT's temporary file was created would leave it behind.
        self._writer.check(self.location, "OUT.data")
        if external:
            self._check_location()
        self._model = self._writer.open(self.output.name, "OUT", exclusive=True, model_location=False)

    def __enter__(self) -> QuantizeOutput:
        return self

    def __exit__(self, kind, error, trace) -> None:
        self._writer.discard()

    @property
    def streaming(self) -> bool:
        return self._data is not None

    def start(self, estimate: Callable[[], int]) -> bool:
        """Decide (unless told) from the result's size in bytes, ``estimate()``; True when streaming."""
        if self.external is None:
            self.external = estimate() >= limits.INLINE_RESULT_LIMIT
        if self.external and self._data is None:
            self._check_location()
            self._data = self._writer.open(self.location, "OUT.data", exclusive=True, model_location=False)
            self._temporary = self._writer.temporary(self.location).name
        return self.external

    def _check_location(self) -> None:
        """OUT.data's name is written into OUT as a location, read back under the model-location
        rules: a name those refuse (``a:b.onnx.data`` reads as a drive) would make a result
        nothing can load."""
        check_location(self.location, "OUT.data")

    def _append(self, chunks) -> tuple[int, int]:
        """Write ``chunks`` at the next aligned offset: (offset, length)."""
        padding = -self._offset % ALIGN
        self._data.write(b"\0" * padding)
        offset = self._offset + padding
        length = 0
        for chunk in chunks:
            self._data.write(chunk)
            length += len(chunk)
        self._data.flush()  # read back by quantize's checks before finish
        self._offset = offset + length
        return offset, length

    def _entries(self, offset: int, length: int) -> list[tuple[str, str]]:
        return [("location", self._temporary), ("offset", str(offset)), ("length", str(length))]

    def store_value(self, value: StructProto) -> StructProto:
        """A copy of ``value`` referencing its payload, appended to the data file (``value``'s own
        ``raw_data`` is cleared)."""
        payload = value.raw_data
        value.ClearField("raw_data")
        # A new message: a cleared bytes field's memory stays in its message's arena until that
        # message goes, so ``value`` (dropped by the caller) takes its payload with it.
        stored = StructProto()
        stored.CopyFrom(value)
        offset, length = self._append([payload])
        del payload
        for key, text in self._entries(offset, length):
            stored.external_data.add(key=key, value=text)
        return stored

    def store_tensor(self, tensor: onnx.TensorProto, source: str | os.PathLike, offset: int, length: int) -> None:
        """Point ``tensor`` (its data left in the file ``source`` at ``offset``) at a copy of those
        bytes in the data file, copied in chunks."""
        with open(source, "rb") as handle:
            handle.seek(offset)

            def chunks():
                left = length
                while left:
                    chunk = handle.read(min(left, COPY_CHUNK))
                    if not chunk:
                        raise OSError(f"{source}: {length} bytes expected at offset {offset} (the file changed?)")
                    left -= len(chunk)
                    yield chunk

            start, _ = self._append(chunks())
        self._point(tensor, start, length)

    def _point(self, tensor: onnx.TensorProto, offset: int, length: int) -> None:
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, text in self._entries(offset, length):
            tensor.external_data.add(key=key, value=text)

    def finish(self, model: onnx.ModelProto) -> int:
        """Write ``model`` as OUT (and the data file as OUT.data) and rename them into place;
        returns OUT's size in bytes."""
        if self.streaming:
            for tensor in model.graph.initializer:  # what is still inline and large (an in-memory input's)
                if tensor.HasField("raw_data") and len(tensor.raw_data) >= MOVED_TENSOR_BYTES:
                    offset, length = self._append([tensor.raw_data])
                    self._point(tensor, offset, length)
            data = _renamed(model, self._temporary, self.location)
        else:
            data = model.SerializeToString()
        self._model.write(data)
        self._writer.commit("OUT")
        return len(data)


def _renamed(model: onnx.ModelProto, temporary: str, location: str) -> bytes:
    """``model`` serialized with every external reference to ``temporary`` naming ``location``."""
    for tensor in model.graph.initializer:
        _rename(tensor.external_data, temporary, location)
    overlay = from_onnx(model)  # its struct values are references now: a small message
    for value in overlay.graph.struct_initializer:
        _rename(value.external_data, temporary, location)
    return overlay.SerializeToString()


def _rename(entries, temporary: str, location: str) -> None:
    for entry in entries:
        if entry.key == "location" and entry.value == temporary:
            entry.value = location
