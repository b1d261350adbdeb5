"""The serde boundary: stock ``onnx.ModelProto`` (struct parts as unknown fields) <-> overlay.

Every public function taking a model goes through :func:`load`, which accepts an
``onnx.ModelProto``, an overlay ``onnx_struct`` ModelProto, serialized bytes, or a path; the rest
of the package then reads one coherent object model (the overlay messages of
``schemas/onnx_struct.proto``). Attaching struct parts to a stock model appends the encoded fields
with ``MergeFromString``, so nothing else in the model is touched or copied.
"""

from __future__ import annotations

import errno
import os
import pathlib
from collections.abc import Callable, Iterable
from typing import Union

import onnx
from google.protobuf.message import DecodeError, EncodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from onnx_struct._proto import pb  # noqa: TID251 - the serde layer
from onnx_struct.errors import ModelValueError, ValidationError
from onnx_struct.schema import struct_parts, wire_format

StructTypeProto = pb.StructTypeProto
StructProto = pb.StructProto
ModelLike = Union[onnx.ModelProto, "pb.ModelProto", bytes, str, os.PathLike]


# The stock views are cut from models of this size or more: below it the cut (a walk over the main
# graph's records) costs more than the copies it saves, above it at most about as much as the
# check's own pass over those records (figures: docs/benchmarks.md, "Figures behind design choices").
STOCK_CUT_MIN_BYTES = 16 << 20


class ModelDirectory(type(pathlib.Path())):
    """The directory of a model file as its path names it (the file's own name not resolved, as
    onnx and onnxruntime take it), carrying the directory of the file that name resolves to when
    that differs. A location is looked up in the first and may resolve into either: Hugging Face's
    cache links ``snapshots/<rev>/m.onnx`` and ``m.onnx.data`` to files in ``blobs/``, which
    onnxruntime accepts the same way (microsoft/onnxruntime#27374)."""

    resolved_file_directory: pathlib.Path | None = None


def resolve_path(path: str | os.PathLike) -> pathlib.Path:
    """``Path(path).resolve()`` with a symlink loop an OSError (ELOOP), as the OS reports it, not
    Python 3.11's RuntimeError: a base_dir or destination that loops is an I/O error like any other."""
    try:
        return pathlib.Path(path).resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path)) from None


def model_directory(path: str | os.PathLike) -> pathlib.Path:
    """Where the external files of the model file at ``path`` are looked up (see ModelDirectory)."""
    path = pathlib.Path(path)
    try:
        directory = ModelDirectory(resolve_path(path.absolute().parent))
        resolved = resolve_path(path).parent
    except OSError:  # a symlink loop: reading the file reports it
        return ModelDirectory(path.absolute().parent)
    if resolved != directory:
        directory.resolved_file_directory = resolved
    return directory


class LoadedModel:
    """An overlay model plus where its external payloads live (None: in memory, no file).

    Loaded from an ``onnx.ModelProto``, the overlay (``proto``) is parsed only when first asked
    for; until then ``struct_types``, ``struct_values`` and :meth:`find_value` read the proposal's
    unknown fields alone (:mod:`onnx_struct.schema.struct_parts`), with the same results. A lazy
    model reads its source when first asked, so it is for use within one call: ``load_model``
    parses whole at once (a snapshot, whatever later happens to the source).
    """

    def __init__(
        self,
        proto: pb.ModelProto | None,
        base_dir: pathlib.Path | None,
        serialized: bytes | None = None,
        *,
        source: onnx.ModelProto | None = None,
    ) -> None:
        self._proto = proto
        self.base_dir = base_dir
        # The bytes ``proto`` was parsed from (nothing mutates a loaded proto), so a stock view can be
        # parsed from them instead of serializing the overlay again; with ``source``: its serialization,
        # if the caller made it already (parsed when ``proto`` is first asked for).
        self._serialized = serialized
        self._source = source  # set while ``proto`` is not parsed yet
        self._stock: bytes | None = None  # see stock_serialized
        self._name_index: tuple | None = None  # (the values it indexes, name -> first index): find_value
        self._types = None
        self._values: struct_parts.StructValues | None = None

    def __repr__(self) -> str:
        state = "parsed" if self._proto is not None else "struct parts only"
        return f"LoadedModel({state}, base_dir={self.base_dir!r})"

    @property
    def proto(self) -> pb.ModelProto:
        if self._proto is None:
            data = self._serialized if self._serialized is not None else self._source.SerializeToString()
            # A stock object holds the proposal's fields as unknown fields, unparsed: one that is
            # not what the proposal says (3 bytes of garbage as struct_types) fails here.
            try:
                proto = pb.ModelProto.FromString(data)
            except DecodeError as error:
                raise ModelValueError(
                    "", f"the model's struct parts do not parse (protobuf: {_reason(error)})", code="not_parsable"
                ) from None
            self._proto, self._serialized, self._source = proto, data, None
        return self._proto

    @property
    def serialized(self) -> bytes | None:
        if self._source is not None:
            self.proto  # noqa: B018 - parses, keeping the bytes
        return self._serialized

    @property
    def stock_serialized(self) -> bytes | None:
        """:attr:`serialized` without the main graph's struct value records, computed once, for a
        model of at least :data:`STOCK_CUT_MIN_BYTES` (smaller ones: :attr:`serialized`): what
        stock views parse (:mod:`onnx_struct.schema.projections`), which would skip them as unknown
        fields after copying their inline payloads."""
        if self._stock is None:
            self._stock = data = self.serialized
            # Not for a graph without struct values: the walk over its records would find nothing.
            # Their sizes are not asked: ByteSize over them makes a transient as large as a payload.
            if data is not None and len(data) >= STOCK_CUT_MIN_BYTES and len(self.proto.graph.struct_initializer):
                try:
                    self._stock = struct_parts.without_struct_values(data)
                except wire_format.Malformed:  # the stock parse of the whole bytes reports it
                    pass
        return self._stock

    def release_serialized(self) -> None:
        """Drop :attr:`serialized` (its inline payloads are also in :attr:`proto`), keeping
        :attr:`stock_serialized`: for a model checked already and held by its caller alone
        (``InferenceSession`` while it repacks the weights). A later check reads the overlay's
        serialization, in which a oneof's lost member is gone."""
        self.stock_serialized  # noqa: B018 - computed while the bytes are here
        self._serialized = None

    def discard(self) -> None:
        """Drop everything this model holds (its bytes, parse and caches): for a model its caller
        alone holds and replaces by an equivalent one (``InferenceSession``). It must not be used
        again."""
        self._proto = self._serialized = self._source = self._stock = self._types = self._values = None

    def rebased(self, base_dir: pathlib.Path) -> LoadedModel:
        """The same model (parsed parts shared) with external payloads under ``base_dir``."""
        other = LoadedModel(self._proto, base_dir, self._serialized, source=self._source)
        other._types, other._values, other._stock = self._types, self._values, self._stock
        return other

    def _struct_values(self) -> struct_parts.StructValues | None:
        if self._source is None:
            return None
        if self._values is None:
            self._values = struct_parts.read_struct_values(self._source)
            if self._values is None:
                self.proto  # noqa: B018 - the whole parse raises what it raises today, or serves them
        return self._values

    @property
    def struct_types(self):
        if self._source is not None and self._types is None:
            self._types = struct_parts.read_struct_types(self._source)
        if self._source is not None and self._types is not None:
            return self._types
        return self.proto.struct_types

    @property
    def struct_values(self):
        values = self._struct_values()
        if values is None:
            return self.proto.graph.struct_initializer
        return values.all()

    def find_value(self, name: str) -> tuple[int, StructProto, memoryview | None]:
        """(index, value, inline payload) of the first struct value named ``name``.

        A payload that is not None is the value's ``raw_data`` (a zero-copy view of the model's
        bytes), and then the value's own ``raw_data`` is present but empty. Unknown names raise.
        """
        values = self._struct_values()
        candidates = values.stripped if values is not None else self.proto.graph.struct_initializer
        # One name -> first index map per model: finding each of N values by name is linear in N.
        if self._name_index is None or self._name_index[0] is not candidates:
            index_of: dict = {}
            for index, value in enumerate(candidates):
                index_of.setdefault(value.name, index)
            self._name_index = (candidates, index_of)
        index = self._name_index[1].get(name)
        if index is not None:
            value = candidates[index]
            return (index, value, values.payloads[index]) if values is not None else (index, value, None)
        known = ", ".join(
            v.name if isinstance(v.name, str) else repr(v.name) for v in candidates
        )  # proto2 gives non-UTF-8 as bytes
        raise ValidationError(
            "graph.struct_initializer", f"no struct value named {name!r}", known=known, code="unknown_value"
        )

    def struct_value(self, name: str) -> StructProto:
        values = self._struct_values()
        index, value, _ = self.find_value(name)
        return value if values is None else values.full(index)


def _unset_reader(path: pathlib.Path) -> bytes:
    raise RuntimeError(f"{path}: no model file reader installed (onnx_struct.payload.external installs it)")


# Model files are read under payload's file rules (payload/external.py: one reader for every file;
# non-regular files refused unopened). schema sits below payload, so the reader is handed down:
# payload/external.py installs it when imported, and the package's __init__ imports it, so it is
# in place before any onnx_struct module can be used.
_read_model_file: Callable[[pathlib.Path], bytes] = _unset_reader


def install_model_file_reader(reader: Callable[[pathlib.Path], bytes]) -> None:
    """Make :func:`load` read model files with ``reader`` (called by payload/external.py)."""
    global _read_model_file
    _read_model_file = reader


def load(
    model: ModelLike | LoadedModel, base_dir: str | os.PathLike | None = None, *, serialized: bytes | None = None
) -> LoadedModel:
    """Parse any accepted model form into the overlay object model (no payload is read).

    An ``onnx.ModelProto`` is not serialized until something needs more than its struct parts;
    ``serialized``: its serialization, when the caller has made it (not made again). For a path,
    ``serialized`` is the file's bytes as :func:`read_model_file` read them (not read again).
    """
    # A relative base_dir is resolved here, once, as a model's own directory is: a later os.chdir
    # must not change which file a call reads.
    if isinstance(base_dir, ModelDirectory):  # a loaded model's own: resolved, with its second root
        directory = base_dir
    else:
        # a ModelDirectory too: it carries what the model admits (payload/file_identity.py)
        directory = ModelDirectory(resolve_path(base_dir)) if base_dir is not None else None
    if isinstance(model, LoadedModel):
        return model if directory is None else model.rebased(directory)
    if isinstance(model, pb.ModelProto):
        return LoadedModel(model, directory)
    if isinstance(model, onnx.ModelProto):
        if struct_parts.AVAILABLE:
            return LoadedModel(None, directory, serialized, source=model)
        data = serialized if serialized is not None else model.SerializeToString()
        return LoadedModel(pb.ModelProto.FromString(data), directory, data)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        return LoadedModel(_parse(data, "<bytes>"), directory, data)
    if isinstance(model, (str, os.PathLike)):
        path = pathlib.Path(model)
        # read unless the caller read it (read_model_file): a FIFO, device or directory is refused unopened
        data = serialized if serialized is not None else _read_model_file(path)
        if not data:  # parses as an empty ModelProto, which onnx.checker would blame for its ir_version
            raise ValidationError("", f"{path}: the file is empty (0 bytes), not an ONNX model", code="not_parsable")
        return LoadedModel(_parse(data, str(path)), directory if directory is not None else model_directory(path), data)
    raise TypeError(f"expected onnx.ModelProto, bytes or a path, got {type(model).__name__}")


def read_model_file(path: str | os.PathLike) -> bytes:
    """The bytes of the model file at ``path``, under :func:`load`'s file rules (a FIFO, device
    or directory refused unopened); an empty file is a ValidationError (``not_parsable``)."""
    path = pathlib.Path(path)
    data = _read_model_file(path)
    if not data:
        raise ValidationError("", f"{path}: the file is empty (0 bytes), not an ONNX model", code="not_parsable")
    return data


def read_stock_model(path: str | os.PathLike) -> tuple[onnx.ModelProto, ModelDirectory]:
    """The model file at ``path`` parsed by onnx alone (struct parts stay unknown fields), and its
    directory: :func:`load`'s file rules and errors (a FIFO refused unopened, an empty, corrupt or
    GGUF file a ValidationError) without the overlay parse, so a pass that rewrites a plain model
    holds the file once, not three times."""
    path = pathlib.Path(path)
    data = read_model_file(path)
    try:
        proto = onnx.ModelProto.FromString(data)
    except DecodeError:
        _parse(data, str(path))  # raises load()'s error for these bytes
        raise
    return proto, model_directory(path)


def accepted_form(model: object) -> bool:
    """Whether :func:`load` accepts ``model``'s type (else it raises TypeError)."""
    return isinstance(
        model, (LoadedModel, pb.ModelProto, onnx.ModelProto, bytes, bytearray, memoryview, str, os.PathLike)
    )


def load_model(model: ModelLike | LoadedModel, base_dir: str | os.PathLike | None = None) -> LoadedModel:
    """Parse a model once for many calls: every public function accepts the result in place of
    the model, and skips re-reading the file or re-serializing an ``onnx.ModelProto`` (which costs
    a pass over every inline payload per call).

    Args:
        model: any model form (``onnx.ModelProto``, overlay ModelProto, bytes, path, LoadedModel).
        base_dir: the directory external payloads are read from (default: the model file's).

    Returns:
        The LoadedModel, parsed.

    Raises:
        ValidationError: the file is missing, empty or not a parsable ONNX model.
        TypeError: ``model`` is not a model form.

    >>> from onnx import helper
    >>> from onnx_struct import add_struct_values, formats
    >>> model = helper.make_model(helper.make_graph([], "g", [], []))
    >>> block = bytes([0x00, 0x3C]) + bytes([0x9A]) * 16  # Q4_0: d = 1.0, codes 10 (low), 9 (high)
    >>> add_struct_values(model, formats.get("Q4_0").make_value(model, "weight", (32,), block))
    >>> from onnx_struct import decode
    >>> loaded = load_model(model)
    >>> {v.name: decode(v.name, loaded)[[0, 16]] for v in loaded.struct_values}
    {'weight': array([2., 1.], dtype=float32)}
    """
    loaded = load(model, base_dir)
    loaded.proto  # noqa: B018 - parsed now: a snapshot of an onnx.ModelProto the caller may edit later
    return loaded


GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (gguf.GGUF_MAGIC, little-endian)


def _parse(data: bytes, origin: str) -> pb.ModelProto:
    try:
        return pb.ModelProto.FromString(data)
    except DecodeError as error:
        if data[:4] == GGUF_MAGIC:  # a GGUF file under an .onnx name: say what it is and what reads it
            raise ModelValueError(
                "",
                f"{origin} is a GGUF file, not an ONNX model; convert it first: onnx-struct from-gguf {origin} OUT.onnx",
                code="not_parsable",
            ) from None
        raise ModelValueError(
            "", f"{origin} is not a parsable ONNX model (protobuf: {_reason(error)})", code="not_parsable"
        ) from None


def _reason(error: DecodeError) -> str:
    # protobuf's message names its own class ("Error parsing message with type
    # 'onnx_struct.ModelProto': ..."), an internal name; keep only its reason.
    return str(error).rpartition(": ")[2] or "not protobuf"


def copy_without_struct_values(model: pb.ModelProto) -> pb.ModelProto:
    """A copy of the overlay ``model`` without its graph's struct values, field by field so that
    no inline payload is copied; a model or graph with unknown fields is copied whole instead
    (and its struct values then deleted), which keeps those fields as they are."""
    copy = type(model)()
    if len(UnknownFieldSet(model)) or len(UnknownFieldSet(model.graph)):
        copy.CopyFrom(model)
        del copy.graph.struct_initializer[:]
        return copy
    for target, source, skip in ((copy, model, "graph"), (copy.graph, model.graph, "struct_initializer")):
        for field, value in source.ListFields():
            if field.name == skip:
                continue
            if field.is_repeated:
                getattr(target, field.name).extend(value)
            elif field.message_type is not None:
                getattr(target, field.name).CopyFrom(value)
            else:
                setattr(target, field.name, value)
    if model.HasField("graph"):
        copy.graph.SetInParent()
    return copy


def from_onnx(model: onnx.ModelProto) -> pb.ModelProto:
    """Stock model -> overlay: the struct parts, unknown fields to onnx, become real fields.

    Args:
        model: the stock model.

    Returns:
        A new overlay ModelProto; ``model`` is not changed.

    Raises:
        google.protobuf.message.DecodeError: as protobuf's whole parse raises it (e.g. nesting past
            its limit).
    """
    return pb.ModelProto.FromString(model.SerializeToString())


def to_onnx(model: pb.ModelProto) -> onnx.ModelProto:
    """Overlay -> stock model (struct parts kept as unknown fields, written back on save).

    Args:
        model: the overlay model.

    Returns:
        A new ``onnx.ModelProto``; ``model`` is not changed.

    Raises:
        ValidationError: the model is too large for protobuf to copy (``limit_exceeded``).
    """
    # Within a few bytes of 2 GiB protobuf may refuse to write or read back what it parsed (the
    # overlay's parse already passed the nesting limit, which onnx's, skipping struct parts,
    # cannot exceed).
    try:
        return onnx.ModelProto.FromString(model.SerializeToString())
    except (DecodeError, EncodeError) as error:
        raise ValidationError(
            "",
            f"the model is too large for protobuf to copy ({error}); store the struct payloads "
            "externally (save_with_external_data)",
            code="limit_exceeded",
        ) from None


def get_struct_types(model: ModelLike) -> list[StructTypeProto]:
    """The model-level declarations ``ModelProto.struct_types``, in index order.

    **A snapshot, not a live view**: for an ``onnx.ModelProto`` (where the struct parts are
    unknown fields), bytes or a path the list holds parsed copies, so editing them changes
    nothing in ``model``. To write edits back, pass the edited list to :func:`set_struct_types`.

    Args:
        model: any model form (``onnx.ModelProto``, overlay ModelProto, bytes, path, LoadedModel).

    Returns:
        The declarations, index ``i`` at position ``i``.

    Raises:
        ValidationError: the model cannot be read or parsed.
        TypeError: ``model`` is not a model form.
    """
    return list(load(model).struct_types)


def get_struct_values(model: ModelLike) -> list[StructProto]:
    """The struct values of the main graph (``GraphProto.struct_initializer``), in order.

    **A snapshot, not a live view**: for an ``onnx.ModelProto`` (where the struct parts are
    unknown fields), bytes or a path the list holds parsed copies, so editing them changes
    nothing in ``model``. To write edits back, pass the edited list to :func:`set_struct_values`.

    Args:
        model: any model form (``onnx.ModelProto``, overlay ModelProto, bytes, path, LoadedModel).

    Returns:
        The struct values, in order.

    Raises:
        ValidationError: the model cannot be read or parsed.
        TypeError: ``model`` is not a model form.

    >>> from onnx import helper
    >>> from onnx_struct import add_struct_values, formats
    >>> model = helper.make_model(helper.make_graph([], "g", [], []))
    >>> block = bytes([0x00, 0x3C]) + bytes([0x9A]) * 16  # Q4_0: d = 1.0, codes 10 (low), 9 (high)
    >>> add_struct_values(model, formats.get("Q4_0").make_value(model, "weight", (32,), block))
    >>> values = get_struct_values(model)
    >>> values[0].name = "renamed"
    >>> get_struct_values(model)[0].name
    'weight'
    >>> set_struct_values(model, values)
    >>> get_struct_values(model)[0].name
    'renamed'
    """
    return list(load(model).struct_values)


def set_struct_types(model: onnx.ModelProto | pb.ModelProto, declarations: Iterable[StructTypeProto]) -> None:
    """Replace ``model.struct_types`` in place by ``declarations`` (e.g. an edited
    :func:`get_struct_types` list). Indices are positions: references keep their numbers.

    Args:
        model: the in-memory model to change.
        declarations: the new declarations, in index order.

    Raises:
        TypeError: ``model`` is not an in-memory ModelProto.
    """
    declarations = list(declarations)
    _replace(model, "struct_types", lambda proto: proto.struct_types, declarations)


def set_struct_values(model: onnx.ModelProto | pb.ModelProto, values: Iterable[StructProto]) -> None:
    """Replace the main graph's struct values in place by ``values`` (e.g. an edited
    :func:`get_struct_values` list); the rest of the model is left as it was.

    Args:
        model: the in-memory model to change.
        values: the new struct values, in order.

    Raises:
        TypeError: ``model`` is not an in-memory ModelProto.
    """
    values = list(values)
    _replace(model, "struct values", lambda proto: proto.graph.struct_initializer, values)


def _replace(model, what: str, field, items: list) -> None:
    if not isinstance(model, (onnx.ModelProto, pb.ModelProto)):
        raise TypeError(f"set {what}: expected an in-memory ModelProto, got {type(model).__name__}")
    if isinstance(model, pb.ModelProto):
        target = field(model)
        items = [_copy(item) for item in items]  # the list may hold the very messages being cleared
        del target[:]
        target.extend(items)
        return
    # onnx.ModelProto holds struct parts as unknown fields: rebuild them through the overlay.
    overlay = from_onnx(model)
    target = field(overlay)
    del target[:]
    target.extend(items)
    model.CopyFrom(to_onnx(overlay))


def _copy(message):
    fresh = type(message)()
    fresh.CopyFrom(message)
    return fresh


def add_struct_types(model: onnx.ModelProto | pb.ModelProto, *declarations: StructTypeProto) -> list[int]:
    """Append declarations to ``model.struct_types`` in place.

    Args:
        model: the in-memory model to change.
        *declarations: the declarations to append, in order.

    Returns:
        Their indices in ``model.struct_types``, for references and struct values.

    Raises:
        TypeError: ``model`` is not an in-memory ModelProto.
    """
    first = len(load(model).struct_types) if isinstance(model, onnx.ModelProto) else len(model.struct_types)
    _append(model, pb.ModelProto(struct_types=declarations))
    return list(range(first, first + len(declarations)))


def add_struct_values(model: onnx.ModelProto | pb.ModelProto, *values: StructProto) -> None:
    """Append struct values to the main graph's ``struct_initializer`` in place.

    Args:
        model: the in-memory model to change.
        *values: the StructProtos to append, in order.

    Raises:
        TypeError: ``model`` is not an in-memory ModelProto.
    """
    _append(model, pb.ModelProto(graph=pb.GraphProto(struct_initializer=values)))


def struct_values_bytes(model: onnx.ModelProto) -> int:
    """The serialized size of the main graph's struct values in a stock model (0 when it has
    none), without the model serialized or parsed again: each value's bytes once at a time."""
    return sum(
        len(field.data) for field in UnknownFieldSet(model.graph) if field.field_number == _STRUCT_INITIALIZER_FIELD
    )


def struct_value_fragment_head(value: StructProto, payload_length: int) -> bytes:
    """The bytes that, followed by a payload of ``payload_length`` bytes, are a serialized
    ModelProto holding only ``value`` (its own ``raw_data`` and ``external_data`` left out, that
    payload as its ``raw_data``) in the main graph's ``struct_initializer``. Appended to a
    serialized model they append the value to it: protobuf merges a message field given twice and
    appends to its repeated fields. The payload is written after them from wherever it is, never
    copied into a message.
    """
    head = StructProto()
    head.CopyFrom(value)
    head.ClearField("raw_data")
    del head.external_data[:]
    raw = _varint(_RAW_DATA_FIELD << 3 | 2) + _varint(payload_length)
    value_length = head.ByteSize() + len(raw) + payload_length
    value_tag = _varint(_STRUCT_INITIALIZER_FIELD << 3 | 2) + _varint(value_length)
    graph_tag = _varint(_GRAPH_FIELD << 3 | 2) + _varint(len(value_tag) + value_length)
    return graph_tag + value_tag + head.SerializeToString() + raw


def add_value_infos(
    model: onnx.ModelProto | pb.ModelProto,
    *,
    inputs: Iterable[pb.ValueInfoProto] = (),
    outputs: Iterable[pb.ValueInfoProto] = (),
    value_info: Iterable[pb.ValueInfoProto] = (),
) -> None:
    """Append (struct-typed) ValueInfoProtos to the main graph's inputs/outputs/value_info.

    Args:
        model: the in-memory model to change.
        inputs: appended to ``graph.input``.
        outputs: appended to ``graph.output``.
        value_info: appended to ``graph.value_info``.

    Raises:
        TypeError: ``model`` is not an in-memory ModelProto.
    """
    graph = pb.GraphProto(input=list(inputs), output=list(outputs), value_info=list(value_info))
    _append(model, pb.ModelProto(graph=graph))


def _append(model: onnx.ModelProto | pb.ModelProto, fragment: pb.ModelProto) -> None:
    # Merging a serialized fragment appends repeated fields (known or unknown to the target class)
    # and leaves every other field as it was, so a stock model is never round-tripped whole.
    if not isinstance(model, (onnx.ModelProto, pb.ModelProto)):
        raise TypeError(f"expected an in-memory ModelProto, got {type(model).__name__}")
    model.MergeFromString(fragment.SerializeToString())


_ONE_BYTE_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    if value < 128:  # tags and the lengths of names: almost every call
        return _ONE_BYTE_VARINTS[value]
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def length_delimited(field_number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (a message, string or bytes), ready to concatenate.

    Used to append thousands of small entries with a single ``MergeFromString`` instead of
    building each one as a message (see ``projections.stock_view``).
    """
    return _varint(field_number << 3 | 2) + _varint(len(payload)) + payload


_GRAPH_FIELD = pb.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_STRUCT_INITIALIZER_FIELD = pb.GraphProto.DESCRIPTOR.fields_by_name["struct_initializer"].number
_RAW_DATA_FIELD = StructProto.DESCRIPTOR.fields_by_name["raw_data"].number
_GRAPH_INPUT_TAG = length_delimited(11, b"")[:1]  # GraphProto.input = 11
_VALUE_INFO_NAME_TAG = length_delimited(1, b"")[:1]  # ValueInfoProto.name = 1
_VALUE_INFO_TYPE_TAG = length_delimited(2, b"")[:1]  # ValueInfoProto.type = 2


def graph_inputs_fragment(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """Serialized ``GraphProto.input`` entries for ``(name, serialized TypeProto)`` pairs, to
    append thousands of inputs with one ``MergeFromString`` (building each ValueInfoProto as a
    message costs more than the whole fragment; figures in docs/benchmarks.md). Short entries,
    nearly all of them, skip the general varint."""
    parts = []
    small = _ONE_BYTE_VARINTS
    for name, type_bytes in entries:
        name_bytes = name if isinstance(name, bytes) else name.encode()  # proto2 hands non-UTF-8 names over as bytes
        inner = _VALUE_INFO_NAME_TAG + (small[len(name_bytes)] if len(name_bytes) < 128 else _varint(len(name_bytes)))
        inner += name_bytes + _VALUE_INFO_TYPE_TAG
        inner += (small[len(type_bytes)] if len(type_bytes) < 128 else _varint(len(type_bytes))) + type_bytes
        parts.append(_GRAPH_INPUT_TAG + (small[len(inner)] if len(inner) < 128 else _varint(len(inner))) + inner)
    return b"".join(parts)
