"""The Opaque stand-ins of struct types in stock views, written and read in one place.

A stock view (``projections.stock_view``) shows ``struct_type { type_index: i }`` as
``Opaque(domain="onnx_struct", name="struct_types.<i>")`` and the unconstrained category as
``Opaque(domain="onnx_struct", name="struct")``.
"""

from __future__ import annotations

import onnx

OPAQUE_DOMAIN = "onnx_struct"
_PREFIX = "struct_types."


def opaque_type(struct_type) -> onnx.TypeProto.Opaque:
    """The stand-in of a static struct type (a ``type_index`` or the unconstrained category)."""
    if struct_type.WhichOneof("kind") == "type_index":
        return onnx.TypeProto.Opaque(domain=OPAQUE_DOMAIN, name=f"{_PREFIX}{struct_type.type_index}")
    return onnx.TypeProto.Opaque(domain=OPAQUE_DOMAIN, name="struct")


def exact_index(type_proto: onnx.TypeProto) -> int | None:
    """``i`` when ``type_proto`` is the stand-in of ``struct_types[i]``, else None.

    The index is plain ASCII decimal as :func:`opaque_type` writes it ("0", "12"; no sign, space,
    leading zero, or other Unicode digits such as "²", which ``str.isdigit`` accepts and ``int``
    refuses).
    """
    if type_proto.WhichOneof("value") != "opaque_type":
        return None
    opaque = type_proto.opaque_type
    name = opaque.name
    if opaque.domain != OPAQUE_DOMAIN or not isinstance(name, str) or not name.startswith(_PREFIX):
        return None
    digits = name[len(_PREFIX) :]
    if not digits.isascii() or not digits.isdecimal() or (digits != "0" and digits.startswith("0")):
        return None
    return int(digits)


def innermost_type(type_proto):
    """The element type below any sequence, optional and map wrappers (stock or overlay TypeProto)."""
    while True:
        which = type_proto.WhichOneof("value")
        if which in ("sequence_type", "optional_type"):
            type_proto = getattr(type_proto, which).elem_type
        elif which == "map_type":
            type_proto = type_proto.map_type.value_type
        else:
            return type_proto


def opaque_inside(type_proto: onnx.TypeProto) -> bool:
    """True when a stock view's type is, or contains, a struct type's stand-in."""
    inner = innermost_type(type_proto)
    return inner.WhichOneof("value") == "opaque_type" and inner.opaque_type.domain == OPAQUE_DOMAIN
