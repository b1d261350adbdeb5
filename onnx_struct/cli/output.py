"""The one way the CLI writes OUT: as onnx_struct writes into model directories
(:class:`onnx_struct.payload.external_write.DirectoryWriter`), a new temporary file renamed over OUT.

So OUT is never written through a symlink and an existing file is never truncated in place. OUT
naming an input file or a file an input model references, or a link, directory or other
non-regular file, is a usage error (exit 2).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

from onnx_struct.cli import UsageError
from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import element_label
from onnx_struct.payload import external
from onnx_struct.payload.external_io import save_plain_with_external_tensors
from onnx_struct.payload.external_write import DirectoryWriter
from onnx_struct.schema.model import load, model_directory, read_model_file
from onnx_struct.schema.skeleton import split_initializer_data
from onnx_struct.schema.wire_format import Malformed


def refuse_inputs(
    output: str | os.PathLike, inputs: Sequence[str | os.PathLike], models: Sequence[str | os.PathLike] = ()
) -> pathlib.Path:
    """``output`` as a Path; a UsageError when it is one of the ``inputs`` or ``models`` files (the
    input models), or a file an input model references (replacing it would destroy the input, and
    the output too when it keeps references into it). The models are read again only when
    ``output`` already exists: a new file cannot be an input's."""
    output = pathlib.Path(output)
    for source in (*inputs, *models):
        if _same_file(output, source):
            raise UsageError(f"{output}: is the input file {source}; write the result to another file")
    if models and os.path.isfile(output):
        for model in models:
            for where, file in _referenced_files(model):
                if _same_file(output, file):
                    raise UsageError(
                        f"{output}: is the file {model} references at {where}; write the result to another file"
                    )
    return output


def refuse_foreign_data(output: pathlib.Path, data: pathlib.Path) -> None:
    """A UsageError when ``data`` (the external-data file the result will write) exists and is not
    one ``output`` references: it is another model's (``b.onnx.data`` of a model that is not
    OUT), and replacing it would destroy that model's weights. OUT's own data file, re-written
    with OUT, is replaced as OUT is."""
    if not os.path.lexists(data):
        return
    if os.path.isfile(output) and any(_same_file(data, file) for _, file in _referenced_files(output)):
        return
    raise UsageError(
        f"{data}: exists and is not the external data of {output}; it may be another model's: "
        f"remove it or write the result to another file"
    )


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one of them does not exist (yet), or names no file (a NUL): not the same file
        return False


def _referenced_files(model: str | os.PathLike) -> Iterator[tuple[str, pathlib.Path]]:
    """(path, file) of each external reference of the model at ``model``: where its location
    leads, whether or not the model-directory rules would admit the file (a file they refuse, e.g.
    one with a second hard link, is still the input's and must not be replaced)."""
    try:
        # Without the bytes of its large initializers (inline data references no file): the
        # model is read once, not parsed whole beside the result being written.
        data = read_model_file(model)
        skeleton, _ = split_initializer_data(data)
        del data
        loaded = load(skeleton, model_directory(model))
    except (ValidationError, Malformed):
        return
    references = [
        (element_label(f"graph.struct_initializer[{k}]", value.name), value.external_data)
        for k, value in enumerate(loaded.proto.graph.struct_initializer)
    ]
    references += [(where, tensor.external_data) for where, tensor in external.model_tensors(loaded.proto)]
    for where, entries in references:
        if not len(entries):
            continue
        try:
            location = external.parse_external_data(entries, where).location
        except ValidationError:
            continue
        yield where, pathlib.Path(loaded.base_dir) / location


def write_output(
    output: str | os.PathLike,
    write: Callable[[BinaryIO], None],
    *,
    inputs: Sequence[str | os.PathLike] = (),
    models: Sequence[str | os.PathLike] = (),
) -> None:
    """Call ``write(handle)`` on a new file that then replaces ``output`` (see refuse_inputs)."""
    output = refuse_inputs(output, inputs, models)
    try:
        with DirectoryWriter(output.absolute().parent) as writer:
            write(writer.open(output.name, "OUT", exclusive=True, model_location=False))
            writer.commit("OUT")
    except ValidationError as error:
        raise as_usage(output, error) from None


def write_model_with_external_tensors(
    model,
    output: str | os.PathLike,
    *,
    inputs: Sequence[str | os.PathLike] = (),
    models: Sequence[str | os.PathLike] = (),
) -> None:
    """A plain model too large for one protobuf, as OUT and ``OUT.data``, written the same way."""
    output = refuse_inputs(output, inputs, models)
    refuse_inputs(output.with_name(f"{output.name}.data"), inputs, models)
    try:
        save_plain_with_external_tensors(model, output, location=f"{output.name}.data", model_location=False)
    except ValidationError as error:
        raise as_usage(output, error) from None


def as_usage(output: pathlib.Path, error: ValidationError) -> Exception:
    """A refusal of OUT (a link, a directory) as the CLI reports it: a usage error (exit 2)."""
    if isinstance(error, OSError):  # a NotRegularFileError: already an I/O error (exit 2)
        return error
    return UsageError(f"OUT {error.reason}")
