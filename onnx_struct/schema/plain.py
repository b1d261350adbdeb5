"""Whether a serialized model holds a struct part: the one cheap test that sends a plain model to
stock onnx unchanged (docs/semantics.md, "Plain models").

The bytes are parsed at C speed as a *mask*: the overlay messages declaring only the fields on a
path to a struct part, each struct part a message that can never be initialized, so
``IsInitialized()`` reports any struct part. A proposal field of the wrong wire type counts as a
(broken) struct part in the model and its main graph, not elsewhere (docs/semantics.md); the
checker's wire scan (schema/wire.py) refuses it anywhere.

Notes: docs/modules.md.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer
from onnx_struct.schema.wire import stock_numbers
from onnx_struct.schema.wire_format import LEN, Malformed, len_header, skip, varint

_FIELD = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "onnx_struct_mask"


def _mask_class():
    """The mask of ``pb.ModelProto``: one message per overlay message type on a path to a struct
    part, declaring only those paths and the struct parts (as ``Mark``)."""
    file = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE, syntax="proto2")
    mark = file.message_type.add(name="Mark")
    # A Mark requires a Mark: no finite bytes make one initialized (the deepest lacks its inner
    # Mark, or the nesting exceeds protobuf's limit and the parse fails), whatever a writer puts
    # in a struct part, so a struct part cannot pass for initialized.
    mark.field.add(
        name="inner", number=1, label=_FIELD.LABEL_REQUIRED, type=_FIELD.TYPE_MESSAGE, type_name=f".{_PACKAGE}.Mark"
    )
    done: set[str] = set()
    todo = [pb.ModelProto.DESCRIPTOR]
    while todo:
        descriptor = todo.pop()
        if descriptor.full_name in done:
            continue
        done.add(descriptor.full_name)
        message = file.message_type.add(name=_name(descriptor))
        stock = stock_numbers(descriptor)
        for field in descriptor.fields:
            if field.number not in stock:  # a struct part
                type_name = f".{_PACKAGE}.Mark"
            elif field.message_type is not None and field.message_type.file is pb.DESCRIPTOR:
                todo.append(field.message_type)  # an overlay message: a path to struct parts
                type_name = f".{_PACKAGE}.{_name(field.message_type)}"
            elif descriptor in _OUTER:  # any other field of a model or graph, by its wire type, never read
                label = _FIELD.LABEL_REPEATED if field.is_repeated else _FIELD.LABEL_OPTIONAL
                message.field.add(
                    name=field.name, number=field.number, label=label, type=_AS_READ.get(field.type, field.type)
                )
                continue
            else:
                continue  # onnx's own messages, other messages' scalars: unknown fields of the mask, never read
            # repeated: a singular field written twice is two marks, merged or not, all checked; the
            # main graph is singular (one message to read, not a list): its occurrences merge, their
            # marks and unknown fields kept, as onnx merges them
            main_graph = field.full_name == _MAIN_GRAPH
            message.field.add(
                name=field.name, number=field.number, type=_FIELD.TYPE_MESSAGE, type_name=type_name,
                label=_FIELD.LABEL_OPTIONAL if main_graph else _FIELD.LABEL_REPEATED,
            )  # fmt: skip
    # The main graph's own type: its struct values as bytes, so that a model holding them is told
    # by their count, without a message per value or IsInitialized's walk over every node.
    graph = next(m for m in file.message_type if m.name == _name(pb.GraphProto.DESCRIPTOR))
    main = file.message_type.add()
    main.CopyFrom(graph)
    main.name = _MAIN_GRAPH_TYPE
    values = next(f for f in main.field if f.number == _VALUES)
    values.type = _FIELD.TYPE_BYTES
    values.ClearField("type_name")
    model = next(m for m in file.message_type if m.name == _name(pb.ModelProto.DESCRIPTOR))
    next(f for f in model.field if f.number == _GRAPH).type_name = f".{_PACKAGE}.{_MAIN_GRAPH_TYPE}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{_name(pb.ModelProto.DESCRIPTOR)}"))


# A model and a graph declare every stock field too: their unknown fields, where a proposal field
# of the wrong wire type is, are then none in the common case, which is cheap to see. A message or
# a string is declared as bytes (a copy, not parsed or validated, as an unknown field is not), an
# enum as its integer (every value known).
_OUTER = (pb.ModelProto.DESCRIPTOR, pb.GraphProto.DESCRIPTOR)
_MAIN_GRAPH = pb.ModelProto.DESCRIPTOR.fields_by_name["graph"].full_name
_AS_READ = {
    _FIELD.TYPE_MESSAGE: _FIELD.TYPE_BYTES,
    _FIELD.TYPE_STRING: _FIELD.TYPE_BYTES,
    _FIELD.TYPE_ENUM: _FIELD.TYPE_INT32,
}


def _name(descriptor) -> str:
    return descriptor.full_name.replace(".", "_")


_MAIN_GRAPH_TYPE = "MainGraph"
_GRAPH = pb.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZERS = {pb.GraphProto.DESCRIPTOR.fields_by_name[name].number for name in ("initializer", "sparse_initializer")}
_TYPES = pb.ModelProto.DESCRIPTOR.fields_by_name["struct_types"].number
_VALUES = pb.GraphProto.DESCRIPTOR.fields_by_name["struct_initializer"].number
_Mask = _mask_class()


class FileBytes:
    """A file's bytes as the scan reads them (``len``, an index, a slice), read in windows by
    ``read_at(offset, count)`` (``os.pread``): a scan that skips a model's initializer records
    reads only their headers, not their data."""

    WINDOW = 1 << 16

    def __init__(self, read_at, size: int) -> None:
        self._read_at, self._size = read_at, size
        self._start, self._window = 0, b""

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop = max(key.start or 0, 0), min(self._size if key.stop is None else key.stop, self._size)
            if self._start <= start and stop <= self._start + len(self._window):
                return self._window[start - self._start : stop - self._start]
            return self._read_exactly(start, max(stop - start, 0))
        if not self._start <= key < self._start + len(self._window):
            if not 0 <= key < self._size:
                raise IndexError(key)
            self._start, self._window = key, self._read_exactly(key, min(self.WINDOW, self._size - key))
        return self._window[key - self._start]

    def _read_exactly(self, offset: int, count: int) -> bytes:
        pieces, done = [], 0
        while done < count:  # a read may return less (at most 2 GiB at once on Linux)
            piece = self._read_at(offset + done, count - done)
            if not piece:  # the file shrank while it was read
                raise Malformed(offset + done)
            pieces.append(piece)
            done += len(piece)
        return b"".join(pieces) if len(pieces) != 1 else pieces[0]


def has_struct_parts(data: bytes | FileBytes) -> bool | None:
    """True when the serialized ModelProto ``data`` (bytes, or a file's :class:`FileBytes`) holds
    a struct part anywhere (every graph,
    subgraph, function and training graph, every type), False when it holds none, None when
    protobuf cannot parse it (the caller's own parse then says what is wrong)."""
    try:
        data = without_initializers(data) if len(data) >= CUT_MIN_BYTES else data[:]
        mask = _Mask.FromString(data)
    except (DecodeError, Malformed):
        return None
    graph = mask.graph
    if graph.struct_initializer or not mask.IsInitialized():
        return True
    model, graph = UnknownFieldSet(mask), UnknownFieldSet(graph)
    if not (model or graph):  # the common case: no unknown field to list
        return False
    return any(field.field_number == _TYPES for field in model) or any(field.field_number == _VALUES for field in graph)


# Above this size a model is mostly initializer data, which protobuf's Python parse would copy: the
# mask is parsed from the bytes without the main graph's initializer records, found by one pass over
# the main graph's records (figures: docs/benchmarks.md, "Figures behind design choices").
CUT_MIN_BYTES = 1 << 20


def without_initializers(data) -> bytes:
    """``data`` without the main graph's (dense and sparse) initializer records, every other byte
    kept in order; a main graph's length prefix is rewritten to what is left of it."""
    pieces = []
    for number, wire_type, start, end in _records(data, 0, len(data)):
        if number != _GRAPH or wire_type != LEN:
            pieces.append(data[start:end])
            continue
        _, value = varint(data, start, end)
        _, value = varint(data, value, end)  # past the tag and the length
        graph = b"".join(data[a:b] for n, w, a, b in _records(data, value, end) if n not in _INITIALIZERS or w != LEN)
        pieces += [len_header(_GRAPH, len(graph)), graph]
    return b"".join(pieces)


def _records(data, start: int, end: int):
    """(number, wire type, record start, record end) of the fields in ``data[start:end]``, the
    record being the tag, the length and the value."""
    pos = start
    while pos < end:
        tag, value = varint(data, pos, end)
        after = skip(data, value, end, tag)
        yield tag >> 3, tag & 7, pos, after
        pos = after
