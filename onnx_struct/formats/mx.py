"""OCP Microscaling (MX) v1.0: MXFP8, MXFP6, MXFP4 and MXINT8 blocks of 32 elements.

A block is one E8M0 scale byte (0xFF is NaN), then 32 elements of their real ONNX types packed
LSB-first; the value is ``2**(scale - 127) * P[i]``. The decoder is exact; the encoder follows
OCP v1.0 section 6.3 with round-to-nearest-even and saturation. onnxruntime has no FLOAT4E2M1 or
FLOAT6 kernels, so MXFP4 and MXFP6 functions run in ``onnx.reference`` (with a warning).

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto

from onnx_struct.formats.base import BlockFormat, FormatSpec, register_formats
from onnx_struct.formats.function_builder import FunctionBuilder, field

BLOCK_SIZE = 32
SCALE_BIAS = 127
NAN_SCALE = 0xFF
MXINT8_SCALE = 2.0**-6  # the implicit scale of an MXINT8 element


@dataclasses.dataclass(frozen=True)
class ElementFormat:
    """One OCP element type: its ONNX type, width, emax (exponent of its largest normal) and
    largest finite magnitude, and the lowest default-domain opset that can Cast it."""

    onnx_type: int
    bits: int
    emax: int
    max_value: float
    opset: int

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(self.onnx_type))


ELEMENTS = {
    "OCP_MXFP8_E4M3": ElementFormat(TensorProto.FLOAT8E4M3FN, 8, 8, 448.0, 25),
    "OCP_MXFP8_E5M2": ElementFormat(TensorProto.FLOAT8E5M2, 8, 15, 57344.0, 25),
    "OCP_MXFP6_E2M3": ElementFormat(TensorProto.FLOAT6E2M3, 6, 2, 7.5, 28),
    "OCP_MXFP6_E3M2": ElementFormat(TensorProto.FLOAT6E3M2, 6, 4, 28.0, 28),
    "OCP_MXFP4": ElementFormat(TensorProto.FLOAT4E2M1, 4, 2, 6.0, 25),
    "OCP_MXINT8": ElementFormat(TensorProto.INT8, 8, 0, 127 * MXINT8_SCALE, 25),
}

# X = 2**(b - 127) for every finite scale byte b (b = 0 is the float32 subnormal 2**-127).
SCALE_VALUES = np.ldexp(np.float32(1), np.arange(NAN_SCALE) - SCALE_BIAS).astype(np.float32)


def scale_thresholds(emax: int) -> np.ndarray:
    """``t[b - 1] = 2**(b - 127 + emax)`` for b = 1..254: the scale byte of a block is
    ``count(t <= amax) = clamp(floor(log2(amax)) - emax + 127, 0, 254)``, exactly (float32;
    thresholds past float32's range are inf and never reached by a finite amax)."""
    with np.errstate(over="ignore"):
        return np.ldexp(np.float64(1), np.arange(1, NAN_SCALE) - SCALE_BIAS + emax).astype(np.float32)


# ---------------------------------------------------------------------- declaration
def _fields(element: ElementFormat):
    def fields() -> list:
        return [
            field("scale", TensorProto.FLOAT8E8M0, doc="shared scale X = 2**(scale - 127)"),
            field(
                "elements",
                element.onnx_type,
                (BLOCK_SIZE,),
                "the 32 elements P[i], tightly packed LSB-first; value = X * P[i]",
            ),
        ]

    return fields


# ---------------------------------------------------------------------- decoder / encoder
def _decoder(name: str, element: ElementFormat):
    def decode(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
        g = FunctionBuilder(f"decode_{name}", ["scale", "elements"], element.opset)
        values = g.to_float("elements")  # [n, 32]
        if element.onnx_type == TensorProto.INT8:
            values = g.op("Mul", values, g.const(np.float32(MXINT8_SCALE)))
        return g.finish(g.op("Mul", values, g.to_float("scale", [n, 1])), shape)

    return decode


def _encoder(name: str, element: ElementFormat):
    def encode(n: int, shape: Sequence[int]) -> onnx.FunctionProto:
        g = FunctionBuilder(f"encode_{name}", ["x"], element.opset)
        x = g.reshape("x", [n, BLOCK_SIZE])
        special = g.not_finite(x)
        not_finite = g.block_any(special)  # [n, 1]
        # ReduceMax's NaN handling differs between runtimes; such blocks are NaN-scaled anyway
        magnitude = g.where(special, np.float32(0), g.op("Abs", x))
        amax = g.op("ReduceMax", magnitude, g.axes(1), keepdims=1)
        byte = g.count_at_least(amax, scale_thresholds(element.emax))  # [n, 1], 0..254
        x_scale = g.gather(SCALE_VALUES, byte)
        # X is an exact power of two (or NaN), so any rounding mode is exact; "down", because
        # onnx 1.23's reference rounds the float32 subnormal 2**-127 (E8M0 byte 0) "up" to byte 1.
        # Reshaped before the cast: onnxruntime has no Reshape kernel for FLOAT8E8M0.
        scale = g.reshape(g.where(not_finite, np.float32(np.nan), x_scale), [n])
        g.cast(scale, TensorProto.FLOAT8E8M0, out="scale", round_mode="down")
        # V / X is exact (a power-of-two division whose tiny results are far below any element's
        # rounding step), so casting it rounds each element exactly once
        ratio = g.where(not_finite, np.float32(0), g.op("Div", x, x_scale))
        if element.onnx_type == TensorProto.INT8:
            steps = g.op("Round", g.op("Mul", ratio, g.const(np.float32(1 / MXINT8_SCALE))))  # half to even
            g.cast(
                g.op("Clip", steps, g.const(np.float32(-127)), g.const(np.float32(127))),
                TensorProto.INT8,
                out="elements",
            )
        else:
            limit = np.float32(element.max_value)
            clipped = g.op("Clip", ratio, g.const(-limit), g.const(limit))  # saturate, then round to nearest even
            g.cast(clipped, element.onnx_type, out="elements")
        return g.build(["scale", "elements"])

    return encode


def _spec(name: str, element: ElementFormat) -> FormatSpec:
    kind = (
        "INT8 (x 2**-6)" if element.onnx_type == TensorProto.INT8 else onnx.TensorProto.DataType.Name(element.onnx_type)
    )
    return FormatSpec(
        name,
        BLOCK_SIZE,
        1 + BLOCK_SIZE * element.bits // 8,
        _fields(element),
        _decoder(name, element),
        _encoder(name, element),
        f"OCP MX v1.0 {name[4:]}: an E8M0 scale, then 32 {kind} elements packed LSB-first",
    )


# One row per element type of ELEMENTS (the table of the family).
FORMATS: dict[str, BlockFormat] = register_formats("mx", [_spec(name, element) for name, element in ELEMENTS.items()])


def element_dtype(name: str) -> np.dtype:
    """The ml_dtypes/numpy dtype of the elements of MX format ``name`` (e.g. float4_e2m1fn)."""
    return ELEMENTS[name].dtype


__all__ = ["BLOCK_SIZE", "ELEMENTS", "FORMATS", "ElementFormat", "element_dtype", "scale_thresholds"]
