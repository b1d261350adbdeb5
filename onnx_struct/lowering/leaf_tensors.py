"""A lowered leaf's data: a payload leaf as an ONNX tensor (``raw_data`` in ONNX's own packing),
or the byte run of the payload it can reference in place."""

from __future__ import annotations

import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.functions.models import PACKED_TYPES, contiguous, packed_rows
from onnx_struct.layout.bits import merged_dims, pack_sub_byte
from onnx_struct.layout.leaves import Leaf
from onnx_struct.payload.view import StructView


def dense_byte_run(leaf: Leaf) -> tuple[int, int] | None:
    """(byte offset, byte length) when the leaf's elements are one contiguous, byte-aligned run
    of the payload in C order (so its bytes are the tensor's raw_data as is); else None."""
    shape, strides = merged_dims(leaf.shape, leaf.strides)
    if leaf.bit_offset % 8 or leaf.dtype == np.bool_:  # BOOL bytes are written as 0 or 1 (leaf_to_tensor)
        return None
    if shape and (len(shape) != 1 or strides[0] != leaf.bit_width):
        return None
    bits = leaf.count * leaf.bit_width
    if bits % 8:
        return None
    if leaf.kind == "component" and leaf.bit_width != leaf.dtype.itemsize * 8:
        return None
    return leaf.bit_offset // 8, bits // 8


def leaf_to_tensor(name: str, leaf: Leaf, struct_view: StructView, elem_type: int) -> TensorProto:
    """A TensorProto with the leaf's elements in ``raw_data`` (sub-byte types packed as ONNX
    packs them; multi-byte types little-endian)."""
    if elem_type in PACKED_TYPES and leaf.kind == "tensor":
        packed = packed_rows(struct_view.buffer, leaf)
        if packed is None:
            packed = pack_sub_byte(struct_view[leaf.path], leaf.bit_width)
        tensor = TensorProto(name=name, data_type=elem_type, dims=leaf.shape)
        tensor.raw_data = packed.tobytes()
        return tensor
    array = contiguous(struct_view[leaf.path])
    if array.dtype == np.bool_:  # a payload byte other than 0 or 1 means true: written as ONNX writes it
        array = np.asarray(np.not_equal(array.view(np.uint8), 0))  # 0-d: numpy returns a scalar
    if leaf.bit_width % 8 or array.dtype.itemsize * 8 != (
        leaf.bit_width if leaf.kind == "tensor" else array.dtype.itemsize * 8
    ):
        tensor = numpy_helper.from_array(array, name)  # e.g. FLOAT6: onnx's own packing
        tensor.data_type = elem_type
        return tensor
    if sys.byteorder == "big" and array.dtype.kind in "iufc":
        array = array.astype(array.dtype.newbyteorder("<"))
    tensor = TensorProto(name=name, data_type=elem_type, dims=leaf.shape)
    tensor.raw_data = array.tobytes()
    return tensor


def leaf_array(leaf: Leaf, struct_view: StructView, elem_type: int) -> np.ndarray | None:
    """The leaf's elements as a C-contiguous numpy array of ``elem_type``'s numpy type, for a runtime
    handed arrays in memory; None where the tensor needs ONNX's own packing or a type numpy does not
    have (sub-byte, BOOL, non-native widths, ml_dtypes types): :func:`leaf_to_tensor` then."""
    if elem_type in PACKED_TYPES or leaf.bit_width % 8:
        return None
    try:
        wanted = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        return None
    if wanted.kind not in "iuf" or wanted.itemsize * 8 != leaf.bit_width:
        return None
    array = contiguous(struct_view[leaf.path])
    if array.dtype != wanted:
        return None
    return np.ascontiguousarray(array.reshape(leaf.shape))
