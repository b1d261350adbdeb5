"""The decoder safety policy: what a decoder (or encoder) may contain, so that running it is
bounded in time and memory by its input and output sizes (docs/security.md, "Decoder safety
policy"; the limits are in :mod:`onnx_struct.limits`).

Two checks, both enforced by ``check_model`` and applied again wherever a function runs
(``decode``, ``encode``, every runner :mod:`onnx_struct.runtime` builds), so nothing runs that
the checker would refuse:

* :func:`check_structure` (the function alone): valid UTF-8 names, not named like a standard
  operator, at most :data:`~onnx_struct.limits.MAX_FUNCTION_NODES` nodes, every node a standard
  operator from :data:`ALLOWED_OPERATORS` (no control flow, no function calls and hence no
  recursion, no randomness, no output sizes that only the data decides), no function attributes,
  constants inline and at most :data:`~onnx_struct.limits.MAX_FUNCTION_CONSTANT_BYTES`.
* :func:`check_sizes` (the function for given input types, e.g. the leaves of a declaration): the
  function's own graph typed by onnx's shape inference from shapes alone (the values of
  ``Shape``/``Size`` are folded from static shapes; data propagation only over small 1-D values),
  every value with a static shape and a fixed-width element type, and all of them together
  within :data:`~onnx_struct.limits.FUNCTION_EXPANSION` bytes per input byte plus
  :data:`~onnx_struct.limits.FUNCTION_BASE_BYTES`. It returns the output types: the logical type
  of a declaration is :func:`check_sizes`' result for its decoder, so typing never materializes
  a payload-sized tensor.
"""

from __future__ import annotations

import collections
import hashlib
import math
import threading
from collections.abc import Sequence

import onnx
import onnx.checker
import onnx.defs
import onnx.shape_inference
from onnx import TensorProto, helper

from onnx_struct import limits
from onnx_struct.errors import ValidationError
from onnx_struct.layout import dtypes

STANDARD_DOMAINS = ("", "ai.onnx")

# Operators whose work is linear (TopK: n log n) in the sizes of their inputs and outputs, and
# whose output shapes onnx infers from input shapes and constant inputs. Anything else (Loop,
# Scan, If, Random*, NonZero, Unique, Compress, Conv, Einsum, sequences, ...) is refused.
ALLOWED_OPERATORS = frozenset(
    # element-wise
    "Abs Acos Acosh Add And Asin Asinh Atan Atanh BitCast BitShift BitwiseAnd BitwiseNot BitwiseOr "
    "BitwiseXor Cast CastLike Ceil Celu Clip Cos Cosh Div Elu Equal Erf Exp Floor Gelu Greater "
    "GreaterOrEqual HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu Less LessOrEqual Log Max "
    "Mean Min Mish Mod Mul Neg Not Or Pow PRelu Reciprocal Relu Round Selu Shrink Sigmoid Sign Sin "
    "Sinh Softplus Softsign Sqrt Sub Sum Tan Tanh ThresholdedRelu Where Xor "
    # quantization
    "DequantizeLinear QuantizeLinear DynamicQuantizeLinear "
    # data movement (output shapes static: checked by check_sizes)
    "Concat Constant ConstantOfShape DepthToSpace Expand EyeLike Flatten Gather GatherElements "
    "GatherND OneHot Pad Range Reshape Resize ReverseSequence ScatterElements ScatterND Shape Size "
    "Slice SpaceToDepth Split Squeeze Tile Transpose Trilu Unsqueeze CenterCropPad "
    # reductions and normalizations
    "ArgMax ArgMin CumSum Hardmax LogSoftmax ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp "
    "ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Softmax TopK "
    # work counted per multiply-add
    "MatMul".split()
)
_CONTROL_FLOW = frozenset({"Loop", "Scan", "If", "SequenceMap"})
_TENSOR_ATTRIBUTES = (onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS)
_SPARSE_ATTRIBUTES = (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)
_ELEMENT_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
# Inputs that are shapes (1-D int64 by the operators' schemas; onnx's inference does not check it).
_SHAPE_OPERANDS = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}
# Attributes naming an element type (Cast.to, EyeLike.dtype, QuantizeLinear.output_dtype), and
# whether 0 ("the default") is allowed: onnx's inference raises a bare ValueError for others.
_ELEMENT_TYPE_ATTRIBUTES = {"to": False, "dtype": False, "output_dtype": True}
# Captured at import (onnx_struct.inference imports this module before hooks.install() can replace
# onnx's function with the struct-aware one).
_stock_infer_shapes = onnx.shape_inference.infer_shapes

# Results of check_sizes, keyed by the function, its input types and constants: a model with many
# declarations of one format and shape (or decode calls on many values) analyzes it once.
_CACHE_SIZE = 256
_cache: collections.OrderedDict[bytes, tuple[list[onnx.TypeProto], None] | tuple[None, ValidationError]] = (
    collections.OrderedDict()
)
_cache_lock = threading.Lock()


# ---------------------------------------------------------------------- the function alone
def check_structure(function: onnx.FunctionProto, where: str, ir_version: int = onnx.IR_VERSION) -> None:
    """Raise ValidationError (path ``where`` or one of its nodes) unless ``function`` follows the
    structural rules of the policy; ``ir_version`` is the model's, for onnx's function checker."""
    if not isinstance(function.name, str) or not isinstance(function.domain, str):
        raise ValidationError(where, "the function's name or domain is not valid UTF-8", code="invalid_utf8")
    if onnx.defs.has(function.name, function.domain or ""):
        raise ValidationError(
            where,
            f"a function may not be named like the standard operator {function.domain or 'ai.onnx'}.{function.name}: "
            "registered beside the graph it would shadow it",
            code="decoder_policy",
        )
    if len(function.attribute) or len(function.attribute_proto):
        raise ValidationError(
            where, "a decoder or encoder takes no attributes: it is called without any", code="decoder_policy"
        )
    if len(function.node) > limits.MAX_FUNCTION_NODES:
        raise ValidationError(
            where,
            f"has {len(function.node)} nodes; at most {limits.MAX_FUNCTION_NODES} are allowed",
            actual=len(function.node),
            code="limit_exceeded",
            limit=limits.MAX_FUNCTION_NODES,
        )
    _check_onnx_function(function, where, ir_version)
    constant_bytes = 0
    for i, node in enumerate(function.node):
        constant_bytes += _check_node(node, f"{where}.node[{i}]")
        if constant_bytes > limits.MAX_FUNCTION_CONSTANT_BYTES:
            raise ValidationError(
                f"{where}.node[{i}]",
                f"the function's constants exceed {limits.MAX_FUNCTION_CONSTANT_BYTES} bytes; "
                "large tables belong in constant leaves of the declaration",
                code="limit_exceeded",
                actual=constant_bytes,
                limit=limits.MAX_FUNCTION_CONSTANT_BYTES,
            )


def _check_onnx_function(function: onnx.FunctionProto, where: str, ir_version: int) -> None:
    """onnx's own function checker, with the function's opset_import."""
    opsets = {o.domain: o.version for o in function.opset_import}
    if any(not isinstance(d, str) or not 0 <= v < 1 << 31 for d, v in opsets.items()):
        raise ValidationError(
            where, "invalid function: opset_import has a bad domain or version", code="invalid_function"
        )
    context = onnx.checker.C.CheckerContext()
    # An out-of-range model ir_version is the stock checker's finding; check the function anyway.
    context.ir_version = ir_version if 0 < ir_version <= onnx.IR_VERSION else onnx.IR_VERSION
    context.opset_imports = opsets
    try:
        onnx.checker.check_function(function, context)
    except onnx.checker.ValidationError as error:
        raise ValidationError(where, f"invalid function: {_first_line(error)}", code="invalid_function") from None
    except UnicodeDecodeError:
        raise ValidationError(
            where, "invalid function: a string in it is not valid UTF-8", code="invalid_utf8"
        ) from None


def _check_node(node: onnx.NodeProto, where: str) -> int:
    """The rules for one node; returns the bytes of the constants it holds."""
    if not all(isinstance(s, str) for s in (node.op_type, node.domain, *node.input, *node.output)):
        raise ValidationError(where, "an operator, domain or value name is not valid UTF-8", code="invalid_utf8")
    where = f"{where} ({node.op_type!r})"
    if node.domain not in STANDARD_DOMAINS:
        raise ValidationError(
            where,
            f"calls {node.domain!r}.{node.op_type}: a decoder may use standard ONNX operators only "
            "(no function calls, hence no recursion)",
            code="decoder_policy",
        )
    if node.op_type not in ALLOWED_OPERATORS:
        if node.op_type in _CONTROL_FLOW:
            why = "control flow runs for as long as its data says"
        elif node.op_type.startswith("Random") or node.op_type in ("Bernoulli", "Multinomial"):
            why = "a decoder is deterministic"
        else:
            why = "its output size or work is not bounded by static shapes"
        raise ValidationError(
            where, f"{node.op_type} is not allowed in a decoder or encoder: {why}", code="decoder_policy"
        )
    nbytes = 0
    for attribute in node.attribute:
        if attribute.ref_attr_name:
            raise ValidationError(
                where, f"attribute {attribute.name!r} refers to a function attribute", code="decoder_policy"
            )
        if attribute.type == onnx.AttributeProto.INT and attribute.name in _ELEMENT_TYPE_ATTRIBUTES:
            allowed = _ELEMENT_TYPES | ({TensorProto.UNDEFINED} if _ELEMENT_TYPE_ATTRIBUTES[attribute.name] else set())
            if attribute.i not in allowed:
                raise ValidationError(
                    where,
                    f"attribute {attribute.name!r} = {attribute.i} is not an ONNX element type",
                    code="unknown_element_type",
                )
        if attribute.type in _SPARSE_ATTRIBUTES or attribute.HasField("sparse_tensor"):
            raise ValidationError(
                where, "sparse constants are not allowed: their dense size is unbounded", code="decoder_policy"
            )
        tensors = [attribute.t] if attribute.type == onnx.AttributeProto.TENSOR else list(attribute.tensors)
        if attribute.type not in _TENSOR_ATTRIBUTES:
            # value_ints, value_floats, value_strings of a Constant, and any list attribute
            nbytes += 8 * (len(attribute.ints) + len(attribute.floats)) + sum(len(s) for s in attribute.strings)
        for tensor in tensors:
            nbytes += _tensor_bytes(tensor, f"{where}.attribute ({attribute.name!r})")
    return nbytes


def _tensor_bytes(tensor: TensorProto, where: str) -> int:
    if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
        raise ValidationError(
            where, "a constant inside a function may not have external data", code="external_not_allowed"
        )
    if tensor.data_type not in _ELEMENT_TYPES:
        raise ValidationError(
            where, f"data_type {tensor.data_type} is not an ONNX element type", code="unknown_element_type"
        )
    if any(d < 0 for d in tensor.dims):
        raise ValidationError(where, f"negative dimension in {list(tensor.dims)}", code="bad_shape")
    if tensor.data_type == TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    count = math.prod(tensor.dims)
    return -(-count * (dtypes.bit_width(tensor.data_type) or 8) // 8)


# ---------------------------------------------------------------------- the function for given inputs
def check_sizes(
    function: onnx.FunctionProto,
    inputs: Sequence[tuple[str, onnx.TypeProto]],
    initializers: Sequence[TensorProto],
    where: str,
    allowance_bytes: int = 0,
) -> list[onnx.TypeProto]:
    """The types of ``function``'s outputs when ``inputs`` (name, tensor type) and
    ``initializers`` (constant leaves, by name) are bound, after checking that every value has a
    static shape and that all of them fit the policy's budget (``allowance_bytes`` adds the
    bytes an encoder writes to its leaves). Applies :func:`check_structure` first. Memoized."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{where}\0{allowance_bytes}\0".encode(errors="replace"))
    digest.update(function.SerializeToString(deterministic=True))
    for name, type_proto in inputs:
        digest.update(name.encode(errors="replace") + b"\0" + type_proto.SerializeToString(deterministic=True))
    for tensor in initializers:
        digest.update(tensor.SerializeToString(deterministic=True))
    key = digest.digest()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        try:
            hit = (_analyze(function, inputs, initializers, where, allowance_bytes), None)
        except ValidationError as error:
            hit = (None, error)
        with _cache_lock:
            _cache[key] = hit
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    types, error = hit
    if error is not None:
        raise ValidationError(error.path, error.reason, **error.details, code=error.code)
    return [_copy(t) for t in types]


def check_function_model(model: onnx.ModelProto, where: str, allowance_bytes: int = 0) -> None:
    """:func:`check_sizes` for a model built by :func:`onnx_struct.functions.function_model`."""
    if len(model.functions) != 1 or len(model.graph.node) != 1:
        raise ValidationError(
            where, "not a function model: one function and one call node expected", code="invalid_function"
        )
    inputs = [(info.name, info.type) for info in model.graph.input]
    check_sizes(model.functions[0], inputs, list(model.graph.initializer), where, allowance_bytes)


def _analyze(function, inputs, initializers, where: str, allowance_bytes: int) -> list[onnx.TypeProto]:
    check_structure(function, where)
    try:
        graph_model = _body_model(function, inputs, initializers)
    except UnicodeDecodeError:  # a value or node name (not checked by check_structure) is not UTF-8
        raise ValidationError(where, "a name in the function is not valid UTF-8", code="invalid_utf8") from None
    inferred = _infer(graph_model, where, data_prop=False)
    # Shape and Size depend on shapes only: fold them into constants where the input's shape is
    # static, and infer again, until nothing changes (each round folds at least one node).
    while _fold_shapes(graph_model, inferred):
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
    budget = limits.FUNCTION_EXPANSION * input_bytes + limits.FUNCTION_BASE_BYTES
    total = 0
    for i, node in enumerate(function.node):
        node_where = f"{where}.node[{i}] ({node.op_type!r})"
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
                f"({limits.FUNCTION_EXPANSION} per input byte + {limits.FUNCTION_BASE_BYTES})",
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
        return _stock_infer_shapes(model, check_type=True, strict_mode=True, data_prop=data_prop)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError) as error:
        # onnx raises ValueError for element types it does not know (Cast(to=0), data_type 255)
        role = "encoder" if ".encoder" in where else "decoder"
        raise ValidationError(
            where, f"type inference of the {role} failed: {_first_line(error)}", code="invalid_function"
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
    width = dtypes.bit_width(elem_type) if elem_type in _ELEMENT_TYPES else None
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


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
