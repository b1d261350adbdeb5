"""Which registered format a struct value holds, trusted only when its declaration is the registry's.

The decoder is recognized by :func:`onnx_struct.formats.recognize.registered_decoder` (its exact
identity and bytes; a declaration's name is free text and is not read). The quantized execution
path reads the payload through the *format's* declaration and rule, so it is taken only when the
value's declaration also reads the same bytes as the same leaves (every leaf's path, type, width,
shape, strides and offset): then the registry's affine form and the value's own decoder compute
the same tensor. Anything else keeps its decoder call.
"""

from __future__ import annotations

import dataclasses
import functools

from onnx_struct.formats.affine import AffineSpec, affine_spec
from onnx_struct.formats.base import BlockFormat
from onnx_struct.formats.recognize import registered_decoder
from onnx_struct.layout.table import Leaf, TypeTable
from onnx_struct.schema.model import StructTypeProto


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
    if not declaration.HasField("decoder"):
        return None
    registered = registered_decoder(declaration.decoder)
    if registered is None:
        return None
    fmt, shape = registered
    spec = affine_spec(fmt)
    if spec is None or len(shape) != 2:
        return None
    try:
        actual = table.leaves(declaration, where)
    except Exception:  # noqa: BLE001 - the checker reports a bad declaration; here it is just not ours
        return None
    if tuple(_leaf_key(a) for a in actual) != _registry_leaf_keys(fmt, tuple(shape)):
        return None
    return Recognized(fmt, shape, spec)


@functools.lru_cache(maxsize=256)
def _registry_leaf_keys(fmt: BlockFormat, shape: tuple[int, ...]) -> tuple:
    """The leaves of the registry's own declaration of ``fmt`` for ``shape`` (built once per format
    and shape: a model's layers share a few shapes)."""
    reference = TypeTable([fmt.block_declaration()])
    return tuple(_leaf_key(e) for e in reference.leaves(fmt.root_declaration(shape, 0), f"{fmt.name} (registry)"))
