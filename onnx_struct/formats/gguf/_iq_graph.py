"""A small builder for the IQ/TQ decoder and encoder FunctionProtos (private to iq.py and tq.py).

Nodes get generated value names; constants are ``Constant`` nodes created once per value. The
helpers cover what every IQ/TQ decoder does: unpack bit fields with BitShift/BitwiseAnd on the
leaf's own unsigned type, turn lookup indices into int32 for Gather, build the ±1 sign table
from a byte table, and turn an f16 scale into float32 with a trailing broadcast shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import FORMAT_DOMAIN
from onnx_struct.helper import make_field, make_tensor_type
from onnx_struct.model import StructTypeProto

# Opset 21 has every operator used here (BitShift/BitwiseAnd on uint8/16/32, Gather, Reshape with
# allowzero) and is supported by onnxruntime 1.32 and onnx.reference.
OPSET = 21


class FunctionBuilder:
    """Accumulates the nodes of one FunctionProto in domain ``FORMAT_DOMAIN``."""

    def __init__(self, name: str, inputs: Sequence[str]) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.nodes: list[onnx.NodeProto] = []
        self._constants: dict[tuple, str] = {}
        self._count = 0

    def _fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        """Append one node; returns its (single) output name."""
        output = out or self._fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attrs))
        return output

    def ops(self, op_type: str, *inputs: str, count: int, **attrs) -> list[str]:
        """Append one node with ``count`` outputs (e.g. Split); returns their names."""
        outputs = [self._fresh(op_type.lower()) for _ in range(count)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, **attrs))
        return outputs

    def const(self, value, dtype=None) -> str:
        """A Constant node holding ``value`` (numpy array or scalar), shared by equal values."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            name = self._fresh("c")
            tensor = numpy_helper.from_array(array, name)
            self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
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
            opset_imports=[helper.make_opsetid("", OPSET)],
        )

    # ------------------------------------------------------------------ shorthands
    def reshape(self, x: str, shape: Sequence[int], out: str | None = None) -> str:
        # allowzero=1: a 0 in ``shape`` is a real zero-length dimension (no blocks), not "copy"
        return self.op("Reshape", x, self.const(np.array(shape, dtype=np.int64)), out=out, allowzero=1)

    def cast(self, x: str, to: int) -> str:
        return self.op("Cast", x, to=to)

    def shr(self, x: str, shifts) -> str:
        """``x >> shifts`` (both of the same unsigned type; numpy broadcasting)."""
        return self.op("BitShift", x, self.const(shifts), direction="RIGHT")

    def shl(self, x: str, shifts) -> str:
        return self.op("BitShift", x, self.const(shifts), direction="LEFT")

    def band(self, x: str, mask) -> str:
        return self.op("BitwiseAnd", x, self.const(mask))

    def bits(self, x: str, dtype, shifts: Sequence[int], width: int, shape: Sequence[int], axis: int = -1) -> str:
        """Packed ``width``-bit fields of ``x`` (unsigned ``dtype``), reshaped to ``shape``.

        ``axis=-1``: ``(x[..., None] >> shifts) & mask``, the fields of one element adjacent;
        ``axis=-2``: ``(x[..., None, :] >> shifts[:, None]) & mask``, all elements' field 0
        first, then all field 1, ... (ggml's "low nibbles, then high nibbles" order).

        For ``axis=-1`` the shifts run along a new *leading* axis, ``[k, count]``, and a 2-D
        Transpose makes the fields adjacent: onnxruntime broadcasts ``[count, 1] >> [k]`` one tiny
        span at a time, several times slower than the two passes."""
        shifts = list(shifts)
        mask = np.array((1 << width) - 1, dtype=dtype)
        if axis == -1:
            count = math.prod(shape) // len(shifts)
            flat = self.reshape(x, [1, count])
            fields = self.band(self.shr(flat, np.array(shifts, dtype=dtype).reshape(-1, 1)), mask)  # [k, count]
            return self.reshape(self.op("Transpose", fields, perm=[1, 0]), shape)
        shifts = np.array(shifts, dtype=dtype).reshape([-1] + [1] * (-axis - 1))
        unsqueezed = self.op("Unsqueeze", x, self.const(np.array([axis], dtype=np.int64)))
        return self.reshape(self.band(self.shr(unsqueezed, shifts), mask), shape)

    def slice(self, x: str, start: int, end: int, axis: int, out: str | None = None) -> str:
        return self.op("Slice", x, *(self.const(np.array([v], dtype=np.int64)) for v in (start, end, axis)), out=out)

    def index_hi_lo(self, low: str, high: str, shape: Sequence[int]) -> str:
        """Gather index ``low | high << 8`` as int32 of ``shape``: a grid index whose low 8 bits
        are a uint8 leaf and whose high bits come from a packed field."""
        high = self.op("Mul", self.index(high), self.const(np.int32(256)))
        return self.reshape(self.op("Add", self.index(low), high), shape)

    def index(self, x: str) -> str:
        """Gather indices: Gather takes int32/int64 only."""
        return self.cast(x, TensorProto.INT32)

    def gather(self, table: str, indices: str) -> str:
        return self.op("Gather", table, indices, axis=0)

    def to_float(self, x: str) -> str:
        return self.cast(x, TensorProto.FLOAT)

    def scale(self, d: str, shape: Sequence[int]) -> str:
        """An f16 scale leaf ``d: [n]`` as float32 of ``shape`` (e.g. ``[n, 1, 1]``)."""
        return self.reshape(self.to_float(d), shape)

    def sign_table(self, sign_bytes: str) -> str:
        """int8 ``[len, 8]``: entry ``[i, k]`` is -1 if bit k of ``sign_bytes[i]`` is set, else 1.

        Gathering whole rows of 8 signs replaces per-element shift/mask/select work on the large
        tensor by one Gather; the table itself is a few hundred elements."""
        bit = self.cast(self.bits(sign_bytes, np.uint8, range(8), 1, [-1, 8]), TensorProto.INT8)
        return self.op("Sub", self.const(np.int8(1)), self.op("Mul", bit, self.const(np.int8(2))))

    def to_int8(self, x: str) -> str:
        return self.cast(x, TensorProto.INT8)

    def dequantize(self, values: str, scale: str, zero_point: str | None = None) -> str:
        """``(values - zero_point) * scale`` per row: values ``[G, S]`` (8/16-bit integers), scale
        float32 ``[G]``. One float multiply per value of exact integers, so it equals gguf-py's
        ``scale * float(value)`` bit for bit, and it is onnxruntime's fastest int -> float path."""
        inputs = [values, scale] + ([zero_point] if zero_point else [])
        return self.op("DequantizeLinear", *inputs, axis=0)

    def f16_bits_to_float(self, bits: str) -> str:
        """uint16 IEEE half-precision bit patterns -> float32 values, exactly (opset 21 has no
        BitCast): subnormals, infinities and NaN included, -0.0 kept."""
        exponent = self.band(self.shr(bits, np.uint16(10)), np.uint16(31))
        mantissa = self.band(bits, np.uint16(1023))
        # the implicit leading 1 of normal numbers: (exponent != 0) << 10
        normal = self.cast(self.cast(exponent, TensorProto.BOOL), TensorProto.UINT16)
        significand = self.to_float(self.op("BitwiseOr", mantissa, self.shl(normal, np.uint16(10))))
        # 2**(max(e, 1) - 25) for e < 31; e == 31 gives inf (and NaN below when the mantissa is set)
        powers = np.array([2.0 ** (max(e, 1) - 25) for e in range(31)] + [np.inf], dtype=np.float32)
        magnitude = self.op("Mul", significand, self.gather(self.const(powers), self.index(exponent)))
        is_nan = self.op("Greater", self.band(bits, np.uint16(0x7FFF)), self.const(np.uint16(0x7C00)))
        magnitude = self.op("Where", is_nan, self.const(np.float32(np.nan)), magnitude)
        # times +-1 rather than Where(sign, Neg(m), m): onnxruntime's Neg turns 0.0 into +0.0
        sign = self.to_float(self.shr(bits, np.uint16(15)))
        factor = self.op("Sub", self.const(np.float32(1)), self.op("Mul", sign, self.const(np.float32(2))))
        return self.op("Mul", magnitude, factor)


# ---------------------------------------------------------------------- declarations
def f16(name: str) -> StructTypeProto.Field:
    return make_field(name, make_tensor_type(TensorProto.FLOAT16, []))


def tensor(name: str, elem_type: int, *shape: int) -> StructTypeProto.Field:
    return make_field(name, make_tensor_type(elem_type, list(shape)))


def u8(name: str, n: int) -> StructTypeProto.Field:
    return tensor(name, TensorProto.UINT8, n)


def u16(name: str, n: int) -> StructTypeProto.Field:
    return tensor(name, TensorProto.UINT16, n)


def num_blocks(name: str, shape: Sequence[int], block_size: int) -> int:
    shape = tuple(int(d) for d in shape)
    if not shape or shape[-1] % block_size:
        raise ValidationError(
            name, f"the last dimension of {list(shape)} is not a multiple of the block size {block_size}"
        )
    return math.prod(shape) // block_size


def finish(g: FunctionBuilder, value: str, shape: Sequence[int]) -> onnx.FunctionProto:
    """Reshape ``value`` to the logical ``shape`` as the output ``y`` and build the function.

    Without a zero dimension the Reshape keeps the default ``allowzero=0``: onnx_struct's runtime
    recognizes that plain trailing Reshape and replaces onnxruntime's copy by a numpy view."""
    shape = [int(d) for d in shape]
    target = g.const(np.array(shape, dtype=np.int64))
    g.op("Reshape", value, target, out="y", **({"allowzero": 1} if 0 in shape else {}))
    return g.build("y")
