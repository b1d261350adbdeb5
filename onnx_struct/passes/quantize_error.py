"""The error each quantized weight introduces: the relative error of its op's output.

For each node reading a weight ``W`` quantized to ``Wq`` the op is computed twice on the same
input ``x`` (float64 for MatMul, Gemm and Gather; onnxruntime's Conv for Conv); the error is
``||op(x, Wq) - op(x, W)|| / ||op(x, W)||``, the largest over the weight's readers. ``x`` is what
the node reads in the float model on the calibration input, or random where that is not
available; the report says which.

Notes: docs/modules.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from google.protobuf.message import EncodeError
from onnx import helper

from onnx_struct.errors import ValidationError, limit_exceeded
from onnx_struct.limits import MAX_RANDOM_CALIBRATION_BYTES
from onnx_struct.passes.quantize_plan import PlannedWeight
from onnx_struct.passes.quantize_sites import MAIN, Site
from onnx_struct.runtime.ort import load_onnxruntime, ort_errors

CALIBRATION_ROWS = 8  # rows of a synthetic MatMul/Gemm input
SPATIAL = 16  # spatial size of a synthetic Conv input, plus the kernel's reach
_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """A random input for every graph input that is not an initializer: standard normal floats,
    zeros for integers and booleans (indices and flags that are valid whatever the model), every
    dimension without a fixed size set to 1.

    The declared shape is the model's word, checked before anything is allocated: a negative or
    zero dimension (an input of no element measures nothing), or inputs past
    limits.MAX_RANDOM_CALIBRATION_BYTES together, is a ValidationError naming the input and
    suggesting a calibration file."""
    generator = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    planned, total = [], 0
    for i, value in enumerate(model.graph.input):
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        dtype = _NUMPY.get(tensor_type.elem_type)
        if dtype is None:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        where = f"graph.input[{i}] ({value.name!r})"
        if any(d <= 0 for d in shape):
            kind = "a negative" if any(d < 0 for d in shape) else "a zero"
            raise ValidationError(
                f"{where}.type.tensor_type.shape",
                f"declares {kind} dimension {shape}: no random calibration input can be made from it; "
                "pass the model's inputs (--calibration FILE.npz, or calibration= a mapping)",
                code="bad_shape",
            )
        # float64 samples first, then the input's type: bound what numpy allocates
        total += math.prod(shape) * max(8, np.dtype(dtype).itemsize)
        if total > MAX_RANDOM_CALIBRATION_BYTES:
            raise limit_exceeded(
                f"{where}.type.tensor_type.shape",
                f"random calibration inputs of the declared shapes (this one {shape}) would take {total} "
                f"bytes, past {MAX_RANDOM_CALIBRATION_BYTES} (limits.MAX_RANDOM_CALIBRATION_BYTES); pass "
                "smaller inputs (--calibration FILE.npz, or calibration= a mapping)",
                total,
                MAX_RANDOM_CALIBRATION_BYTES,
            )
        planned.append((value.name, shape, dtype))
    feeds = {}
    for name, shape, dtype in planned:
        if np.issubdtype(dtype, np.floating):
            feeds[name] = generator.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype)
    return feeds


def activations(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: set[str], *, owned: bool = False
) -> tuple[dict, str]:
    """The values ``names`` take in the float ``model`` on ``feeds`` (onnxruntime), and "" or why
    the model could not be run (then the dict is empty). ``owned``: ``model`` is the caller's
    throw-away copy, given outputs in place rather than copied again."""
    ort = load_onnxruntime()
    if owned:
        probe = model
    else:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    wanted = sorted(n for n in names if n)
    for name in wanted:
        if name not in outputs:
            probe.graph.output.add().name = name  # no type: onnxruntime infers it
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failure is returned; onnxruntime's own log of it is noise
    try:
        data = probe.SerializeToString()
    except EncodeError:  # past protobuf's 2 GiB: onnxruntime cannot be given it as one message
        return {}, "the float model is past protobuf's 2 GiB"
    del probe  # (the caller's reference, if any, is its own)
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        del data
        inputs = {i.name for i in session.get_inputs()}
        values = session.run(wanted, {k: v for k, v in feeds.items() if k in inputs})
    except ort_errors() as error:
        return {}, str(error).strip().splitlines()[0][:300]
    return dict(zip(wanted, values, strict=True)), ""


def output_errors(lowered: onnx.ModelProto, feeds: dict[str, np.ndarray], reference: dict) -> dict[str, float]:
    """Relative L2 error of each output of ``lowered`` (the quantized model, plain ONNX) against
    ``reference`` (the float model's outputs on ``feeds``); {} when onnxruntime cannot run it."""
    try:
        data = lowered.SerializeToString()
    except EncodeError:  # one protobuf cannot hold it: not measured
        return {}
    ort = load_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failure is returned; onnxruntime's own log of it is noise
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        inputs = {i.name for i in session.get_inputs()}
        got = session.run(list(reference), {k: v for k, v in feeds.items() if k in inputs})
    except ort_errors():
        return {}
    return {
        name: _relative((np.asarray(want, np.float64), np.asarray(value, np.float64)))
        for (name, want), value in zip(reference.items(), got, strict=True)
    }


def restored(decoded: np.ndarray, weight: PlannedWeight) -> np.ndarray:
    """The logical weight from its decoded stored tensor: padding sliced off, transposed back,
    reshaped to a Conv kernel (the restoring nodes' computation)."""
    kept = decoded[..., : decoded.shape[-1] - weight.pad] if weight.pad else decoded
    kept = kept.T if weight.transpose != "none" else kept
    return kept.reshape(weight.shape)


def op_input_names(site: Site) -> set[str]:
    """The activations the main-graph readers of ``site`` read besides the weight."""
    names = set()
    for use in site.uses:
        if use.where == MAIN and not use.via_call:
            names.add(use.node.input[1 - use.position] if use.node.op_type == "Gather" else use.node.input[0])
    return names


def weight_error(site: Site, w: np.ndarray, wq: np.ndarray, values: dict, seed: int = 0) -> tuple[float, bool]:
    """(the largest relative error of an op reading the weight, whether every reader's input was
    the calibration's own activation)."""
    return worst_error(site, values, seed, lambda use, x, rng: _relative(_op(use.node, use.position, x, w, wq, rng)))


def worst_error(site: Site, values: dict, seed: int, error: Callable) -> tuple[float, bool]:
    """(the largest ``error(use, x, generator)`` over the readers of ``site``, whether every ``x``
    was the calibration's own activation); ``x`` is None where it is not, and random inputs are
    drawn from one generator seeded with ``seed``, reader by reader."""
    worst, measured = 0.0, True
    generator = np.random.default_rng(seed)
    for use in site.uses:
        x = _x_of(use, values)
        measured &= x is not None
        found = error(use, x, generator)
        if math.isnan(found) or found > worst:  # max() would drop a NaN error as smaller than 0
            worst = found
        if math.isnan(worst):
            break
    return worst, measured


def _x_of(use, values: dict):
    """The input a reader of the weight reads besides it, in the float model on the calibration
    input (None: not available, for a reader in a subgraph or function, or not measured)."""
    node = use.node
    source = node.input[0] if node.op_type != "Gather" else node.input[1]
    return values.get(source) if use.where == MAIN and not use.via_call else None


def x_oriented(node: onnx.NodeProto, x) -> np.ndarray:
    """``x`` as the op multiplies it (transposed for a Gemm with transA)."""
    return np.asarray(x).T if node.op_type == "Gemm" and _attribute(node, "transA", 0) else x


def norms_relative(reference_squares: float, difference_squares: float) -> float:
    """||difference|| / ||reference|| from their sums of squares (0 when both are 0)."""
    norm, diff = reference_squares**0.5, difference_squares**0.5
    return diff / norm if norm else (0.0 if diff == 0 else math.inf)


def _relative(pair: tuple[np.ndarray, np.ndarray]) -> float:
    reference, quantized = pair
    norm = _norm(reference)
    diff = _norm(quantized - reference)
    return diff / norm if norm else (0.0 if diff == 0 else math.inf)


def _norm(a: np.ndarray) -> float:
    """The L2 norm, summed in float64 row block by row block (no float64 copy of a large array)."""
    if a.size == 0:  # an empty output (a zero dimension): reshape(len(a), -1) cannot infer its width
        return 0.0
    flat = a.reshape(len(a), -1) if a.ndim > 1 else a.reshape(1, -1)
    step = max(1, (1 << 20) // max(1, flat.shape[1]))
    total = sum(float(np.sum(np.square(flat[i : i + step], dtype=np.float64))) for i in range(0, len(flat), step))
    return total**0.5


def _attribute(node: onnx.NodeProto, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _op(node, position: int, x, w: np.ndarray, wq: np.ndarray, generator) -> tuple[np.ndarray, np.ndarray]:
    """(op(x, W), op(x, Wq)) for the reader ``node``, in float32 (the product of ``x`` with
    ``Wq - W`` added to the reference: no float64 copy of a weight is made)."""
    if node.op_type == "Gather":
        if x is None:  # every row: the table itself
            return w, wq
        rows = np.asarray(x, np.int64) % w.shape[0]
        return w[rows], wq[rows]
    if node.op_type == "Conv":
        return _conv(node, x, w, wq, generator)
    if node.op_type == "Gemm" and _attribute(node, "transB", 0):
        w, wq = w.T, wq.T
    x = generator.standard_normal((CALIBRATION_ROWS, w.shape[0])) if x is None else x_oriented(node, x)
    x = np.asarray(x, np.float32)
    reference = x @ w
    return reference, reference + x @ (wq - w)


def _conv(node, x, w: np.ndarray, wq: np.ndarray, generator) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's float32 Conv with the node's attributes, on ``x`` or a random input."""
    ort = load_onnxruntime()
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if x is None:
        group = int(attributes.get("group", 1))
        dilations = attributes.get("dilations", [1] * (w.ndim - 2))
        spatial = [SPATIAL + (k - 1) * d for k, d in zip(w.shape[2:], dilations, strict=True)]
        x = generator.standard_normal((1, w.shape[1] * group, *spatial)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], **attributes)
    graph = helper.make_graph(
        [conv],
        "conv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.ascontiguousarray(w, np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.ascontiguousarray(wq, np.float32), "w"))
    quantized = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"x": np.asarray(x, np.float32)}
    return reference.run(None, feed)[0].astype(np.float64), quantized.run(None, feed)[0].astype(np.float64)
