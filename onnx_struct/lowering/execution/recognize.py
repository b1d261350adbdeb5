"""Which registered format a struct value holds, trusted only when its declaration is the registry's.

A struct value's root declaration names its format and logical shape (``"Q4_K[4096,4096]"``, as
:meth:`BlockFormat.root_declaration` names it), but a name is free text. The quantized execution
path reads the payload through the *format's* declaration and rule, so it is taken only when the
value's declaration reads the same bytes as the same leaves (every leaf's path, type, width,
shape, strides and offset) and its decoder is byte-identical to the registry's for that shape:
then the registry's affine form and the value's own decoder compute the same tensor. Anything
else keeps its decoder call. This is the one place that recognition happens, so it can follow
the registry's lookup if that changes.
"""

from __future__ import annotations

import dataclasses
import re

from onnx_struct import formats
from onnx_struct.formats.affine import AffineSpec, affine_spec
from onnx_struct.formats.base import BlockFormat
from onnx_struct.layout.table import Leaf, TypeTable
from onnx_struct.schema.model import StructTypeProto

_ROOT_NAME = re.compile(r"(?P<format>[^\[\]]+)\[(?P<shape>\d+(?:,\d+)*)\]")


@dataclasses.dataclass(frozen=True)
class Recognized:
    """A struct value known to hold ``format`` data of logical ``shape`` with an affine form."""

    format: BlockFormat
    shape: tuple[int, ...]
    spec: AffineSpec


def _leaf_key(leaf: Leaf) -> tuple:
    constant = leaf.constant.SerializeToString(deterministic=True) if leaf.constant is not None else None
    return (
        leaf.path,
        leaf.kind,
        leaf.elem_type,
        leaf.bit_width,
        leaf.dtype,
        leaf.shape,
        leaf.strides,
        leaf.bit_offset,
        constant,
    )


def recognize(declaration: StructTypeProto, table: TypeTable, where: str) -> Recognized | None:
    """The registered format with an affine form that ``declaration`` (a root in ``table``) is
    exactly, or None."""
    match = _ROOT_NAME.fullmatch(declaration.name)
    if match is None or not declaration.HasField("decoder"):
        return None
    try:
        fmt = formats.get(match["format"])
    except KeyError:
        return None
    spec = affine_spec(fmt)
    shape = tuple(int(d) for d in match["shape"].split(","))
    if spec is None or len(shape) != 2 or shape[-1] % fmt.block_size:
        return None
    if declaration.decoder.SerializeToString(deterministic=True) != fmt.decoder(shape).SerializeToString(
        deterministic=True
    ):
        return None
    reference = TypeTable([fmt.block_declaration()])
    expected = reference.leaves(fmt.root_declaration(shape, 0), f"{fmt.name} (registry)")
    try:
        actual = table.leaves(declaration, where)
    except Exception:  # noqa: BLE001 - the checker reports a bad declaration; here it is just not ours
        return None
    if [_leaf_key(a) for a in actual] != [_leaf_key(e) for e in expected]:
        return None
    return Recognized(fmt, shape, spec)
