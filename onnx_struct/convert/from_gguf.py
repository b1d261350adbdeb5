"""GGUF file -> ONNX model with struct values: ``convert("model.gguf")``.

Every GGUF tensor becomes a struct value of the same name, declared with the registered format of
its GGML type; its bytes are the GGUF tensor's, verbatim, inline or (``reference=True``)
referenced in the .gguf. GGUF metadata becomes ``metadata_props`` (docs/formats.md).

Rule: gguf-py reads the header only after :mod:`onnx_struct.formats.gguf.validate` has checked every count, length and
range in it; tensor bytes are read with ``pread``, never through a memory map, so a file
truncated meanwhile is a ValidationError, not a SIGBUS.

Notes: docs/modules.md.
"""

from __future__ import annotations

import json
import mmap
import os
import pathlib
import stat
from collections.abc import Callable

import onnx

from onnx_struct import formats
from onnx_struct.errors import ValidationError
from onnx_struct.formats.function_builder import OPSET
from onnx_struct.formats.gguf.gguf_py import load_gguf_py, quant_sizes
from onnx_struct.formats.gguf.metadata import metadata_props
from onnx_struct.formats.gguf.validate import check_gguf_bytes
from onnx_struct.limits import GGUF_INLINE_LIMIT
from onnx_struct.payload import file_identity
from onnx_struct.schema.builders import make_array, make_struct_value
from onnx_struct.schema.model import add_struct_types, add_struct_values, from_onnx, resolve_path, to_onnx

# (tensors done, tensors in total, current tensor name); total 0: a stage before the count is known
Progress = Callable[[int, int, str], None]


def convert(
    path: str | os.PathLike,
    *,
    reference: bool = False,
    keep_unknown: bool = False,
    model_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    graph: bool = False,
    context_length: int | None = None,
    all_logits: bool = False,
) -> onnx.ModelProto:
    """Read the GGUF file ``path`` into an ONNX model whose struct values are its tensors.

    Args:
        path: the .gguf file.
        reference: point each struct value's ``external_data`` at the tensor's bytes inside the
            .gguf instead of copying them. ``location`` is the .gguf's path relative to
            ``model_dir``, so the .gguf must sit in the directory where the model will be saved
            (or below it). The model then records the .gguf's size and a hash of its header and
            of both ends of every tensor (``metadata_props['onnx_struct.referenced_files']``):
            checking or running it refuses a .gguf replaced since (docs/security.md, "Files").
        keep_unknown: keep tensors whose GGML type has no registered format as raw
            ``Array(UINT8, n_bytes)`` values without a decoder (their GGUF type and shape in the
            declaration's metadata_props) instead of raising.
        model_dir: the directory the model will be saved in; only used with ``reference``.
            Defaults to the .gguf's own directory.
        progress: called as ``progress(done, total, tensor_name)`` after each tensor, and once
            before the file is opened as ``progress(0, 0, label)`` (total unknown yet).
        graph: also build the decoder graph of the file's architecture (docs/llm.md lists them):
            inputs ``input_ids``, ``attention_mask``, ``past_key_values.{i}.key/value``, outputs
            ``logits`` and ``present.{i}.key/value`` (:mod:`onnx_struct.llm.graph`,
            docs/llm.md). Without it the graph has no nodes.
        context_length: with ``graph``, build for this many positions instead of the file's
            ``{arch}.context_length`` (at most that), as llama.cpp's ``n_ctx``: the RoPE tables
            are that long, the model's metadata says it, and phi3's LongRoPE picks its factors
            by it.
        all_logits: with ``graph``, ``logits`` for every position (``[batch, seq, n_vocab]``, as
            for a perplexity) instead of the last one only (``[batch, 1, n_vocab]``, what
            generation reads; docs/llm.md, "Logits").

    Returns:
        The model: a struct value per tensor, the GGUF metadata in ``metadata_props``.

    Raises:
        ValidationError: the file is not a readable little-endian GGUF file whose counts,
            lengths and tensor ranges fit in it and in the limits of :mod:`onnx_struct.limits`,
            or a tensor's type has no registered format (and ``keep_unknown`` is false); the
            path names the header, key-value pair or tensor, e.g. ``gguf.tensors[5] ('w')``.
            With ``graph``: the architecture, a metadata key or a tensor does not fit the decoder
            graph (:func:`onnx_struct.llm.graph.plan_decoder`).
        OSError: the file cannot be read, or is not a regular file (a FIFO, a directory).

    Example::

        model = convert("tiny.gguf")
        onnx.save(model, "tiny.onnx")
        onnx_struct.decode("blk.0.attn_q.weight", "tiny.onnx")
    """
    gguf = load_gguf_py()
    source = pathlib.Path(path)
    if progress is not None:  # gguf-py reads every metadata item on open: a big vocabulary takes seconds
        progress(0, 0, f"reading the header and metadata of {source.name}")
    reader, fd = _open(gguf, source)
    try:
        return _convert(
            gguf, source, reader, fd, reference, keep_unknown, model_dir, progress, graph, context_length, all_logits
        )
    finally:
        os.close(fd)


def _convert(
    gguf, source, reader, fd: int, reference, keep_unknown, model_dir, progress, graph: bool, context_length, all_logits
) -> onnx.ModelProto:
    """:func:`convert` over the open file ``fd`` and gguf-py's reader of it."""
    location = _location(source, model_dir) if reference else None

    empty = onnx.helper.make_graph([], _graph_name(source), [], [])
    stock = onnx.helper.make_model(empty, producer_name="onnx_struct.formats.gguf")
    stock.doc_string = f"Tensors and metadata of the GGUF file {source.name}; the graph has no nodes."
    for key, value in metadata_props(reader, gguf).items():
        stock.metadata_props.add(key=key, value=value)
    if (
        location is not None
    ):  # what the model references, so that a replaced .gguf is refused (payload/file_identity.py)
        ranges = [(int(t.data_offset), int(t.n_bytes)) for t in reader.tensors]
        file_identity.record(stock.metadata_props, [file_identity.identity_of_open_file(fd, location, ranges)])
    model = from_onnx(stock)

    if not reference:
        total = sum(int(t.n_bytes) for t in reader.tensors)
        if total > GGUF_INLINE_LIMIT:
            raise ValidationError(
                str(source),
                f"the tensors hold {total} bytes, more than one ONNX file can hold inline; use reference=True",
                actual=total,
                code="limit_exceeded",
            )
    roots: dict[tuple[str, tuple[int, ...]], int] = {}  # (format, shape) -> root index, shared by same-shape tensors
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for i, tensor in enumerate(reader.tensors):
        where = f"gguf.tensors[{i}] ({tensor.name!r})"
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))  # numpy order: GGUF's ne0 is the last
        type_name = gguf.GGMLQuantizationType(tensor.tensor_type).name
        tensors[tensor.name] = (type_name, shape)
        root = _root_index(model, type_name, shape, int(tensor.n_bytes), roots, keep_unknown, gguf, where)
        if location is not None:
            external = {"location": location, "offset": int(tensor.data_offset), "length": int(tensor.n_bytes)}
            value = make_struct_value(tensor.name, root, external_data=external)
        else:
            value = make_struct_value(tensor.name, root, raw_data=_payload(fd, tensor, where))
        # One value at a time: the model never holds a second copy of all the payloads at once.
        add_struct_values(model, value)
        del value
        if progress is not None:
            progress(i + 1, len(reader.tensors), tensor.name)
    _match_decoder_opsets(model)
    if not graph:
        return to_onnx(model)
    from onnx_struct.llm.graph import add_decoder_graph  # noqa: PLC0415 - only when a graph is asked for

    return add_decoder_graph(to_onnx(model), tensors, context_length=context_length, all_logits=all_logits)


def _match_decoder_opsets(model) -> None:
    """Import the default-domain opset the decoders import, at the IR version that opset needs.

    onnxruntime resolves a function's operators at the *model's* opset, so a model importing a
    newer opset than its decoders (onnx.helper.make_model's default) could not be lowered or run
    once a node consumes a tensor: lowering refuses the mismatch when operators the decoders use
    changed between the two versions (tests/test_workflows_cli.py).
    """
    versions = [
        opset.version
        for declaration in model.struct_types
        if declaration.HasField("decoder")
        for opset in declaration.decoder.opset_import
        if opset.domain in ("", "ai.onnx")
    ]
    version = max(versions, default=OPSET)
    del model.opset_import[:]
    model.opset_import.append(onnx.helper.make_opsetid("", version))
    model.ir_version = onnx.helper.find_min_ir_version_for(list(model.opset_import), True)


def _open(gguf, source: pathlib.Path):
    """(gguf-py's reader of ``source``, once :func:`check_gguf_bytes` has bounded every count in
    it; a descriptor of the same open file, the caller's to close).

    The file is opened once, without following it into a FIFO's wait (O_NONBLOCK), and the same
    open file is checked, handed to gguf-py and read, so all see the same file even if the path is
    replaced in between.
    """
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_BINARY", 0))
    try:
        return _reader(gguf, source, fd), os.dup(fd)
    finally:
        os.close(fd)


def _reader(gguf, source: pathlib.Path, fd: int):
    with os.fdopen(os.dup(fd), "rb") as handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"{source}: not a regular file")
        size = status.st_size
        if size == 0:  # mmap refuses empty files; the check refuses them too
            check_gguf_bytes(b"", quant_sizes(gguf))
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            check_gguf_bytes(data, quant_sizes(gguf))
        try:
            return gguf.GGUFReader(handle, "r")
        except (ValueError, KeyError, IndexError, TypeError) as error:  # gguf-py's ways of saying "malformed"
            raise ValidationError("gguf", f"not a readable GGUF file: {error}") from None


def _graph_name(source: pathlib.Path) -> str:
    return source.stem or "gguf"


def _location(source: pathlib.Path, model_dir: str | os.PathLike | None) -> str:
    base = pathlib.Path(model_dir) if model_dir is not None else source.parent
    # The file's own name is kept, not resolved: a Hugging Face cache link (snapshots/<rev>/x.gguf
    # -> ../../blobs/<sha>) the user named is the location, its target's identity is recorded and
    # verified whenever the model is read (external.resolve's links rule).
    relative = pathlib.Path(os.path.relpath(resolve_path(source.absolute().parent) / source.name, resolve_path(base)))
    if relative.is_absolute() or ".." in relative.parts:
        raise ValidationError(
            str(source),
            f"with reference=True the .gguf must sit in the model's directory {str(base)!r} (or below it); "
            "move it there or convert without reference",
        )
    return relative.as_posix()


def _root_index(model, type_name, shape, n_bytes, roots, keep_unknown, gguf, where) -> int:
    key = (type_name, shape)
    if key in roots:
        return roots[key]
    try:
        fmt = formats.get(type_name)
    except KeyError:
        fmt = None
    if fmt is None:
        if not keep_unknown:
            raise ValidationError(
                where,
                f"GGML type {type_name} has no registered format; pass keep_unknown=True (--keep-unknown) to keep it as raw bytes",
                gguf_type=type_name,
                code="unknown_gguf_type",
            )
        # No decoder: the bytes are kept and checkable, but no node may consume the value.
        metadata = {"gguf.type": type_name, "gguf.shape": json.dumps(list(shape))}
        declaration = make_array(onnx.TensorProto.UINT8, n_bytes, name=f"{type_name}_raw", metadata_props=metadata)
        (index,) = add_struct_types(model, declaration)
    else:
        block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
        if (fmt.block_size, fmt.bytes_per_block) != (block_size, type_size):
            raise ValidationError(
                where,
                f"format {type_name} declares {fmt.bytes_per_block} bytes per {fmt.block_size} elements; "
                f"GGUF uses {type_size} per {block_size}",
            )
        index = fmt.add_to_model(model, shape)
    roots[key] = index
    return index


def _payload(fd: int, tensor, where: str) -> bytes:
    """The tensor's bytes, read from the open file (not through gguf-py's map: see the module)."""
    offset, size = int(tensor.data_offset), int(tensor.n_bytes)
    chunks, done = [], 0
    while done < size:
        chunk = os.pread(fd, size - done, offset + done)
        if not chunk:
            file_size = os.fstat(fd).st_size
            raise ValidationError(
                where,
                f"the file changed while it was read: {file_size} bytes, {offset + size} needed",
                bytes_needed=offset + size,
                file_size=file_size,
                code="file_changed",
            )
        chunks.append(chunk)
        done += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
