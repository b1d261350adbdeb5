"""Bounds-checked, vectorized reads of the leaves of a struct payload (``view``, ``StructView``).

A view pairs a payload (inline ``raw_data``, or the exact external range, copied into memory on
the first read of a leaf: a file that changes after the check is a ValidationError, never a
SIGBUS as with a memory map) with the leaf layout of its declaration (:meth:`onnx_struct.layout.TypeTable.leaves`).
The payload length is verified against the size function before any byte is read.

Reading a leaf takes one of four routes, all exact under the proposal's physical rules (tight
packing, declaration order, bits LSB-first within a byte, little-endian multi-byte values):

* **zero copy**: offset, strides and width are byte multiples and the width is the dtype's full
  width; the leaf is a read-only strided numpy view of the payload;
* **sub-byte rows**: 1/2/4-bit elements contiguous within byte-aligned rows (INT4 values, 4-bit
  components); the rows are unpacked with a few whole-array shift/mask passes;
* **phase columns**: outer strides are byte multiples; the last dimension is split into at most 8
  columns whose elements all start at the same bit of a byte, each read as one strided unaligned
  little-endian load (a view), one shift and one mask (6-bit components, FLOAT16 at bit 4);
* **gather**: any other affine bit layout; element bit positions are computed by broadcasting
  and each element is assembled from the bytes it spans (shift, mask), in chunks of
  :data:`CHUNK` elements to bound memory.

No route loops per element or per block (loops run over chunks, columns or bytes of an element).
Every read stays inside the payload: strided views are bounds-checked by numpy's constructor,
wide loads are used only where the whole load fits, and gathered byte indices are clamped (the
extra bytes fetched past an element's last bit are masked off).
"""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from onnx_struct.errors import LeafNotFoundError, ValidationError
from onnx_struct.layout.table import Leaf, TypeTable, read_constant
from onnx_struct.payload import external
from onnx_struct.schema.model import LoadedModel, StructProto, StructTypeProto, load

# Elements handled per vectorized step of the general route and of nibble unpacking: big enough
# to amortize numpy's per-call cost, small enough that temporaries stay in the CPU cache.
CHUNK = 1 << 16

__all__ = ["StructView", "view", "view_buffer", "read_leaf", "value_declaration"]


class StructView(Mapping):
    """Leaves of one struct payload by path: ``v["qs"]``, ``"d" in v``, ``v.leaves()``.

    Arrays returned for byte-aligned full-width leaves are zero-copy, read-only views of the
    payload; other leaves are materialized on each access (nothing is cached).
    """

    def __init__(self, buffer, layout: tuple[Leaf, ...], name: str = "") -> None:
        # ``buffer`` is any buffer, or an ExternalPayload read on the first access to a leaf
        # (so a view used only for its layout, as by ``lower``, reads nothing).
        self._source = buffer if isinstance(buffer, ExternalPayload) else None
        self._array = None if self._source is not None else np.frombuffer(buffer, dtype=np.uint8)
        self._layout = tuple(layout)
        self._by_path = {leaf.path: leaf for leaf in self._layout}
        self.name = name

    @property
    def _data(self) -> np.ndarray:
        if self._array is None:
            self._array = self._source.read()  # two threads may both read: same bytes, one kept
        return self._array

    @property
    def layout(self) -> tuple[Leaf, ...]:
        """The leaves of the declaration, in payload order (constants where declared)."""
        return self._layout

    @property
    def paths(self) -> list[str]:
        return [leaf.path for leaf in self._layout]

    @property
    def nbytes(self) -> int:
        """Payload length in bytes (= size_in_bits / 8)."""
        return self._source.length if self._array is None else int(self._array.size)

    @property
    def buffer(self) -> np.ndarray:
        """The whole payload as a read-only uint8 array."""
        data = self._data.view()
        data.flags.writeable = False
        return data

    def leaf(self, path: str) -> Leaf:
        """The layout entry of ``path`` (LeafNotFoundError lists the valid paths)."""
        try:
            return self._by_path[path]
        except KeyError:
            known = ", ".join(repr(p) for p in self._by_path) or "none"
            where = f"struct value {self.name!r}" if self.name else "struct view"
            raise LeafNotFoundError(where, f"no leaf {path!r}; leaves are: {known}", leaf=path) from None

    def __getitem__(self, path: str) -> np.ndarray:
        return read_leaf(self._data, self.leaf(path))

    def __contains__(self, path: object) -> bool:
        return path in self._by_path

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_path)

    def __len__(self) -> int:
        return len(self._by_path)

    def leaves(self) -> dict[str, np.ndarray]:
        """Every leaf (constants included) as ``{path: array}`` in payload order."""
        return {leaf.path: read_leaf(self._data, leaf) for leaf in self._layout}

    def __repr__(self) -> str:
        return f"StructView({self.name!r}, {self.nbytes} bytes, leaves={self.paths})"


# ---------------------------------------------------------------------- entry points
def view(
    value: StructProto | str,
    model=None,
    *,
    base_dir: str | os.PathLike | None = None,
) -> StructView:
    """A :class:`StructView` of a struct value: a StructProto, or the name of one in ``model``.

    ``model`` (any form :func:`onnx_struct.model.load` accepts, or a plain list of declarations)
    supplies ``struct_types`` for
    ``type`` indices and ``type_index`` references, and, when it is a path, the directory external
    payloads are resolved against (``base_dir`` overrides it). The payload length is checked
    against the declaration's size before any byte is read; an external payload's exact range is
    read into memory when a leaf is first read (the file is checked again then).

    >>> v = view("weight", "model.onnx")
    >>> v["values"].dtype, v["scale"]
    (dtype(int4), array(0.125, dtype=float32))
    """
    loaded, struct_types = load_declarations(model, base_dir)
    if isinstance(value, str):
        if loaded is None:
            raise ValidationError("graph.struct_initializer", f"struct value {value!r} named without a model")
        # ``inline``: the payload as a view of the model's bytes, when the load gives one
        index, proto, inline = loaded.find_value(value)  # raises "no struct value named ..."
        where = f"graph.struct_initializer[{index}] ({value!r})"
    else:
        proto, inline = value, None
        where = f"struct value {value.name!r}" if value.name else "struct value"
    directory = pathlib.Path(base_dir) if base_dir is not None else (loaded.base_dir if loaded else None)
    table = TypeTable(struct_types)
    declaration = value_declaration(proto, table, where)
    layout, nbytes = layout_and_size(table, declaration, where)
    buffer = _payload(proto, nbytes, directory, where, inline)
    return StructView(buffer, layout, proto.name)


def view_buffer(buffer, struct_type: StructTypeProto | int, model=None, *, name: str = "") -> StructView:
    """A view of raw bytes (any buffer) under a declaration, or an index into ``model``'s types.

    The buffer length must equal the declaration's size in bytes.
    """
    table = TypeTable(load_declarations(model, None)[1])
    where = f"struct value {name!r}" if name else "buffer"
    if isinstance(struct_type, int):
        declaration = table.declaration(struct_type, f"{where}.type")
    else:
        declaration = struct_type
    layout, nbytes = layout_and_size(table, declaration, where)
    data = memoryview(buffer).cast("B") if not isinstance(buffer, np.ndarray) else buffer.reshape(-1).view(np.uint8)
    if len(data) != nbytes:
        raise ValidationError(
            where, f"payload is {len(data)} bytes; the type requires {nbytes}", expected=nbytes, actual=len(data)
        )
    return StructView(data, layout, name)


def load_declarations(model, base_dir) -> tuple[LoadedModel | None, Sequence[StructTypeProto]]:
    """(the loaded model or None, its declarations); ``model`` may also be a list of declarations."""
    if model is None:
        return None, ()
    if isinstance(model, (list, tuple)):
        return None, model
    loaded = load(model, base_dir)
    return loaded, list(loaded.struct_types)  # a list: callers pass it on as a list of declarations


def value_declaration(value: StructProto, table: TypeTable, where: str) -> StructTypeProto:
    """The concrete root declaration of a struct value (inline ``struct_type`` or ``type`` index)."""
    if value.HasField("struct_type"):
        if value.type != -1:
            raise ValidationError(f"{where}.type", f"type must be -1 when struct_type is present, not {value.type}")
        return value.struct_type
    if value.type == -1:
        raise ValidationError(f"{where}.type", "type is -1 but struct_type is absent")
    return table.declaration(value.type, f"{where}.type")


def layout_and_size(table: TypeTable, declaration: StructTypeProto, where: str) -> tuple[tuple[Leaf, ...], int]:
    kind = declaration.WhichOneof("kind")
    if kind not in ("array", "structure", "bit_packing"):
        raise ValidationError(
            where, f"the root of a struct value must be a concrete declaration, not {kind or 'unset'}"
        )
    bits = table.size(declaration, where)  # iterative and memoized: no RecursionError to catch
    if bits % 8:
        raise ValidationError(where, f"size {bits} bits is not a whole number of bytes", size_in_bits=bits)
    return table.leaves(declaration, where), bits // 8


class ExternalPayload:
    """A verified external range, read into memory (a copy, never a memory map) on first use."""

    def __init__(self, file: pathlib.Path, offset: int, length: int, where: str) -> None:
        self.file, self.offset, self.length, self.where = file, offset, length, where

    def read(self) -> np.ndarray:
        return external.read_range(self.file, self.offset, self.length, f"{self.where}.external_data")


def _payload(value: StructProto, nbytes: int, base_dir: pathlib.Path | None, where: str, inline=None):
    if len(value.external_data):
        located = external.external_payload_range(value, nbytes, base_dir, where)
        if located is None:
            raise ValidationError(
                f"{where}.external_data",
                "external payload but no base directory (load the model from a path or pass base_dir)",
            )
        return ExternalPayload(located[0], located[1], nbytes, where)
    data = value.raw_data if inline is None else inline  # raw_data copies the payload out: read it once
    if len(data) != nbytes:
        raise ValidationError(
            where,
            f"payload is {len(data)} bytes; the type requires {nbytes}",
            expected=nbytes,
            actual=len(data),
        )
    return data


# ---------------------------------------------------------------------- leaf extraction
def read_leaf(data: np.ndarray, leaf: Leaf) -> np.ndarray:
    """The elements of ``leaf`` in the uint8 payload ``data`` as an array of ``leaf.dtype``."""
    if leaf.kind == "constant":
        array = read_constant(leaf.constant, leaf.source)  # dims verified against the data first
        array.flags.writeable = False
        return array
    width = leaf.bit_width
    if leaf.count == 0:
        # No payload bounds an empty leaf's other dimensions: a uint64 one can exceed numpy's.
        try:
            return np.zeros(leaf.shape, dtype=leaf.dtype)
        except ValueError:
            raise ValidationError(leaf.source, f"empty leaf of shape {leaf.shape} has no numpy shape") from None
    if is_zero_copy(leaf):
        array = byte_strided(data, leaf.shape, leaf.dtype.newbyteorder("<"), leaf.bit_offset, leaf.strides)
        array.flags.writeable = False
        return array
    shape, strides = merged_dims(leaf.shape, leaf.strides)
    if width in (1, 2, 4) and strides and strides[-1] == width and all(s % 8 == 0 for s in strides[:-1]):
        if (leaf.bit_offset % 8) % width == 0:
            raw = _sub_byte_rows(data, leaf.bit_offset, shape, strides, width)
            return _as_dtype(raw, leaf).reshape(leaf.shape)
    columns = phase_columns(leaf.bit_offset, shape, strides)
    if columns is not None and all(offset % 8 + width <= 64 for _, offset, _, _ in columns):
        raw = np.empty(shape, dtype=uint_for_bits(width))
        for selector, offset, column_shape, byte_strides in columns:
            raw[selector] = _read_constant_phase(data, offset, column_shape, byte_strides, width)
        return (raw.view(leaf.dtype) if leaf.kind == "tensor" and width % 8 == 0 else _as_dtype(raw, leaf)).reshape(
            leaf.shape
        )
    if leaf.kind == "tensor" and width % 8 == 0:
        raw = _gather_bytes(data, leaf.bit_offset, shape, strides, width // 8)
        return raw.view(leaf.dtype.newbyteorder("<")).reshape(leaf.shape)
    raw = _gather_bits(data, leaf.bit_offset, shape, strides, width)
    return _as_dtype(raw, leaf).reshape(leaf.shape)


def byte_strided(buffer, shape, dtype, bit_offset: int, bit_strides) -> np.ndarray:
    """The ndarray over ``buffer`` whose element ``idx`` starts at bit
    ``bit_offset + sum(idx * bit_strides)`` (all multiples of 8): the one place where a bit layout
    becomes numpy byte strides, for reading (view), writing (pack) and feeding (runtime)."""
    return np.ndarray(
        shape, dtype=dtype, buffer=buffer, offset=bit_offset // 8, strides=tuple(s // 8 for s in bit_strides)
    )


def is_zero_copy(leaf: Leaf) -> bool:
    """True when the leaf is a plain strided view of bytes (no bit shifting needed)."""
    return (
        leaf.kind != "constant"
        and leaf.bit_offset % 8 == 0
        and all(s % 8 == 0 for s in leaf.strides)
        and leaf.bit_width == leaf.dtype.itemsize * 8
    )


def _as_dtype(raw: np.ndarray, leaf: Leaf) -> np.ndarray:
    """Raw unsigned bit patterns -> the leaf's dtype. ml_dtypes keeps a sub-byte value as the raw
    low bits of one byte (INT4 -1 is 0x0F), so a uint8 view is exact for every sub-byte type."""
    if leaf.kind == "tensor":
        return raw.astype(np.uint8, copy=False).view(leaf.dtype)
    return raw.astype(leaf.dtype, copy=False)


def merged_dims(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Merge adjacent dimensions that are contiguous in bits (and drop size-1 dimensions), so a
    fully contiguous leaf becomes one dimension. Element order is unchanged."""
    out_shape: list[int] = []
    out_strides: list[int] = []
    for size, stride in zip(shape, strides, strict=True):
        if size == 1:
            continue
        if out_shape and out_strides[-1] == stride * size:
            out_shape[-1] *= size
            out_strides[-1] = stride
        else:
            out_shape.append(size)
            out_strides.append(stride)
    return tuple(out_shape), tuple(out_strides)


def bit_positions(
    bit_offset: int, shape: tuple[int, ...], strides: tuple[int, ...], start: int, stop: int
) -> np.ndarray:
    """Start bits (int64) of the elements with C-order flat indices ``start:stop``."""
    flat = np.arange(start, stop, dtype=np.int64)
    positions = np.full(stop - start, bit_offset, dtype=np.int64)
    suffix = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        index = flat // suffix % size if suffix > 1 else flat % size
        positions += index * stride
        suffix *= size
    return positions


def chunks(count: int, size: int = CHUNK) -> Iterator[tuple[int, int]]:
    for start in range(0, count, size):
        yield start, min(start + size, count)


def uint_for_bits(bits: int) -> np.dtype:
    """Smallest little-endian unsigned integer dtype of 1, 2, 4 or 8 bytes holding ``bits``."""
    for size in (1, 2, 4, 8):
        if bits <= 8 * size:
            return np.dtype(f"<u{size}")
    raise ValueError(f"{bits} bits do not fit in 64")


def phase_columns(bit_offset: int, shape: tuple[int, ...], strides: tuple[int, ...]):
    """Split an affine layout into at most 8 sub-layouts ("columns") whose elements all start at
    the same bit within a byte, so each is a strided byte view plus one scalar shift.

    Along the last dimension element ``i`` starts at phase ``(offset + i * stride) % 8``, which
    repeats every ``8 / gcd(stride, 8)`` elements; column ``k`` takes elements ``k::period``.
    Returns ``[(selector, bit_offset, shape, byte_strides)]``, or None when an outer stride is not
    a whole number of bytes (those layouts use the gather route).
    """
    if not shape:
        return [((), bit_offset, (), ())]
    if any(s % 8 for s in strides[:-1]):
        return None
    stride = strides[-1]
    period = 8 // math.gcd(stride, 8)
    outer = tuple(s // 8 for s in strides[:-1])
    columns = []
    for k in range(min(period, shape[-1])):
        count = len(range(k, shape[-1], period))
        selector = (..., slice(k, None, period))
        columns.append((selector, bit_offset + k * stride, shape[:-1] + (count,), outer + (period * stride // 8,)))
    return columns


def _read_constant_phase(data: np.ndarray, bit_offset: int, shape, byte_strides, width: int) -> np.ndarray:
    """Elements that all start at phase ``bit_offset % 8`` (``phase + width <= 64``): one unaligned
    little-endian load per element (a strided view, no copy), then one shift and one mask. Elements
    whose wide load would pass the payload's end are assembled from the bytes they span instead."""
    phase, start = bit_offset % 8, bit_offset // 8
    span = (phase + width + 7) // 8  # bytes an element touches: all inside the payload
    load = uint_for_bits(8 * span)
    result = uint_for_bits(width)
    mask = load.type((1 << width) - 1)
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=result)
    last_start = start + sum((n - 1) * b for n, b in zip(shape, byte_strides, strict=True))
    fits = last_start + load.itemsize <= data.size

    def wide(count_shape, first):
        words = np.ndarray(count_shape, dtype=load, buffer=data, offset=first, strides=byte_strides)
        bits = words >> load.type(phase)
        bits &= mask
        return bits.astype(result, copy=False)

    def exact(count_shape, first):
        spanned = np.ndarray(
            count_shape + (span,), dtype=np.uint8, buffer=data, offset=first, strides=byte_strides + (1,)
        )
        bits = spanned[..., 0].astype(load)
        for j in range(1, span):  # per byte of an element, not per element
            bits |= spanned[..., j].astype(load) << load.type(8 * j)
        bits >>= load.type(phase)
        bits &= mask
        return bits.astype(result, copy=False)

    if fits:
        return wide(shape, start)
    if len(shape) == 1:  # only the last few elements need the exact route
        head = max(0, min(shape[0], (data.size - load.itemsize - start) // byte_strides[0] + 1))
        return np.concatenate([wide((head,), start), exact((shape[0] - head,), start + head * byte_strides[0])])
    return exact(shape, start)


def _gather_bits(data: np.ndarray, bit_offset: int, shape, strides, width: int) -> np.ndarray:
    """Elements of ``width`` (1-64) bits at any positions, as uint64 bit patterns."""
    count = math.prod(shape)
    out = np.empty(count, dtype=np.uint64)
    last = data.size - 1
    mask = np.uint64((1 << width) - 1)
    # An element starting at bit s (0-7) of its first byte spans ceil((s + width) / 8) bytes; fetch
    # the worst case; bytes beyond the element are clamped to the payload and masked away.
    span = min((7 + width + 7) // 8, 8)
    for start, stop in chunks(count):
        positions = bit_positions(bit_offset, shape, strides, start, stop)
        first = positions >> 3
        shift = (positions & 7).astype(np.uint64)
        acc = data[first].astype(np.uint64)
        for j in range(1, span):
            acc |= data[np.minimum(first + j, last)].astype(np.uint64) << np.uint64(8 * j)
        acc >>= shift
        if width > 57:  # may need a ninth byte: its low bits land above bit 64 - shift
            ninth = data[np.minimum(first + 8, last)].astype(np.uint64)
            acc |= np.where(shift == 0, np.uint64(0), ninth << (np.uint64(64) - shift))
        out[start:stop] = acc & mask
    return out


def _gather_bytes(data: np.ndarray, bit_offset: int, shape, strides, nbytes: int) -> np.ndarray:
    """Whole-byte-width elements at unaligned bit positions, as ``(count, nbytes)`` uint8 rows in
    little-endian order (any width: FLOAT16 at bit 4, COMPLEX128 at bit 3)."""
    count = math.prod(shape)
    out = np.empty((count, nbytes), dtype=np.uint8)
    last = data.size - 1
    byte_steps = np.arange(nbytes, dtype=np.int64)
    for start, stop in chunks(count, max(1, CHUNK // nbytes)):
        positions = bit_positions(bit_offset, shape, strides, start, stop)
        first = (positions >> 3)[:, None] + byte_steps
        shift = (positions & 7).astype(np.uint16)[:, None]
        low = data[first].astype(np.uint16)
        high = data[np.minimum(first + 1, last)].astype(np.uint16)
        out[start:stop] = ((low | (high << np.uint16(8))) >> shift).astype(np.uint8)
    return out


def _sub_byte_rows(data: np.ndarray, bit_offset: int, shape, strides, width: int) -> np.ndarray:
    """1/2/4-bit elements contiguous along the last dimension, every row starting at the same
    phase within a byte: unpack the rows' bytes and cut each row to its elements."""
    per_byte = 8 // width
    skip = (bit_offset % 8) // width  # elements of the first byte that precede the leaf
    inner = shape[-1]
    row_bytes = -(-(skip + inner) * width // 8)
    rows = byte_strided(data, shape[:-1] + (row_bytes,), np.uint8, bit_offset, strides[:-1] + (8,))
    flat = np.ascontiguousarray(rows).reshape(-1)  # a view when the rows are contiguous
    unpacked = unpack_sub_byte(flat, width).reshape(shape[:-1] + (row_bytes * per_byte,))
    if skip == 0 and row_bytes * per_byte == inner:
        return unpacked
    return np.ascontiguousarray(unpacked[..., skip : skip + inner])


def unpack_sub_byte(packed: np.ndarray, width: int) -> np.ndarray:
    """Split each byte into ``8 // width`` elements, LSB first (uint8 results)."""
    if width == 1:
        return np.unpackbits(packed, bitorder="little")
    if width == 4:
        # byte hi:lo -> uint16 (lo | hi << 8) via (b | b << 4) & 0x0F0F, chunked to stay in cache.
        # Widening once with copyto, then same-type ufuncs, is ~15% faster than ufuncs that
        # cast uint8 operands themselves (numpy buffers those casts).
        out = np.empty(packed.size, dtype=np.uint16)
        scratch = np.empty(min(CHUNK, packed.size), dtype=np.uint16)
        for start, stop in chunks(packed.size):
            wide, dest = scratch[: stop - start], out[start:stop]
            np.copyto(wide, packed[start:stop], casting="unsafe")
            np.multiply(wide, 16, out=dest)  # b << 4, no overflow in 16 bits
            np.bitwise_or(dest, wide, out=dest)
            np.bitwise_and(dest, 0x0F0F, out=dest)
        return out.view(np.uint8)
    per_byte = 8 // width
    mask = (1 << width) - 1
    out = np.empty((packed.size, per_byte), dtype=np.uint8)
    for k in range(per_byte):  # per position within a byte, not per element
        np.bitwise_and(packed >> (k * width), mask, out=out[:, k])
    return out.reshape(-1)
