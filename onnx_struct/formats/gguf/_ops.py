"""Small helpers for writing GGUF decoders and encoders as ONNX FunctionProtos.

A format module reads like gguf-py's numpy code, one helper call per numpy step::

    b = FunctionBuilder("decode_Q4_0", ["d", "qs"])
    q = nibbles(b, "qs", n, 16)  # [n, 32]: low nibbles, then high nibbles
    y = dequantize_rows(b, q, b.cast("d", FLOAT), zero_point=8)
    decoder = b.build([b.reshape(y, shape, out="y")])

Stable interface for any GGUF format module: :data:`OPSET`, :data:`BITCAST_OPSET`,
:class:`FunctionBuilder`; the recipes :func:`nibbles`, :func:`bit_fields`, :func:`bit_planes`,
:func:`byte_lookup`, :func:`dequantize_rows`, :func:`scaled_down`; the declaration helpers
:func:`field` and :func:`gguf_format`.

Why the recipes look the way they do (measured on onnxruntime 1.32's CPU provider): uint8
``Add``/``Sub``/``Mul`` are vectorized and 5-10x faster than ``BitwiseAnd``/``BitShift``; uint8
``Where``, Gathers of single bytes and any broadcast whose innermost run is short (a
``[n, 1, 32] >> [1, 8, 1]`` shift, say) are slower still (per-element or per-run loops). So nibbles are cut with one *scalar* shift plus uint8
arithmetic, narrower fields over long runs (Tile, then one wrapping multiply that moves each
field to the top bits, then one shift, mask or compare), and bit expansions with short runs use
a 256-entry ``Gather`` table (one row copy per byte).
``DequantizeLinear`` (per-axis) turns bytes into floats in one pass and computes
``float(q - zero_point) * scale`` with a single rounding, exactly gguf-py's ``d * q``. The
remaining float pass of formats with a minimum (``d * q + m``) is a broadcast Add/Sub, kept as a
separate op because gguf-py rounds twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.formats.base import FORMAT_DOMAIN, BlockFormat, register
from onnx_struct.helper import make_field, make_tensor_type

# Default-domain opset of every decoder/encoder: onnxruntime 1.32 and onnx's ReferenceEvaluator
# implement all ops used here at this version (BitwiseAnd, uint8 BitShift, blocked/per-axis
# DequantizeLinear, Cast from/to FLOAT16 and BFLOAT16).
OPSET = 21
# BitCast (reinterpret bits) exists from opset 26; only functions that must read a float's bits
# (e.g. the BF16 encoder's NaN handling) use it.
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
    """Accumulates the nodes of one FunctionProto in the ``onnx_struct.formats`` domain.

    Every op yields one fresh value name; constants are ``Constant`` nodes (deduplicated), so the
    function is self-contained and specific to the shapes it was built for.
    """

    def __init__(self, name: str, inputs: Sequence[str], *, doc_string: str = "", opset: int = OPSET) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.doc_string = doc_string
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self._constants: dict[tuple, str] = {}
        self._count = 0

    def _fresh(self, stem: str) -> str:
        self._count += 1
        return f"_{stem}{self._count}"

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attributes) -> str:
        """Append ``op_type(inputs)`` and return its (single) output name."""
        output = out or self._fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attributes))
        return output

    def const(self, value, dtype=None) -> str:
        """A constant tensor (numpy array or scalar, converted to ``dtype`` if given)."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = self.op("Constant", value=numpy_helper.from_array(array))
        return self._constants[key]

    def reshape(self, x: str, shape: Sequence[int], out: str | None = None) -> str:
        return self.op("Reshape", x, self.const(np.asarray(shape, dtype=np.int64)), out=out)

    def cast(self, x: str, to: int, out: str | None = None) -> str:
        return self.op("Cast", x, to=to, out=out)

    def shift_right(self, x: str, bits: int, dtype=np.uint8) -> str:
        return self.op("BitShift", x, self.const(bits, dtype), direction="RIGHT")

    def build(self, outputs: Sequence[str]) -> onnx.FunctionProto:
        return helper.make_function(
            FORMAT_DOMAIN,
            self.name,
            self.inputs,
            list(outputs),
            self.nodes,
            [helper.make_opsetid("", self.opset)],
            doc_string=self.doc_string or None,
        )


def nibbles(b: FunctionBuilder, x: str, rows: int, run: int, times: int = 1) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, 2 * run]``: the low nibbles of the run, then its high
    nibbles, each multiplied by ``times`` (1, 2, 4, 8 or 16).

    This is ggml's 4-bit layout (``qs``: element ``j`` is the low nibble of byte ``j``, element
    ``j + run`` its high nibble). ``times * low`` is ``times * x - 16 * times * high`` in wrapping
    uint8 arithmetic; ``16 * high`` is one mask (``times=16`` needs no shift at all, the fastest
    form). Scaled values go to :func:`dequantize_rows` with ``scale / times`` (see there).
    """
    if times not in (1, 2, 4, 8, 16):
        raise ValueError(f"nibbles can be scaled by 1, 2, 4, 8 or 16, not {times}")
    x = b.reshape(x, [rows, run])
    if times == 16:
        return b.op(
            "Concat", b.op("Mul", x, b.const(16, np.uint8)), b.op("BitwiseAnd", x, b.const(0xF0, np.uint8)), axis=1
        )
    high = b.shift_right(x, 4)
    scaled_x = x if times == 1 else b.op("Mul", x, b.const(times, np.uint8))
    low = b.op("Sub", scaled_x, b.op("Mul", high, b.const(16 * times, np.uint8)))
    return b.op("Concat", low, high if times == 1 else b.op("Mul", high, b.const(times, np.uint8)), axis=1)


def _spread(b: FunctionBuilder, x: str, rows: int, run: int, multipliers: Sequence[int]) -> str:
    """``[rows, len(multipliers) * run]``: copy ``k`` of the run times ``multipliers[k]`` (mod 256).

    Tile then one multiply by a constant row: every op sees runs of ``len * run`` elements."""
    tiled = b.op("Tile", b.reshape(x, [rows, run]), b.const([1, len(multipliers)], np.int64))
    return b.op("Mul", tiled, b.const(np.repeat(np.asarray(multipliers, np.uint8), run)))


def bit_fields(b: FunctionBuilder, x: str, rows: int, run: int, width: int, *, scaled: bool = False) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, (8 // width) * run]``: field ``k`` (bits ``[k*width, (k+1)*width)``)
    of byte ``l`` at ``[r, k * run + l]``.

    gguf-py's ``(x.reshape(n, 1, run) >> shifts.reshape(1, -1, 1)) & mask``. Written as: copy ``k``
    multiplied by ``2**(8 - (k+1)*width)`` (a wrapping uint8 multiply moves field ``k`` to the top
    bits and drops the bits above it), then one scalar shift right by ``8 - width``. With
    ``scaled`` the shift is replaced by a mask and the result is ``field << (8 - width)``: feed it
    to :func:`dequantize_rows` with ``scale / 2**(8 - width)``, a product of the same two exact
    factors, so the same float32.
    """
    count = 8 // width
    top = _spread(b, x, rows, run, [1 << (8 - (k + 1) * width) for k in range(count)])
    if scaled:
        return b.op("BitwiseAnd", top, b.const((0xFF << (8 - width)) & 0xFF, np.uint8))
    return b.shift_right(top, 8 - width)


def bit_planes(b: FunctionBuilder, x: str, rows: int, run: int, value: int = 1) -> str:
    """Bytes ``x [rows, run]`` -> ``[rows, 8 * run]`` with ``value * bit_j(x[r, l])`` at ``[r, j * run + l]``.

    :func:`bit_fields` for width 1, with the top bit tested by a compare (cheaper than a shift)
    and the result multiplied by ``value`` (e.g. 16 for the fifth bit of a 5-bit quant).
    """
    top = _spread(b, x, rows, run, [1 << (7 - j) for j in range(8)])
    bits = b.cast(b.op("GreaterOrEqual", top, b.const(128, np.uint8)), UINT8)
    return bits if value == 1 else b.op("Mul", bits, b.const(value, np.uint8))


def scaled_down(b: FunctionBuilder, scale: str, times: int) -> str:
    """``scale / times`` for a power of two ``times`` (exact), the partner of scaled quants."""
    return b.op("Mul", scale, b.const(1.0 / times, np.float32))


def byte_lookup(b: FunctionBuilder, x: str, table: np.ndarray) -> str:
    """``table[x]``: each uint8 of ``x`` replaced by the row ``table[x]`` (shape ``x.shape + table.shape[1:]``).

    The fast way to expand a byte into short runs (e.g. its 8 bits as 8 values): one Gather
    copies a row per byte, where an equivalent broadcast shift would loop per run.
    """
    if table.shape[0] != 256:
        raise ValueError(f"a byte lookup table has 256 rows, not {table.shape[0]}")
    return b.op("Gather", b.const(table), b.cast(x, INT32), axis=0)


def dequantize_rows(b: FunctionBuilder, q: str, scale: str, zero_point: int | None = None, dtype=np.uint8) -> str:
    """``float(q[r, :] - zero_point) * scale[r]`` for integer ``q [rows, k]`` and float32 ``scale [rows]``.

    One DequantizeLinear (per-axis, axis 0): the difference is an exact small integer and the
    product is rounded once, so this equals gguf-py's ``d * (q - zp).astype(float32)`` bit for bit
    (NaN and infinity included). ``zero_point`` has the integer type ``dtype`` of ``q``.

    Scaled quants: ``(2**k * q - 2**k * zp) * (scale / 2**k)`` is the same float32 as
    ``(q - zp) * scale``, because both factors are exact (``scale / 2**k`` cannot underflow: GGUF
    scales are FLOAT16, at least 2**-24, times small integers; k <= 6) and their real product is
    the same, so the one rounding gives the same result. :func:`scaled_down` divides the scale.
    """
    if zero_point is None:
        return b.op("DequantizeLinear", q, scale, axis=0)
    zero = b.op("Expand", b.const(zero_point, dtype), b.op("Shape", scale))
    return b.op("DequantizeLinear", q, scale, zero, axis=0)


# ---------------------------------------------------------------------------------- declarations
def field(name: str, elem_type: int, dims: Sequence[int] = (), doc: str = ""):
    """One block field: a static tensor of ``elem_type`` (a scalar when ``dims`` is empty)."""
    return make_field(name, make_tensor_type(elem_type, list(dims)), doc)


def gguf_format(
    name: str,
    block_size: int,
    bytes_per_block: int,
    fields: Callable[[], list],
    decoder: Callable[[int, tuple[int, ...]], onnx.FunctionProto],
    encoder: Callable[[int, tuple[int, ...]], onnx.FunctionProto] | None = None,
    description: str = "",
) -> BlockFormat:
    """Register the GGUF format ``name`` (the GGML type name).

    ``decoder(n_blocks, shape)`` and ``encoder(n_blocks, shape)`` build the functions for a tensor
    of numpy ``shape``; ``n_blocks`` is checked by :meth:`BlockFormat.num_blocks` first.
    """
    fmt: BlockFormat | None = None

    def with_count(build):
        def for_shape(shape: Sequence[int]) -> onnx.FunctionProto:
            shape = tuple(int(d) for d in shape)
            return build(fmt.num_blocks(shape), shape)

        return for_shape

    fmt = BlockFormat(
        name=name,
        family="gguf",
        block_size=block_size,
        bytes_per_block=bytes_per_block,
        block_fields=fields,
        decoder=with_count(decoder),
        encoder=with_count(encoder) if encoder else None,
        description=description,
    )
    return register(fmt)
