"""Strings that are not UTF-8, anywhere in a message: found at C speed, named by path.

Rule: every ``string`` field of a model is UTF-8, checked in one place. onnx.proto is proto2, whose
parsers hand other bytes to Python as ``bytes``, which code expecting ``str`` mishandles. A proto3
twin of the schemas (same messages, numbers and types) parses the same bytes, and upb validates
every string in it; only when the twin refuses does a walk look for the first such string, to
name its path (docs/security.md).
"""

from __future__ import annotations

import functools

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer
from onnx_struct.errors import ValidationError


def check_model_utf8(loaded, *, plain_values: bool = False) -> None:
    """:func:`check_utf8` for a :class:`~onnx_struct.schema.model.LoadedModel`, without a copy of
    its inline payloads: the twin parses the bytes stock views parse, which lack the main graph's
    struct value records in a large model (their payloads would be copied a third time: the
    session's peak memory, docs/benchmarks.md); those values' strings are read one by one.

    ``plain_values``: every main-graph struct value is known to hold only ``type``, ``raw_data``
    and a UTF-8 ``name`` (the checker's wire facts): no string of theirs is left to check, so the
    twin takes their records as bytes (no message per value) and none is read one by one."""
    data = loaded.stock_serialized
    if plain_values and data is not None and data is loaded.serialized:
        try:
            _main_graph_twin().FromString(data)
            return
        except DecodeError:
            pass  # a string elsewhere: the full check below names it
    check_utf8(loaded.proto, data=data)
    if data is loaded.serialized or plain_values:
        return
    for k, value in enumerate(loaded.proto.graph.struct_initializer):
        where = f"graph.struct_initializer[{k}] ({value.name!r})" if value.name else f"graph.struct_initializer[{k}]"
        for name in ("name", "doc_string"):
            if isinstance(getattr(value, name), bytes):
                raise _refusal(f"{where}.{name}")
        for i, entry in enumerate(value.external_data):
            check_utf8(entry, f"{where}.external_data[{i}]")
        if value.HasField("struct_type"):
            check_utf8(value.struct_type, f"{where}.struct_type")


def check_utf8(message, where: str = "", data: bytes | None = None) -> None:
    """Raise a ValidationError (code ``invalid_utf8``) naming the first string field of ``message``
    (an onnx or overlay message) that is not UTF-8. ``data``: its serialization, if at hand."""
    if data is None:
        data = message.SerializeToString()
    try:
        _twin(message.DESCRIPTOR.full_name).FromString(data)
        return
    except DecodeError:
        pass  # only UTF-8 can fail here: ``message`` itself was parsed from the same bytes
    found = _first_bytes_string(message)
    if found is None:  # the twin refused for another reason (never seen): protobuf's parse stands
        return
    raise _refusal(".".join(p for p in (where, found) if p))


def _refusal(path: str) -> ValidationError:
    return ValidationError(path, "a string that is not valid UTF-8 (protobuf's string type)", code="invalid_utf8")


def _first_bytes_string(message) -> str | None:
    """The path (below ``message``) of the first string field that holds bytes, depth first in field
    order; iterative, as a hostile model may be deeply nested. Bytes fields are never read."""
    stack = [("", message)]
    while stack:
        path, current = stack.pop()
        children = []
        for name, kind, repeated in _fields(current.DESCRIPTOR):
            prefix = f"{path}.{name}" if path else name
            if kind == "string":
                if repeated:
                    for i, item in enumerate(getattr(current, name)):
                        if isinstance(item, bytes):
                            return f"{prefix}[{i}]"
                elif isinstance(getattr(current, name), bytes):
                    return prefix
            elif repeated:
                for i, item in enumerate(getattr(current, name)):
                    label = getattr(item, "name", "") if "name" in item.DESCRIPTOR.fields_by_name else ""
                    children.append((f"{prefix}[{i}] ({label!r})" if label else f"{prefix}[{i}]", item))
            elif current.HasField(name):
                children.append((prefix, getattr(current, name)))
        stack.extend(reversed(children))
    return None


@functools.cache
def _fields(descriptor) -> tuple[tuple[str, str, bool], ...]:
    """(name, "string" or "message", repeated) of the fields a walk must read, in field order."""
    kinds = {FieldDescriptor.TYPE_STRING: "string", FieldDescriptor.TYPE_MESSAGE: "message"}
    return tuple(
        (f.name, kinds[f.type], f.is_repeated)
        for f in sorted(descriptor.fields, key=lambda f: f.number)
        if f.type in kinds
    )


@functools.cache
def _twin(full_name: str):
    """The proto3 twin class of the message type ``full_name`` (overlay or onnx)."""
    return message_factory.GetMessageClass(_twin_pool().FindMessageTypeByName(full_name))


@functools.cache
def _twin_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for file in _with_dependencies(pb.DESCRIPTOR):
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        proto.syntax = "proto3"
        proto.ClearField("options")
        _as_proto3(proto.message_type)
        pool.Add(proto)
    return pool


@functools.cache
def _main_graph_twin():
    """The twin of ModelProto whose main graph takes its struct value records as bytes (each
    copied, none parsed): the others' strings checked as the twin checks them."""
    pool = descriptor_pool.DescriptorPool()
    for file in _with_dependencies(pb.DESCRIPTOR):
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        proto.syntax = "proto3"
        proto.ClearField("options")
        _as_proto3(proto.message_type)
        if file is pb.DESCRIPTOR:
            graph = next(m for m in proto.message_type if m.name == pb.GraphProto.DESCRIPTOR.name)
            main = proto.message_type.add()
            main.CopyFrom(graph)
            main.name = _MAIN_GRAPH
            values = next(f for f in main.field if f.name == "struct_initializer")
            values.type = FieldDescriptor.TYPE_BYTES
            values.ClearField("type_name")
            model = next(m for m in proto.message_type if m.name == pb.ModelProto.DESCRIPTOR.name)
            next(f for f in model.field if f.name == "graph").type_name = f".{proto.package}.{_MAIN_GRAPH}"
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(pb.ModelProto.DESCRIPTOR.full_name))


_MAIN_GRAPH = "MainGraphProto"


def _with_dependencies(file, seen: set | None = None) -> list:
    seen = set() if seen is None else seen
    if file.name in seen:
        return []
    seen.add(file.name)
    files = [f for dependency in file.dependencies for f in _with_dependencies(dependency, seen)]
    return [*files, file]


def _as_proto3(messages) -> None:
    # What proto3 forbids, and nothing a parse depends on: required labels, defaults, extension
    # ranges, proto2 packing options (a proto3 parser accepts packed and unpacked alike).
    for message in messages:
        for field in message.field:
            if field.label == FieldDescriptor.LABEL_REQUIRED:
                field.label = FieldDescriptor.LABEL_OPTIONAL
            field.ClearField("default_value")
            field.ClearField("options")
        message.ClearField("extension_range")
        message.ClearField("options")
        _as_proto3(message.nested_type)
