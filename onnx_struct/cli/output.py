"""The one way the CLI writes OUT: as onnx_struct writes into model directories
(:class:`onnx_struct.payload.external_write.DirectoryWriter`), a new temporary file renamed over OUT.

So OUT is never written through a symlink and an existing file is never truncated in place (a
red-team pass found every command writing through a link at OUT, and `lower m.onnx m.onnx`
replacing the model it read). OUT naming an input file, or a link, directory or other
non-regular file, is a usage error (exit 2).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Sequence
from typing import BinaryIO

from onnx_struct.cli import UsageError
from onnx_struct.errors import ValidationError
from onnx_struct.payload.external_io import save_plain_with_external_tensors
from onnx_struct.payload.external_write import DirectoryWriter


def refuse_inputs(output: str | os.PathLike, inputs: Sequence[str | os.PathLike]) -> pathlib.Path:
    """``output`` as a Path; a UsageError when it is one of the ``inputs`` files. (The external
    files an input model names are not looked for: that would parse the model again, payloads
    included.)"""
    output = pathlib.Path(output)
    for source in inputs:
        try:
            same = os.path.samefile(output, source)
        except OSError:  # one of them does not exist (yet): not the same file
            same = False
        if same:
            raise UsageError(f"{output}: is the input file {source}; write the result to another file")
    return output


def write_output(
    output: str | os.PathLike, write: Callable[[BinaryIO], None], *, inputs: Sequence[str | os.PathLike] = ()
) -> None:
    """Call ``write(handle)`` on a new file that then replaces ``output``."""
    output = refuse_inputs(output, inputs)
    try:
        with DirectoryWriter(output.absolute().parent) as writer:
            write(writer.open(output.name, "OUT", exclusive=True, model_location=False))
            writer.commit("OUT")
    except ValidationError as error:
        raise _as_usage(output, error) from None


def write_model_with_external_tensors(
    model, output: str | os.PathLike, *, inputs: Sequence[str | os.PathLike] = ()
) -> None:
    """A plain model too large for one protobuf, as OUT and ``OUT.data``, written the same way."""
    output = refuse_inputs(output, inputs)
    try:
        save_plain_with_external_tensors(model, output, location=f"{output.name}.data", model_location=False)
    except ValidationError as error:
        raise _as_usage(output, error) from None


def _as_usage(output: pathlib.Path, error: ValidationError) -> Exception:
    if isinstance(error, OSError):  # a NotRegularFileError: already an I/O error (exit 2)
        return error
    return UsageError(f"OUT {error.reason}")
