"""Deterministic choices from fuzz bytes, and protobuf wire-format helpers for the generators.

``Draw`` turns the bytes libFuzzer mutates into choices: the same bytes always give the same
choices (so the same model), and exhausted input yields the smallest choice, so every input,
including the empty one, is a complete case. The wire helpers build and mutate serialized
messages below the level protobuf's Python API allows: two members of a oneof, a field with the
wrong wire type, a duplicated length-delimited field, non-UTF-8 strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

# A placeholder set in string fields; replaced on the wire by as many invalid UTF-8 bytes.
NON_UTF8 = "\x01NONUTF8\x01"


class Draw:
    """Choices consumed from the front of ``data``; zero bytes when it runs out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def int(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi], from as few bytes as the range needs."""
        span = hi - lo
        if span <= 0:
            return lo
        value, bits = 0, 0
        while (1 << bits) <= span:
            value = (value << 8) | self.byte()
            bits += 8
        return lo + value % (span + 1)

    def bool(self, percent_true: int = 50) -> bool:
        return self.byte() * 100 < percent_true * 256

    def pick(self, options: Sequence[T]) -> T:
        return options[self.int(0, len(options) - 1)]

    def bytes(self, max_len: int) -> bytes:
        n = min(self.int(0, max_len), len(self.data) - self.pos)
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def rest(self) -> bytes:
        out = self.data[self.pos :]
        self.pos = len(self.data)
        return out


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def length_delimited(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def fields(data: bytes) -> list[tuple[int, int, int]]:
    """(field number, start, end) of each top-level field of a well-formed message; stops at the
    first malformed byte."""
    out, pos = [], 0
    while pos < len(data):
        start = pos
        try:
            key, pos = _read_varint(data, pos)
            wire_type = key & 7
            if wire_type == 0:
                _, pos = _read_varint(data, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 2:
                size, pos = _read_varint(data, pos)
                pos += size
            elif wire_type == 5:
                pos += 4
            else:
                break
        except IndexError:
            break
        if pos > len(data):
            break
        out.append((key >> 3, start, pos))
    return out


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80 or shift > 63:
            return value, pos


def poison_utf8(data: bytes) -> bytes:
    """Every NON_UTF8 placeholder becomes invalid UTF-8 of the same length (lengths stay valid)."""
    marker = NON_UTF8.encode()
    return data.replace(marker, b"\xff\xfe" + b"\xc3" * (len(marker) - 2))


def mutate(data: bytes, draw: Draw, rounds: int) -> bytes:
    """Byte- and field-level mutations of a serialized message."""
    buf = bytearray(data)
    for _ in range(rounds):
        if not buf:
            break
        action = draw.int(0, 9)
        position = draw.int(0, len(buf) - 1)
        if action == 0:
            buf[position] ^= 1 << draw.int(0, 7)
        elif action == 1:
            buf[position] = draw.byte()
        elif action == 2:
            buf[position:position] = draw.bytes(8)
        elif action == 3:
            del buf[position : position + draw.int(1, 8)]
        elif action == 4:
            del buf[position:]
        else:  # duplicate (5-7) or drop (8-9) one top-level or second-level length-delimited field
            buf = bytearray(_edit_field(bytes(buf), draw, duplicate=action <= 7))
    return bytes(buf)


def _edit_field(data: bytes, draw: Draw, duplicate: bool) -> bytes:
    top = fields(data)
    if not top:
        return data
    number, start, end = draw.pick(top)
    if draw.bool(40):  # one level down (graph, declarations): rebuild the parent's length prefix
        header = data[start:end]
        key, body_start = _read_varint(header, 0)
        size = -1
        if key & 7 == 2:  # only a length-delimited field has a body (a varint's value is no length)
            size, body_start = _read_varint(header, body_start)
        body = header[body_start:]
        if len(body) == size and fields(body):
            inner = _edit_field(body, draw, duplicate)
            return data[:start] + length_delimited(number, inner) + data[end:]
    piece = data[start:end]
    return data[:end] + piece + data[end:] if duplicate else data[:start] + data[end:]
