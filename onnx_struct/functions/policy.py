"""The decoder safety policy: what a decoder (or encoder) may contain, so that running it is
bounded in time and memory by its input and output sizes (docs/security.md, "Decoder safety
policy"; limits in :mod:`onnx_struct.limits`).

Rule: nothing runs that the checker would refuse. :func:`check_structure` (the function alone:
allowed operators, node and constant limits) and :func:`check_sizes` (the function typed for its
inputs: static shapes, fixed-width types, at most ``FUNCTION_EXPANSION`` bytes per input byte)
are enforced by ``check_model`` and again wherever a function runs. :func:`check_sizes` returns
the output types, so typing never materializes a payload-sized tensor.

Notes: docs/modules.md.
"""

from __future__ import annotations

import collections
import hashlib
import math
import threading
from collections.abc import Sequence

import numpy as np
import onnx
import onnx.checker
import onnx.defs
import onnx.shape_inference
from onnx import TensorProto, helper, numpy_helper

from onnx_struct import limits, originals
from onnx_struct.errors import ValidationError
from onnx_struct.functions.models import signature_digest
from onnx_struct.functions.structure import (
    ELEMENT_TYPES,
    check_structure,
    first_line,
)
from onnx_struct.layout import dtypes

# Inputs that are shapes (1-D int64 by the operators' schemas; onnx's inference does not check it).
_SHAPE_OPERANDS = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}

_cache: collections.OrderedDict[bytes, tuple[list[onnx.TypeProto], None] | tuple[None, ValidationError]] = (
    collections.OrderedDict()
)
_cache_lock = threading.Lock()


# ---------------------------------------------------------------------- the function for given inputs
def check_sizes(
    function: onnx.FunctionProto,
    inputs: Sequence[tuple[str, onnx.TypeProto]],
    initializers: Sequence[TensorProto],
    where: str,
    allowance_bytes: int = 0,
    expansion: int | None = None,
) -> list[onnx.TypeProto]:
    """The types of ``function``'s outputs when ``inputs`` (name, tensor type) and
    ``initializers`` (constant leaves, by name) are bound, after checking that every value has a
    static shape and that all of them fit the policy's budget (``allowance_bytes`` adds the
    bytes an encoder writes to its leaves; ``expansion`` replaces :data:`~onnx_struct.limits.FUNCTION_EXPANSION`,
    e.g. by an encoder's :data:`~onnx_struct.limits.ENCODER_EXPANSION`). Applies :func:`check_structure`
    first. Memoized."""
    # Types do not depend on where the function is: one analysis serves every path that names it
    # (the checker's policy check and the logical types label a declaration differently). An
    # error names its path, so it is kept per path.
    expansion = limits.FUNCTION_EXPANSION if expansion is None else expansion
    typed = signature_digest(function, inputs, initializers, str(allowance_bytes), str(expansion))
    failed = hashlib.blake2b(typed + where.encode("utf-8", "surrogatepass"), digest_size=32).digest()
    with _cache_lock:
        key = typed if typed in _cache else failed
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        try:
            hit, key = (_analyze(function, inputs, initializers, where, allowance_bytes, expansion), None), typed
        except ValidationError as error:
            hit, key = (None, error), failed
        with _cache_lock:
            _cache[key] = hit
            while len(_cache) > limits.POLICY_CACHE_SIZE:
                _cache.popitem(last=False)
    types, error = hit
    if error is not None:
        raise ValidationError(error.path, error.reason, **error.details, code=error.code)
    return [_copy(t) for t in types]


def check_function_model(
    model: onnx.ModelProto, where: str, allowance_bytes: int = 0, expansion: int | None = None
) -> None:
    """:func:`check_sizes` for a model built by :func:`onnx_struct.functions.models.function_model`."""
    if len(model.functions) != 1 or len(model.graph.node) != 1:
        raise ValidationError(
            where, "not a function model: one function and one call node expected", code="invalid_function"
        )
    inputs = [(info.name, info.type) for info in model.graph.input]
    check_sizes(model.functions[0], inputs, list(model.graph.initializer), where, allowance_bytes, expansion)


def _analyze(function, inputs, initializers, where: str, allowance_bytes: int, expansion: int) -> list[onnx.TypeProto]:
    check_structure(function, where)
    try:
        graph_model = _body_model(function, inputs, initializers)
    except UnicodeDecodeError:  # a value or node name (not checked by check_structure) is not UTF-8
        raise ValidationError(where, "a name in the function is not valid UTF-8", code="invalid_utf8") from None
    inferred = _infer(graph_model, where, data_prop=False)
    # Shape and Size depend on shapes only: fold them into constants where the input's shape is
    # static, and infer again, until nothing changes (each round folds at least one node). Each
    # round runs onnx's inference on the whole function, and a chain of Shape -> Reshape pairs needs
    # a round per pair (quadratic), so the rounds are limited (MAX_SHAPE_FOLD_ROUNDS).
    rounds = 0
    while _fold_shapes(graph_model, inferred):
        rounds += 1
        if rounds > limits.MAX_SHAPE_FOLD_ROUNDS:
            raise ValidationError(
                where,
                f"its Shape/Size values depend on each other more than {limits.MAX_SHAPE_FOLD_ROUNDS} deep "
                "(each level is one more run of onnx's inference over the function)",
                code="limit_exceeded",
                limit=limits.MAX_SHAPE_FOLD_ROUNDS,
            )
        inferred = _infer(graph_model, where, data_prop=False)
    values = _value_types(inferred)
    if any(_static_shape(t) is None for t in values.values()) and _propagation_is_small(values):
        inferred = _infer(graph_model, where, data_prop=True)
        values = _value_types(inferred)
    input_bytes = allowance_bytes
    for name, _ in inputs:
        input_bytes += _bytes(values[name], where, name)
    for tensor in initializers:
        input_bytes += _bytes(values[tensor.name], where, tensor.name)
    budget = expansion * input_bytes + limits.FUNCTION_BASE_BYTES
    total = 0
    constants = _constant_values(function, initializers)
    for i, node in enumerate(function.node):
        node_where = f"{where}.node[{i}] ({node.op_type!r})"
        if node.op_type in ("Div", "Mod"):
            _check_integer_divisor(node, values, constants, node_where)
        for name in node.output:
            if name:
                if name not in values:
                    raise ValidationError(
                        node_where, f"onnx cannot infer the type of output {name!r}", code="invalid_function"
                    )
                total += _bytes(values[name], node_where, name)
        _check_shape_inputs(node, values, node_where)
        if node.op_type == "MatMul":
            total += _matmul_work(values, node)
        if total > budget:
            raise ValidationError(
                node_where,
                f"its values reach {total} bytes, over the policy's budget of {budget} bytes "
                f"({expansion} per input byte + {limits.FUNCTION_BASE_BYTES})",
                code="limit_exceeded",
                actual=total,
                limit=budget,
            )
    outputs = []
    for name in function.output:
        if name not in values:
            raise ValidationError(where, f"onnx cannot infer the type of output {name!r}", code="invalid_function")
        _bytes(values[name], where, name)
        outputs.append(values[name])
    return outputs


def _constant_values(function, initializers) -> dict[str, object]:
    """The function's Constant node outputs and the constant leaves, by name: the TensorProto or
    the integer attribute holding each (read as an array only where one is needed)."""
    out: dict[str, object] = {t.name: t for t in initializers}
    for node in function.node:
        if node.op_type == "Constant" and len(node.output) == 1 and len(node.attribute) == 1:
            attribute = node.attribute[0]
            if attribute.name in ("value", "value_int", "value_ints"):
                out[node.output[0]] = attribute
    return out


def _as_array(source) -> np.ndarray | None:
    """A constant's values, or None when they cannot be read (invalid data: other rules report it)."""
    try:
        if isinstance(source, TensorProto):
            return numpy_helper.to_array(source)
        if source.type == onnx.AttributeProto.TENSOR:
            return numpy_helper.to_array(source.t)
        return np.asarray(helper.get_attribute_value(source), np.int64)
    except (ValueError, TypeError):  # numpy_helper's word for data that does not fit its dims
        return None


def _check_integer_divisor(node, values: dict[str, onnx.TypeProto], constants: dict[str, object], where: str) -> None:
    """An integer Div or Mod divides by a constant without 0 (or -1, for a signed type): a payload
    value there is an error in onnxruntime and 0 in onnx's reference evaluator, and onnxruntime's
    int64 Div of INT64_MIN by -1 kills the process with SIGFPE."""
    if len(node.input) < 2:
        return
    elem_type = values.get(node.input[1], onnx.TypeProto()).tensor_type.elem_type
    kind = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).kind if elem_type in ELEMENT_TYPES else ""
    if kind not in ("i", "u"):
        return
    source = constants.get(node.input[1])
    divisor = _as_array(source) if source is not None else None
    signed = kind == "i"
    if divisor is None or np.any(divisor == 0) or (signed and np.any(divisor == -1)):
        raise ValidationError(
            where,
            f"an integer {node.op_type} must divide by a constant without 0{' or -1' if signed else ''} "
            "(runtimes fail or differ on those, and onnxruntime's INT64_MIN / -1 crashes the process)",
            code="decoder_policy",
        )


def _body_model(function, inputs, initializers) -> onnx.ModelProto:
    """The function's nodes as a graph (they are all standard operators: nothing to inline)."""
    graph = helper.make_graph(
        list(function.node),
        "decoder",
        [helper.make_value_info(name, type_proto) for name, type_proto in inputs],
        [helper.make_value_info(name, onnx.TypeProto()) for name in function.output],
        initializer=list(initializers),
    )
    opsets = [helper.make_opsetid(o.domain, o.version) for o in function.opset_import]
    ir_version = max(10, helper.find_min_ir_version_for(opsets, True))
    return helper.make_model(graph, opset_imports=opsets, ir_version=min(ir_version, onnx.IR_VERSION))


def _infer(model: onnx.ModelProto, where: str, data_prop: bool) -> onnx.ModelProto:
    try:
        return originals.infer_shapes(model, check_type=True, strict_mode=True, data_prop=data_prop)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError) as error:
        # onnx raises ValueError for element types it does not know (Cast(to=0), data_type 255)
        role = "encoder" if ".encoder" in where else "decoder"
        raise ValidationError(
            where, f"type inference of the {role} failed: {first_line(error)}", code="invalid_function"
        ) from None


def _value_types(inferred: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    graph = inferred.graph
    values = {info.name: info.type for info in (*graph.input, *graph.value_info, *graph.output)}
    for tensor in graph.initializer:
        values.setdefault(tensor.name, helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    return values


def _static_shape(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    if type_proto.WhichOneof("value") != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if not all(d.HasField("dim_value") and d.dim_value >= 0 for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def _fold_shapes(model: onnx.ModelProto, inferred: onnx.ModelProto) -> bool:
    values = _value_types(inferred)
    folded = False
    for node in model.graph.node:
        if node.op_type not in ("Shape", "Size") or len(node.input) != 1 or len(node.output) != 1:
            continue
        shape = _static_shape(values.get(node.input[0], onnx.TypeProto()))
        if shape is None:
            continue
        if node.op_type == "Size":
            value = helper.make_tensor("value", TensorProto.INT64, [], [math.prod(shape)])
        else:
            attributes = {a.name: a.i for a in node.attribute}
            rank = len(shape)
            start, end = attributes.get("start", 0), attributes.get("end", rank)
            start = min(max(start + rank if start < 0 else start, 0), rank)
            end = min(max(end + rank if end < 0 else end, 0), rank)
            dims = list(shape[start:end])
            value = helper.make_tensor("value", TensorProto.INT64, [len(dims)], dims)
        folded_node = helper.make_node("Constant", [], list(node.output), value=value)
        node.CopyFrom(folded_node)
        folded = True
    return folded


def _propagation_is_small(values: dict[str, onnx.TypeProto]) -> bool:
    """True when onnx's data propagation cannot be costly: every value has a known rank, and the
    1-D ones (whose elements onnx tracks one by one) are short enough together."""
    elements = 0
    for type_proto in values.values():
        if type_proto.WhichOneof("value") != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
            return False
        dims = type_proto.tensor_type.shape.dim
        if len(dims) == 1:
            if not dims[0].HasField("dim_value"):
                return False
            elements += dims[0].dim_value
    return elements <= limits.MAX_DATA_PROPAGATION_ELEMENTS


def _bytes(type_proto: onnx.TypeProto, where: str, name: str) -> int:
    """Bytes of a value of ``type_proto``: a tensor of static shape and fixed-width element type."""
    shape = _static_shape(type_proto)
    if shape is None:
        raise ValidationError(
            where,
            f"the shape of {name!r} is not static: every value of a decoder or encoder must have a "
            "shape inferred from the shapes of its inputs and its constants",
            code="decoder_policy",
        )
    elem_type = type_proto.tensor_type.elem_type
    width = dtypes.bit_width(elem_type) if elem_type in ELEMENT_TYPES else None
    if width is None:
        raise ValidationError(
            where,
            f"{name!r} has element type {dtypes.type_name(elem_type)}, which has no fixed width",
            code="decoder_policy",
        )
    return -(-math.prod(shape) * width // 8)


def _check_shape_inputs(node: onnx.NodeProto, values: dict[str, onnx.TypeProto], where: str) -> None:
    """What onnx's inference lets pass and onnxruntime refuses at run time: a shape operand that
    is not 1-D, a Reshape that changes the element count."""
    for index in _SHAPE_OPERANDS.get(node.op_type, ()):
        if index < len(node.input) and node.input[index]:
            shape = _static_shape(values.get(node.input[index], onnx.TypeProto()))
            if shape is not None and len(shape) != 1:
                raise ValidationError(
                    where,
                    f"input {index} ({node.input[index]!r}) must be 1-D, not of shape {list(shape)}",
                    code="decoder_policy",
                )
    if node.op_type == "Reshape" and node.input and node.output:
        before = _static_shape(values.get(node.input[0], onnx.TypeProto()))
        after = _static_shape(values.get(node.output[0], onnx.TypeProto()))
        if before is not None and after is not None and math.prod(before) != math.prod(after):
            raise ValidationError(
                where, f"reshapes {list(before)} to {list(after)}: the element counts differ", code="decoder_policy"
            )


def _matmul_work(values: dict[str, onnx.TypeProto], node: onnx.NodeProto) -> int:
    """Multiply-adds of a MatMul: output elements times the contracted dimension."""
    a = _static_shape(values.get(node.input[0], onnx.TypeProto())) or (1,)
    out = _static_shape(values.get(node.output[0], onnx.TypeProto())) or ()
    return math.prod(out) * (a[-1] if a else 1)


def _copy(type_proto: onnx.TypeProto) -> onnx.TypeProto:
    copy = onnx.TypeProto()
    copy.CopyFrom(type_proto)
    return copy


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
