"""A small FunctionProto builder shared by the mx, nf4, linear and GGUF fp4 format modules.

Decoders and encoders are written as straight-line code (``g.op("Mul", a, b)``) that returns
generated value names; constants become ``Constant`` nodes, created once per distinct value.
The builder knows nothing about formats: it only spares each module the protobuf plumbing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.formats.base import FORMAT_DOMAIN


class FunctionBuilder:
    """Accumulates the nodes of one FunctionProto in domain ``FORMAT_DOMAIN``.

    ``opset`` is the default-domain version the function imports: 21 for functions onnxruntime
    1.32 runs, 25 where FLOAT8E8M0/FLOAT4E2M1 casts are needed, 28 for FLOAT6 casts.
    """

    def __init__(self, name: str, inputs: Sequence[str], opset: int) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self._constants: dict[tuple, str] = {}
        self._count = 0

    def _fresh(self, hint: str) -> str:
        self._count += 1
        return f"_{hint}{self._count}"

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        """Append one node with a single output; returns the output's name."""
        output = out or self._fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attrs))
        return output

    def const(self, value, dtype=None) -> str:
        """A Constant node holding ``value`` (array or scalar), shared between equal values."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            name = self._fresh("c")
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name)))
            self._constants[key] = name
        return self._constants[key]

    def build(self, outputs: str | Sequence[str]) -> onnx.FunctionProto:
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        return helper.make_function(
            FORMAT_DOMAIN,
            self.name,
            self.inputs,
            outputs,
            self.nodes,
            opset_imports=[helper.make_opsetid("", self.opset)],
        )

    # ------------------------------------------------------------------ shorthands
    def reshape(self, x: str, shape: Sequence[int], out: str | None = None) -> str:
        # allowzero=1: a 0 in ``shape`` is a real empty dimension (a tensor with no blocks), not "copy"
        return self.op("Reshape", x, self.const(np.array(list(shape), dtype=np.int64)), out=out, allowzero=1)

    def cast(self, x: str, to: int, out: str | None = None, **attrs) -> str:
        return self.op("Cast", x, to=to, out=out, **attrs)

    def to_float(self, x: str) -> str:
        return self.cast(x, TensorProto.FLOAT)

    def axes(self, *axes: int) -> str:
        return self.const(np.array(axes, dtype=np.int64))

    def gather(self, table, indices: str) -> str:
        """``table[indices]``: ``table`` is a value name or a numpy array (made a constant)."""
        table = table if isinstance(table, str) else self.const(table)
        return self.op("Gather", table, self.cast(indices, TensorProto.INT32), axis=0)

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", x, self.axes(start), self.axes(end), self.axes(axis))

    def where(self, condition: str, if_true, if_false) -> str:
        """``Where`` whose branches may be value names or numpy scalars (made constants)."""
        if_true = if_true if isinstance(if_true, str) else self.const(if_true)
        if_false = if_false if isinstance(if_false, str) else self.const(if_false)
        return self.op("Where", condition, if_true, if_false)

    def block_any(self, mask: str) -> str:
        """BOOL ``[..., 1]``: whether any element along the last axis of the BOOL ``mask`` is set."""
        as_int = self.cast(mask, TensorProto.INT32)
        return self.cast(self.op("ReduceMax", as_int, self.axes(-1), keepdims=1), TensorProto.BOOL)

    def not_finite(self, x: str) -> str:
        """BOOL mask of NaN and ±inf elements of ``x``."""
        return self.op("Or", self.op("IsNaN", x), self.op("IsInf", x))

    def count_at_least(self, x: str, thresholds: np.ndarray) -> str:
        """INT32 ``[..., 1]``: for each ``x[..., 0]``, how many of the ascending ``thresholds`` are <= it.

        This is an exact, branch-free step function: with thresholds ``2**k`` it is
        ``floor(log2(x))`` clamped to the table, without BitCast (absent before opset 26 and
        from onnxruntime) and without the rounding of ``Log``. NaN counts as 0.
        """
        at_least = self.op("GreaterOrEqual", x, self.const(np.asarray(thresholds, dtype=np.float32)))
        return self.op("ReduceSum", self.cast(at_least, TensorProto.INT32), self.axes(-1), keepdims=1)
