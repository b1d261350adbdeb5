"""The plumbing every format module shares: one FunctionProto builder, one field helper, one factory.

Decoders and encoders are written as straight-line code (``g.op("Mul", a, b)``) that returns
generated value names; constants become ``Constant`` nodes, created once per distinct value::

    g = FunctionBuilder("decode_Q8_0", ["d", "qs"])
    y = g.op("DequantizeLinear", "qs", g.to_float("d"), axis=0)
    decoder = g.finish(y, shape)  # Reshape to the logical shape as output "y", then build

The builder knows nothing about formats; format recipes live with their family (GGUF's in
``gguf/_ops.py``, the IQ types' in ``gguf/_iq_graph.py``). :func:`field` declares one block field
and :class:`onnx_struct.formats.base.FormatSpec` rows registered by
:func:`onnx_struct.formats.base.register_formats` make the formats (one registration style).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.formats.base import FORMAT_DOMAIN
from onnx_struct.schema.builders import make_field, make_tensor_type
from onnx_struct.schema.model import StructTypeProto

# Default-domain opset of decoders/encoders unless a type needs more: onnxruntime 1.32 and onnx's
# ReferenceEvaluator implement every op the formats use at this version (BitwiseAnd, uint8
# BitShift, per-axis DequantizeLinear, Cast from/to FLOAT16 and BFLOAT16, Reshape allowzero).
OPSET = 21
# BitCast (reinterpret bits) exists from opset 26; only functions that must read a float's bits
# (e.g. the GGUF F16/BF16 encoders' NaN handling) use it.
BITCAST_OPSET = 26

FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16
BFLOAT16 = TensorProto.BFLOAT16
UINT8 = TensorProto.UINT8
INT8 = TensorProto.INT8
UINT16 = TensorProto.UINT16
UINT32 = TensorProto.UINT32
INT32 = TensorProto.INT32
INT64 = TensorProto.INT64


class FunctionBuilder:
    """Accumulates the nodes of one FunctionProto in domain ``FORMAT_DOMAIN``.

    ``opset`` is the default-domain version the function imports: :data:`OPSET` (21) for
    functions onnxruntime 1.32 runs, 25 where FLOAT8E8M0/FLOAT4E2M1 casts are needed, 26 for
    BitCast, 28 for FLOAT6 casts. The function is specific to the shapes it was built for.
    """

    def __init__(self, name: str, inputs: Sequence[str], opset: int = OPSET, *, doc_string: str = "") -> None:
        self.name = name
        self.inputs = list(inputs)
        self.opset = opset
        self.doc_string = doc_string
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

    def ops(self, op_type: str, *inputs: str, count: int, **attrs) -> list[str]:
        """Append one node with ``count`` outputs (e.g. Split); returns their names."""
        outputs = [self._fresh(op_type.lower()) for _ in range(count)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, **attrs))
        return outputs

    def const(self, value, dtype=None) -> str:
        """A Constant node holding ``value`` (array or scalar, converted to ``dtype`` if given),
        shared between equal values."""
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
            doc_string=self.doc_string or None,
        )

    def finish(self, value: str, shape: Sequence[int], out: str = "y") -> onnx.FunctionProto:
        """A decoder's end: ``value`` reshaped to the logical ``shape`` as the one output ``out``."""
        return self.build(self.reshape(value, shape, out=out))

    # ------------------------------------------------------------------ shorthands
    def reshape(self, x: str, shape: Sequence[int], out: str | None = None) -> str:
        """``Reshape(x, shape)``. A 0 in ``shape`` is a real empty dimension (a tensor with no
        blocks), so it gets ``allowzero=1``; otherwise the attribute stays unset, because the
        runtime replaces a decoder's final plain Reshape by a numpy view (saving onnxruntime's
        copy of the output) only then."""
        shape = [int(d) for d in shape]
        if 0 in shape and -1 in shape:  # not allowed with allowzero=1, and ambiguous without
            raise ValueError(f"reshape target {shape} has both 0 and -1")
        attrs = {"allowzero": 1} if 0 in shape else {}
        return self.op("Reshape", x, self.const(np.array(shape, dtype=np.int64)), out=out, **attrs)

    def cast(self, x: str, to: int, out: str | None = None, **attrs) -> str:
        return self.op("Cast", x, to=to, out=out, **attrs)

    def to_float(self, x: str, shape: Sequence[int] | None = None) -> str:
        """``x`` as float32, reshaped to ``shape`` if given (e.g. a scale leaf ``[n]`` as ``[n, 1]``)."""
        value = self.cast(x, FLOAT)
        return value if shape is None else self.reshape(value, shape)

    def index(self, x: str) -> str:
        """``x`` as INT32 Gather indices (Gather takes int32/int64 only)."""
        return self.cast(x, INT32)

    def axes(self, *axes: int) -> str:
        return self.const(np.array(axes, dtype=np.int64))

    def gather(self, table, indices: str) -> str:
        """``table[indices]`` along axis 0; ``table`` is a value name or a numpy array (made a
        constant); ``indices`` are INT32/INT64 (see :meth:`index`)."""
        table = table if isinstance(table, str) else self.const(table)
        return self.op("Gather", table, indices, axis=0)

    def slice(self, x: str, start: int, end: int, axis: int, out: str | None = None) -> str:
        return self.op("Slice", x, self.axes(start), self.axes(end), self.axes(axis), out=out)

    def where(self, condition: str, if_true, if_false) -> str:
        """``Where`` whose branches may be value names or numpy scalars (made constants)."""
        if_true = if_true if isinstance(if_true, str) else self.const(if_true)
        if_false = if_false if isinstance(if_false, str) else self.const(if_false)
        return self.op("Where", condition, if_true, if_false)

    def shr(self, x: str, shifts, dtype=None) -> str:
        """``x >> shifts``: ``shifts`` of ``x``'s unsigned type (a numpy value, or converted to
        ``dtype``); numpy broadcasting."""
        return self.op("BitShift", x, self.const(shifts, dtype), direction="RIGHT")

    def shl(self, x: str, shifts, dtype=None) -> str:
        return self.op("BitShift", x, self.const(shifts, dtype), direction="LEFT")

    def band(self, x: str, mask, dtype=None) -> str:
        return self.op("BitwiseAnd", x, self.const(mask, dtype))

    def block_any(self, mask: str) -> str:
        """BOOL ``[..., 1]``: whether any element along the last axis of the BOOL ``mask`` is set."""
        as_int = self.cast(mask, INT32)
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
        return self.op("ReduceSum", self.cast(at_least, INT32), self.axes(-1), keepdims=1)


# ---------------------------------------------------------------------------------- declarations
def field(name: str, elem_type: int, dims: Sequence[int] = (), doc: str = "") -> StructTypeProto.Field:
    """One block field: a static tensor of ``elem_type`` (a scalar when ``dims`` is empty)."""
    return make_field(name, make_tensor_type(elem_type, list(dims)), doc)


FunctionFor = Callable[[int, tuple[int, ...]], onnx.FunctionProto]
