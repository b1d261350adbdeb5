"""Affine forms of the linear family (``(values - zero_point) * scale``): already affine.

Registered for the registered linear presets by name; :func:`linear_spec` gives the spec of any
linear :class:`BlockFormat` (e.g. one from ``make_linear_format``) from its declared fields.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.affine.form import AffineSpec, BlockArrays
from onnx_struct.formats.base import BlockFormat
from onnx_struct.formats.linear import ELEMENTS

_BY_TYPE = {element.onnx_type: (name, element) for name, element in ELEMENTS.items()}


def linear_spec(fmt: BlockFormat) -> AffineSpec:
    fields = {f.name: f for f in fmt.block_fields()}
    name, element = _BY_TYPE[fields["values"].type.tensor_type.elem_type]
    zero_point = "zero_point" in fields
    note = f"{name} values" + (", stored zero point" if zero_point else "")
    return AffineSpec(element.bits, name.startswith("INT"), fmt.block_size, zero_point, False, "bit-exact", note)


def linear_arrays(spec: AffineSpec, leaves, n: int) -> BlockArrays:
    dtype = np.int8 if spec.signed else np.uint8
    scale = np.asarray(leaves["scale"]).astype(np.float32)[:, None]
    zero_point = np.asarray(leaves["zero_point"]).astype(dtype)[:, None] if spec.zero_point else None
    return np.asarray(leaves["values"]).astype(dtype), scale, zero_point, None
