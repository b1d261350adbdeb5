"""What a model records of a file it references, and the check that the file is still that file.

Rule: a model that points into a file it did not write (``from-gguf --reference`` points every
struct value into the .gguf) records, in ``metadata_props[REFERENCED_FILES_KEY]``, each such file's
size and a SHA-256 of sampled bytes: the bytes before the first referenced range (a GGUF's header,
metadata and tensor table) and the first and last page of every referenced range. The check
(:func:`check_referenced_files`, run by ``check_model`` and every session) reads those samples
again, never the whole file: a file replaced by another of the same name (another quantization,
another model, a fine-tune of the same shape) is a ValidationError naming it, not wrong weights.
Only the files the model's external references still name are checked; a model without the
record is checked as before (sizes and ranges only).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping

from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import element_label
from onnx_struct.limits import MAX_IDENTITY_SAMPLE_BYTES, MAX_IDENTITY_SAMPLES
from onnx_struct.payload import external

REFERENCED_FILES_KEY = "onnx_struct.referenced_files"
PAGE = 4096  # bytes sampled at each end of a referenced range
# The bytes before the first range sampled at most (a GGUF header with a 256k-token vocabulary is ~6 MiB).
HEADER_SAMPLE_BYTES = 32 << 20
_VERIFIED_ENTRIES = 64
_verified: dict[tuple[int, ...], FileIdentity] = {}  # (dev, inode, size, mtime, ctime) -> the identity it matched


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """A referenced file as a model records it: its location, size and the SHA-256 of its sampled pieces."""

    location: str
    size: int
    sampled: tuple[tuple[int, int], ...]  # (offset, length), sorted, disjoint
    sha256: str

    def to_json(self) -> dict:
        """The record's JSON object (``metadata_props``, see :func:`record`)."""
        return {"location": self.location, "size": self.size, "sampled": [list(r) for r in self.sampled],
                "sha256": self.sha256}  # fmt: skip


def sampled_ranges(ranges: Iterable[tuple[int, int]], size: int) -> tuple[tuple[int, int], ...]:
    """The (offset, length) pieces of a file of ``size`` bytes that identify it, given the
    (offset, length) ranges a model references: what precedes the first range (up to
    :data:`HEADER_SAMPLE_BYTES`) and the first and last :data:`PAGE` of each range (less when
    there are so many ranges that the whole would pass limits.MAX_IDENTITY_SAMPLE_BYTES), merged."""
    ranges = sorted((o, n) for o, n in ranges if n > 0)
    first = ranges[0][0] if ranges else size
    pieces = [(0, min(first, HEADER_SAMPLE_BYTES, size))]
    # Within the check's budget: many ranges are sampled by less than a page at each end.
    budget = MAX_IDENTITY_SAMPLE_BYTES - pieces[0][1]
    page = max(1, min(PAGE, budget // max(1, 2 * len(ranges))))
    for offset, length in ranges:
        end = min(page, length)
        pieces += [(offset, end), (offset + length - end, end)]
    merged: list[list[int]] = []
    for offset, length in sorted(p for p in pieces if p[1] > 0):
        if merged and offset <= merged[-1][0] + merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], offset + length - merged[-1][0])
        else:
            merged.append([offset, length])
    return tuple((o, n) for o, n in merged)


def _digest(fd: int, sampled: Iterable[tuple[int, int]]) -> str | None:
    """SHA-256 of the sampled pieces read from ``fd``; None when the file is too short for one."""
    hasher = hashlib.sha256()
    for offset, length in sampled:
        done = 0
        while done < length:
            chunk = os.pread(fd, min(length - done, 1 << 20), offset + done)
            if not chunk:
                return None
            hasher.update(chunk)
            done += len(chunk)
    return hasher.hexdigest()


def identity_of_open_file(fd: int, location: str, ranges: Iterable[tuple[int, int]]) -> FileIdentity:
    """The identity of the open file ``fd`` (a model will name it ``location``, and reference
    ``ranges`` of it), read from the file itself."""
    size = os.fstat(fd).st_size
    sampled = sampled_ranges(ranges, size)
    digest = _digest(fd, sampled)
    if digest is None:
        raise ValidationError(location, "the file changed while it was read", code="file_changed")
    return FileIdentity(location, size, sampled, digest)


def record(metadata_props, identities: Iterable[FileIdentity]) -> None:
    """Add (or replace) the record of ``identities`` in a model's ``metadata_props``."""
    for k in reversed(range(len(metadata_props))):
        if metadata_props[k].key == REFERENCED_FILES_KEY:
            del metadata_props[k]
    text = json.dumps([identity.to_json() for identity in identities], separators=(",", ":"))
    metadata_props.add(key=REFERENCED_FILES_KEY, value=text)


def recorded(metadata_props) -> list[tuple[FileIdentity, str]] | None:
    """The identities a model records, each with its path; None when it records none. A record
    that is not what :func:`record` writes is a ValidationError naming the entry."""
    found = [(k, p.value) for k, p in enumerate(metadata_props) if p.key == REFERENCED_FILES_KEY]
    if not found:
        return None
    k, text = found[-1]
    where = f"metadata_props[{k}] ({REFERENCED_FILES_KEY!r})"
    if len(found) > 1:
        raise _bad_record(where, "the key appears more than once")
    return list(_parsed_record(text, where))


def _bad_record(where: str, why: str) -> ValidationError:
    return ValidationError(where, f"not a record of referenced files: {why}", code="bad_external_data")


@functools.lru_cache(maxsize=16)  # a model's values each resolve against the same record
def _parsed_record(text: str, where: str) -> tuple[tuple[FileIdentity, str], ...]:
    def bad(why: str) -> ValidationError:
        return _bad_record(where, why)

    try:
        entries = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise bad(f"not JSON ({error})") from None
    if not isinstance(entries, list):
        raise bad("not a JSON array")
    identities, samples, sampled_bytes = [], 0, 0
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"location", "size", "sampled", "sha256"}:
            raise bad(f"entry {i} is not an object of location, size, sampled, sha256")
        location, size, sampled, digest = entry["location"], entry["size"], entry["sampled"], entry["sha256"]
        if not isinstance(location, str) or not isinstance(digest, str) or not _is_count(size):
            raise bad(f"entry {i}: location and sha256 are strings, size a non-negative integer")
        external.check_location(location, at)
        if not isinstance(sampled, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(map(_is_count, r)) for r in sampled
        ):
            raise bad(f"entry {i}: sampled is a list of [offset, length] pairs")
        samples += len(sampled)
        sampled_bytes += sum(n for _, n in sampled)
        if samples > MAX_IDENTITY_SAMPLES or sampled_bytes > MAX_IDENTITY_SAMPLE_BYTES:
            raise ValidationError(
                at,
                f"the record samples {samples} ranges of {sampled_bytes} bytes so far, past "
                f"{MAX_IDENTITY_SAMPLES} ranges or {MAX_IDENTITY_SAMPLE_BYTES} bytes "
                "(limits.MAX_IDENTITY_SAMPLES, MAX_IDENTITY_SAMPLE_BYTES)",
                code="limit_exceeded",
            )
        identities.append((FileIdentity(location, size, tuple(map(tuple, sampled)), digest), at))
    return tuple(identities)


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def admit_recorded_links(metadata_props, base_dir) -> None:
    """Let ``base_dir`` (a model's :class:`~onnx_struct.schema.model.ModelDirectory`) admit links
    at the locations the model records the identity of: :func:`external.resolve` then follows
    such a link (a Hugging Face cache ``snapshots/<rev>/x.gguf -> ../../blobs/<sha>``, a hard
    link) once the file it reaches is verified to be the recorded one. A directory given as a plain
    path, or a model without the record, admits none."""
    identities = recorded(metadata_props)
    if identities and base_dir is not None and hasattr(base_dir, "__dict__"):
        base_dir.recorded_identities = {identity.location: identity for identity, _ in identities}


def _admits_link(location: str, base_dir, target, path: str) -> bool:
    identity = (getattr(base_dir, "recorded_identities", None) or {}).get(location)
    if identity is None:
        return False
    try:
        size = os.stat(target).st_size
    except OSError as error:
        raise ValidationError(
            path, f"external file {location!r} cannot be opened: {error.strerror}", code="file_unreadable"
        ) from None
    _verify(identity, target, size, path)
    return True


def _is_identified_file(info: os.stat_result) -> bool:
    return stat_key(info) in _verified


def stat_key(info: os.stat_result) -> tuple[int, ...]:
    """What identifies a file between two looks at it without reading it: device, inode, size,
    modification and change times (a write or a rename over it changes them)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def referenced_locations(values, tensors) -> dict[str, str]:
    """The external locations a model names -> the path of its first reference to each: struct
    ``values`` (StructProtos, in graph.struct_initializer order) and stock ``tensors`` ((path,
    TensorProto) as external.model_tensors gives them; those not external are skipped)."""
    referenced: dict[str, str] = {}
    for k, value in enumerate(values):
        if len(value.external_data):
            where = f"{element_label(f'graph.struct_initializer[{k}]', value.name)}.external_data"
            referenced.setdefault(external.parse_external_data(value.external_data, where).location, where)
    for where, tensor in tensors:
        if external.is_external(tensor):
            at = f"{where}.external_data"
            referenced.setdefault(external.parse_external_data(tensor.external_data, at).location, at)
    return referenced


def check_referenced_files(metadata_props, base_dir, referenced: Mapping[str, str]) -> None:
    """Raise a ValidationError unless every file the model records and still references (a
    location of ``referenced``, mapped to the path of a reference to it) is the recorded file:
    its size, and the SHA-256 of its sampled bytes. The path is the reference's; the message
    names the file. Nothing is checked without ``base_dir`` (a model in memory)."""
    identities = recorded(metadata_props)
    if not identities or base_dir is None:
        return
    admit_recorded_links(metadata_props, base_dir)
    for identity, _ in identities:
        where = referenced.get(identity.location)
        if where is None:  # no longer referenced (its payloads were inlined or moved): not the model's file
            continue
        ref = external.ExternalRef(identity.location, 0, None)
        file, size = external.resolve(ref, base_dir, where)
        _verify(identity, file, size, where)


def _verify(identity: FileIdentity, file, size: int, where: str) -> None:
    """Raise ``file_changed`` unless ``file`` (``size`` bytes) is the file ``identity`` records."""
    try:
        info = os.stat(file)
    except OSError:
        info = None
    # A file verified before, still the same inode, size and change times (a write or a
    # rename over it changes them): view and decode of many values read its samples once.
    seen = None if info is None else stat_key(info)
    if seen is not None and _verified.get(seen) == identity:
        return
    stale = f"external file {identity.location!r} is not the file this model was made from"
    hint = "; it was replaced since: restore it, or make the model again from the new file"
    if size != identity.size:
        raise ValidationError(
            where,
            f"{stale}: {size} bytes, {identity.size} recorded{hint}",
            code="file_changed",
            file_size=size,
        )
    fd = _open_identified(file, identity, where)
    try:
        digest = _digest(fd, identity.sampled)
    except OSError as error:
        raise ValidationError(
            where, f"external file {identity.location!r} cannot be read: {error.strerror}", code="file_unreadable"
        ) from None
    finally:
        os.close(fd)
    if digest != identity.sha256:
        raise ValidationError(
            where,
            f"{stale}: its header and the ends of its referenced ranges differ from those recorded{hint}",
            code="file_changed",
        )
    if seen is not None:
        if len(_verified) >= _VERIFIED_ENTRIES:
            _verified.pop(next(iter(_verified)))
        _verified[seen] = identity


def _open_identified(file, identity: FileIdentity, where: str) -> int:
    """The file opened to hash its samples: a regular file (hard links allowed: hashing it is how
    a linked file is told to be the recorded one; nothing else is read before it is)."""
    what = f"external file {identity.location!r}"
    try:
        info = os.stat(file, follow_symlinks=False)
    except OSError as error:
        raise ValidationError(where, f"{what} cannot be opened: {error.strerror}", code="file_unreadable") from None
    if info.st_nlink <= 1:
        fd, _ = external._open_regular(file, where, what, follow=False)
        return fd
    if not stat.S_ISREG(info.st_mode):
        raise ValidationError(where, f"{what} is not a regular file", code="not_regular_file")
    try:
        fd = os.open(file, external._READ_FLAGS | external._NOFOLLOW)
    except OSError as error:
        raise ValidationError(where, f"{what} cannot be opened: {error.strerror}", code="file_unreadable") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValidationError(where, f"{what} is not a regular file", code="not_regular_file")
    return fd


external.install_link_admission(_admits_link, _is_identified_file)
