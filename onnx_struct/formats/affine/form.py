"""AffineForm: a block format's payload as integer codes, per-block scales, zero points and minimums.

``value = (code - zero_point) * scale + minimum``, with one scale (zero point, minimum) per
``block_size`` consecutive elements of the last axis. This is what ONNX's blocked
``DequantizeLinear`` (plus an Add for the minimum) computes, so a weight with an affine form can
stay quantized in a graph instead of being decoded to float32.

The family modules (:mod:`.gguf`, :mod:`.iq`, :mod:`.mx`, :mod:`.linear`) register one *rule*
per format: the format's :class:`AffineSpec` (code width, sub-block size, which parts exist,
how exactly :meth:`AffineForm.dequantize` reproduces the format's own decoding) and a function
from the block leaves (each with a leading ``n_blocks`` dimension, as
:func:`onnx_struct.payload.view.view_buffer` reads them) to per-block arrays.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from onnx_struct.errors import ValidationError


@dataclasses.dataclass(frozen=True)
class AffineSpec:
    """What a format's affine form looks like, independent of any payload."""

    bits: int  # 4 or 8: the smallest width holding every code the format can produce
    signed: bool  # codes are int8 (signed) or uint8 (unsigned) arrays
    block_size: int  # elements sharing one scale (may divide the format's own block size)
    zero_point: bool  # False: the zero point is 0 (``AffineForm.zero_point`` is None)
    minimum: bool  # False: no additive minimum (``AffineForm.minimum`` is None)
    exactness: str  # "bit-exact", or how dequantize() differs from the format's decoding
    note: str = ""


# Per-block arrays of one payload: codes [n, format block], scale [n, format block / block_size],
# zero point and minimum like scale (or None).
BlockArrays = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]
Rule = Callable[[Mapping[str, np.ndarray], int], BlockArrays]

_RULES: dict[str, tuple[AffineSpec, Rule]] = {}


def rule(name: str, spec: AffineSpec) -> Callable[[Rule], Rule]:
    """Register ``spec`` and the decorated function as the affine form of format ``name``."""

    def register(function: Rule) -> Rule:
        if name in _RULES:
            raise ValueError(f"affine form of {name!r} is already registered")
        _RULES[name] = (spec, function)
        return function

    return register


@dataclasses.dataclass(frozen=True)
class AffineForm:
    """A tensor of ``codes.shape`` as ``(codes - zero_point) * scale + minimum`` per block.

    ``codes``: int8 or uint8 of the logical shape, blocks along the last axis; every code fits
    ``bits`` (4 or 8) in the dtype's signedness. ``scale``: float32 of shape ``shape[:-1] +
    (shape[-1] // block_size,)``. ``zero_point``: like ``scale`` with the dtype of ``codes``, or
    None (zero). ``minimum``: float32 like ``scale``, or None (nothing added).
    """

    codes: np.ndarray
    bits: int
    block_size: int
    scale: np.ndarray
    zero_point: np.ndarray | None = None
    minimum: np.ndarray | None = None

    def __post_init__(self) -> None:
        # Shapes and dtypes only: a range check of the codes would cost a pass over the tensor.
        where = "AffineForm"
        if self.codes.dtype not in (np.int8, np.uint8) or self.bits not in (4, 8):
            raise ValidationError(where, f"codes must be int8/uint8 of 4 or 8 bits, not {self.codes.dtype}/{self.bits}")
        shape = self.codes.shape
        if not shape or self.block_size < 1 or shape[-1] % self.block_size:
            raise ValidationError(where, f"block size {self.block_size} does not divide the last dimension of {shape}")
        expected = self.scale_shape
        for part, array, dtype in (
            ("scale", self.scale, np.float32),
            ("zero_point", self.zero_point, self.codes.dtype),
            ("minimum", self.minimum, np.float32),
        ):
            if array is not None and (array.shape != expected or array.dtype != dtype):
                raise ValidationError(
                    f"{where}.{part}", f"expected {np.dtype(dtype)} {expected}, got {array.dtype} {array.shape}"
                )

    @property
    def shape(self) -> tuple[int, ...]:
        return self.codes.shape

    @property
    def signed(self) -> bool:
        return self.codes.dtype == np.int8

    @property
    def scale_shape(self) -> tuple[int, ...]:
        return (*self.codes.shape[:-1], self.codes.shape[-1] // self.block_size)

    def dequantize(self) -> np.ndarray:
        """float32 values, in this order: ``d = code - zero_point`` exactly (in int16), then
        ``float32(d) * scale`` (one rounding), then ``+ minimum`` (a second rounding) when a
        minimum exists. No minimum means no addition (adding 0 would turn -0.0 into +0.0)."""
        blocked = (*self.scale_shape, self.block_size)
        q = self.codes.reshape(blocked).astype(np.int16)
        if self.zero_point is not None:
            q -= self.zero_point[..., None]
        with np.errstate(over="ignore", invalid="ignore"):
            y = q.astype(np.float32) * self.scale[..., None]
            if self.minimum is not None:
                y += self.minimum[..., None]
        return y.reshape(self.shape)


@dataclasses.dataclass(frozen=True)
class PairedForm:
    """An :class:`AffineForm` of unsigned 4-bit codes held packed: ``pairs`` is uint8
    ``shape[:-1] + (shape[-1] // 2,)``, element 2i of the last axis in the low nibble and 2i+1 in
    the high one (ONNX's order, what MatMulNBits and GatherBlockQuantized read). ``codes`` unpacks
    them on first use; scale, zero point and minimum are the AffineForm's."""

    pairs: np.ndarray
    block_size: int
    scale: np.ndarray
    zero_point: np.ndarray | None = None
    minimum: np.ndarray | None = None
    bits = 4

    @functools.cached_property
    def codes(self) -> np.ndarray:
        codes = np.empty((*self.pairs.shape[:-1], self.pairs.shape[-1] * 2), np.uint8)
        codes[..., 0::2] = self.pairs & np.uint8(0x0F)
        codes[..., 1::2] = self.pairs >> np.uint8(4)
        return codes


def build(spec: AffineSpec, arrays: BlockArrays, shape: Sequence[int]) -> AffineForm:
    """An AffineForm of logical ``shape`` from a rule's per-block arrays (blocks run along the
    last axis in payload order, so reshaping is all it takes)."""
    shape = tuple(int(d) for d in shape)
    codes, scale, zero_point, minimum = arrays
    scale_shape = (*shape[:-1], shape[-1] // spec.block_size)
    codes = codes.astype(np.int8 if spec.signed else np.uint8, copy=False).reshape(shape)
    return AffineForm(
        codes, spec.bits, spec.block_size, *per_block((scale, zero_point, minimum), codes.dtype, scale_shape)
    )


def per_block(parts, code_dtype, scale_shape: tuple[int, ...]) -> tuple:
    """A rule's (scale, zero point, minimum) as the form holds them: float32, the codes' dtype and
    float32, each of ``scale_shape`` (None stays None)."""
    return tuple(
        None if array is None else np.ascontiguousarray(array, dtype=dtype).reshape(scale_shape)
        for array, dtype in zip(parts, (np.float32, code_dtype, np.float32), strict=True)
    )


# ---------------------------------------------------------------------------------- bit helpers
def planes(packed: np.ndarray, width: int, shifts: Sequence[int], mask: int) -> np.ndarray:
    """ggml's packing: each run of ``width`` bytes holds ``len(shifts)`` consecutive runs of
    ``width`` values, run k in bits ``shifts[k]`` (masked). [n, m] -> [n, m * len(shifts)] uint8."""
    n = packed.shape[0]
    shift = np.asarray(shifts, dtype=packed.dtype).reshape(1, 1, -1, 1)
    return ((packed.reshape(n, -1, 1, width) >> shift) & mask).astype(np.uint8).reshape(n, -1)


def nibbles(packed: np.ndarray, width: int) -> np.ndarray:
    """Runs of ``width`` bytes: ``width`` low nibbles, then ``width`` high nibbles."""
    return planes(packed, width, (0, 4), 0x0F)


def nibble_pairs(packed: np.ndarray, width: int) -> np.ndarray:
    """:func:`nibbles`' values packed again two per byte in ONNX's order (value 2i low, 2i+1
    high), straight from the runs: in a run of ``width`` bytes (``width`` even), values 2i, 2i+1
    are the low nibbles of bytes 2i, 2i+1 and values width + 2i, width + 2i + 1 their high ones.
    [n, m] -> [n, m] uint8, the bytes of ``pack(nibbles(packed, width))`` without the values."""
    n = packed.shape[0]
    runs = packed.reshape(n, -1, width)
    even, odd = runs[..., 0::2], runs[..., 1::2]
    out = np.empty_like(runs)
    half = width // 2
    np.bitwise_or(even & np.uint8(0x0F), (odd & np.uint8(0x0F)) << np.uint8(4), out=out[..., :half])
    np.bitwise_or(even >> np.uint8(4), odd & np.uint8(0xF0), out=out[..., half:])
    return out.reshape(n, -1)


def half_to_float(array: np.ndarray) -> np.ndarray:
    """A FLOAT16 leaf as float32 (exact: every half is a float32)."""
    return np.asarray(array).astype(np.float32)
