"""The one writer of onnx_struct: files written into a model's directory (``DirectoryWriter``).

Writes create fresh temporary files in the target directory and rename them over the
destination, so they never follow a symlink, never truncate a file they did not create, and never
depend on the current directory. Locations obey the same rules as reads
(:func:`onnx_struct.payload.external.check_location`).
"""

from __future__ import annotations

import os
import pathlib
import secrets
import stat

from onnx_struct.errors import ValidationError
from onnx_struct.payload.external import _NOFOLLOW, _kind, check_location
from onnx_struct.schema.model import resolve_path


def _create_new(destination: pathlib.Path) -> tuple[pathlib.Path, int]:
    """A new, empty temporary file next to ``destination``: ``O_CREAT | O_EXCL`` never opens an
    existing file or follows a link; mode 0o666 less the umask, as ``open`` would give."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    while True:
        temporary = destination.with_name(f".{destination.name}.{secrets.token_hex(6)}.tmp")
        try:
            return temporary, os.open(temporary, flags, 0o666)
        except FileExistsError:
            continue


def _keep_mode(fd: int, destination: pathlib.Path) -> None:
    """Give the new file (open as ``fd``) the permission bits of the regular file it will replace,
    as editors and ``install`` do: a private (0600) file stays private. A new destination keeps
    0o666 less the umask. Only the rwx bits are copied: set-id bits stay off a file we wrote."""
    try:
        info = os.lstat(destination)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode) and hasattr(os, "fchmod"):  # anything else is refused before the rename
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o777)


class DirectoryWriter:
    """Files written into one directory without following symlinks or truncating anything.

    Each file is first written to a fresh temporary file in its destination's directory
    (``mkstemp``: ``O_CREAT | O_EXCL``); :meth:`commit` then renames each over its destination,
    refusing a destination that is a symlink or not a regular file, or whose directory resolves
    outside ``directory``; a replaced file's permission bits are kept. Nothing is replaced until every file is complete; :meth:`discard`
    (or leaving a ``with`` block by an exception) removes the temporary files.
    """

    def __init__(self, directory: pathlib.Path) -> None:
        self.root = resolve_path(directory)
        self._pending: dict[pathlib.Path, tuple[str, pathlib.Path, object]] = {}
        self._scratch: list[tuple[pathlib.Path, object]] = []

    def __enter__(self) -> DirectoryWriter:
        return self

    def __exit__(self, kind, error, trace) -> None:
        self.discard()

    def open(self, name: str, where: str, *, exclusive: bool = False, model_location: bool = True):
        """A binary file handle for ``name`` (relative to the directory), new and empty; the same
        handle again for a name already open, unless ``exclusive``. ``model_location``: ``name``
        is a location a model states, checked by the model-location rules (the CLI's OUT is the
        user's own file name, which may hold a ':' on POSIX)."""
        if model_location:
            check_location(name, where)
        destination = self._destination(name, where)
        if destination in self._pending:
            if exclusive:
                raise ValidationError(where, f"{name!r} is also the destination of another file", code="name_clash")
            return self._pending[destination][2]
        temporary, fd = _create_new(destination)
        handle = open(fd, "wb")  # noqa: SIM115 - closed by commit / discard
        self._pending[destination] = (name, temporary, handle)
        return handle

    def scratch(self, stem: str) -> tuple[pathlib.Path, object]:
        """A new temporary file in the directory (named after ``stem``) and a binary handle to it,
        never renamed into place: a writer's working data, read back before :meth:`commit`, which
        removes it as :meth:`discard` does."""
        temporary, fd = _create_new(self.root / stem)
        handle = open(fd, "wb")  # noqa: SIM115 - closed by commit / discard
        self._scratch.append((temporary, handle))
        return temporary, handle

    def check(self, name: str, where: str) -> None:
        """Raise now the ValidationError :meth:`open` would raise for ``name`` (a link, a
        directory, outside the directory): a writer deciding later whether to write it refuses
        a bad destination before any work."""
        self._destination(name, where)

    def temporary(self, name: str) -> pathlib.Path:
        """The temporary file :meth:`open` made for ``name``, where its bytes are until
        :meth:`commit`: a writer that reads back what it wrote (quantize checks and runs its result
        before committing it) reads it there."""
        destination = self._destination(name, "temporary")
        return self._pending[destination][1]

    def _destination(self, name: str, where: str) -> pathlib.Path:
        try:
            parent = resolve_path((self.root / name).parent)
        except OSError as error:
            raise ValidationError(where, f"{name!r}: its directory cannot be resolved: {error.strerror}") from None
        if not parent.is_relative_to(self.root) or not parent.is_dir():
            raise ValidationError(
                where, f"{name!r} is not in a directory inside {str(self.root)!r}", code="file_outside_model_dir"
            )
        destination = parent / pathlib.PurePath(name).name
        try:
            info = os.lstat(destination)
        except FileNotFoundError:
            return destination
        if stat.S_ISLNK(info.st_mode):
            raise ValidationError(
                where, f"{name!r} is a symbolic link; refusing to write through or over it", code="unsafe_destination"
            )
        if not stat.S_ISREG(info.st_mode):
            raise ValidationError(
                where, f"{name!r} is {_kind(info.st_mode)}; refusing to replace it", code="unsafe_destination"
            )
        return destination

    def commit(self, where: str) -> None:
        """Rename every complete temporary file over its destination (checked again first)."""
        for destination, (_, _, handle) in self._pending.items():
            handle.flush()
            _keep_mode(handle.fileno(), destination)
            os.fsync(handle.fileno())
            handle.close()
        for destination, (name, temporary, _) in list(self._pending.items()):
            self._destination(name, where)  # still not a symlink, nor a directory
            os.replace(temporary, destination)  # rename(2) replaces the name, never follows it
            del self._pending[destination]
        self._remove_scratch()

    def discard(self) -> None:
        for _, temporary, handle in self._pending.values():
            handle.close()
            temporary.unlink(missing_ok=True)
        self._pending.clear()
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        for temporary, handle in self._scratch:
            handle.close()
            temporary.unlink(missing_ok=True)
        self._scratch.clear()
