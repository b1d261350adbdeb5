"""An independent bit-level oracle for views and the writer, plus golden checks of the oracle.

The oracle follows the proposal's physical rules literally and shares no code with
``onnx_struct.layout`` or ``onnx_struct.view``: it walks a declaration recursively, unpacks the
payload into single bits (``np.unpackbits(..., bitorder="little")``: bit k of byte i is bit
8*i + k) and assembles each element from its bits as a Python integer, LSB first. Bit widths come
from a table written here, not from ``onnx_struct.dtypes``. It is slow (Python per element) and
meant for small payloads only.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from onnx import TensorProto as T
from onnx import helper, numpy_helper

# Bits per element of every fixed-width ONNX type, from the ONNX type definitions.
ORACLE_WIDTHS = {
    T.FLOAT: 32, T.UINT8: 8, T.INT8: 8, T.UINT16: 16, T.INT16: 16, T.INT32: 32, T.INT64: 64,
    T.BOOL: 8, T.FLOAT16: 16, T.DOUBLE: 64, T.UINT32: 32, T.UINT64: 64, T.COMPLEX64: 64,
    T.COMPLEX128: 128, T.BFLOAT16: 16, T.FLOAT8E4M3FN: 8, T.FLOAT8E4M3FNUZ: 8, T.FLOAT8E5M2: 8,
    T.FLOAT8E5M2FNUZ: 8, T.UINT4: 4, T.INT4: 4, T.FLOAT4E2M1: 4, T.FLOAT8E8M0: 8, T.UINT2: 2,
    T.INT2: 2, T.FLOAT6E2M3: 6, T.FLOAT6E3M2: 6,
}  # fmt: skip


def component_dtype(width: int) -> np.dtype:
    return np.dtype(np.uint8 if width <= 8 else np.uint16 if width <= 16 else np.uint32 if width <= 32 else np.uint64)


@dataclasses.dataclass
class _Leaf:
    kind: str
    dtype: np.dtype | None
    width: int
    shape: tuple[int, ...]
    ints: list[int]
    constant: object = None


class Oracle:
    """Reads (or, for ``positions``, locates) every leaf of a root declaration."""

    def __init__(self, struct_types=()):
        self.struct_types = list(struct_types)

    def leaves(self, declaration, payload: bytes | None) -> dict[str, _Leaf]:
        bits = None if payload is None else np.unpackbits(np.frombuffer(payload, np.uint8), bitorder="little")
        out, size = self._walk_decl(declaration, 0, bits)
        if bits is not None:
            assert size == bits.size, (size, bits.size)
        return out

    def size(self, declaration) -> int:
        return self._walk_decl(declaration, 0, None)[1]

    # -- walking: every function returns ({path: _Leaf}, size_in_bits); bits=None is a dry walk
    def _read(self, bits, position: int, width: int) -> int:
        if bits is None:
            return 0
        return sum(int(bits[position + k]) << k for k in range(width))

    def _walk_decl(self, declaration, position, bits):
        kind = declaration.WhichOneof("kind")
        if kind == "type_index":
            return self._walk_decl(self.struct_types[declaration.type_index], position, bits)
        if kind == "bit_packing":
            packing = declaration.bit_packing
            record = sum(c.bit_width for c in packing.component)
            out, offset = {}, 0
            for c in packing.component:
                ints = [self._read(bits, position + i * record + offset, c.bit_width) for i in range(packing.dimension)]
                out[c.name] = _Leaf("component", component_dtype(c.bit_width), c.bit_width, (packing.dimension,), ints)
                offset += c.bit_width
            return out, record * packing.dimension
        if kind == "array":
            n = declaration.array.dimension
            dry, element = self._walk_type(declaration.array.element_type, position, None)
            parts = [self._walk_type(declaration.array.element_type, position + i * element, bits)[0] for i in range(n)]
            out = {}
            for path, leaf in dry.items():
                if leaf.kind == "constant":
                    out[path] = leaf
                else:
                    ints = [x for part in parts for x in part[path].ints]
                    out[path] = _Leaf(leaf.kind, leaf.dtype, leaf.width, (n,) + leaf.shape, ints)
            return out, n * element
        if kind == "structure":
            out, offset = {}, 0
            for field in declaration.structure.field:
                if field.WhichOneof("content") == "constant":
                    out[field.name] = _Leaf("constant", None, 0, tuple(field.constant.dims), [], field.constant)
                    continue
                sub, size = self._walk_type(field.type, position + offset, bits)
                for path, leaf in sub.items():
                    out[f"{field.name}.{path}" if path else field.name] = leaf
                offset += size
            return out, offset
        raise AssertionError(kind)

    def _walk_type(self, type_proto, position, bits):
        if type_proto.WhichOneof("value") == "struct_type":
            return self._walk_decl(self.struct_types[type_proto.struct_type.type_index], position, bits)
        tensor = type_proto.tensor_type
        width = ORACLE_WIDTHS[tensor.elem_type]
        shape = tuple(d.dim_value for d in tensor.shape.dim)
        count = int(np.prod(shape, dtype=np.int64))
        ints = [self._read(bits, position + i * width, width) for i in range(count)]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        return {"": _Leaf("tensor", dtype, width, shape, ints)}, count * width


def to_array(leaf: _Leaf) -> np.ndarray:
    """The oracle's integers as an array of the leaf's dtype (constants: the TensorProto's value)."""
    if leaf.kind == "constant":
        return numpy_helper.to_array(leaf.constant)
    if leaf.kind == "component":
        return np.array(leaf.ints, dtype=np.uint64).astype(leaf.dtype).reshape(leaf.shape)
    nbytes = max(1, leaf.width // 8)
    # Full-width types: little-endian bytes of the integer; sub-byte types: the raw low bits in one
    # byte (ml_dtypes' storage of int4/uint4/int2/float4/float6).
    raw = b"".join(x.to_bytes(nbytes, "little") for x in leaf.ints)
    return np.frombuffer(raw, dtype=np.uint8).view(leaf.dtype).reshape(leaf.shape)


def oracle_arrays(declaration, payload: bytes, struct_types=()) -> dict[str, np.ndarray]:
    return {path: to_array(leaf) for path, leaf in Oracle(struct_types).leaves(declaration, payload).items()}


def same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Equal dtype, shape and bit patterns (NaN-safe; every float8/6/4 pattern compares)."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return False
    if actual.dtype == object:
        return actual.tolist() == expected.tolist()
    return np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()
