"""Protobuf wire encoding written out by hand: the tests' independent oracle for bytes that
protobuf itself would never write (non-minimal varints, split or repeated fields, wrong wire types)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a minimal base-128 varint, low group first."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag, length, payload."""
    return tag(number, 2) + varint(len(payload)) + payload
