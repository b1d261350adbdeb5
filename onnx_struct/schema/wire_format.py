"""Protobuf's wire format, read by hand: varints, skipping a field's value, listing a message's
fields. The primitives of the wire scan (``wire.py``), of the error paths it reports
(``wire_paths.py``) and of the struct-part reader (``struct_parts.py``)."""

from __future__ import annotations

VARINT, I64, LEN, START_GROUP, END_GROUP, I32 = range(6)


class Malformed(Exception):
    """The bytes are not well-formed protobuf at ``pos``."""

    def __init__(self, pos: int) -> None:
        self.pos = pos


def varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise Malformed(pos)


def len_header(number: int, length: int) -> bytes:
    """The tag and length of a length-delimited field ``number`` of ``length`` bytes."""
    header = bytearray()
    for value in (number << 3 | LEN, length):
        while value >= 0x80:
            header.append(value & 0x7F | 0x80)
            value >>= 7
        header.append(value)
    return bytes(header)


def skip(data: bytes, pos: int, end: int, tag: int) -> int:
    """Past the value of a field with ``tag`` (groups, deprecated but valid, are skipped whole)."""
    depth = 0
    while True:
        wire_type = tag & 7
        if wire_type == VARINT:
            _, pos = varint(data, pos, end)
        elif wire_type == I64:
            pos += 8
        elif wire_type == I32:
            pos += 4
        elif wire_type == LEN:
            length, pos = varint(data, pos, end)
            pos += length
        elif wire_type == START_GROUP:
            depth += 1
        elif wire_type == END_GROUP:
            depth -= 1
            if depth < 0:
                raise Malformed(pos)
        else:
            raise Malformed(pos)
        if pos > end:
            raise Malformed(end)
        if depth == 0:
            return pos
        if pos >= end:
            raise Malformed(end)
        tag, pos = varint(data, pos, end)


def fields(data: bytes, start: int, end: int):
    """(field number, wire type, value start, value end) of the fields in ``data[start:end]``."""
    pos = start
    while pos < end:
        tag, pos = varint(data, pos, end)
        if tag & 7 == LEN:
            length, value = varint(data, pos, end)
            yield tag >> 3, LEN, value, value + length
            pos = value + length
        else:
            after = skip(data, pos, end, tag)
            yield tag >> 3, tag & 7, pos, after
            pos = after
