"""Values crossing into and out of onnxruntime: one function input (:class:`Feed`) over the payload
bytes, and an output OrtValue as numpy.

Leaves are fed as ``OrtValue`` s over the payload bytes: sub-byte types (INT4, UINT4, INT2, UINT2,
FLOAT4E2M1) in ONNX's packed form, which for byte-aligned dense rows is exactly the payload layout,
and types numpy cannot name for onnxruntime (BFLOAT16, FLOAT8*) by reinterpreting their bytes with
the right ONNX element type.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections.abc import Mapping

import numpy as np
from onnx import TensorProto

from onnx_struct.functions.models import PACKED_TYPES, contiguous, onnx_elem_type, packed_rows
from onnx_struct.layout import dtypes
from onnx_struct.layout.bits import pack_sub_byte, unpack_sub_byte
from onnx_struct.layout.table import Leaf
from onnx_struct.payload.values import constant_tensor
from onnx_struct.payload.view import StructView
from onnx_struct.runtime.ort import load_onnxruntime


@dataclasses.dataclass
class Feed:
    """One function input: ONNX element type, logical shape, and the data in one or both forms.

    ``array`` holds the elements as numpy / ml_dtypes values (what the reference evaluator
    takes); ``packed`` holds sub-byte types as contiguous bytes in ONNX's packing (what
    onnxruntime takes). Either is derived from the other on demand.
    """

    elem_type: int
    shape: tuple[int, ...]
    array: np.ndarray | None = None
    packed: np.ndarray | None = None

    def numpy(self) -> np.ndarray:
        if self.array is None:
            width = dtypes.bit_width(self.elem_type)
            count = math.prod(self.shape)
            raw = unpack_sub_byte(self.packed, width, count)
            self.array = raw.view(dtypes.np_dtype(self.elem_type)).reshape(self.shape)
        return self.array

    def ort_value(self):
        """An OrtValue over this feed's memory (no copy of the elements)."""
        ort = load_onnxruntime()
        if self.elem_type in PACKED_TYPES:
            if self.packed is None:
                self.packed = pack_sub_byte(self.array, dtypes.bit_width(self.elem_type))
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                _packed_carrier(self.packed, self.shape), self.elem_type
            )
        array = contiguous(self.numpy())
        if array.dtype == np.bool_:
            # A BOOL leaf is fed as 0 or 1: a view exposes its payload byte as is (0x76), which
            # onnxruntime's Cast would turn into 118.0 where the reference evaluator gives 1.0.
            array = np.asarray(np.not_equal(array.view(np.uint8), 0))  # 0-d: numpy returns a scalar
        if array.dtype.kind == "V" or array.dtype.type.__module__.startswith("ml_dtypes"):
            # bfloat16, float8*, float8e8m0: same-size unsigned view, typed by ONNX element type.
            carrier = array.view(np.dtype(f"u{array.dtype.itemsize}"))
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(carrier, self.elem_type)
        return ort.OrtValue.ortvalue_from_numpy(array)


def _packed_carrier(packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of the *logical* shape whose data pointer is ``packed``.

    onnxruntime takes the tensor shape from the numpy shape and reads only the packed byte count
    (ceil(count * width / 8)) from the data pointer, so this carrier, whose nominal extent exceeds
    ``packed``, is never read past ``packed`` by onnxruntime; it is never handed to numpy code.
    """
    if not shape:
        return packed[:1].reshape(())
    strides = tuple(int(math.prod(shape[k + 1 :])) for k in range(len(shape)))
    return np.lib.stride_tricks.as_strided(packed, shape=shape, strides=strides, writeable=False)


def leaf_feeds(struct_view: StructView, bound: Mapping[str, Leaf]) -> tuple[dict[str, Feed], list[TensorProto]]:
    """Feeds for the non-constant bound leaves, and the constant leaves as named TensorProtos."""
    feeds: dict[str, Feed] = {}
    constants: list[TensorProto] = []
    data = struct_view.buffer
    for name, leaf in bound.items():
        if leaf.kind == "constant":
            constants.append(constant_tensor(leaf, name))
            continue
        elem_type = onnx_elem_type(leaf)
        if elem_type in PACKED_TYPES and leaf.kind == "tensor":
            packed = packed_rows(data, leaf)
            if packed is not None:
                feeds[name] = Feed(elem_type, leaf.shape, packed=packed)
                continue
        feeds[name] = Feed(elem_type, leaf.shape, array=struct_view[leaf.path])
    return feeds, constants


def ortvalue_to_numpy(value) -> np.ndarray:
    """An output OrtValue as numpy: zero-copy for numpy's own types; a copy of the bytes viewed as
    the ml_dtypes type (unpacked for sub-byte types) for the others."""
    elem_type = value.element_type()
    dtype = dtypes.np_dtype(elem_type)
    if dtype.type.__module__ == "numpy" and elem_type not in PACKED_TYPES:
        return value.numpy()
    shape = tuple(value.shape())
    nbytes = value.tensor_size_in_bytes()
    raw = np.empty(nbytes, dtype=np.uint8)
    if nbytes:
        ctypes.memmove(raw.ctypes.data, value.data_ptr(), nbytes)
    if elem_type in PACKED_TYPES:
        raw = unpack_sub_byte(raw, dtypes.bit_width(elem_type), math.prod(shape))
    return raw.view(dtype).reshape(shape)
