"""The decoder safety policy's structural rules: what a decoder or encoder may contain, checked on
the function alone (:func:`check_structure`; see :mod:`onnx_struct.functions.policy` for the
policy as a whole and for the size rules, which need the function's input types).
"""

from __future__ import annotations

import math

import onnx
import onnx.checker
import onnx.defs
from onnx import TensorProto

from onnx_struct import limits
from onnx_struct.errors import ValidationError
from onnx_struct.layout import dtypes
from onnx_struct.schema import utf8

STANDARD_DOMAINS = ("", "ai.onnx")

# Operators whose work is linear (TopK: n log n) in the sizes of their inputs and outputs, and
# whose output shapes onnx infers from input shapes and constant inputs. Anything else (Loop,
# Scan, If, Random*, NonZero, Unique, Compress, Conv, Einsum, sequences, ...) is refused. Range
# too: onnx computes an int64 Range's length with wrapping arithmetic
# (INT64_MIN..INT64_MAX typed as 0 elements, 2^64 / delta at run time), and a float Range's
# length with other rounding than onnxruntime's; indices a decoder needs can be a constant.
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
    "GatherND OneHot Pad Reshape Resize ReverseSequence ScatterElements ScatterND Shape Size "
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
ELEMENT_TYPES = frozenset(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
# Attributes naming an element type (Cast.to, EyeLike.dtype, QuantizeLinear.output_dtype), and
# whether 0 ("the default") is allowed: onnx's inference raises a bare ValueError for others.
_ELEMENT_TYPE_ATTRIBUTES = {"to": False, "dtype": False, "output_dtype": True}


def check_structure(function: onnx.FunctionProto, where: str, ir_version: int = onnx.IR_VERSION) -> None:
    """Raise ValidationError (path ``where`` or one of its nodes) unless ``function`` follows the
    structural rules of the policy; ``ir_version`` is the model's, for onnx's function checker."""
    if not isinstance(function.name, str) or not isinstance(function.domain, str):
        raise ValidationError(where, "the function's name or domain is not valid UTF-8", code="invalid_utf8")
    utf8.check_utf8(function, where)  # any other string: its inputs, outputs, attributes, nodes
    if function.domain in STANDARD_DOMAINS and onnx.defs.has(function.name, ""):  # onnx registers under ""
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
        raise ValidationError(where, f"invalid function: {first_line(error)}", code="invalid_function") from None
    except UnicodeDecodeError:
        raise ValidationError(
            where, "invalid function: a string in it is not valid UTF-8", code="invalid_utf8"
        ) from None
    except ValueError as error:  # e.g. onnx's C++ protobuf refusing bytes upb parsed (field 0 in a group)
        raise ValidationError(where, f"invalid function: {first_line(error)}", code="invalid_function") from None


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
            allowed = ELEMENT_TYPES | ({TensorProto.UNDEFINED} if _ELEMENT_TYPE_ATTRIBUTES[attribute.name] else set())
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
    if tensor.data_type not in ELEMENT_TYPES:
        raise ValidationError(
            where, f"data_type {tensor.data_type} is not an ONNX element type", code="unknown_element_type"
        )
    if any(d < 0 for d in tensor.dims):
        raise ValidationError(where, f"negative dimension in {list(tensor.dims)}", code="bad_shape")
    if tensor.data_type == TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    count = math.prod(tensor.dims)
    return -(-count * (dtypes.bit_width(tensor.data_type) or 8) // 8)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
