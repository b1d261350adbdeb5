"""A bounds check of a GGUF file, run before gguf-py's ``GGUFReader`` is let near it.

Rule: ``GGUFReader`` trusts every count it reads, so this module walks the same header
iteratively first and checks every count and length against the bytes that remain and the limits
in :mod:`onnx_struct.limits`; a hostile file is a :class:`ValidationError` after one read of its
header. Paths name the offending element: ``gguf.kv[3] ('general.name')``,
``gguf.tensors[5] ('blk.0.attn_q.weight')``.

Notes: docs/modules.md.
"""

from __future__ import annotations

import itertools
import mmap
import struct

from onnx_struct.errors import ValidationError
from onnx_struct.limits import MAX_GGUF_ARRAY_DEPTH, MAX_GGUF_DIMS, MAX_GGUF_METADATA_ITEMS, MAX_GGUF_TENSORS

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # the versions gguf-py reads (version 1 had 32-bit counts)
DEFAULT_ALIGNMENT = 32
HEADER = "gguf.header"

# GGUF value types (gguf.GGUFValueType) -> size in bytes of one value; STRING and ARRAY vary.
STRING, ARRAY = 8, 9
FIXED_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
TYPE_NAMES = {0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32", 7: "BOOL"}
TYPE_NAMES.update({8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64"})
# The fewest bytes one value of a type occupies: a string's length, an array's type and count.
MIN_SIZES = {**FIXED_SIZES, STRING: 8, ARRAY: 12}
MIN_TENSOR_INFO = 8 + 4 + 4 + 8  # empty name, n_dims, type, offset
MIN_KV = 8 + 4 + 1  # empty key, value type, one-byte value


def _unique_name(cursor, where: str, what: str, seen: set[str], duplicate: str) -> tuple[str, str]:
    """A key or tensor name read at ``where``, and the path naming it; a repeated one is refused."""
    name = cursor.text(where, what)
    where = f"{where} ({name!r})"
    if name in seen:
        raise ValidationError(where, duplicate, code="duplicate_name")
    return name, where


def check_gguf_bytes(data: bytes | bytearray | memoryview | mmap.mmap, quant_sizes: dict[int, tuple[int, int]]) -> None:
    """Raise a :class:`ValidationError` unless ``data`` is a little-endian GGUF file whose every
    count, length and tensor range fits in ``data`` and in the documented limits.

    ``quant_sizes`` maps each known GGML type number to ``(block_size, bytes_per_block)``
    (gguf-py's ``GGML_QUANT_SIZES``); a tensor of any other type is refused, as gguf-py would.
    """
    cursor = _Cursor(data)
    if cursor.size < 4 or bytes(data[:4]) != MAGIC:
        raise ValidationError(
            HEADER, "not a GGUF file (it does not start with the magic bytes 'GGUF')", code="not_gguf"
        )
    cursor.position = 4
    version = cursor.u32(HEADER, "the version")
    if version not in VERSIONS:
        if int.from_bytes(version.to_bytes(4, "little"), "big") in VERSIONS:
            raise ValidationError(
                HEADER,
                "big-endian GGUF files are not supported (payloads must be little-endian)",
                code="unsupported_gguf",
            )
        raise ValidationError(
            HEADER,
            f"GGUF version {version} is not supported (only {VERSIONS})",
            actual=version,
            code="unsupported_gguf",
        )
    tensor_count = cursor.u64(HEADER, "the tensor count")
    kv_count = cursor.u64(HEADER, "the key-value count")
    _check_count(cursor, HEADER, "tensor count", tensor_count, MIN_TENSOR_INFO, MAX_GGUF_TENSORS)
    _check_count(cursor, HEADER, "key-value count", kv_count, MIN_KV, MAX_GGUF_METADATA_ITEMS)

    budget = _Budget(MAX_GGUF_METADATA_ITEMS)
    alignment = DEFAULT_ALIGNMENT
    keys: set[str] = set()
    for i in range(kv_count):
        key, where = _unique_name(cursor, f"gguf.kv[{i}]", "its key", keys, "the key appears twice")
        if key.startswith("GGUF."):  # gguf-py lists the header as fields GGUF.version, GGUF.kv_count, ...
            raise ValidationError(where, "keys starting with 'GGUF.' are reserved for the header")
        keys.add(key)
        value_type = cursor.u32(where, "its value type")
        start = cursor.position
        _skip_value(cursor, value_type, budget, where)
        if key == "general.alignment":
            alignment = _alignment(data, start, value_type, where)

    names: set[str] = set()
    tensors = []
    for i in range(tensor_count):
        name, where = _unique_name(cursor, f"gguf.tensors[{i}]", "its name", names, "two tensors have this name")
        if not name:  # it would name a struct value, which must have a name
            raise ValidationError(where, "the tensor has no name", code="missing_name")
        names.add(name)
        n_dims = cursor.u32(where, "its number of dimensions")
        if not 1 <= n_dims <= MAX_GGUF_DIMS:  # ggml's tensors have 1 to 4 dimensions
            raise ValidationError(where, f"{n_dims} dimensions, not 1 to {MAX_GGUF_DIMS}", actual=n_dims)
        dims = [cursor.u64(where, f"dimension {d}") for d in range(n_dims)]
        ggml_type = cursor.u32(where, "its GGML type")
        offset = cursor.u64(where, "its data offset")
        tensors.append((where, dims, ggml_type, offset))

    data_start = -(-cursor.position // alignment) * alignment  # padding up to the alignment
    data_size = max(cursor.size - data_start, 0)
    ranges = sorted(
        (offset, _check_tensor(where, dims, ggml_type, offset, alignment, data_size, quant_sizes), where)
        for where, dims, ggml_type, offset in tensors
    )
    # Tensors share no byte: llama.cpp's reader even wants each at the running size of the ones
    # before it, and gguf-py would read overlapping ones as two weights of the same bytes.
    for (start, length, where), (next_start, _, next_where) in itertools.pairwise(ranges):
        if next_start < start + length:
            raise ValidationError(
                next_where,
                f"its data at offset {next_start} overlaps the {length} bytes of {where} at offset {start}",
                offset=next_start,
                code="overlapping_tensors",
            )


class _Cursor:
    """Reads little-endian integers and strings, refusing any read past the end."""

    def __init__(self, data) -> None:
        self.data = data
        self.size = len(data)
        self.position = 0

    @property
    def remaining(self) -> int:
        return self.size - self.position

    def need(self, n: int, where: str, what: str) -> None:
        if n > self.remaining:
            raise ValidationError(
                where,
                f"{what} needs {n} bytes at offset {self.position}, but the file ends {self.remaining} bytes later",
                file_size=self.size,
                code="file_too_short",
            )

    def u32(self, where: str, what: str) -> int:
        self.need(4, where, what)
        (value,) = struct.unpack_from("<I", self.data, self.position)
        self.position += 4
        return value

    def u64(self, where: str, what: str) -> int:
        self.need(8, where, what)
        (value,) = struct.unpack_from("<Q", self.data, self.position)
        self.position += 8
        return value

    def text(self, where: str, what: str) -> str:
        length = self.u64(where, f"{what}'s length")
        self.need(length, where, f"{what} ({length} bytes)")
        raw = bytes(self.data[self.position : self.position + length])
        self.position += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValidationError(where, f"{what} is not valid UTF-8: {error}", code="invalid_utf8") from None


class _Budget:
    """Metadata items (key-value pairs and array elements at any depth) left before the limit:
    gguf-py builds one numpy array per item (cost per item: docs/benchmarks.md)."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    def spend(self, n: int, where: str) -> None:
        self.left -= n
        if self.left < 0:
            raise ValidationError(
                where,
                f"the metadata holds more than {MAX_GGUF_METADATA_ITEMS} values (array elements included)",
                limit=MAX_GGUF_METADATA_ITEMS,
                code="limit_exceeded",
            )


def _check_count(cursor: _Cursor, where: str, what: str, count: int, min_size: int, limit: int) -> None:
    if count > limit:
        raise ValidationError(
            where, f"{what} {count} exceeds the limit {limit}", actual=count, limit=limit, code="limit_exceeded"
        )
    cursor.need(count * min_size, where, f"{what} {count} ({min_size} bytes each at least)")


def _skip_value(cursor: _Cursor, value_type: int, budget: _Budget, where: str) -> None:
    """Move past one value of ``value_type``, iteratively (an explicit stack, not recursion)."""
    budget.spend(1, where)
    # Each frame: [element type, elements left, depth, element type every inner array must have].
    stack = [[value_type, 1, 0, None]]
    while stack:
        frame = stack[-1]
        element_type, left, depth, _ = frame
        if left == 0:
            stack.pop()
            continue
        if element_type in FIXED_SIZES:
            size = left * FIXED_SIZES[element_type]
            cursor.need(size, where, f"{left} {TYPE_NAMES[element_type]} values")
            cursor.position += size
            stack.pop()
        elif element_type == STRING:
            for _ in range(left):
                cursor.text(where, "a string value")
            stack.pop()
        elif element_type == ARRAY:
            frame[1] -= 1
            inner_type = cursor.u32(where, "an array's element type")
            count = cursor.u64(where, "an array's length")
            if inner_type not in MIN_SIZES:
                raise ValidationError(
                    where,
                    f"unknown GGUF value type {inner_type} in an array",
                    actual=inner_type,
                    code="unknown_gguf_type",
                )
            if depth + 1 > MAX_GGUF_ARRAY_DEPTH:
                raise ValidationError(
                    where,
                    f"arrays nested more than {MAX_GGUF_ARRAY_DEPTH} deep",
                    limit=MAX_GGUF_ARRAY_DEPTH,
                    code="limit_exceeded",
                )
            if depth > 0:  # gguf-py records the element type of the first inner array only
                if frame[3] is None:
                    frame[3] = inner_type
                elif frame[3] != inner_type:
                    raise ValidationError(where, "the arrays of a nested array have different element types")
            cursor.need(count * MIN_SIZES[inner_type], where, f"an array of {count} {TYPE_NAMES[inner_type]} values")
            budget.spend(count, where)
            stack.append([inner_type, count, depth + 1, None])
        else:
            raise ValidationError(
                where, f"unknown GGUF value type {element_type}", actual=element_type, code="unknown_gguf_type"
            )


def _alignment(data, start: int, value_type: int, where: str) -> int:
    # gguf-py accepts general.alignment only as a non-zero power of two UINT32; so do we, and the
    # tensor data then starts at the same offset for both.
    if value_type != 4:
        raise ValidationError(where, f"general.alignment must be a UINT32, not {TYPE_NAMES[value_type]}")
    (alignment,) = struct.unpack_from("<I", data, start)
    if alignment == 0 or alignment & (alignment - 1):
        raise ValidationError(where, f"general.alignment {alignment} is not a power of two", actual=alignment)
    return alignment


def _check_tensor(where, dims, ggml_type, offset, alignment, data_size, quant_sizes) -> int:
    """The tensor's byte count, once its type, dimensions and range are checked."""
    if ggml_type not in quant_sizes:
        raise ValidationError(where, f"unknown GGML type {ggml_type}", actual=ggml_type, code="unknown_gguf_type")
    block_size, type_size = quant_sizes[ggml_type]
    if any(d == 0 for d in dims):
        # A zero dimension would leave the others unbounded by the bytes the tensor occupies.
        raise ValidationError(where, f"dimensions {dims} include a zero")
    if dims[0] % block_size:  # ne0, the row gguf-py splits into blocks
        raise ValidationError(where, f"its row of {dims[0]} elements is not a multiple of the block size {block_size}")
    n_elements = 1
    for d in dims:
        n_elements *= d  # exact: Python integers do not wrap like gguf-py's numpy product
    n_bytes = n_elements // block_size * type_size
    if offset % alignment:
        raise ValidationError(where, f"data offset {offset} is not a multiple of the alignment {alignment}")
    if offset + n_bytes > data_size:
        missing = offset + n_bytes - data_size  # a truncated download: how much of the file is missing
        raise ValidationError(
            where,
            f"its {n_bytes} bytes at data offset {offset} run past the end of the file: {missing} bytes "
            f"missing (the tensor data section holds {data_size} bytes); the file may be truncated",
            offset=offset,
            length=n_bytes,
            code="file_too_short",
        )
    return n_bytes
