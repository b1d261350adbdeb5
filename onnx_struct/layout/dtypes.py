"""ONNX element types as physical leaves: bit width and numpy/ml_dtypes dtype.

Dtypes come from ``onnx.helper.tensor_dtype_to_np_dtype`` and widths from ``ml_dtypes`` /
numpy, so every fixed-width scalar type of the installed onnx is covered without a table here.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

# Not physical leaves: no fixed width.
_VARIABLE_WIDTH = {TensorProto.UNDEFINED, TensorProto.STRING}


@functools.cache
def bit_width(elem_type: int) -> int | None:
    """Bits one element of ``elem_type`` occupies in a payload, or None if it is not a leaf type.

    BOOL is 8 bits (one byte, as in TensorProto.raw_data); complex types count both parts.
    """
    if elem_type in _VARIABLE_WIDTH:
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return None
    if dtype.kind in "bcO":
        return None if dtype.kind == "O" else dtype.itemsize * 8
    for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
        try:
            return int(info(dtype).bits)
        except (ValueError, TypeError):
            continue
    return dtype.itemsize * 8


def np_dtype(elem_type: int) -> np.dtype:
    """The numpy (or ml_dtypes) dtype onnx uses for ``elem_type``."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def type_name(elem_type: int) -> str:
    """``TensorProto.DataType`` name, or the number if the installed onnx does not know it."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def uint_for_bits(bits: int) -> np.dtype:
    """Smallest little-endian unsigned integer dtype of 1, 2, 4 or 8 bytes holding ``bits``: the
    dtype of a bit-packing component, and of the bit patterns the bit kernels move."""
    for size in (1, 2, 4, 8):
        if bits <= 8 * size:
            return np.dtype(f"<u{size}")
    raise ValueError(f"{bits} bits do not fit in 64")
