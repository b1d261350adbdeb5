"""GGUF file -> ONNX model with struct values: ``convert("model.gguf")``.

Every GGUF tensor becomes a struct value of the same name, declared with the registered format of
its GGML type (``formats.get("Q4_K")``) for the tensor's logical shape; the bytes are the GGUF
tensor's bytes, verbatim. They are copied inline (``raw_data``) by default, or with
``reference=True`` left in the .gguf and referenced by ``external_data`` (location, offset,
length), so a multi-GiB file is converted without copying a payload byte.

The header is read with gguf-py's ``GGUFReader`` (a memory map), after :mod:`.validate` has
checked every count, length and tensor range in its header against the file's size and the limits
in :mod:`onnx_struct.limits` (gguf-py trusts them); nothing here parses GGUF for its data. Tensor
bytes are read from the open file (``pread``), never through the map: a file truncated during the
conversion then gives a short read, a ValidationError, where touching a mapped page past the new
end of the file killed the process (SIGBUS). The
model's graph has no nodes, inputs or outputs: a GGUF file carries weights and metadata, not the
computation, and ``onnx.checker`` accepts such a graph. It imports the opset its decoders import,
so a graph built on it lowers and runs. GGUF key-value metadata becomes model ``metadata_props``
(encoding in docs/formats.md, "GGUF files and quantizing").
"""

from __future__ import annotations

import json
import mmap
import os
import pathlib
import stat
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import onnx

from onnx_struct import formats
from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.formats.function_builder import OPSET
from onnx_struct.formats.gguf.validate import check_gguf_bytes
from onnx_struct.limits import MAX_CONTEXT_LENGTH
from onnx_struct.schema.builders import make_array, make_struct_value
from onnx_struct.schema.model import add_struct_types, add_struct_values, from_onnx, resolve_path, to_onnx

# metadata_props keys added besides the GGUF keys themselves.
VALUE_TYPES_KEY = "onnx_struct.gguf.value_types"  # JSON object: GGUF key -> value type, e.g. "ARRAY[STRING]"
VERSION_KEY = "onnx_struct.gguf.version"
RESERVED_PREFIX = "onnx_struct."  # GGUF keys may not collide with the entries above
# Inline payloads above this cannot be serialized (protobuf messages are limited to 2 GiB).
INLINE_LIMIT = 2**31 - 2**24

# (tensors done, tensors in total, current tensor name); total 0: a stage before the count is known
Progress = Callable[[int, int, str], None]


def _gguf():
    try:
        import gguf  # noqa: PLC0415 - optional dependency, imported only when a file is converted
    except ImportError as error:  # pragma: no cover - depends on the environment
        # name="gguf": the CLI tells this missing extra (one line, exit 2) from a broken install.
        raise ImportError("reading GGUF files needs gguf-py: pip install 'onnx-struct[gguf]'", name="gguf") from error
    return gguf


def convert(
    path: str | os.PathLike,
    *,
    reference: bool = False,
    keep_unknown: bool = False,
    model_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    graph: bool = False,
) -> onnx.ModelProto:
    """Read the GGUF file ``path`` into an ONNX model whose struct values are its tensors.

    Args:
        path: the .gguf file.
        reference: point each struct value's ``external_data`` at the tensor's bytes inside the
            .gguf instead of copying them. ``location`` is the .gguf's path relative to
            ``model_dir``, so the .gguf must sit in the directory where the model will be saved
            (or below it).
        keep_unknown: keep tensors whose GGML type has no registered format as raw
            ``Array(UINT8, n_bytes)`` values without a decoder (their GGUF type and shape in the
            declaration's metadata_props) instead of raising.
        model_dir: the directory the model will be saved in; only used with ``reference``.
            Defaults to the .gguf's own directory.
        progress: called as ``progress(done, total, tensor_name)`` after each tensor, and once
            before the file is opened as ``progress(0, 0, label)`` (total unknown yet).
        graph: also build the decoder graph of a llama-shaped model (llama, mistral, qwen2):
            inputs ``input_ids``, ``attention_mask``, ``past_key_values.{i}.key/value``, outputs
            ``logits`` and ``present.{i}.key/value`` (:mod:`onnx_struct.tools.llm_graph`,
            docs/llm.md). Without it the graph has no nodes.

    Raises:
        ValidationError: the file is not a readable little-endian GGUF file whose counts,
            lengths and tensor ranges fit in it and in the limits of :mod:`onnx_struct.limits`,
            or a tensor's type has no registered format (and ``keep_unknown`` is false); the
            path names the header, key-value pair or tensor, e.g. ``gguf.tensors[5] ('w')``.
            With ``graph``: the architecture, a metadata key or a tensor does not fit the decoder
            graph (:func:`onnx_struct.tools.llm_graph.hyperparameters`).
        OSError: the file cannot be read, or is not a regular file (a FIFO, a directory).

    Example::

        model = convert("tiny.gguf")
        onnx.save(model, "tiny.onnx")
        onnx_struct.decode("blk.0.attn_q.weight", "tiny.onnx")
    """
    gguf = _gguf()
    source = pathlib.Path(path)
    if progress is not None:  # gguf-py reads every metadata item on open: a big vocabulary takes seconds
        progress(0, 0, f"reading the header and metadata of {source.name}")
    reader, fd = _open(gguf, source)
    try:
        return _convert(gguf, source, reader, fd, reference, keep_unknown, model_dir, progress, graph)
    finally:
        os.close(fd)


def _convert(
    gguf, source, reader, fd: int, reference, keep_unknown, model_dir, progress, graph: bool
) -> onnx.ModelProto:
    """:func:`convert` over the open file ``fd`` and gguf-py's reader of it."""
    location = _location(source, model_dir) if reference else None

    empty = onnx.helper.make_graph([], _graph_name(source), [], [])
    stock = onnx.helper.make_model(empty, producer_name="onnx_struct.formats.gguf")
    stock.doc_string = f"Tensors and metadata of the GGUF file {source.name}; the graph has no nodes."
    for key, value in metadata_props(reader, gguf).items():
        stock.metadata_props.add(key=key, value=value)
    model = from_onnx(stock)

    if not reference:
        total = sum(int(t.n_bytes) for t in reader.tensors)
        if total > INLINE_LIMIT:
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
    # issue 28 moves this converter out of formats/; the graph builder already lives in tools/.
    from onnx_struct.tools.llm_graph import add_decoder_graph  # noqa: PLC0415

    return add_decoder_graph(to_onnx(model), tensors)


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
            check_gguf_bytes(b"", _quant_sizes(gguf))
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            check_gguf_bytes(data, _quant_sizes(gguf))
        try:
            return gguf.GGUFReader(handle, "r")
        except (ValueError, KeyError, IndexError, TypeError) as error:  # gguf-py's ways of saying "malformed"
            raise ValidationError("gguf", f"not a readable GGUF file: {error}") from None


def _quant_sizes(gguf) -> dict[int, tuple[int, int]]:
    return {int(t): sizes for t, sizes in gguf.GGML_QUANT_SIZES.items()}


def _graph_name(source: pathlib.Path) -> str:
    return source.stem or "gguf"


def _location(source: pathlib.Path, model_dir: str | os.PathLike | None) -> str:
    base = pathlib.Path(model_dir) if model_dir is not None else source.parent
    relative = pathlib.Path(os.path.relpath(resolve_path(source), resolve_path(base)))
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


# ---------------------------------------------------------------------------------- metadata


def metadata_props(reader, gguf=None, *, where: str = "gguf.kv") -> dict[str, str]:
    """GGUF key-value metadata as ``metadata_props`` entries.

    A STRING value is stored verbatim; every other value as JSON (integers in decimal, booleans
    ``true``/``false``, floats as the shortest decimal that reads back to the same float32/64,
    arrays as JSON arrays). The GGUF value type of every key goes into one extra entry,
    ``onnx_struct.gguf.value_types`` (a JSON object such as ``{"llama.block_count": "UINT32",
    "tokenizer.ggml.tokens": "ARRAY[STRING]"}``), so the file's metadata can be rebuilt exactly.
    A string that is not UTF-8, or a key in the ``onnx_struct.`` namespace of the entries added
    here, is a ValidationError at ``where[<index>] ('<key>')``.
    """
    gguf = gguf or _gguf()
    props: dict[str, str] = {}
    types: dict[str, str] = {}
    pairs = [(key, field) for key, field in reader.fields.items() if not key.startswith("GGUF.")]
    props[VERSION_KEY] = str(int(reader.fields["GGUF.version"].parts[-1][0]))
    for index, (key, field) in enumerate(pairs):  # GGUF.*: the reader's pseudo-fields for the header
        if key.startswith(RESERVED_PREFIX):
            raise ValidationError(f"{where}[{index}] ({key!r})", f"keys starting with {RESERVED_PREFIX!r} are reserved")
        value_types = _element_types(field, gguf)
        types[key] = _type_label(value_types)
        try:
            props[key] = _encode_value(field, value_types, gguf)
        except UnicodeDecodeError as error:  # gguf-py decodes string values only here, on request
            raise ValidationError(
                f"{where}[{index}] ({key!r})", f"a {types[key]} value is not valid UTF-8: {error}"
            ) from None
    props[VALUE_TYPES_KEY] = json.dumps(types, separators=(",", ":"))
    return props


def _element_types(field, gguf) -> list:
    """The value's type, and an array's element types down to the innermost. gguf-py records an
    array's element type from its first element, so an empty array's (``[]`` of UINT8, or the
    first inner array of an array of arrays) is read from the array's own header: parts 3, 5, ...
    are the element types of the outer array and of each first inner array (found by a red-team
    pass: an empty array's type came out as ``ARRAY``)."""
    types = [gguf.GGUFValueType(t) for t in field.types]
    while types[-1] == gguf.GGUFValueType.ARRAY and 3 + 2 * (len(types) - 1) < len(field.parts):
        types.append(gguf.GGUFValueType(int(field.parts[3 + 2 * (len(types) - 1)][0])))
    return types


def _type_label(value_types) -> str:
    label = value_types[-1].name
    for _ in value_types[:-1]:
        label = f"ARRAY[{label}]"
    return label


def _encode_value(field, value_types, gguf) -> str:
    main = value_types[0]
    if main == gguf.GGUFValueType.STRING:
        return field.contents()
    if main != gguf.GGUFValueType.ARRAY:
        return _json_numbers(field.parts[-1][:1])[1:-1]
    if value_types[-1] == gguf.GGUFValueType.STRING:
        return json.dumps(field.contents(), ensure_ascii=False, separators=(",", ":"))
    # Numeric arrays (tokenizer scores and types run to 10^5 entries): one vectorized conversion of
    # the reader's parts instead of its per-element Python list; nested arrays come out flattened,
    # as gguf-py reads them.
    parts = [field.parts[i] for i in field.data]
    return _json_numbers(np.concatenate(parts) if parts else np.zeros(0, np.int64))


def _json_numbers(items: np.ndarray) -> str:
    """A JSON array of ``items``: booleans as true/false, integers in decimal, floats as the
    shortest decimal that reads back to the same float32/float64 (numpy's ``str``), non-finite
    floats as Python's json writes them (NaN, Infinity)."""
    if items.dtype.kind == "b":
        texts = np.where(items, "true", "false")
    elif items.dtype.kind == "f":
        texts = items.astype(str)
        texts = np.select([texts == "nan", texts == "inf", texts == "-inf"], ["NaN", "Infinity", "-Infinity"], texts)
    else:
        texts = items.astype(str)
    return "[" + ",".join(texts.tolist()) + "]"


def decode_metadata(
    props: onnx.ModelProto | Mapping[str, str] | Iterable[onnx.StringStringEntryProto],
) -> dict[str, object]:
    """The inverse of :func:`metadata_props`: GGUF key -> Python value (str, int, float, bool, list).

    ``props`` is a converted model, its ``metadata_props`` as they are (``model.metadata_props``),
    or a ``{key: value}`` mapping. Entries that did not come from the GGUF file (no value type
    recorded for them) are left out; a model that was not converted from GGUF gives ``{}``.

    Example::

        model = onnx.load("tiny.onnx")
        decode_metadata(model)["llama.block_count"]  # 2, an int
    """
    if isinstance(props, onnx.ModelProto):
        props = props.metadata_props
    if not isinstance(props, Mapping):
        props = {entry.key: entry.value for entry in props}
    try:
        types = json.loads(props.get(VALUE_TYPES_KEY, "{}"))
    except ValueError as error:
        raise ValidationError(f"metadata_props[{VALUE_TYPES_KEY!r}]", f"not JSON: {error}") from None
    if not isinstance(types, dict):
        raise ValidationError(f"metadata_props[{VALUE_TYPES_KEY!r}]", "not a JSON object of key -> value type")
    out: dict[str, object] = {}
    for key, label in types.items():
        if key not in props:  # a recorded type without its entry: the key is missing, as if never written
            continue
        text = props[key]
        try:
            out[key] = text if label == "STRING" else json.loads(text)
        except ValueError as error:
            raise ValidationError(f"metadata_props[{key!r}]", f"not the JSON of a {label} value: {error}") from None
    return out


def checked_context_length(metadata: Mapping[str, object], arch: object) -> int:
    """``{arch}.context_length``: a positive integer up to ``MAX_CONTEXT_LENGTH``.

    Raises:
        ValidationError: it is missing (``missing_metadata``), not a positive integer, or above
            the limit (``limit_exceeded``); the path names the key.
    """
    full = f"{arch}.context_length"
    value = metadata.get(full)
    if value is None:
        raise ValidationError(f"gguf.kv[{full!r}]", "missing: the decoder graph needs it", code="missing_metadata")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(f"gguf.kv[{full!r}]", f"must be a positive integer, not {value!r} ({value_kind(value)})")
    if value > MAX_CONTEXT_LENGTH:  # the graph's cos/sin tables hold context_length positions
        raise limit_exceeded(
            f"gguf.kv[{full!r}]",
            f"{value} positions exceed the limit of {MAX_CONTEXT_LENGTH} (the rotary tables hold every position)",
            value,
            MAX_CONTEXT_LENGTH,
        )
    return value


def value_kind(value: object) -> str:
    """The GGUF-facing name of a decoded metadata value's type, for messages."""
    return {bool: "a bool", int: "an integer", float: "a float", str: "a string", list: "an array"}.get(
        type(value), type(value).__name__
    )
