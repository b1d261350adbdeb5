"""The proposal's fields of a stock ``onnx.ModelProto``, read without parsing the model whole.

Stock onnx keeps ``struct_types`` and ``struct_initializer`` as unknown fields; their bytes are
parsed as overlay messages in their place (so protobuf's nesting limit counts as in a whole
parse), and a struct value's inline payload is a memoryview, never parsed. Rule: whatever this
reader cannot vouch for makes it return None, and the caller parses the whole model, which raises
what it always raised.

Notes: docs/modules.md.
"""

from __future__ import annotations

import onnx
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer
from onnx_struct.schema import wire_format  # its field reader: protobuf exposes no byte offsets
from onnx_struct.schema.wire_format import len_header

_LEN = 2
_GRAPH = pb.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_TYPES = pb.ModelProto.DESCRIPTOR.fields_by_name["struct_types"].number
_VALUES = pb.GraphProto.DESCRIPTOR.fields_by_name["struct_initializer"].number
_RAW_DATA = pb.StructProto.DESCRIPTOR.fields_by_name["raw_data"].number
_RAW_DATA_TAG = _RAW_DATA << 3 | _LEN  # one byte: field 3
_EMPTY_RAW_DATA = bytes((_RAW_DATA_TAG, 0))

# Unknown fields hold the proposal's fields only while onnx does not know them (nor ``graph`` moves).
AVAILABLE = (
    _TYPES not in onnx.ModelProto.DESCRIPTOR.fields_by_number
    and _VALUES not in onnx.GraphProto.DESCRIPTOR.fields_by_number
    and onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number == _GRAPH
)


def _entries(message, number: int) -> list[bytes]:
    # A field number of the wrong wire type is an unknown field of the overlay too: not a part.
    return [f.data for f in UnknownFieldSet(message) if f.field_number == number and f.wire_type == _LEN]


def _frame(number: int, payload: bytes) -> bytes:
    """One length-delimited field (used on small bytes only: struct types and stripped values)."""
    return len_header(number, len(payload)) + payload


def read_struct_types(model: onnx.ModelProto):
    """``model.struct_types`` as a whole-model parse gives them, or None (parse the model instead)."""
    entries = _entries(model, _TYPES)
    try:
        return pb.ModelProto.FromString(b"".join(_frame(_TYPES, e) for e in entries)).struct_types
    except DecodeError:
        return None


class StructValues:
    """The main graph's struct values of a stock model: each value without its inline payload
    (``raw_data`` present but empty where the value has one) plus the payload as a memoryview."""

    def __init__(self, entries: list[bytes], stripped, payloads: list[memoryview | None]) -> None:
        self._entries = entries
        self.stripped = stripped  # the parsed values, ``raw_data`` emptied
        self.payloads = payloads  # None: the value has no inline payload
        self._full: dict[int, pb.StructProto] = {}
        self._all: list[pb.StructProto] | None = None

    def full(self, index: int) -> pb.StructProto:
        """The value with its payload, as a whole-model parse gives it (parsed once, on demand)."""
        value = self._full.get(index)
        if value is None:
            # Parsed alone: its stripped form parsed in place, so no nesting limit can differ.
            value = self._full[index] = pb.StructProto.FromString(self._entries[index])
        return value

    def all(self) -> list[pb.StructProto]:
        """Every value with its payload, in order (one list, built once)."""
        if self._all is None:
            self._all = [self.full(i) for i in range(len(self.stripped))]
        return self._all


def read_struct_values(model: onnx.ModelProto) -> StructValues | None:
    """The main graph's struct values, or None (parse the model instead)."""
    entries = _entries(model.graph, _VALUES)  # an absent graph has no unknown fields
    framed, payloads = [], []
    try:
        for entry in entries:
            stripped, payload = _strip_payload(entry)
            framed.append(_frame(_VALUES, stripped))
            payloads.append(payload)
        stripped_values = pb.ModelProto.FromString(_frame(_GRAPH, b"".join(framed))).graph.struct_initializer
    except (DecodeError, wire_format.Malformed):
        return None
    return StructValues(entries, stripped_values, payloads)


def _strip_payload(entry: bytes) -> tuple[bytes, memoryview | None]:
    """``entry`` (a serialized StructProto) with its top-level ``raw_data`` fields replaced by one
    empty ``raw_data`` (so presence is kept), and the last payload (the one protobuf keeps), or
    ``entry`` and None (see :func:`_payload_field`)."""
    found = _payload_field(entry)
    if found is None:
        return entry, None
    stripped, start, end = found
    return stripped, memoryview(entry)[start:end]


def _payload_field(entry) -> tuple[bytes, int, int] | None:
    """(``entry`` with its top-level ``raw_data`` fields replaced by one empty ``raw_data``, start
    and end in ``entry`` of the last payload), or None when it has no ``raw_data``.

    Only the top-level fields are stepped over (by their lengths); every byte but the payloads is
    left for protobuf to parse. A ``raw_data`` whose tag or length is not in its shortest form is
    left in place too (then None: protobuf reads every payload and nothing is stripped).
    """
    size = len(entry)
    payload_fields = []
    previous = 0  # where the field being read starts
    for number, wire_type, start, end in wire_format.fields(entry, 0, size):
        if end > size:
            raise wire_format.Malformed(size)
        if number == _RAW_DATA and wire_type == _LEN:
            header = entry[previous:start]
            if header[0] != _RAW_DATA_TAG or len(header) > 6 or (len(header) > 2 and header[-1] == 0):
                return None
            payload_fields.append((previous, start, end))
        previous = end
    if not payload_fields:
        return None
    pieces, kept = [], 0
    for field_start, _, field_end in payload_fields:
        pieces.append(entry[kept:field_start])
        kept = field_end
    pieces += [entry[kept:], _EMPTY_RAW_DATA]  # where it goes is immaterial: raw_data is in no oneof
    _, start, end = payload_fields[-1]
    return b"".join(pieces), start, end


def without_struct_values(data: bytes) -> bytes:
    """``data`` (a serialized ModelProto, stock or overlay) without its main graph's
    ``struct_initializer`` records: what stock views parse, so that neither they nor onnx's checker
    copy the inline payloads they would skip as unknown fields. ``data`` itself when it has none.

    Only the top-level fields of the model and of each ``graph`` occurrence are stepped over, by
    their lengths; every other byte is kept as it is, in its order (protobuf merges the
    occurrences of ``graph`` as before). Raises :class:`wire_format.Malformed` on bytes protobuf
    would not parse."""
    whole = memoryview(data)  # slices of it are joined once: no intermediate copies
    pieces: list = []
    kept = 0  # data[kept:] is not yet in pieces
    for field_start, start, end in _graph_occurrences(data):
        spans, dropped = _spans_without_values(data, start, end)
        if dropped:
            pieces += [whole[kept:field_start], len_header(_GRAPH, end - start - dropped)]
            pieces += [whole[a:b] for a, b in spans]
            kept = end
    if not pieces:
        return data
    pieces.append(whole[kept:])
    return b"".join(pieces)


def main_value_payloads(data: bytes) -> list[tuple[bytes, int, int] | None]:
    """Per struct value of the main graph, in the order a whole parse lists them: (its bytes with
    the payload stripped, as :func:`_payload_field` gives them, and where in ``data`` its inline
    payload starts and ends), or None for a value without a payload that can be stripped. Raises
    :class:`wire_format.Malformed` on bytes protobuf would not parse."""
    whole = memoryview(data)
    found: list[tuple[bytes, int, int] | None] = []
    for _, start, end in _graph_occurrences(data):
        for _, tag, value_start, value_end in _graph_fields(data, start, end):
            if tag != _VALUES_TAG:
                continue
            payload = _payload_field(whole[value_start:value_end])
            if payload is not None:
                stripped, payload_start, payload_end = payload
                payload = (stripped, value_start + payload_start, value_start + payload_end)
            found.append(payload)
    return found


def _graph_occurrences(data: bytes):
    """(field start, value start, value end) of each ``graph`` field of a serialized ModelProto."""
    size = len(data)
    previous = 0  # where the field being read starts
    for number, wire_type, start, end in wire_format.fields(data, 0, size):
        if end > size:
            raise wire_format.Malformed(size)
        if number == _GRAPH and wire_type == _LEN:
            yield previous, start, end
        previous = end


def _spans_without_values(data: bytes, start: int, end: int) -> tuple[list[tuple[int, int]], int]:
    """The byte ranges of a GraphProto's fields other than ``struct_initializer`` (adjacent fields
    in one range), and how many bytes the others take."""
    spans, dropped = [], 0
    kept_from = start
    for field_start, tag, _, after in _graph_fields(data, start, end):
        if tag == _VALUES_TAG:
            if field_start > kept_from:
                spans.append((kept_from, field_start))
            dropped += after - field_start
            kept_from = after
    if end > kept_from:
        spans.append((kept_from, end))
    return spans, dropped


_VALUES_TAG = _VALUES << 3 | _LEN


def _graph_fields(data: bytes, start: int, end: int):
    """(field start, tag, value start, field end) of each top-level field of a GraphProto in
    ``data[start:end]``; the value start is where a length-delimited field's bytes begin. One-byte
    tags and lengths are read inline (nodes, the bulk of a graph, have them)."""
    pos = start
    while pos < end:
        field_start = pos
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = wire_format.varint(data, pos, end)
        if tag & 7 == _LEN:
            length = data[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = wire_format.varint(data, pos, end)
            value = pos
            pos += length
        else:
            value = pos
            pos = wire_format.skip(data, pos, end, tag)
        if pos > end:
            raise wire_format.Malformed(end)
        yield field_start, tag, value, pos
