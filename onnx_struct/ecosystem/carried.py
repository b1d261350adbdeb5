"""The carried form of a struct model: its struct parts in fields every ONNX tool keeps.

What :mod:`onnx_struct.schema.carry` writes, with each struct value's stand-in input typed by the
value's logical type (what its decoder returns), so that a tool's shape inference and passes see
what the nodes consume.
"""

from __future__ import annotations

import onnx

from onnx_struct.check.inference import LogicalTypes
from onnx_struct.errors import ValidationError
from onnx_struct.schema import carry as carrier
from onnx_struct.schema.model import load


def carry(model: onnx.ModelProto, type_offset: int = 0) -> onnx.ModelProto:
    """``model`` with its struct parts carried in stock fields, for a tool that drops unknown fields.

    Each struct value becomes a main-graph input of its logical type whose ``metadata_props``
    hold the value; the declarations go into the model's ``metadata_props``. :func:`restore`
    puts them back.

    Args:
        model: a stock ``onnx.ModelProto`` with struct parts.
        type_offset: how many declarations will precede the model's own (merging two models):
            every declaration index it holds is shifted by that much.

    Returns:
        A new model without unknown struct fields (``model`` itself when it has no struct parts).

    Raises:
        ValidationError: a struct value's name is also a graph input or initializer, or a struct
            type sits outside a value_info.
    """
    loaded = load(model)
    types = LogicalTypes(loaded)
    values = loaded.struct_values

    def stand_in_type(k: int, where: str) -> onnx.TypeProto | None:
        try:  # typed before any shift of the indices, by the model's own declarations
            return types.of_value(values[k], where)
        except ValidationError:  # an invalid declaration: the value is carried untyped
            return None

    shifted = carrier.offset_type_indices(model, type_offset) if type_offset else model
    return carrier.carry(shifted, stand_in_type)


def restore(model: onnx.ModelProto) -> onnx.ModelProto:
    """The struct parts :func:`carry` carried, put back (values named by their inputs' names now;
    a value whose users were all dropped is dropped).

    Args:
        model: a carried model, as a tool returned it.

    Returns:
        A new stock model with its struct parts (``model`` itself when it carries none).

    Raises:
        ValidationError: the carried records are not what :func:`carry` writes.
    """
    return carrier.restore(model)
