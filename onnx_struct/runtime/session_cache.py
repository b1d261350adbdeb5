"""The session cache: what onnxruntime loads for a quantized session, kept on disk.

Rule: ``InferenceSession(path, cache_dir=D)`` (and ``Generator``, ``generate``, the CLI's
``--cache-dir``) looks in D for the entry keyed by the SHA-256 of the model file's bytes, its
absolute path, the settings that shape the lowered model (execution, compact, MatMulNBits'
accuracy level, the resolved base_dir), the kind of entry (for a saved graph, the machine) and
the versions of onnx_struct and onnxruntime. An entry is used only while the model file and every
file the model referenced are still the files it recorded (:func:`file_record`: each path still
leads to the same file, with the same device, inode, size, modification and change times, as
payload/file_identity.py judges a file it verified, taken before the file was read): onnxruntime
then loads the entry's model, and nothing is checked, lowered or repacked again (the model's
bytes and files are the ones that passed). Otherwise the session is made as without a cache and
its entry is written to a new directory under D that is renamed into place once complete, and
older entries made from the same model path are removed. With the session's own options on the
CPU, the entry is the graph onnxruntime saved after its optimizations (``model.onnx``, its
weights in ``model.data``: no function to inline, no constant to fold at the next load) beside
the lowered model without its weights (``lowered.onnx``, what ``InferenceSession.lowered``
shows); with a caller's options or other providers, which shape onnxruntime's graph in ways the
key cannot name, it is the lowered model and its weights (every external tensor copied). Either
way the entry reads nothing outside its own directory. An entry onnxruntime cannot load is
removed, and the session is made as on a miss. A model with struct-typed graph inputs is not
cached (its inputs are split through the lowering's views at run time). docs/llm.md, "Start-up
and the session cache".
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import shutil
import stat
import warnings

import onnx
from google.protobuf.message import DecodeError

from onnx_struct._version import __version__
from onnx_struct.errors import ValidationError
from onnx_struct.limits import MAX_CACHE_RECORD_BYTES
from onnx_struct.payload import external, file_identity
from onnx_struct.runtime.delivery import SAVED_WEIGHTS_FILE

ENTRY_FORMAT = 3
ENTRY_FILE = "entry.json"  # written last: a directory without it is not an entry
MODEL_FILE = "model.onnx"  # what onnxruntime loads (WeightsFile.write_model's name for a lowered model)
LOWERED_FILE = "lowered.onnx"  # beside a saved graph: the lowered model, its weights placeholders
TEMPORARY_PREFIX = ".tmp-"


@dataclasses.dataclass(frozen=True)
class CacheSlot:
    """Where a model's entry is (``directory``) and what it must record to be used."""

    cache_dir: pathlib.Path
    key: str
    source: str  # the model file's absolute path as given: entries of one path replace each other
    model_file: list  # the model file's record (see file_record), taken before its bytes were read

    @property
    def directory(self) -> pathlib.Path:
        return self.cache_dir / self.key

    def usable(self) -> str | None:
        """The path of the entry's lowered model when the entry exists, is complete, and every
        file it records is unchanged; None otherwise. (Read once: a record replaced by another
        process afterwards is not read again.)"""
        record = _read_record(self.directory)
        if record is None or record.get("format") != ENTRY_FORMAT or record.get("source") != self.source:
            return None
        files, lowered = record.get("files"), record.get("lowered")
        if not isinstance(files, list) or lowered not in (MODEL_FILE, LOWERED_FILE):
            return None
        if not ((self.directory / MODEL_FILE).is_file() and (self.directory / lowered).is_file()):
            return None
        if not all(_unchanged(f) for f in files):
            return None
        return str(self.directory / lowered)

    def model_path(self) -> str:
        return str(self.directory / MODEL_FILE)

    def new_directory(self) -> str | None:
        """A new private directory under the cache for an entry being written; None, with a
        warning (the session is made without a cache), when the cache cannot be written."""
        import tempfile  # noqa: PLC0415

        try:
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            return tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.cache_dir)
        except OSError as error:
            warnings.warn(
                f"onnx_struct: the session cache {str(self.cache_dir)!r} cannot be written "
                f"({error.strerror or error}): this session is not kept",
                RuntimeWarning,
                stacklevel=3,  # the caller of InferenceSession
            )
            return None

    def publish(self, directory: str, files: list[list], lowered: str = MODEL_FILE) -> bool:
        """Record the model file and ``files`` (:func:`referenced_files`' records, and which file is
        the ``lowered`` model) in ``directory`` and rename it into place; remove older entries of
        the same model path. False (``directory`` removed) when another process published first or
        the cache cannot be written: the session works either way."""
        record = {
            "format": ENTRY_FORMAT,
            "source": self.source,
            "files": [self.model_file, *files],
            "lowered": lowered,
        }
        try:
            with open(os.path.join(directory, ENTRY_FILE), "x", encoding="utf-8") as handle:
                json.dump(record, handle)
            if self.directory.exists() and not self.usable():
                shutil.rmtree(self.directory, ignore_errors=True)  # stale or broken: replaced
            os.rename(directory, self.directory)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            return False
        self._remove_older()
        return True

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def _remove_older(self) -> None:
        try:
            entries = list(self.cache_dir.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry.name == self.key or entry.name.startswith(TEMPORARY_PREFIX):
                continue
            record = _read_record(entry)
            if record is not None and record.get("source") == self.source:
                shutil.rmtree(entry, ignore_errors=True)


def check_arguments(cache_dir, model) -> None:
    """A cache directory is a path, and the model it keeps is given as one (the key is the file's).

    Raises:
        ValidationError: (``bad_argument``) either is not a path.
    """
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise ValidationError(
            "InferenceSession(cache_dir)", f"expects a directory path, not {type(cache_dir).__name__}",
            code="bad_argument",
        )  # fmt: skip
    if not isinstance(model, (str, os.PathLike)):
        raise ValidationError(
            "InferenceSession(cache_dir)",
            f"a session cache keys a model file by its bytes and files: give the model as a path, "
            f"not {type(model).__name__}",
            code="bad_argument",
        )


def slot(
    cache_dir: str | os.PathLike, model_record: list, model_bytes: bytes, settings: dict, ort_version: str
) -> CacheSlot:
    """The slot of a model file (its :func:`file_record` at its absolute path taken first, then its
    bytes read once by the caller) with these session settings."""
    source = model_record[0]  # the absolute path: its directory is where the model's locations are looked up
    digest = hashlib.sha256()
    head = {"format": ENTRY_FORMAT, "onnx_struct": __version__, "onnxruntime": ort_version, "source": source,
            **settings}  # fmt: skip
    digest.update(json.dumps(head, sort_keys=True).encode())
    digest.update(model_bytes)
    return CacheSlot(pathlib.Path(cache_dir).expanduser().resolve(), digest.hexdigest()[:40], source, model_record)


def publish_saved_graph(cache: CacheSlot, directory: str, lowered, files: list[list]) -> bool:
    """Publish ``directory`` once onnxruntime's saved graph in it is whole and self-contained (every
    external tensor in its own weights file, within the file) and ``lowered`` is written beside
    it; otherwise remove it. True when published."""
    try:
        saved = onnx.load_model(os.path.join(directory, MODEL_FILE), load_external_data=False)
        size = None  # the weights file: none where every initializer is under the 1 KiB threshold
        for where, tensor in external.model_tensors(saved):
            if not external.is_external(tensor):
                continue
            size = os.path.getsize(os.path.join(directory, SAVED_WEIGHTS_FILE)) if size is None else size
            ref = external.parse_external_data(tensor.external_data, where)
            if ref.location != SAVED_WEIGHTS_FILE or ref.offset + (ref.length or 0) > size:
                raise ValueError(f"{where} is not in the entry's weights file")
        del saved
        with open(os.path.join(directory, LOWERED_FILE), "xb") as handle:
            handle.write(lowered.SerializeToString())
    except (OSError, ValueError, ValidationError, DecodeError):  # no graph saved (a full disk), or one reading outside
        shutil.rmtree(directory, ignore_errors=True)
        return False
    return cache.publish(directory, files, lowered=LOWERED_FILE)


@functools.cache
def machine() -> str:
    """What names this machine's CPU for a saved graph's key: onnxruntime's optimizations at its
    default level may fit the graph to the instruction set (its NCHWc layouts, for one)."""
    import platform  # noqa: PLC0415

    identity = [platform.system(), platform.machine()]  # not platform.processor(): it runs uname
    try:
        with open("/proc/cpuinfo", "rb") as handle:
            lines = handle.read(1 << 20).splitlines()
        identity += sorted({line.decode(errors="replace") for line in lines if line.split(b":")[0].strip()
                            in (b"vendor_id", b"model name", b"flags", b"Features", b"CPU part")})  # fmt: skip
    except OSError:  # not Linux: the platform's names
        pass
    return hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]


def file_record(path: str | os.PathLike, resolved: str | os.PathLike | None = None) -> list:
    """What an entry records of a file it was made from: ``path`` as it is looked up, the file it
    resolved to (``resolved``, or ``path`` with its links resolved now), and that file's stat key
    (file_identity's). An entry is used only while ``path`` still leads to that file and the file
    is unchanged (:func:`_unchanged`): a re-pointed link or another lookup directory is a miss."""
    resolved = pathlib.Path(resolved) if resolved is not None else pathlib.Path(path).resolve()
    return [str(path), str(resolved), _stat_key(resolved)]


def referenced_files(loaded) -> list[list] | None:
    """The :func:`file_record` of every file the model's external payloads and external tensors
    name, taken before the check reads them (a file changed afterwards is a later miss, never an
    entry recording the changed file); None when a location cannot be resolved (the check then
    refuses the model). A link the model records the identity of (a ``.gguf`` linked in from a
    download cache) is followed as the check follows it: admitted before it is resolved."""
    if loaded.base_dir is None:
        return []
    file_identity.admit_recorded_links(loaded.proto.metadata_props, loaded.base_dir)
    referenced = file_identity.referenced_locations(loaded.struct_values, external.model_tensors(loaded.proto))
    root = pathlib.Path(loaded.base_dir).resolve()
    records = {}
    try:
        for location, where in referenced.items():
            file, _ = external.resolve(external.ExternalRef(location, 0, None), loaded.base_dir, where)
            records[(location, str(file))] = file_record(root / location, file)
    except ValidationError:
        return None
    return list(records.values())


def _unchanged(record: object) -> bool:
    """The file a record names is still where its path leads, with the recorded stat key."""
    if not (isinstance(record, list) and len(record) == 3 and all(isinstance(r, str) for r in record[:2])):
        return False
    try:
        return str(pathlib.Path(record[0]).resolve()) == record[1] and _stat_key(record[1]) == record[2]
    except (OSError, RuntimeError, ValueError):  # a link loop (RuntimeError on 3.11), a NUL
        return False


def _stat_key(path) -> list[int] | None:
    """file_identity's stat key of ``path`` as JSON keeps it (None: no such file)."""
    try:
        return list(file_identity.stat_key(os.stat(path)))
    except (OSError, TypeError, ValueError):
        return None


def _read_record(directory: pathlib.Path) -> dict | None:
    """An entry's record, or None for anything that is not one: no file, not a regular file (a
    FIFO would block the open), too large, not JSON (nested past the parser's recursion)."""
    try:
        fd = os.open(directory / ENTRY_FILE, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_CACHE_RECORD_BYTES + 1)
        record = json.loads(data) if len(data) <= MAX_CACHE_RECORD_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) else None
