"""All file access of onnx_struct goes through here: one resolver, one reader, one writer.

Rule (the model-directory rules): every external reference is resolved by :func:`resolve` to a
relative location, free of ``..``, inside the model's directory after symlinks, naming a regular
file that holds the range; tensors stored in a type must be inline. Reads refuse non-regular
files unopened, check the opened file again and copy the bytes, so a file that shrinks is a
ValidationError, never a SIGBUS. Writes are in :mod:`onnx_struct.payload.external_write`.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import re
import stat
from collections.abc import Iterator

import numpy as np
import onnx

from onnx_struct.errors import ModelFileNotFoundError, NotRegularFileError, ValidationError
from onnx_struct.layout import dtypes
from onnx_struct.layout.table import UINT64_MAX, element_label
from onnx_struct.limits import MAX_EXTERNAL_DIGITS
from onnx_struct.payload import buffer_pool
from onnx_struct.schema.model import install_model_file_reader
from onnx_struct.schema.walk import picked, walk_graphs

KNOWN_KEYS = ("location", "offset", "length", "checksum")
_DECIMAL = re.compile(r"[0-9]+")
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclasses.dataclass(frozen=True)
class ExternalRef:
    location: str
    offset: int
    length: int | None  # None: to the end of the file


# ---------------------------------------------------------------------- references
def parse_external_data(entries, path: str) -> ExternalRef:
    """Validate ``external_data`` entries (keys as in TensorProto) of a StructProto or tensor."""
    values: dict[str, tuple[str, str]] = {}
    for i, entry in enumerate(entries):
        where = f"{path}[{i}] ({entry.key!r})"
        if not isinstance(entry.key, str) or not isinstance(entry.value, str):
            # proto2 does not validate UTF-8 on parse: such strings arrive as bytes
            raise ValidationError(f"{path}[{i}]", "external_data entry is not valid UTF-8", code="invalid_utf8")
        if entry.key not in KNOWN_KEYS:
            raise ValidationError(
                where, f"unknown external_data key; expected one of {', '.join(KNOWN_KEYS)}", code="bad_external_data"
            )
        if entry.key in values:
            raise ValidationError(where, "duplicate external_data key", code="bad_external_data")
        values[entry.key] = (entry.value, where)
    location = values.get("location", ("", path))[0]
    if not location:
        raise ValidationError(path, "external_data has no location", code="bad_external_data")
    check_location(location, path)
    offset = _uint64(*values["offset"]) if "offset" in values else 0
    length = _uint64(*values["length"]) if "length" in values else None
    if length is not None and offset + length > UINT64_MAX:
        raise ValidationError(path, "offset + length overflows uint64", offset=offset, length=length, code="overflow")
    return ExternalRef(location, offset, length)


def _uint64(text: str, path: str) -> int:
    if len(text) > MAX_EXTERNAL_DIGITS:
        raise ValidationError(
            path,
            f"{text[:20]!r}... has {len(text)} characters; a uint64 has at most {MAX_EXTERNAL_DIGITS} digits",
            code="bad_external_data",
        )
    if not _DECIMAL.fullmatch(text):
        raise ValidationError(path, f"{text!r} is not a non-negative decimal integer", code="bad_external_data")
    value = int(text)
    if value > UINT64_MAX:
        raise ValidationError(path, f"{text} overflows uint64", code="overflow")
    return value


def check_location(location: str, path: str) -> None:
    """Reject absolute locations and ``..`` components (syntax only, no file system access)."""
    if "\0" in location:  # no file system accepts it; os calls would raise ValueError
        raise ValidationError(path, f"location {location!r} contains a NUL character", code="bad_location")
    pure = pathlib.PurePosixPath(location.replace("\\", "/"))
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", location) or location.startswith(("/", "\\")):
        raise ValidationError(
            path, f"location {location!r} is absolute; it must be relative to the model", code="bad_location"
        )
    if ".." in pure.parts:
        raise ValidationError(path, f"location {location!r} contains '..'", code="bad_location")
    # pathlib drops a trailing separator or '.', the OS does not: 'x/' and 'x/.' name a directory.
    if location.endswith(("/", "\\")) or re.search(r"(^|[/\\])\.$", location):
        raise ValidationError(path, f"location {location!r} names a directory, not a file", code="bad_location")


def resolve(ref: ExternalRef, base_dir: os.PathLike | str, path: str) -> tuple[pathlib.Path, int]:
    """The file of ``ref`` inside ``base_dir`` (symlinks resolved) and the referenced length,
    checked to be inside a regular file. Only ``stat`` is called: no byte is read, except to
    verify an admitted link. A model file reached through a symlink also admits files in the
    directory it resolves into (:class:`~onnx_struct.schema.model.ModelDirectory`).

    Links (docs/security.md, "Links"): a location that resolves outside the model directory, or
    a file with more than one hard link, is refused unless the model records that location's
    identity (:mod:`onnx_struct.payload.file_identity`: ``from-gguf --reference`` records the
    file the user named, a Hugging Face cache link into ``blobs/`` included) and the file the
    link reaches now is that file (size and sampled SHA-256)."""
    root = pathlib.Path(base_dir).resolve()
    roots = [root, *filter(None, [getattr(base_dir, "resolved_file_directory", None)])]
    try:
        target = (root / ref.location).resolve()
    except (OSError, RuntimeError) as error:  # Python 3.11 raises RuntimeError on a symlink loop
        raise ValidationError(
            path, f"external location {ref.location!r} cannot be resolved: {error}", code="file_unreadable"
        ) from None
    admitted = False
    if not any(target.is_relative_to(allowed) for allowed in roots):
        admitted = _admits_link(ref.location, base_dir, target, path)
        if not admitted:
            raise ValidationError(
                path,
                f"location {ref.location!r} resolves outside the model directory (a link the model records no "
                "identity of)",
                code="file_outside_model_dir",
            )
    try:
        info = target.stat()
    except OSError as error:
        raise ValidationError(
            path, f"external file {ref.location!r} cannot be opened: {error.strerror}", code="file_unreadable"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise ValidationError(
            path,
            f"external location {ref.location!r} is {_kind(info.st_mode)}, not a regular file",
            code="not_regular_file",
        )
    if info.st_nlink > 1 and not (admitted or _admits_link(ref.location, base_dir, target, path)):
        _refuse_hard_links(info, f"external file {ref.location!r}", path)
    return target, _range_length(ref, info.st_size, path)


def _no_link_admitted(location: str, base_dir, target: pathlib.Path, path: str) -> bool:
    return False


# (location, base_dir, resolved file, path) -> whether the model records the location's identity
# and the file is that file (raising file_changed when it is not): installed by file_identity.
_admits_link = _no_link_admitted


def _no_file_identified(info: os.stat_result) -> bool:
    return False


# (stat of an opened file) -> whether it is a file whose recorded identity was verified
_is_identified_file = _no_file_identified


def install_link_admission(admits, identified) -> None:
    """Install file_identity's checks: ``admits(location, base_dir, target, path)`` (a link the
    model identifies, verified) and ``identified(stat_result)`` (a file verified so)."""
    global _admits_link, _is_identified_file  # noqa: PLW0603 - hooks, installed once at import
    _admits_link, _is_identified_file = admits, identified


def _refuse_hard_links(info: os.stat_result, what: str, path: str) -> None:
    """A file a model names must have one link, as onnx requires of external data: a second hard
    link can make a file from outside the model directory look like one inside, which no path
    rule sees (unless the model records the file's identity: :func:`resolve`'s links rule)."""
    if info.st_nlink > 1:
        raise ValidationError(
            path,
            f"{what} has {info.st_nlink} hard links; refused, as onnx does (one may name a file outside "
            "the model directory; the model records no identity of it)",
            code="hard_link",
        )


def _range_length(ref: ExternalRef, size: int, path: str) -> int:
    if ref.offset > size:
        raise ValidationError(
            path, f"offset {ref.offset} is past the end of {ref.location!r} ({size} bytes)", offset=ref.offset,
            file_size=size, code="file_too_short")  # fmt: skip
    length = size - ref.offset if ref.length is None else ref.length
    if ref.offset + length > size:
        raise ValidationError(
            path,
            f"{ref.location!r} holds {size} bytes, fewer than offset {ref.offset} + length {length}",
            bytes_needed=ref.offset + length,
            file_size=size,
            code="file_too_short",
        )
    return length


def external_payload_range(
    value, nbytes: int, base_dir: os.PathLike | str | None, where: str
) -> tuple[pathlib.Path, int] | None:
    """Check a struct value's external payload against the ``nbytes`` its type requires.

    Returns ``(file, offset)`` of the verified range, or None when ``base_dir`` is None (then only
    the entries and a declared ``length`` can be checked). Only ``stat`` touches the file.
    """
    if value.HasField("raw_data"):
        raise ValidationError(
            where, "payload is given both inline (raw_data) and as external_data", code="inline_and_external"
        )
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
                code="size_mismatch",
            )
    return None if file is None else (file, ref.offset)


# ---------------------------------------------------------------------- reads
def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),  # where links are not followed
    ):
        if test(mode):
            return name
    return "a special file"  # said as "X is a special file, not a regular file"


def _open_regular(file: str | os.PathLike, path: str, what: str, *, follow: bool) -> tuple[int, int]:
    """(fd, size) of a regular file opened read-only. ``stat`` first, so a FIFO or device is never
    opened; ``O_NONBLOCK`` in case it was swapped in since; ``fstat`` of what was opened."""
    try:
        info = os.stat(file, follow_symlinks=follow)
        if not stat.S_ISREG(info.st_mode):
            # a file the caller named (path "") is an I/O error of the caller's; one a model names is content
            refused = NotRegularFileError if not path else ValidationError
            raise refused(path, f"{what} is {_kind(info.st_mode)}, not a regular file; refused unopened")
        fd = os.open(file, _READ_FLAGS | (0 if follow else _NOFOLLOW))
    except NotRegularFileError:
        raise
    except OSError as error:
        raise ValidationError(path, f"{what} cannot be opened: {error.strerror}", code="file_unreadable") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValidationError(path, f"{what} is {_kind(info.st_mode)}, not a regular file", code="not_regular_file")
        # a file the model names (one the caller names may have links, as with onnx.load), unless
        # it is a file whose recorded identity was verified (the links rule of resolve)
        if path and info.st_nlink > 1 and not _is_identified_file(info):
            _refuse_hard_links(info, what, path)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def require_regular_file(file: str | os.PathLike, path: str = "") -> None:
    """Refuse (without opening it) a path named by the caller that is not a regular file, for
    readers we do not own (gguf-py)."""
    what = os.fspath(file)
    info = os.stat(file)  # a missing file is the caller's OSError, as with ``open``
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFileError(path, f"{what} is {_kind(info.st_mode)}, not a regular file; refused unopened")


def open_regular_input(file: str | os.PathLike, what: str):
    """A binary handle of an input file named by the caller that is not a model (a calibration
    ``.npz``): a non-regular file is a NotRegularFileError, refused unopened (``stat`` first, then
    ``O_NONBLOCK`` and ``fstat`` of what was opened; a regular file never blocks); a missing or
    unreadable one an OSError, as ``open`` raises it."""
    name = os.fspath(file)
    require_regular_file(file)  # NotRegularFileError naming the file; FileNotFoundError
    fd = os.open(file, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped in since the stat
            raise NotRegularFileError("", f"{what} {name} is {_kind(info.st_mode)}, not a regular file; refused")
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb", closefd=True)


def open_model_file(file: str | os.PathLike) -> tuple[int, int]:
    """(fd, size) of a model file named by the caller, opened read-only under the rules of
    :func:`read_model_file`; the caller closes the fd."""
    what = os.fspath(file)
    if not os.path.lexists(file):
        raise ModelFileNotFoundError("", f"{what}: No such file or directory", file=what)
    return _open_regular(file, "", what, follow=True)


def read_model_file(file: str | os.PathLike) -> bytes:
    """The bytes of a model file named by the caller (symlinks followed); non-regular files are
    refused unopened. A missing file is a FileNotFoundError, as with ``open``, and a
    ValidationError, as stock ``check_model`` raises (ModelFileNotFoundError)."""
    fd, size = open_model_file(file)
    with open(fd, "rb", closefd=True) as handle:
        return handle.read()  # to the end: a file that grew since fstat is read whole


def read_range(file: pathlib.Path, offset: int, length: int, path: str) -> np.ndarray:
    """A read-only uint8 copy of ``length`` bytes at ``offset`` of ``file`` (a path from
    :func:`resolve`). The opened file is checked again: one that changed since the check is a
    ValidationError, and a later truncation cannot crash the interpreter (SIGBUS) as it would a
    memory map. The price is one copy from the page cache (docs/security.md, "Files")."""
    # A recycled buffer when one is free (buffer_pool: returned only once no array can reach it),
    # which saves the page faults of fresh memory; the allocation is bounded by the checked stat.
    buffer = buffer_pool.empty((length,), np.uint8)
    if length:
        fd, size = _open_regular(file, path, f"external file {file.name!r}", follow=False)
        with open(fd, "rb", buffering=0, closefd=True) as handle:
            if offset + length > size:
                raise _changed(path, file, size, offset + length)
            handle.seek(offset)
            target, done = memoryview(buffer), 0
            while done < length:
                count = handle.readinto(target[done:])
                if not count:
                    raise _changed(path, file, offset + done, offset + length)
                done += count
    buffer.flags.writeable = False
    return buffer


def _changed(path: str, file: pathlib.Path, size: int, needed: int) -> ValidationError:
    return ValidationError(
        path,
        f"external file {file.name!r} changed after the check: {size} bytes, {needed} needed",
        bytes_needed=needed,
        code="file_changed",
        file_size=size,
    )


def tensor_range(tensor: onnx.TensorProto, base_dir: os.PathLike | str, path: str) -> tuple[pathlib.Path, int, int]:
    """(file, offset, length) of a stock tensor's external bytes, checked under the model-directory
    rules (``path`` names its ``external_data``). Without a ``length``, a tensor of a fixed-width
    type takes its type's size, as onnxruntime reads it (not onnx's "to the end of the file", which
    would inline the file's trailing bytes too); other types run to the end. A negative dimension
    is a ValidationError naming the tensor, as onnxruntime refuses such a tensor too."""
    if any(d < 0 for d in tensor.dims):
        raise ValidationError(
            path.removesuffix(".external_data") + ".dims",
            f"external tensor has a negative dimension {list(tensor.dims)}",
            code="bad_shape",
        )
    ref = parse_external_data(tensor.external_data, path)
    file, length = resolve(ref, base_dir, path)
    bits = dtypes.bit_width(tensor.data_type)
    if ref.length is None and bits is not None:
        needed = -(-math.prod(tensor.dims) * bits // 8)
        if needed > length:
            raise ValidationError(
                path,
                f"{ref.location!r} holds {length} bytes after offset {ref.offset}, fewer than the {needed} "
                f"bytes of the tensor's type",
                offset=ref.offset,
                length=needed,
                bytes_needed=ref.offset + needed,
                code="file_too_short",
            )
        length = needed
    return file, ref.offset, length


def read_tensor_data(tensor: onnx.TensorProto, base_dir: os.PathLike | str, path: str) -> bytes:
    """The external bytes of a stock tensor (:func:`tensor_range`), read under the model-directory rules."""
    return read_range(*tensor_range(tensor, base_dir, path), path).tobytes()


# ---------------------------------------------------------------------- tensors of a model
def graph_tensors(
    graph, path: str, *, initializers_only: bool = False, initializers=None, nodes=None
) -> Iterator[tuple[str, onnx.TensorProto]]:
    """Every TensorProto of a graph or function: initializers, sparse initializers' parts, node
    attributes, and those of subgraphs (overlay or stock messages; the field names agree), graph
    by graph in document order (:func:`onnx_struct.schema.walk.walk_graphs`).
    ``initializers_only``: the (dense) initializers of the graph and its subgraphs only.
    ``initializers``, ``nodes``: the indices of the only initializers and nodes of ``graph`` itself
    to read (e.g. the external ones, and those that may have attributes: the checker knows both)."""
    for where, current in walk_graphs(graph, path, by_index=True, nodes=nodes):
        main = current is graph  # the given indices are of ``graph`` itself, not its subgraphs
        for i, tensor in picked(getattr(current, "initializer", ()), initializers if main else None):
            yield element_label(f"{where}.initializer[{i}]", tensor.name), tensor
        if initializers_only:
            continue
        for i, sparse in enumerate(getattr(current, "sparse_initializer", ())):
            yield f"{where}.sparse_initializer[{i}].values", sparse.values
            yield f"{where}.sparse_initializer[{i}].indices", sparse.indices
        for j, node in picked(current.node, nodes if main else None):
            for k, attribute in enumerate(node.attribute):
                at = f"{where}.node[{j}].attribute[{k}]"
                if attribute.HasField("t"):
                    yield f"{at}.t", attribute.t
                for n, tensor in enumerate(attribute.tensors):
                    yield f"{at}.tensors[{n}]", tensor
                if attribute.HasField("sparse_tensor"):
                    yield f"{at}.sparse_tensor.values", attribute.sparse_tensor.values
                    yield f"{at}.sparse_tensor.indices", attribute.sparse_tensor.indices
                for n, sparse in enumerate(attribute.sparse_tensors):
                    yield f"{at}.sparse_tensors[{n}].values", sparse.values
                    yield f"{at}.sparse_tensors[{n}].indices", sparse.indices


def model_tensors(model, *, initializers=None, nodes=None) -> Iterator[tuple[str, onnx.TensorProto]]:
    """Every TensorProto of a stock or overlay model outside struct types: the main graph's and
    training graphs' (with subgraphs), and those of model-local functions (``initializers``,
    ``nodes``: of the main graph, see :func:`graph_tensors`)."""
    yield from graph_tensors(model.graph, "graph", initializers=initializers, nodes=nodes)
    for i, function in enumerate(model.functions):
        yield from graph_tensors(function, f"functions[{i}]")
    for i, training in enumerate(model.training_info):
        for name in ("initialization", "algorithm"):
            if training.HasField(name):
                yield from graph_tensors(getattr(training, name), f"training_info[{i}].{name}")


def is_main_initializer(where: str) -> bool:
    """Whether a :func:`model_tensors` path is one of the main graph's own initializers."""
    return where.startswith("graph.initializer[")


def is_external(tensor: onnx.TensorProto) -> bool:
    """Whether readers take the tensor's data from a file (as onnx's ``uses_external_data``)."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def check_tensor(tensor: onnx.TensorProto, base_dir: os.PathLike | str | None, path: str) -> None:
    """The model-directory rules for one external stock tensor (syntax only without a directory)."""
    where = f"{path}.external_data"
    ref = parse_external_data(tensor.external_data, where)
    if base_dir is not None:
        resolve(ref, base_dir, where)


def refuse_external_tensors(function: onnx.FunctionProto, path: str, leaves=()) -> None:
    """A decoder or encoder is part of a type, which has no directory: its tensors (Constant
    nodes, attributes, subgraphs) and the constant ``leaves`` it is fed must be inline, wherever
    the model is stored or decoded (no file is ever read for them)."""
    for leaf in leaves:
        if leaf.kind == "constant" and is_external(leaf.constant):
            raise ValidationError(
                leaf.source,
                "constants are stored in the type; external data is not allowed",
                code="external_not_allowed",
            )
    for where, tensor in graph_tensors(function, path):
        if is_external(tensor):
            raise ValidationError(
                f"{where}.external_data",
                "tensors of a decoder or encoder must be inline; external data is not allowed",
                code="external_not_allowed",
            )


def load_external_tensors(model: onnx.ModelProto, base_dir: os.PathLike | str) -> None:
    """Bring every external stock tensor of ``model`` inline, in place, through :func:`resolve`
    (onnx's ``load_external_data_for_model``, under onnx_struct's rules and without mmap)."""
    for where, tensor in model_tensors(model):
        if is_external(tensor):
            check_tensor(tensor, base_dir, where)
            tensor.raw_data = read_tensor_data(tensor, base_dir, f"{where}.external_data")
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT


install_model_file_reader(read_model_file)  # schema.model.load reads model files with it
