"""``onnx.compose``'s add_prefix and merge_models that rename struct values too.

Stock ``add_prefix`` keeps the struct parts (unknown fields) but renames only what onnx declares:
a node reading a struct value then reads a name nothing defines, and ``merge_models`` of two
such models finds the same struct value names twice. Here both run on the carried form
(:mod:`onnx_struct.ecosystem.carried`), where each struct value is a graph input that stock
onnx renames with the others, and the second model's declaration indices follow the first's.
"""

from __future__ import annotations

import base64

import onnx
import onnx.compose

from onnx_struct.ecosystem.carried import carry, restore
from onnx_struct.schema import carry as carrier
from onnx_struct.schema.model import get_struct_types


def add_prefix(model: onnx.ModelProto, prefix: str, **options: bool) -> onnx.ModelProto:
    """``onnx.compose.add_prefix`` that renames struct values as it renames graph inputs.

    Args:
        model: a stock ``onnx.ModelProto`` with struct parts.
        prefix: the prefix.
        **options: ``onnx.compose.add_prefix``'s ``rename_*`` flags; struct values follow
            ``rename_inputs`` and ``rename_initializers``, which must then agree.

    Returns:
        A new model (``inplace`` is not supported).

    Raises:
        ValueError: ``rename_inputs`` and ``rename_initializers`` differ, or ``inplace`` is asked for.
        ValidationError: the struct parts cannot be carried.
    """
    if options.pop("inplace", False):
        raise ValueError("add_prefix with struct parts returns a new model (inplace is not supported)")
    if options.get("rename_inputs", True) != options.get("rename_initializers", True):
        raise ValueError("struct values are renamed with the graph inputs and initializers: the flags must agree")
    return restore(onnx.compose.add_prefix(carry(model), prefix, **options))


def merge_models(
    m1: onnx.ModelProto, m2: onnx.ModelProto, io_map: list[tuple[str, str]], **options: object
) -> onnx.ModelProto:
    """``onnx.compose.merge_models`` of struct models: both models' struct parts in the result.

    The declarations of ``m2`` follow those of ``m1`` (its values' and types' indices shifted);
    with ``prefix1`` / ``prefix2`` struct values are renamed as the other names are.

    Args:
        m1: the first model (stock ``onnx.ModelProto``, struct parts as unknown fields).
        m2: the second model.
        io_map: (output of ``m1``, input of ``m2``) pairs, as for stock.
        **options: ``onnx.compose.merge_models``'s other arguments (``prefix1``, ``prefix2``,
            ``inputs``, ``outputs``, ``name``, ...).

    Returns:
        The merged model, with the struct parts of both.

    Raises:
        ValueError: as stock raises it (names that collide, different IR versions or opsets).
        ValidationError: the struct parts cannot be carried.
    """
    count = len(get_struct_types(m1))
    carried1 = carry(m1)
    carried2 = carry(m2, type_offset=count)
    declarations = _pop_declarations(carried1) + _pop_declarations(carried2)
    if options.get("inputs") is not None:  # the struct values' stand-ins stay inputs
        options["inputs"] = list(options["inputs"]) + _stand_ins(carried1, options.get("prefix1"))
        options["inputs"] += _stand_ins(carried2, options.get("prefix2"))
    merged = onnx.compose.merge_models(carried1, carried2, io_map, **options)
    if declarations:
        merged.metadata_props.add(key=carrier.TYPES_KEY, value=base64.b64encode(declarations).decode("ascii"))
    return restore(merged)


def _pop_declarations(model: onnx.ModelProto) -> bytes:
    """The carried declarations' bytes, removed from ``model`` (serialized ModelProtos holding
    only ``struct_types`` concatenate into one: repeated fields join in order)."""
    found = [entry.value for entry in model.metadata_props if entry.key == carrier.TYPES_KEY]
    kept = [entry for entry in model.metadata_props if entry.key != carrier.TYPES_KEY]
    model.ClearField("metadata_props")
    model.metadata_props.extend(kept)
    return b"".join(base64.b64decode(value) for value in found)


def _stand_ins(model: onnx.ModelProto, prefix: str | None) -> list[str]:
    names = [i.name for i in model.graph.input if any(e.key == carrier.VALUE_KEY for e in i.metadata_props)]
    return [f"{prefix}{name}" if prefix else name for name in names]
