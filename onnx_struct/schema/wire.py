"""What a parse cannot show: a scan of a model's serialized bytes for ambiguous struct parts.

protobuf keeps the last member of a oneof and hides a known field of the wrong wire type among
the unknown fields. Rule: in every overlay message (``schemas/onnx_struct.proto``) a second member
of one oneof, or a known field with the wrong wire type, is a ValidationError with its proto path.
onnx's own messages are skipped by length, so the scan costs one step per overlay field whatever
the payload sizes; it is iterative, and main-graph runs of nodes and values are read with numpy
(schema/wire_runs.py).

Notes: docs/modules.md.
"""

from __future__ import annotations

import re

import onnx
from google.protobuf.descriptor import FieldDescriptor

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer
from onnx_struct.errors import ModelValueError, ValidationError
from onnx_struct.schema import wire_runs
from onnx_struct.schema.wire_format import I32, I64, LEN, START_GROUP, VARINT, Malformed, skip, varint
from onnx_struct.schema.wire_paths import problem

# Actions of fields that are neither overlay messages nor oneof members: skipped by their length.
_SKIP_LEN, _SKIP_SCALAR = object(), object()  # compared by identity in the hot loop

_WIRE_TYPES = {
    FieldDescriptor.TYPE_DOUBLE: I64,
    FieldDescriptor.TYPE_FIXED64: I64,
    FieldDescriptor.TYPE_SFIXED64: I64,
    FieldDescriptor.TYPE_FLOAT: I32,
    FieldDescriptor.TYPE_FIXED32: I32,
    FieldDescriptor.TYPE_SFIXED32: I32,
    FieldDescriptor.TYPE_STRING: LEN,
    FieldDescriptor.TYPE_BYTES: LEN,
    FieldDescriptor.TYPE_MESSAGE: LEN,
    FieldDescriptor.TYPE_GROUP: START_GROUP,
}  # every other type (ints, bool, enum) is a varint


class _Plan:
    """How to read one overlay message type: an action per valid tag, the field numbers whose
    wire type is checked, and a probe that proves a message holds nothing to check."""

    __slots__ = ("descriptor", "actions", "names", "checked", "probe", "probe_bytes")

    def __init__(self, descriptor) -> None:
        self.descriptor = descriptor
        # tag -> _SKIP_LEN, _SKIP_SCALAR or (child plan or None, oneof index or None, number, repeated)
        self.actions: dict = {}
        self.names = {f.number: f.name for f in descriptor.fields}
        self.checked = {f.number for f in descriptor.fields if f.number not in stock_numbers(descriptor)}
        self.probe = self.probe_bytes = None


def stock_numbers(descriptor) -> set[int]:
    """Field numbers onnx's own copy of an overlay message has (none for the proposal's messages):
    a stock field of the wrong wire type is dropped by stock onnx too, so only ours are checked."""
    names = []
    while descriptor is not None:
        names.append(descriptor.name)
        descriptor = descriptor.containing_type
    stock = onnx
    for name in reversed(names):
        stock = getattr(stock, name, None)
        if stock is None:
            return set()
    return set(stock.DESCRIPTOR.fields_by_number)


def _build_plans(root) -> _Plan:
    plans: dict[str, _Plan] = {}
    todo = [root]
    while todo:
        descriptor = todo.pop()
        if descriptor.full_name in plans:
            continue
        plan = plans[descriptor.full_name] = _Plan(descriptor)
        for field in descriptor.fields:
            wire_type = _WIRE_TYPES.get(field.type, VARINT)
            ours = field.message_type is not None and field.message_type.file is pb.DESCRIPTOR
            if ours:
                todo.append(field.message_type)
            oneof = field.containing_oneof.index if field.containing_oneof is not None else None
            if ours or oneof is not None:
                action = (field.message_type.full_name if ours else None, oneof, field.number, field.is_repeated)
            else:
                action = _SKIP_LEN if wire_type == LEN else _SKIP_SCALAR
            plan.actions[field.number << 3 | wire_type] = action
            if field.is_repeated and wire_type != LEN:  # repeated scalars may come packed
                plan.actions[field.number << 3 | LEN] = _SKIP_LEN
    for plan in plans.values():  # child names -> plans
        plan.actions = {
            t: (plans[a[0]] if a[0] else None, *a[1:]) if isinstance(a, tuple) else a for t, a in plan.actions.items()
        }
        plan.probe_bytes = _probe_bytes(plan)
        if plan.probe_bytes is not None:
            plan.probe = re.compile(b"[" + b"".join(re.escape(bytes([b])) for b in sorted(plan.probe_bytes)) + b"]")
    return plans[root.full_name]


def _probe_bytes(plan: _Plan) -> frozenset[int] | None:
    """The bytes that can start an interesting tag (a field to descend into, a oneof member, or a
    checked field of any wire type) when there are few such bytes (NodeProto: those of one tag,
    ``attribute``): the plan's ``probe`` searches them, and a message where it finds none is skipped
    whole, at C speed."""
    tags = {t for t, a in plan.actions.items() if isinstance(a, tuple)}
    tags |= {number << 3 | wire_type for number in plan.checked for wire_type in range(8)}
    # A tag below 0x80 may also come in a longer varint form (0xaa 0x00 for 0x2a), which protobuf
    # reads as the same tag: its first byte is the tag's with the continuation bit set.
    first = {t & 0x7F | 0x80 for t in tags} | {t for t in tags if t < 0x80}
    if not first or len(first) > 6:
        return None
    return frozenset(first)


_MODEL_PLAN = _build_plans(pb.ModelProto.DESCRIPTOR)
_GRAPH_PLAN = _MODEL_PLAN.actions[pb.ModelProto.DESCRIPTOR.fields_by_name["graph"].number << 3 | LEN][0]
_NODE_TAG = pb.GraphProto.DESCRIPTOR.fields_by_name["node"].number << 3 | LEN  # one byte
_NODE_PLAN = _GRAPH_PLAN.actions[_NODE_TAG][0]
_VALUE_NUMBER = pb.GraphProto.DESCRIPTOR.fields_by_name["struct_initializer"].number
_VALUE_PLAN = _GRAPH_PLAN.actions[_VALUE_NUMBER << 3 | LEN][0]
# The wire form of a plain struct value: GraphProto.struct_initializer = 17 (a two-byte tag), then
# StructProto.type = 1 (varint), raw_data = 3 and name = 5 (length-delimited), one-byte tags.
_VALUE_TAG = bytes((_VALUE_NUMBER << 3 | LEN | 0x80, _VALUE_NUMBER << 3 >> 7))
_TYPE_TAG, _RAW_DATA_TAG, _NAME_TAG = (
    pb.StructProto.DESCRIPTOR.fields_by_name[name].number << 3 | wire_type
    for name, wire_type in (("type", VARINT), ("raw_data", LEN), ("name", LEN))
)
_VALUE_TAG0 = _VALUE_TAG[0]
_FIELD_TAGS = bytes((_TYPE_TAG, _RAW_DATA_TAG, _NAME_TAG))
_NODE_PROBE = bytes(sorted(_NODE_PLAN.probe_bytes))
assert _NODE_PLAN.probe is not None and 16 <= _VALUE_NUMBER < 2048 and max(_TYPE_TAG, _RAW_DATA_TAG, _NAME_TAG) < 0x80


class Scan:
    """What one scan found: ``error``, the first problem (or None), and, when there is none, facts
    for the checker's fast paths about the main graph (the model's ``graph``, all occurrences):

    - per struct value, in parsed order: ``value_types``, ``value_payloads`` and ``value_names``
      hold its type, payload bytes and name (bytes) when its bytes are exactly ``type``,
      ``raw_data`` and ``name``, once each, in field order (as every protobuf library writes such a
      value): nothing else is in it, not even an unknown field, and nothing in it can be a
      problem. Its type is None for any other value (whose fields were scanned);
    - ``nodes``: the indices of the nodes that may have attributes (of ``node_count``); every
      other node holds no byte that can start an attribute field.
    """

    __slots__ = ("error", "value_types", "value_payloads", "value_names", "nodes", "node_count")

    def __init__(self, error: ValidationError | None) -> None:
        self.error = error
        self.value_types: list[int | None] = []
        self.value_payloads: list[int] = []
        self.value_names: list[bytes] = []
        self.nodes: list[int] | None = None if error else []
        self.node_count = 0


def scan_model(data: bytes, counts: tuple[int, int] | None = None) -> Scan:
    """The first wire-level problem of a serialized (overlay) ModelProto, or the main graph's facts.
    ``counts``: how many nodes and struct values the parse of ``data`` holds in its main graph, if
    known (they only decide how runs are read, never what is found)."""
    try:
        return _scan(data, counts)
    except Malformed as error:
        return Scan(
            ModelValueError("", f"the model is not well-formed protobuf at byte {error.pos}", code="not_parsable")
        )


def _scan(data: bytes, counts: tuple[int, int] | None) -> Scan:
    # The message being read is (plan, start, end, field number in its parent, state); its
    # ancestors are on ``stack``. ``state`` (created on first need) maps a oneof's index to the
    # first member seen, and ``~number`` to the state of the singular message field ``number``:
    # protobuf merges the occurrences of a singular message field, so they share one state.
    stack: list[tuple] = []
    plan, start, end, field, state = _MODEL_PLAN, 0, len(data), 0, None
    actions = plan.actions
    pos = 0
    found = Scan(None)
    types, payloads, names, nodes = found.value_types, found.value_payloads, found.value_names, found.nodes
    node_count = 0
    main = False  # reading the main graph: its node and value records come in long runs
    runs = wire_runs.Runs(data, _NODE_TAG, _NODE_PROBE, _VALUE_TAG, _FIELD_TAGS, counts)
    while True:
        if pos >= end:
            if pos > end:
                raise Malformed(end)
            if not stack:
                found.node_count = node_count
                return found
            plan, start, end, field, state = stack.pop()
            actions = plan.actions
            main = plan is _GRAPH_PLAN and len(stack) == 1
            continue
        if main:  # runs of records read at C speed; the record that ends a run is read below
            first = data[pos]
            if first == _NODE_TAG:
                after, count = runs.bare_nodes(pos, end)
                if count:
                    pos, node_count = after, node_count + count
                    continue
            elif first == _VALUE_TAG0:
                run = runs.plain_values(pos, end) or _plain_value(data, pos, end)
                if run is not None:
                    pos = run[0]
                    types += run[1]
                    payloads += run[2]
                    names += run[3]
                    continue
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        elif pos + 1 < end and data[pos + 1] < 0x80:  # fields 16-2047 (struct_initializer: 17)
            tag = (tag & 0x7F) | data[pos + 1] << 7
            pos += 2
        else:
            tag, pos = varint(data, pos, end)
        action = actions.get(tag)
        if action is _SKIP_LEN:  # the common case: a string, bytes or onnx message, skipped whole
            length = data[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1 + length
            else:
                length, pos = varint(data, pos, end)
                pos += length
            continue
        if action is None:  # an unknown field, or a known one with the wrong wire type
            number = tag >> 3
            if number in plan.checked:
                frames = [*stack, (plan, start, end, field, state)]
                return Scan(problem(data, frames, number, f"has wire type {tag & 7}, not the one its type requires"))
            pos = skip(data, pos, end, tag)
            continue
        if action is _SKIP_SCALAR:
            pos = skip(data, pos, end, tag)
            continue
        child, oneof, number, repeated = action
        if oneof is not None:
            if state is None:
                state = {}
            first = state.setdefault(oneof, number)
            if first != number:
                field_names = plan.names
                frames = [*stack, (plan, start, end, field, state)]
                return Scan(
                    problem(
                        data,
                        frames,
                        None,
                        f"oneof {plan.descriptor.oneofs[oneof].name!r} has two members on the wire "
                        f"({field_names[first]!r} and {field_names[number]!r}); protobuf would keep only the last",
                    )
                )
        if child is None:
            pos = skip(data, pos, end, tag)
            continue
        length = data[pos] if pos < end else 0x80
        if length < 0x80:
            pos += 1
        else:
            length, pos = varint(data, pos, end)
        if pos + length > end:
            raise Malformed(end)
        if main:
            if child is _NODE_PLAN:
                node_count += 1
            elif child is _VALUE_PLAN:
                types.append(None)
                payloads.append(0)
                names.append(b"")
        probe = child.probe
        if probe is not None and probe.search(data, pos, pos + length) is None:
            pos += length  # nothing in it to check (e.g. a node without attributes)
            continue
        if main and child is _NODE_PLAN:
            nodes.append(node_count - 1)  # it may have attributes
        if repeated:
            child_state = None
        else:
            if state is None:
                state = {}
            child_state = state.get(~number)
            if child_state is None:
                child_state = state[~number] = {}
        stack.append((plan, start, end, field, state))
        plan, start, end, field, state = child, pos, pos + length, number, child_state
        actions = plan.actions
        main = plan is _GRAPH_PLAN and len(stack) == 1


def _plain_value(data: bytes, pos: int, end: int) -> tuple[int, list[int], list[int], list[bytes]] | None:
    """The struct value record at ``pos`` if its bytes are exactly ``type``, ``raw_data`` and
    ``name``, once each, in this order (for one numpy does not read): (position after it, [type],
    [payload size], [name]), else None. One-byte varints are read inline (the common case)."""
    if pos + 8 >= end or data[pos + 1] != _VALUE_TAG[1]:
        return None
    try:
        length = data[pos + 2]
        body = pos + 3
        if length >= 0x80:
            length, body = varint(data, pos + 2, end)
        stop = body + length
        if stop > end or length < 6 or data[body] != _TYPE_TAG:
            return None
        type_index = data[body + 1]
        at = body + 2
        if type_index >= 0x80:
            type_index, at = varint(data, body + 1, stop)
        if at + 1 >= stop or data[at] != _RAW_DATA_TAG or type_index >= 1 << 31:
            return None
        payload = data[at + 1]
        at += 2
        if payload >= 0x80:
            payload, at = varint(data, at - 1, stop)
        at += payload
        if at + 1 >= stop or data[at] != _NAME_TAG:
            return None
        name_length = data[at + 1]
        at += 2
        if name_length >= 0x80:
            name_length, at = varint(data, at - 1, stop)
    except Malformed:  # left to the usual way, which reports it
        return None
    if at + name_length != stop:
        return None
    return stop, [type_index], [payload], [data[at:stop]]
