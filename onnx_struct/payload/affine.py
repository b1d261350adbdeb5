"""``affine_form(format, payload, shape)``: a block-format payload as integer codes and scales.

The rules live in :mod:`onnx_struct.formats.affine` (the formats layer, which reads no bytes);
this module supplies the leaves through the bounds-checked :func:`view_buffer` of the format's
root declaration, so a payload of the wrong length is a ValidationError before any byte is read.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from onnx_struct.formats.affine import (
    AffineForm,
    PairedForm,
    _format,
    affine_form_of_leaves,
    affine_spec,
    paired_form_of_leaves,
)
from onnx_struct.formats.base import BlockFormat
from onnx_struct.payload.view import view_buffer


def affine_form(fmt: str | BlockFormat, payload, shape: Sequence[int]) -> AffineForm | None:
    """The affine form of ``payload`` (any buffer) holding a tensor of logical ``shape`` in
    ``fmt`` (a registered name or a BlockFormat), or None if the format has none.

    >>> payload = bytes(18 * 4 * 2)  # Q4_0: 18 bytes per block of 32 weights
    >>> form = affine_form("Q4_0", payload, (4, 64))
    >>> form.codes.dtype, form.bits, form.scale.shape, int(form.zero_point[0, 0])
    (dtype('uint8'), 4, (4, 2), 8)
    """
    fmt = _format(fmt)
    if affine_spec(fmt) is None:
        return None
    shape = tuple(int(d) for d in shape)
    return affine_form_of_leaves(fmt, _leaves(fmt, payload, shape), shape)


def packed_form(fmt: BlockFormat, payload, shape: Sequence[int]) -> AffineForm | PairedForm | None:
    """:func:`affine_form`, or for Q4_0 / Q4_1 its :class:`PairedForm`: the codes packed two per
    byte straight from the payload (what the quantized kernels' layouts store, ~5x faster than
    unpacking them and packing them again)."""
    if affine_spec(fmt) is None:
        return None
    shape = tuple(int(d) for d in shape)
    leaves = _leaves(fmt, payload, shape)
    return paired_form_of_leaves(fmt, leaves, shape) or affine_form_of_leaves(fmt, leaves, shape)


def _leaves(fmt: BlockFormat, payload, shape: tuple[int, ...]):
    return view_buffer(payload, *_layout(fmt, shape), name=fmt.name)


@functools.lru_cache(maxsize=256)  # a model's layers share a few shapes
def _layout(fmt: BlockFormat, shape: tuple[int, ...]) -> tuple:
    """The array of blocks of ``shape`` and the block type list a view reads (no decoder is built:
    only the layout is read)."""
    return fmt.root_declaration(shape, 0, functions=False), [fmt.block_declaration()]


__all__ = ["affine_form", "packed_form"]
