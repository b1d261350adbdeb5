"""A quantized weight's error (:mod:`onnx_struct.passes.quantize_error`) measured range of rows by
range of rows, so that the report holds one range of a weight at a time, never the weight.

The quantized side is decoded ``ROW_RANGE_ELEMENTS`` elements of whole stored rows at a time: blocks
run along the stored tensor's last axis, so the rows' payload is one contiguous byte range (a view
of the model's bytes, or a range of OUT.data read on its own) and decodes to exactly those rows of
the whole decode. The float side is read the same way from the model file (an initializer left
there by the skeleton read) or sliced from an array already in memory. Each range adds its part of
the op's output, ``op(x, W)`` and ``op(x, Wq)``, in float64 (the module's formula); the output is
the size of the op's input activation, not of the weight.

Readers: MatMul and Gemm (outputs accumulated), Gather (both sides read in the same ranges). A
Conv kernel, or a weight with another stored rank, is measured whole by quantize_error.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_struct.check.checked import CheckedModel
from onnx_struct.formats.base import BlockFormat
from onnx_struct.passes.quantize import _Scratch as Scratch
from onnx_struct.passes.quantize_error import CALIBRATION_ROWS, norms_relative, worst_error, x_oriented
from onnx_struct.passes.quantize_plan import DeferredData, PlannedWeight
from onnx_struct.passes.quantize_sites import Site
from onnx_struct.payload.external import read_range
from onnx_struct.payload.values import ExternalPayload, resolve_value
from onnx_struct.runtime.codec import decode_resolved
from onnx_struct.schema.builders import make_struct_value

# Elements of a weight (float or decoded) per range: a range's float32 and float64 copies stay a
# few tens of MiB whatever the weight's size.
ROW_RANGE_ELEMENTS = 1 << 21
ROW_READERS = ("MatMul", "Gemm", "Gather")


def measurable(site: Site, weight: PlannedWeight) -> bool:
    """Whether ``weight``'s error is measured here (else whole, by quantize_error)."""
    readers_known = all(use.node.op_type in ROW_READERS for use in site.uses)
    return readers_known and len(weight.shape) == 2 and len(weight.stored_shape) == 2 and not weight.reshape


class FloatRows:
    """Rows ``[r0, r1)`` of a float weight: read from the model file when its data was left there
    (``deferred``), else sliced from its tensor's array (in memory already)."""

    def __init__(self, tensor: onnx.TensorProto, deferred: DeferredData | None) -> None:
        self.tensor = tensor
        self.deferred = deferred
        self.shape = tuple(int(d) for d in tensor.dims)
        self._array = None if deferred is not None else numpy_helper.to_array(tensor)

    def rows(self, r0: int, r1: int) -> np.ndarray:
        if self._array is not None:
            return self._array[r0:r1]
        row = 4 * math.prod(self.shape[1:])
        data = self.deferred.data(self.tensor.name, r0 * row, (r1 - r0) * row)
        return np.frombuffer(data, dtype="<f4").reshape((r1 - r0, *self.shape[1:]))


class QuantizedRows:
    """Rows of a quantized weight's stored tensor, decoded range by range from its payload. A
    weight of one range is decoded as the checked model's own value; a range of a larger one as a
    value of its own, declared in ``scratch`` (shared by the report's weights: one root per range shape)."""

    def __init__(self, checked: CheckedModel, weight: PlannedWeight, fmt: BlockFormat, scratch: Scratch) -> None:
        # by name: an inline payload is then a view of the model's bytes, not a copy
        self.resolved = resolve_value(weight.value_name, checked.loaded, table=checked.table)
        self.fmt, self.weight, self.scratch = fmt, weight, scratch

    def ranges(self, step: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(r0, r1, rows [r0, r1) of the stored tensor, padding sliced off)``."""
        rows, cols = self.weight.stored_shape
        kept = cols - self.weight.pad
        if step >= rows:
            yield 0, rows, decode_resolved(self.resolved)[:, :kept]
            return
        row_bytes = cols // self.fmt.block_size * self.fmt.bytes_per_block
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            data = self._read(r0 * row_bytes, (r1 - r0) * row_bytes)
            value = make_struct_value(self.weight.value_name, self.scratch.root((r1 - r0, cols)), raw_data=bytes(data))
            del data
            yield r0, r1, decode_resolved(resolve_value(value, self.scratch.model, table=self.scratch.table))[:, :kept]

    def _read(self, offset: int, length: int):
        payload = self.resolved.payload
        if isinstance(payload, ExternalPayload):
            where = f"{self.resolved.where}.external_data"
            return read_range(payload.file, payload.offset + offset, length, where)
        return memoryview(payload).cast("B")[offset : offset + length]


def weight_error(
    site: Site, weight: PlannedWeight, w: FloatRows, wq: QuantizedRows, values: dict, seed: int = 0
) -> tuple[float, bool]:
    """:func:`quantize_error.weight_error` (the same inputs, random ones drawn in the same order),
    range of rows by range of rows."""

    def error(use, x, generator) -> float:
        node = use.node
        if node.op_type == "Gather":
            return norms_relative(*_gather(x, w, wq, weight))
        trans_b = node.op_type == "Gemm" and bool(_trans_b(node))
        k = w.shape[1] if trans_b else w.shape[0]
        x = generator.standard_normal((CALIBRATION_ROWS, k)) if x is None else x_oriented(node, x)
        x = np.asarray(x, np.float32).astype(np.float64)  # the op's float32 input, as quantize_error's
        return norms_relative(*_product(x, w, wq, weight, trans_b))

    return worst_error(site, values, seed, error)


def _trans_b(node: onnx.NodeProto) -> int:
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "transB"), 0)


def _step(width: int) -> int:
    return max(1, ROW_RANGE_ELEMENTS // max(1, width))


def _product(x: np.ndarray, w: FloatRows, wq: QuantizedRows, weight: PlannedWeight, trans_b: bool):
    """(sum of squares of x @ W, of x @ Wq - x @ W), W the op's [K, N] (T.T for transB, T the
    tensor): each range of T's rows, or of the stored tensor's, adds its part of the outputs."""
    rows, cols = w.shape
    reference = np.zeros((*x.shape[:-1], rows if trans_b else cols))
    quantized = np.zeros_like(reference)
    for r0 in range(0, rows, _step(cols)):
        r1 = min(rows, r0 + _step(cols))
        _add(reference, x, np.asarray(w.rows(r0, r1), np.float64), r0, r1, trans_b)
    # the stored tensor is T, or T.T when quantize transposed it (its rows are then T's columns)
    outputs = trans_b != (weight.transpose != "none")
    for r0, r1, part in wq.ranges(_step(weight.stored_shape[1])):
        _add(quantized, x, np.asarray(part, np.float64), r0, r1, outputs)
    quantized -= reference
    return float(np.sum(np.square(reference))), float(np.sum(np.square(quantized)))


def _add(out: np.ndarray, x: np.ndarray, part: np.ndarray, r0: int, r1: int, outputs: bool) -> None:
    """Add x @ W's part from ``part``: W[r0:r1] (rows of K, adding to every output), or, when
    ``outputs``, W[:, r0:r1].T (the outputs r0:r1 whole)."""
    if outputs:
        out[..., r0:r1] += x @ part.T
    else:
        out += x[..., r0:r1] @ part


def _gather(x, w: FloatRows, wq: QuantizedRows, weight: PlannedWeight) -> tuple:
    """(sums of squares of the rows the indices ``x`` select, of their change), both sides read
    in the same ranges (a Gather table is stored unchanged, its rows the table's)."""
    rows = w.shape[0]
    indices = None if x is None else np.asarray(x, np.int64).reshape(-1) % rows
    reference = difference = 0.0
    for r0, r1, part in wq.ranges(_step(weight.stored_shape[1])):
        table = np.asarray(w.rows(r0, r1), np.float64)
        change = np.asarray(part, np.float64) - table
        # each row counts as often as the indices select it (every row once without indices)
        counts = (
            1.0 if indices is None else np.bincount(indices[(indices >= r0) & (indices < r1)] - r0, minlength=r1 - r0)
        )
        counts = np.reshape(counts, (-1, 1))
        reference += float(np.sum(counts * np.square(table)))
        difference += float(np.sum(counts * np.square(change)))
    return reference, difference
