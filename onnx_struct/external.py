"""External payloads: safe location resolution and uint64 offset/length parsing.

Nothing here reads payload bytes except :func:`map_payload`, which memory-maps exactly the
verified range read-only. A location must be relative, free of ``..``, and stay inside the model's
directory after symlinks are resolved.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import pathlib
import re

from onnx_struct.errors import ValidationError
from onnx_struct.layout import UINT64_MAX

KNOWN_KEYS = ("location", "offset", "length", "checksum")
_DECIMAL = re.compile(r"[0-9]+")


@dataclasses.dataclass(frozen=True)
class ExternalRef:
    location: str
    offset: int
    length: int | None  # None: to the end of the file


def parse_external_data(entries, path: str) -> ExternalRef:
    """Validate the ``external_data`` entries of a StructProto (keys as in TensorProto)."""
    values: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}[{i}] ({entry.key!r})"
        if not isinstance(entry.key, str) or not isinstance(entry.value, str):
            # proto2 does not validate UTF-8 on parse: such strings arrive as bytes
            raise ValidationError(where, "external_data entry is not valid UTF-8")
        if entry.key not in KNOWN_KEYS:
            raise ValidationError(where, f"unknown external_data key; expected one of {', '.join(KNOWN_KEYS)}")
        if entry.key in values:
            raise ValidationError(where, "duplicate external_data key")
        values[entry.key] = entry.value
    location = values.get("location", "")
    if not location:
        raise ValidationError(path, "external_data has no location")
    check_location(location, path)
    offset = _uint64(values.get("offset", "0"), f"{path} offset")
    length = _uint64(values["length"], f"{path} length") if "length" in values else None
    if length is not None and offset + length > UINT64_MAX:
        raise ValidationError(path, "offset + length overflows uint64", offset=offset, length=length)
    return ExternalRef(location, offset, length)


def _uint64(text: str, path: str) -> int:
    if not _DECIMAL.fullmatch(text):
        raise ValidationError(path, f"{text!r} is not a non-negative decimal integer")
    value = int(text)
    if value > UINT64_MAX:
        raise ValidationError(path, f"{text} overflows uint64")
    return value


def check_location(location: str, path: str) -> None:
    """Reject absolute locations and ``..`` components (syntax only, no file system access)."""
    if "\0" in location:  # no file system accepts it; os calls would raise ValueError
        raise ValidationError(path, f"location {location!r} contains a NUL character")
    pure = pathlib.PurePosixPath(location.replace("\\", "/"))
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", location) or location.startswith(("/", "\\")):
        raise ValidationError(path, f"location {location!r} is absolute; it must be relative to the model")
    if ".." in pure.parts:
        raise ValidationError(path, f"location {location!r} contains '..'")


def resolve(ref: ExternalRef, base_dir: os.PathLike | str, path: str) -> tuple[pathlib.Path, int]:
    """The file of ``ref`` inside ``base_dir`` (symlinks resolved) and its size, checked to hold
    the referenced range. Only ``stat`` is called: no payload byte is read."""
    root = pathlib.Path(base_dir).resolve()
    try:
        target = (root / ref.location).resolve()
    except (OSError, RuntimeError) as error:  # Python 3.11 raises RuntimeError on a symlink loop
        raise ValidationError(path, f"external location {ref.location!r} cannot be resolved: {error}") from None
    if not target.is_relative_to(root):
        raise ValidationError(path, f"location {ref.location!r} resolves outside the model directory")
    try:
        stat = target.stat()
    except OSError as error:
        raise ValidationError(path, f"external file {ref.location!r} cannot be opened: {error.strerror}") from None
    if not target.is_file():
        raise ValidationError(path, f"external location {ref.location!r} is not a regular file")
    if ref.offset > stat.st_size:
        raise ValidationError(
            path,
            f"offset {ref.offset} is past the end of {ref.location!r} ({stat.st_size} bytes)",
            offset=ref.offset,
            file_size=stat.st_size,
        )
    length = stat.st_size - ref.offset if ref.length is None else ref.length
    if ref.offset + length > stat.st_size:
        raise ValidationError(
            path,
            f"{ref.location!r} holds {stat.st_size} bytes, fewer than offset {ref.offset} + length {length}",
            bytes_needed=ref.offset + length,
            bytes_available=stat.st_size,
        )
    return target, length


def external_payload_range(
    value, nbytes: int, base_dir: os.PathLike | str | None, where: str
) -> tuple[pathlib.Path, int] | None:
    """Check a struct value's external payload against the ``nbytes`` its type requires.

    Returns ``(file, offset)`` of the verified range, or None when ``base_dir`` is None (then only
    the entries and a declared ``length`` can be checked). Only ``stat`` touches the file.
    """
    if value.HasField("raw_data"):
        raise ValidationError(where, "payload is given both inline (raw_data) and as external_data")
    ref = parse_external_data(value.external_data, f"{where}.external_data")
    lengths = [ref.length] if ref.length is not None else []
    file = None
    if base_dir is not None:
        file, length = resolve(ref, base_dir, f"{where}.external_data")
        lengths.append(length)
    for length in lengths:
        if length != nbytes:
            raise ValidationError(
                where,
                f"external payload length is {length} bytes; the type requires {nbytes}",
                expected=nbytes,
                actual=length,
            )
    return None if file is None else (file, ref.offset)


def map_payload(file: pathlib.Path, offset: int, length: int) -> memoryview:
    """A read-only memory map of exactly ``length`` bytes at ``offset`` (already verified)."""
    if length == 0:
        return memoryview(b"")
    granularity = mmap.ALLOCATIONGRANULARITY
    start = offset - offset % granularity
    with open(file, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), length + (offset - start), access=mmap.ACCESS_READ, offset=start)
    return memoryview(mapped)[offset - start : offset - start + length]
