"""Where a wire-level problem is, as a proto path (``graph.node[3] ('n').attribute[0] ...``):
computed only for the one problem a scan reports, by reading the enclosing messages again."""

from __future__ import annotations

from onnx_struct.errors import ValidationError
from onnx_struct.schema.wire_format import LEN, fields


def problem(data: bytes, frames: list[tuple], number: int | None, reason: str) -> ValidationError:
    path = _path(data, frames)
    if number is None:
        return ValidationError(path, reason, code="wire_format")
    name = frames[-1][0].names[number]
    # field_number: the problem is one of the proposal's own fields (what install()'s hook asks)
    return ValidationError(f"{path}.{name}" if path else name, reason, code="wire_format", field_number=number)


def _path(data: bytes, frames: list[tuple]) -> str:
    """``graph.node[3] ('n').attribute[0] ('then_branch').g...`` for the innermost frame: indices
    are counted and names read by scanning the parents again, only for the one reported error."""
    steps = []
    for i in range(1, len(frames)):
        parent, (plan, start, end, number, _) = frames[i - 1][0], frames[i]
        name = parent.names[number]
        if parent.descriptor.fields_by_number[number].is_repeated:
            index = sum(_count(data, s, e, number, start) for s, e in _occurrences(data, frames, i - 1))
            label = _name_of(data, plan, start, end)
            name = f"{name}[{index}] ({label!r})" if label else f"{name}[{index}]"
        steps.append(name)
    return ".".join(steps)


def _occurrences(data: bytes, frames: list[tuple], i: int) -> list[tuple[int, int]]:
    """The byte ranges of the one message ``frames[i]`` is part of, up to its own: every earlier
    occurrence of a singular message field too, as protobuf merges them (repeated fields concatenate)."""
    plan, start, end, number, _ = frames[i]
    if i == 0 or frames[i - 1][0].descriptor.fields_by_number[number].is_repeated:
        return [(start, end)]
    ranges = []
    for outer_start, outer_end in _occurrences(data, frames, i - 1):
        for field, wire_type, value_start, value_end in fields(data, outer_start, outer_end):
            if field == number and wire_type == LEN and value_start <= start:
                ranges.append((value_start, value_end))
    return ranges


def _count(data: bytes, start: int, end: int, number: int, child_start: int) -> int:
    """How many ``number`` fields in ``data[start:end]`` start before ``child_start``."""
    index = 0
    for field, wire_type, value_start, _ in fields(data, start, end):
        if value_start >= child_start:
            return index
        index += field == number and wire_type == LEN
    return index


def _name_of(data: bytes, plan, start: int, end: int) -> str:
    name_field = plan.descriptor.fields_by_name.get("name")
    if name_field is None:
        return ""
    name = b""
    for field, wire_type, value_start, value_end in fields(data, start, end):
        if field == name_field.number and wire_type == LEN:
            name = data[value_start:value_end]  # the last one wins, as in a parse
    return name.decode("utf-8", "backslashreplace")
