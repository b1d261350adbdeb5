"""A GGUF file's key-value metadata, read directly (gguf-py's reader builds numpy views per array
element: 20 s for a 150k-token vocabulary, where this takes a fraction of a second).

Every length and count is checked against the bytes left before it is used (so an array cannot
claim more elements than the file could hold), and arrays nest at most ``MAX_GGUF_ARRAY_DEPTH``
deep. Values come out as
``decode_metadata`` gives them: str, int, float, bool, lists (nested arrays flattened).
"""

from __future__ import annotations

import mmap
import os
import pathlib
import stat
import struct

from onnx_struct.errors import ValidationError
from onnx_struct.limits import MAX_GGUF_ARRAY_DEPTH

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path: str | os.PathLike) -> dict[str, object]:
    """Every key-value pair of the GGUF file at ``path``.

    Args:
        path: the file.

    Returns:
        key -> value.

    Raises:
        ValidationError: the file is not a well-formed GGUF file (the path names what), holds
            more values than ``MAX_GGUF_METADATA_ITEMS``, or a string that is not UTF-8.
        OSError: the file cannot be read or is not a regular file.
        ImportError: gguf-py (its table of tensor types) is not installed.
    """
    import numpy as np  # noqa: PLC0415 - numeric arrays in one conversion

    from onnx_struct.formats.gguf.gguf_py import load_gguf_py, quant_sizes  # noqa: PLC0415 - gguf-py on use
    from onnx_struct.formats.gguf.validate import check_gguf_bytes  # noqa: PLC0415

    # Opened without waiting on a FIFO (O_NONBLOCK) and refused unless a regular file; every count
    # and length is bounded by the file and MAX_GGUF_METADATA_ITEMS (check_gguf_bytes, the walk
    # from-gguf runs) before a value is built: a 10^9-element array would be 10^9 Python objects.
    fd = os.open(pathlib.Path(path), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"{path}: not a regular file")
        if status.st_size < 24:
            raise ValidationError("gguf.header", "not a GGUF file (shorter than its header)", code="not_gguf")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            check_gguf_bytes(data, quant_sizes(load_gguf_py()))
            view = memoryview(data)
            try:
                return _read(view, np)
            finally:
                view.release()


def _read(data: memoryview, np) -> dict[str, object]:
    if bytes(data[:4]) != b"GGUF":
        raise ValidationError("gguf.header", "not a GGUF file (it does not start with 'GGUF')", code="not_gguf")
    version, _, n_kv = struct.unpack_from("<IQQ", data, 4)
    if version not in (2, 3):
        raise ValidationError("gguf.header", f"GGUF version {version} (2 and 3 are read)", code="not_gguf")
    _need(data, 24, n_kv * 13, "gguf.header", f"{n_kv} key-value pairs")
    position = 24
    out: dict[str, object] = {}
    for index in range(n_kv):
        key, position = _text(data, position, f"gguf.kv[{index}]")
        where = f"gguf.kv[{index}] ({key!r})"
        _need(data, position, 4, where, "the value type")
        (value_type,) = struct.unpack_from("<I", data, position)
        value, position = _value(data, position + 4, value_type, np, where, 0)
        out[key] = value
    return out


def _need(data: memoryview, position: int, n: int, where: str, what: str) -> None:
    if position + n > len(data):
        raise ValidationError(
            where, f"{what} needs {n} bytes at offset {position}, past the file's end", code="file_too_short"
        )


def _text(data: memoryview, position: int, where: str) -> tuple[str, int]:
    _need(data, position, 8, where, "a string's length")
    (length,) = struct.unpack_from("<Q", data, position)
    position += 8
    _need(data, position, length, where, "a string")
    try:
        return str(data[position : position + length], "utf-8"), position + length
    except UnicodeDecodeError as error:
        raise ValidationError(where, f"a string is not valid UTF-8: {error}", code="invalid_utf8") from None


def _value(data: memoryview, position: int, value_type: int, np, where: str, depth: int) -> tuple[object, int]:
    if value_type == _STRING:
        return _text(data, position, where)
    if value_type in _SCALARS:
        fmt = _SCALARS[value_type]
        _need(data, position, struct.calcsize(fmt), where, "a value")
        (value,) = struct.unpack_from(fmt, data, position)
        return value, position + struct.calcsize(fmt)
    if value_type != _ARRAY:
        raise ValidationError(where, f"unknown GGUF value type {value_type}", code="unknown_gguf_type")
    if depth >= MAX_GGUF_ARRAY_DEPTH:
        raise ValidationError(where, f"arrays nested more than {MAX_GGUF_ARRAY_DEPTH} deep", code="limit_exceeded")
    _need(data, position, 12, where, "an array's type and length")
    element_type, count = struct.unpack_from("<IQ", data, position)
    position += 12
    if element_type in _NUMPY:
        dtype = np.dtype(_NUMPY[element_type])
        _need(data, position, count * dtype.itemsize, where, f"{count} array elements")
        items = np.frombuffer(data, dtype, count, position)
        return items.tolist(), position + count * dtype.itemsize
    _need(data, position, count * 8, where, f"{count} array elements")  # each at least 8 bytes
    if element_type == _STRING:
        strings: list[object] = []
        for _ in range(count):
            value, position = _text(data, position, where)
            strings.append(value)
        return strings, position
    items: list[object] = []
    for _ in range(count):
        value, position = _value(data, position, element_type, np, where, depth + 1)
        if isinstance(value, list):
            items.extend(value)  # nested arrays flattened, as gguf-py reads them
        else:
            items.append(value)
    return items, position
