"""How decoder inputs and encoder outputs bind to leaves (docs/semantics.md, "Bindings").

A decoder has exactly one output, the logical value; each input binds by name to the leaf with
the same path, except that a root whose only leaf has path "" binds it to the single input
whatever its name. Leaves no input names (padding) are not passed. An encoder mirrors this: one
input, outputs bound to non-constant leaves by the same rule.
"""

from __future__ import annotations

import onnx

from onnx_struct.errors import ValidationError
from onnx_struct.layout.leaves import some_leaf_paths
from onnx_struct.layout.table import Leaf, LeafLookup

Leaves = tuple[Leaf, ...] | LeafLookup


def _bind(names, leaves: Leaves, where: str, role: str, allow_constants: bool) -> dict[str, Leaf]:
    # A LeafLookup finds each name by walking it (the checker binds every root's decoder without
    # listing any root's leaves); a tuple is indexed once.
    by_path = leaves if isinstance(leaves, LeafLookup) else {leaf.path: leaf for leaf in leaves}
    if len(by_path) == 1 and len(names) == 1 and "" in by_path:
        return {names[0]: by_path[""]}
    bound: dict[str, Leaf] = {}
    for name in names:
        leaf = by_path.get(name)
        if leaf is None:
            if isinstance(by_path, LeafLookup):
                known = by_path.preview()
            else:
                known = some_leaf_paths(by_path)
            raise ValidationError(
                where, f"{role} {name!r} binds to no leaf (leaves: {known})", code="unknown_leaf", leaf=name
            )
        if leaf.kind == "constant" and not allow_constants:
            raise ValidationError(
                where,
                f"{role} {name!r} names constant leaf {name!r}, which takes no payload bits",
                code="constant_leaf_bound",
            )
        bound[name] = leaf
    return bound


def function_label(path: str, function: onnx.FunctionProto) -> str:
    return f"{path} ({function.name!r})" if function.name else path


def bind_decoder(decoder: onnx.FunctionProto, leaves: Leaves, path: str) -> dict[str, Leaf]:
    """Decoder input name -> leaf. ``path`` names the decoder, e.g. ``struct_types[0].decoder``."""
    where = function_label(path, decoder)
    if len(decoder.output) != 1:
        raise ValidationError(
            where,
            f"a decoder has exactly one output, the logical value; it has {len(decoder.output)}",
            code="function_arity",
        )
    return _bind(list(decoder.input), leaves, where, "decoder input", allow_constants=True)


def bind_encoder(encoder: onnx.FunctionProto, leaves: Leaves, path: str) -> dict[str, Leaf]:
    """Encoder output name -> leaf. Non-constant leaves it does not produce are written as zeros."""
    where = function_label(path, encoder)
    if len(encoder.input) != 1:
        raise ValidationError(
            where,
            f"an encoder has exactly one input, the logical value; it has {len(encoder.input)}",
            code="function_arity",
        )
    return _bind(list(encoder.output), leaves, where, "encoder output", allow_constants=False)
