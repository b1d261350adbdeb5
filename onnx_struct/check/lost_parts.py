"""What a model that lost its struct parts looks like, told when onnx's checker refuses it.

A tool that does not keep unknown fields (onnx-ir, the onnxscript optimizer, onnx's
version_converter) writes a struct model back without its declarations and values: the nodes
that read a struct value then read a name nothing defines, which onnx's checker reports as an
unsorted graph. Checked only on that failure, so a valid model costs nothing here. Evidence that
the model came from onnx_struct (its own ``onnx_struct.*`` metadata keys, Opaque stand-ins of
struct types in its value_info) makes the diagnosis certain; without it the message says what
the name would have been.
"""

from __future__ import annotations

import os

import onnx
from google.protobuf.message import DecodeError

from onnx_struct.check.reporting import DISABLED_CODES
from onnx_struct.errors import ValidationError
from onnx_struct.schema.model import read_model_file
from onnx_struct.schema.opaque import OPAQUE_DOMAIN, opaque_inside
from onnx_struct.schema.walk import walk_nodes, walk_scoped

LOST = (
    "the model's struct parts were lost (a tool that does not keep unknown fields, e.g. onnx-ir / "
    "onnxscript / version_converter, rewrote it): keep them with onnx_struct.ecosystem.ir "
    "(onnx_struct.ecosystem.compose for onnx.compose) or lower first (onnx_struct.lower)"
)


def explained(model: object, error: ValidationError) -> ValidationError:
    """``error`` (onnx's finding on a model without struct parts), or the lost-parts diagnosis
    when a node of ``model`` reads a name that nothing in the model defines."""
    if "struct_parts_lost" in DISABLED_CODES:  # the conformance suite's mutation check
        return error
    if isinstance(model, (str, os.PathLike)):  # a file onnx's checker read itself
        try:
            model = read_model_file(model)
        except (OSError, ValidationError):
            return error
    if type(model) is bytes:
        try:
            model = onnx.ModelProto.FromString(model)
        except DecodeError:
            return error
    if not isinstance(model, onnx.ModelProto):
        return error
    found = _first_undefined(model.graph)
    if found is None:
        return error
    where, name = found
    if any(name in node.output for node in walk_nodes(model.graph)):
        return error  # defined, only after its reader: an unsorted graph, as onnx says
    reason = f"names no value (no graph input, initializer, node output or struct value): {LOST}"
    if not _from_onnx_struct(model):
        reason = f"names no value: if it named a struct value, {LOST}"
    diagnosis = ValidationError(where, reason, code="struct_parts_lost")
    # Raised as the class of onnx's finding, so that an except clause written for it still catches it.
    try:
        diagnosis.__class__ = type(error)
    except TypeError:  # a class whose instances are laid out otherwise: ours alone
        pass
    return diagnosis


def _first_undefined(graph: onnx.GraphProto) -> tuple[str, str] | None:
    """(path, name) of the first node input of ``graph`` or its subgraphs (each seeing the names
    defined around its node) that names no value defined before it."""
    for where, k, node, defined in walk_scoped(graph, "graph", frozenset()):
        for j, name in enumerate(node.input):
            if name and name not in defined:
                return f"{where}.node[{k}].input[{j}] ({name!r})", name
    return None


# An Opaque type's domain field as onnx_struct's stand-ins write it (TypeProto.Opaque.domain = 1):
# a byte search (C speed) spares every other valid model the parse.
_STAND_IN_DOMAIN = b"\x0a\x0b" + OPAQUE_DOMAIN.encode()


def stand_in_inputs(model: object) -> ValidationError | None:
    """The diagnosis of a valid model (serialized bytes) whose main-graph inputs are Opaque
    stand-ins of struct types, with no struct part: a stock view of a struct model (each struct
    value shown as such an input) written out in its place. None for any other model."""
    if "struct_parts_lost" in DISABLED_CODES:  # the conformance suite's mutation check
        return None
    if type(model) is not bytes or _STAND_IN_DOMAIN not in model:
        return None
    try:
        graph = onnx.ModelProto.FromString(model).graph
    except DecodeError:
        return None
    for k, info in enumerate(graph.input):
        if info.HasField("type") and opaque_inside(info.type):
            return ValidationError(
                f"graph.input[{k}] ({info.name!r})",
                f"is an Opaque stand-in of a struct type and the model has no struct parts: {LOST}",
                code="struct_parts_lost",
            )
    return None


def _from_onnx_struct(model: onnx.ModelProto) -> bool:
    """Whether ``model`` shows it was written by onnx_struct: its own metadata keys (a converted
    GGUF file's), or an Opaque stand-in of a struct type in a main-graph type."""
    if any(entry.key.startswith("onnx_struct.") for entry in model.metadata_props):
        return True
    graph = model.graph
    return any(info.HasField("type") and opaque_inside(info.type) for info in [*graph.input, *graph.value_info])
