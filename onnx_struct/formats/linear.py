"""The proposal's linear family: blocks of INT4/UINT4/INT8/UINT8 values ``y = (q - zero_point) * scale``.

:func:`make_linear_format` builds a :class:`BlockFormat` for any element type, block size, scale
type (FLOAT16 or FLOAT), with or without a stored zero point; a few presets are registered. A
block is ``scale``, then ``zero_point`` (with 4-bit ``padding``), then ``values``. Encoders round
half to even, as ONNX's QuantizeLinear; the values are computed with the *stored* scale, so
decoding sees exactly the scale the encoder divided by.

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto

from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import BlockFormat, FormatSpec, build_format, register_formats
from onnx_struct.formats.function_builder import FunctionBuilder, field

FLOAT16_MAX = 65504.0


@dataclasses.dataclass(frozen=True)
class _Element:
    onnx_type: int
    bits: int
    qmin: int
    qmax: int


ELEMENTS = {
    "INT4": _Element(TensorProto.INT4, 4, -8, 7),
    "UINT4": _Element(TensorProto.UINT4, 4, 0, 15),
    "INT8": _Element(TensorProto.INT8, 8, -128, 127),
    "UINT8": _Element(TensorProto.UINT8, 8, 0, 255),
}
SCALES = {"FLOAT16": (TensorProto.FLOAT16, 16, "F16"), "FLOAT": (TensorProto.FLOAT, 32, "F32")}


def linear_format_name(element: str, block_size: int, scale: str, zero_point: bool) -> str:
    """The default name, e.g. ``INT4_B32_F16`` or ``UINT4_B128_F16_ZP``."""
    return f"{element}_B{block_size}_{SCALES[scale][2]}" + ("_ZP" if zero_point else "")


def make_linear_format(
    element: str = "INT4",
    block_size: int = 32,
    scale: str = "FLOAT16",
    zero_point: bool = False,
    *,
    name: str | None = None,
    register_format: bool = False,
) -> BlockFormat:
    """A linear block format: ``block_size`` values of ``element`` with one ``scale`` (and zero point).

    ``element`` is "INT4", "UINT4", "INT8" or "UINT8"; ``scale`` "FLOAT16" or "FLOAT" ("FLOAT32"
    is accepted too). 4-bit elements need an even ``block_size`` (whole bytes). The format is
    returned, not registered, unless ``register_format=True``.

    >>> fmt = make_linear_format("UINT4", 64, "FLOAT16", zero_point=True)
    >>> fmt.name, fmt.bytes_per_block
    ('UINT4_B64_F16_ZP', 35)
    """
    spec = linear_spec(element, block_size, scale, zero_point, name=name)
    if register_format:
        return register_formats("linear", [spec])[spec.name]
    return build_format("linear", spec)


def linear_spec(element: str, block_size: int, scale: str, zero_point: bool, *, name: str | None = None) -> FormatSpec:
    """The table row of a linear format (arguments as :func:`make_linear_format`'s, checked)."""
    where = "make_linear_format"
    scale = "FLOAT" if scale == "FLOAT32" else scale
    if element not in ELEMENTS:
        raise ValidationError(where, f"element {element!r} is not one of {', '.join(ELEMENTS)}")
    if scale not in SCALES:
        raise ValidationError(where, f"scale {scale!r} is not FLOAT16 or FLOAT")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValidationError(where, f"block_size must be a positive integer, not {block_size!r}")
    spec = ELEMENTS[element]
    if spec.bits == 4 and block_size % 2:
        raise ValidationError(
            where, f"a block of {block_size} 4-bit values does not fill whole bytes (use an even size)"
        )
    block_size = int(block_size)
    scale_type, scale_bits, _ = SCALES[scale]
    zero_bits = 8 if zero_point else 0  # a 4-bit zero point is followed by 4 bits of padding
    fmt_name = name or linear_format_name(element, block_size, scale, zero_point)
    layout = _Layout(fmt_name, spec, block_size, scale_type, zero_point)
    return FormatSpec(
        fmt_name,
        block_size,
        (scale_bits + zero_bits + block_size * spec.bits) // 8,
        layout.fields,
        layout.decoder,
        layout.encoder,
        f"linear: {block_size} {element} values times a {scale} scale"
        + (", minus a stored zero point" if zero_point else ""),
    )


@dataclasses.dataclass(frozen=True)
class _Layout:
    name: str
    element: _Element
    block_size: int
    scale_type: int
    zero_point: bool

    def fields(self) -> list:
        fields = [field("scale", self.scale_type, doc="y = (values - zero_point) * scale")]
        if self.zero_point:
            fields.append(field("zero_point", self.element.onnx_type, doc="the code of 0.0"))
            if self.element.bits == 4:
                fields.append(field("padding", TensorProto.UINT4, doc="zero bits: whole bytes"))
        fields.append(field("values", self.element.onnx_type, (self.block_size,), "LSB-first when 4-bit"))
        return fields

    def decoder(self, n: int, shape: Sequence[int]) -> onnx.FunctionProto:
        inputs = ["scale", "zero_point", "values"] if self.zero_point else ["scale", "values"]
        g = FunctionBuilder(f"decode_{self.name}", inputs)
        values = g.to_float("values")  # [n, block]
        if self.zero_point:
            values = g.op("Sub", values, g.to_float("zero_point", [n, 1]))
        return g.finish(g.op("Mul", values, g.to_float("scale", [n, 1])), shape)

    def encoder(self, n: int, shape: Sequence[int]) -> onnx.FunctionProto:
        qmin, qmax = np.float32(self.element.qmin), np.float32(self.element.qmax)
        g = FunctionBuilder(f"encode_{self.name}", ["x"])
        x = g.reshape("x", [n, self.block_size])
        axes = g.axes(1)
        zero = g.const(np.float32(0))
        if self.zero_point:
            low = g.op("Min", g.op("ReduceMin", x, axes, keepdims=1), zero)
            high = g.op("Max", g.op("ReduceMax", x, axes, keepdims=1), zero)
            scale = g.op("Div", g.op("Sub", high, low), g.const(np.float32(qmax - qmin)))
        elif self.element.qmin < 0:
            scale = g.op("Div", g.op("ReduceMax", g.op("Abs", x), axes, keepdims=1), g.const(qmax))
        else:
            scale = g.op("Div", g.op("Max", g.op("ReduceMax", x, axes, keepdims=1), zero), g.const(qmax))
        if self.scale_type == TensorProto.FLOAT16:
            stored = g.cast(g.op("Min", scale, g.const(np.float32(FLOAT16_MAX))), TensorProto.FLOAT16)
        else:
            stored = scale
        g.reshape(stored, [n], out="scale")
        divisor = g.to_float(stored)  # the scale the decoder will see
        divisor = g.where(g.op("Equal", divisor, zero), np.float32(1), divisor)
        steps = g.op("Round", g.op("Div", x, divisor))
        limits = (g.const(qmin), g.const(qmax))
        if self.zero_point:
            point = g.op("Clip", g.op("Round", g.op("Sub", g.const(qmin), g.op("Div", low, divisor))), *limits)
            # reshaped before the cast: onnxruntime has no Reshape kernel for INT4/UINT4
            g.cast(g.reshape(point, [n]), self.element.onnx_type, out="zero_point")
            steps = g.op("Add", steps, point)
        g.cast(g.op("Clip", steps, *limits), self.element.onnx_type, out="values")
        return g.build(["scale", "zero_point", "values"] if self.zero_point else ["scale", "values"])


# Presets: symmetric 4-bit and 8-bit at the common group sizes 32 (GGUF-like) and 128
# (GPTQ/AWQ-like), and asymmetric unsigned with a zero point (AWQ-style UINT4, UINT8).
PRESETS = (
    ("INT4", 32, "FLOAT16", False),
    ("INT4", 128, "FLOAT16", False),
    ("UINT4", 32, "FLOAT16", True),
    ("UINT4", 128, "FLOAT16", True),
    ("INT8", 32, "FLOAT16", False),
    ("INT8", 32, "FLOAT", False),
    ("UINT8", 32, "FLOAT", True),
)
FORMATS: dict[str, BlockFormat] = register_formats("linear", [linear_spec(*preset) for preset in PRESETS])
