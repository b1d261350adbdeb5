"""Hand-assembled GGUF bytes for hostile files (independent of gguf-py and of the code under test).

Layout (little-endian): "GGUF", uint32 version, uint64 tensor_count, uint64 kv_count, the kv pairs
(string key, uint32 value type, value), the tensor infos (string name, uint32 n_dims,
uint64 dims[n_dims], uint32 ggml type, uint64 offset), padding to the alignment, tensor data.
A string is a uint64 length and its bytes; an array is a uint32 element type, a uint64 count and
the elements.
"""

from __future__ import annotations

import struct

UINT8, UINT32, STRING, ARRAY = 0, 4, 8, 9
F32, Q8_0 = 0, 8


def string(text: bytes | str) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: bytes | str, value_type: int, value: bytes) -> bytes:
    return string(key) + struct.pack("<I", value_type) + value


def array(element_type: int, count: int, elements: bytes = b"") -> bytes:
    return struct.pack("<IQ", element_type, count) + elements


def tensor_info(name: bytes | str, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)


def gguf(
    kvs: list[bytes] = (),
    tensors: list[bytes] = (),
    data: bytes = b"",
    *,
    version: int = 3,
    counts: tuple[int, int] | None = None,
    alignment: int = 32,
) -> bytes:
    """A GGUF file; ``counts`` overrides the (tensor_count, kv_count) the header states."""
    tensor_count, kv_count = counts if counts is not None else (len(tensors), len(kvs))
    head = b"GGUF" + struct.pack("<IQQ", version, tensor_count, kv_count) + b"".join(kvs) + b"".join(tensors)
    if data:
        head += b"\0" * (-len(head) % alignment)
    return head + data
