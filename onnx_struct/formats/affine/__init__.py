"""Affine forms of the registered block formats: ``value = (code - zero_point) * scale + minimum``.

A format has an affine form when its payload maps exactly onto 4- or 8-bit integer codes with
one float32 scale (optionally an integer zero point and a float32 minimum) per block, the form
ONNX's blocked ``DequantizeLinear`` carries. :func:`affine_table` gives which formats have one
(docs/execution.md). This module works on leaves; reading payload bytes into leaves is
:func:`onnx_struct.payload.affine.affine_form`'s job.

>>> spec = affine_spec("Q4_K")
>>> spec.bits, spec.block_size, spec.zero_point, spec.minimum
(4, 32, False, True)

Notes: docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from onnx_struct import formats
from onnx_struct.formats.affine import gguf as _gguf  # noqa: F401 - registers the GGUF rules
from onnx_struct.formats.affine import iq as _iq  # noqa: F401 - registers the IQ/FP4 rules
from onnx_struct.formats.affine import mx as _mx  # noqa: F401 - registers the OCP MX rules
from onnx_struct.formats.affine.form import _RULES, AffineForm, AffineSpec, PairedForm, build, nibble_pairs, per_block
from onnx_struct.formats.affine.linear import linear_arrays, linear_spec
from onnx_struct.formats.base import BlockFormat


def _format(fmt: str | BlockFormat) -> BlockFormat:
    return fmt if isinstance(fmt, BlockFormat) else formats.get(fmt)


def affine_spec(fmt: str | BlockFormat) -> AffineSpec | None:
    """The affine form's spec of a format (a name or a BlockFormat), or None if it has none.
    An unknown name raises KeyError."""
    fmt = _format(fmt)
    if fmt.family == "linear":
        return linear_spec(fmt)
    entry = _RULES.get(fmt.name)
    return entry[0] if entry else None


def has_affine_form(fmt: str | BlockFormat) -> bool:
    """Whether ``fmt`` (a registered name or a BlockFormat) has an exact affine form."""
    return affine_spec(fmt) is not None


def affine_table() -> dict[str, AffineSpec | None]:
    """Every registered format name -> its affine spec, or None where it has none."""
    return {name: affine_spec(name) for name in formats.names()}


def affine_form_of_leaves(
    fmt: str | BlockFormat, leaves: Mapping[str, np.ndarray], shape: Sequence[int]
) -> AffineForm | None:
    """The affine form of a tensor of logical ``shape`` in ``fmt`` from its block leaves (each
    with a leading ``n_blocks`` dimension, as a StructView of the format's root reads them), or
    None if the format has no affine form. Vectorized: no loop over blocks or elements."""
    fmt = _format(fmt)
    spec = affine_spec(fmt)
    if spec is None:
        return None
    n = fmt.num_blocks(shape)
    # Hostile scales (inf, NaN) give inf * 0 = NaN exactly as the formats' decoders do: no warning.
    with np.errstate(over="ignore", invalid="ignore"):
        arrays = linear_arrays(spec, leaves, n) if fmt.family == "linear" else _RULES[fmt.name][1](leaves, n)
    return build(spec, arrays, shape)


def paired_form_of_leaves(
    fmt: BlockFormat, leaves: Mapping[str, np.ndarray], shape: Sequence[int]
) -> PairedForm | None:
    """:func:`affine_form_of_leaves` with the codes packed two per byte (:class:`PairedForm`),
    read straight from the payload's nibble runs, for the formats that store them so (Q4_0, Q4_1);
    None for any other format."""
    parts = _gguf.NIBBLE_RUN_PARTS.get(fmt.name)
    if parts is None:
        return None
    shape = tuple(int(d) for d in shape)
    with np.errstate(over="ignore", invalid="ignore"):
        scale_parts = per_block(parts(leaves), np.uint8, (*shape[:-1], shape[-1] // fmt.block_size))
    pairs = nibble_pairs(np.asarray(leaves["qs"]), 16).reshape(*shape[:-1], shape[-1] // 2)
    return PairedForm(pairs, fmt.block_size, *scale_parts)


__all__ = [
    "AffineForm",
    "AffineSpec",
    "PairedForm",
    "affine_form_of_leaves",
    "affine_spec",
    "affine_table",
    "has_affine_form",
    "paired_form_of_leaves",
]
