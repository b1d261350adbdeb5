"""A model file without the bytes of its large main-graph initializers, and where those bytes are.

A pass that rewrites a model weight by weight (quantize) need not hold every weight at once:
:func:`split_initializer_data` copies a serialized ``ModelProto`` field by field, leaving out the
``raw_data`` of each ``graph.initializer`` of at least ``threshold`` bytes, and returns where each
left-out run sits in the input, so that it can be read back one tensor at a time
(:func:`read_run`). Everything else, including every other tensor, is kept byte for byte; the
skeleton parses as the same model with those tensors' ``raw_data`` empty.
"""

from __future__ import annotations

import os

from onnx_struct.schema.model import length_delimited
from onnx_struct.schema.wire_format import LEN, Malformed, skip, varint

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_NAME, _TENSOR_RAW_DATA = 7, 5, 8, 9


def _copy(data, start: int, end: int, replace) -> bytes:
    """``data[start:end]``'s fields, a LEN field whose number ``replace`` maps to a function
    rewritten by it (value start, value end -> new value bytes, or None to drop the field)."""
    out = bytearray()
    pos = start
    while pos < end:
        tag_start = pos
        tag, pos = varint(data, pos, end)
        if tag & 7 == LEN:
            length, value = varint(data, pos, end)
            pos = value + length
            if pos > end:  # a length past its message: not protobuf
                raise Malformed(end)
            rewrite = replace.get(tag >> 3)
            if rewrite is not None:
                new = rewrite(value, pos)
                if new is not None:
                    out += length_delimited(tag >> 3, new)
                continue
        else:
            pos = skip(data, pos, end, tag)
        out += data[tag_start:pos]
    return bytes(out)


def split_initializer_data(data, threshold: int = 1 << 16) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """(the model without the left-out ``raw_data``, {initializer name: (offset, length)} in ``data``).

    ``data`` is a serialized ``ModelProto`` (bytes or a buffer). An initializer without a name, or
    one whose name an earlier one had, keeps its data (it could not be found again by name).
    Raises ``wire_format.Malformed`` for bytes that are not protobuf; the caller's parse of the
    whole file reports them.
    """
    runs: dict[str, tuple[int, int]] = {}

    def tensor(start: int, end: int) -> bytes:
        name, raw = None, None
        pos = start
        while pos < end:
            tag, pos = varint(data, pos, end)
            if tag & 7 == LEN:
                length, value = varint(data, pos, end)
                pos = value + length
                if pos > end:
                    raise Malformed(end)
                if tag >> 3 == _TENSOR_NAME:
                    name = bytes(data[value:pos]).decode("utf-8", "replace")
                elif tag >> 3 == _TENSOR_RAW_DATA:
                    raw = (value, length)
            else:
                pos = skip(data, pos, end, tag)
        if name is None or raw is None or raw[1] < threshold or name in runs:
            return bytes(data[start:end])
        runs[name] = raw
        return _copy(data, start, end, {_TENSOR_RAW_DATA: lambda s, e: None})

    def graph(start: int, end: int) -> bytes:
        return _copy(data, start, end, {_GRAPH_INITIALIZER: tensor})

    skeleton = _copy(data, 0, len(data), {_MODEL_GRAPH: graph})
    return skeleton, runs


def read_run(path: str | os.PathLike, offset: int, length: int) -> bytes:
    """``length`` bytes of the file at ``path`` from ``offset`` (one read; short is an error)."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        chunk = handle.read(length)
    if len(chunk) != length:
        raise OSError(f"{path}: {length} bytes expected at offset {offset}, {len(chunk)} read (the file changed?)")
    return chunk
