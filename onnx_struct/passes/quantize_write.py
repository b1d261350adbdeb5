"""Where quantize's result goes: OUT alone, or OUT plus OUT.data, with every payload written to a
file as soon as it is encoded, so neither the result nor its checks hold the payloads in memory.

:class:`QuantizeOutput` decides before the first weight is encoded whether the result is
external, from its estimated size (:data:`onnx_struct.limits.INLINE_RESULT_LIMIT`) or on request
(``--external``). Either way each struct value's payload is appended to a data file as soon as it
is encoded and the value keeps only its ``external_data``: quantize's checks and its report read
the payloads back from there (``base_dir``), a range at a time. An external result's data file is
a new temporary file in OUT's directory that becomes OUT.data (the data of each large float
initializer kept as it was is copied there from the input file in chunks, never held whole); an
inline result's is a scratch file that :meth:`QuantizeOutput.finish` reads back, one payload at
a time, into OUT: the skeleton, then one fragment per struct value (protobuf appends a repeated
field given again), and removes. Payloads sit at page-aligned offsets, as a memory-mapping
runtime prefers.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterable

import onnx

from onnx_struct import limits
from onnx_struct.payload.external import check_location
from onnx_struct.payload.external_write import DirectoryWriter
from onnx_struct.schema.model import StructProto, from_onnx, struct_value_fragment_head

__all__ = ["QuantizeOutput"]

ALIGN = 4096  # a page: onnxruntime maps external data at page-aligned offsets instead of copying it
COPY_CHUNK = 64 << 20  # bytes of a kept initializer or a payload copied per read
MOVED_TENSOR_BYTES = 1 << 16  # inline initializers of at least this many bytes move to the data file


class QuantizeOutput:
    """OUT (and OUT.data) for one quantize run; a context manager that removes what it wrote
    unless :meth:`finish` completed.

    Args:
        output: the model file to write (refused at once, a ValidationError, when it is a link or
            a directory, or OUT.data is).
        external: True: OUT and OUT.data; False: one inline file; None (default): external when
            the result's estimate reaches :data:`onnx_struct.limits.INLINE_RESULT_LIMIT`.
        check_data: called (None: nothing) when the result is made external by its estimate,
            before OUT.data is opened: it raises to refuse an existing OUT.data (another model's).
    """

    def __init__(
        self,
        output: str | os.PathLike,
        *,
        external: bool | None = None,
        check_data: Callable[[], None] | None = None,
    ) -> None:
        self.output = pathlib.Path(output)
        self.location = f"{self.output.name}.data"
        self.external = external
        self._check_data = check_data
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
        """Whether payloads are written to a data file in :attr:`base_dir` (after :meth:`start`)."""
        return self._data is not None

    def start(self, estimate: Callable[[], int]) -> bool:
        """Decide (unless told) from the result's size in bytes, ``estimate()``, and open the data
        file the payloads go to; True when the result is external."""
        if self.external is None:
            self.external = estimate() >= limits.INLINE_RESULT_LIMIT
            if self.external and self._check_data is not None:
                self._check_data()  # before any payload is written: nothing is replaced yet
        if self._data is None and self.external:
            self._check_location()
            self._data = self._writer.open(self.location, "OUT.data", exclusive=True, model_location=False)
            self._temporary = self._writer.temporary(self.location).name
        elif self._data is None:  # a name of our own: OUT's may be one the location rules refuse
            temporary, self._data = self._writer.scratch("onnx-struct-payloads")
            self._temporary = temporary.name
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

    def store_payload(self, value: StructProto, chunks: Iterable[bytes]) -> StructProto:
        """``value`` (without a payload) referencing ``chunks``, appended to the data file one at a
        time as they are produced."""
        offset, length = self._append(chunks)
        for key, text in self._entries(offset, length):
            value.external_data.add(key=key, value=text)
        return value

    def store_tensor(self, tensor: onnx.TensorProto, chunks: Iterable[bytes]) -> None:
        """Point ``tensor`` at its data, ``chunks`` (read from the input as they are written),
        appended to the data file."""
        start, length = self._append(chunks)
        self._point(tensor, start, length)

    def _point(self, tensor: onnx.TensorProto, offset: int, length: int) -> None:
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, text in self._entries(offset, length):
            tensor.external_data.add(key=key, value=text)

    def finish(self, model: onnx.ModelProto) -> int:
        """Write ``model`` as OUT (and the data file as OUT.data) and rename them into place;
        returns OUT's size in bytes. An inline result consumes ``model`` (it is cleared)."""
        if self.streaming and self.external:
            for tensor in model.graph.initializer:  # what is still inline and large (an in-memory input's)
                if tensor.HasField("raw_data") and len(tensor.raw_data) >= MOVED_TENSOR_BYTES:
                    offset, length = self._append([tensor.raw_data])
                    self._point(tensor, offset, length)
            data = _renamed(model, self._temporary, self.location)
            self._model.write(data)
            size = len(data)
        elif self.streaming:
            size = self._write_inline(model)
        else:
            data = model.SerializeToString()
            self._model.write(data)
            size = len(data)
        self._writer.commit("OUT")
        return size

    def _write_inline(self, model: onnx.ModelProto) -> int:
        """OUT from ``model``, whose payloads are in the scratch data file: its skeleton, then each
        payload read back into its value, one fragment at a time."""
        self._data.flush()
        overlay = from_onnx(model)  # its struct values are references: a copy of the skeleton
        model.Clear()  # (its kept float weights are not held twice more)
        values = overlay.graph.struct_initializer
        ours = [_copy(v) for v in values if _location(v.external_data) == self._temporary]
        for i in reversed(range(len(values))):  # the others (an input's own inline values) stay where they are
            if _location(values[i].external_data) == self._temporary:
                del values[i]
        skeleton = overlay.SerializeToString()
        del overlay
        self._model.write(skeleton)
        size = len(skeleton)
        del skeleton
        with open(self.base_dir / self._temporary, "rb") as data:
            for value in ours:
                entries = {entry.key: entry.value for entry in value.external_data}
                offset, length = int(entries["offset"]), int(entries["length"])
                head = struct_value_fragment_head(value, length)
                self._model.write(head)
                data.seek(offset)
                for chunk in _chunks(data, length, self._temporary):
                    self._model.write(chunk)
                size += len(head) + length
        return size


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


def _copy(value: StructProto) -> StructProto:
    copy = StructProto()
    copy.CopyFrom(value)
    return copy


def _location(entries) -> str | None:
    return next((entry.value for entry in entries if entry.key == "location"), None)


def _chunks(handle, length: int, name: str | os.PathLike):
    """``length`` bytes from ``handle``'s position, ``COPY_CHUNK`` at a time."""
    left = length
    while left:
        chunk = handle.read(min(left, COPY_CHUNK))
        if not chunk:
            raise OSError(f"{name}: {length} bytes expected, the file ends first (did it change?)")
        left -= len(chunk)
        yield chunk
