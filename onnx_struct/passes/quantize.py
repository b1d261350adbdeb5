"""Quantize the MatMul/Gemm weights of an ONNX model into a block format: ``quantize(model, "Q4_0")``.

Each eligible float32 weight initializer is replaced by a struct value of the chosen format whose
bytes come from the format's own encoder (an ONNX function run by :func:`onnx_struct.encode`), so
the payload is whatever the format's declaration says it is, and the decoder reproduces the
logical weight for every consumer. Everything else in the model is left as it was.

Which axis the blocks group: a block format's blocks run along the LAST dimension (numpy order)
of the stored tensor. For ``Y = X @ W`` with ``W: [K, N]`` that would be the output axis N. GGUF,
onnxruntime's MatMulNBits and most weight-only schemes group along the input (reduction) axis K
instead, which is what ``group_axis="input"`` (the default) does: it stores ``W^T: [N, K]`` and
adds one ``Transpose`` (or, for a Gemm, flips ``transB``), so each block holds consecutive
weights of one output channel (the bytes are then exactly a GGUF tensor's). ``group_axis="output"``
stores ``W`` as is, with no extra node; each block then shares one scale across a block of output
channels for one input channel. docs/formats.md compares the two on a real model. Embedding
tables read by ``Gather`` are quantized on request, blocks along each row.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from onnx_struct import formats
from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import BlockFormat
from onnx_struct.lowering.opsets import OpsetConversionError, convert_default_opset
from onnx_struct.payload.external_io import load_with_external_data
from onnx_struct.runtime.codec import encode
from onnx_struct.schema.model import add_struct_values, from_onnx, load, to_onnx
from onnx_struct.schema.walk import walk_graphs

GroupAxis = Literal["input", "output"]
# The input position of the weight, per supported op type (Gather: the table of an embedding lookup).
WEIGHT_INPUT = {"MatMul": 1, "Gemm": 1, "Gather": 0}


@dataclasses.dataclass(frozen=True)
class PlannedWeight:
    """One weight :func:`quantize` replaces (see :func:`plan`)."""

    name: str  # the initializer replaced
    value_name: str  # the struct value holding it (``name`` unless a Transpose node restores it)
    shape: tuple[int, ...]  # the logical weight
    stored_shape: tuple[int, ...]  # the tensor encoded (blocks along its last dimension)
    transpose: Literal["none", "node", "transB"]  # how the consumers see the original orientation


@dataclasses.dataclass
class Plan:
    """What :func:`quantize` will do: the weights it replaces and why others are left alone."""

    format: BlockFormat
    weights: list[PlannedWeight]
    skipped: dict[str, str]  # initializer consumed by an eligible op -> reason it is kept as is


def plan(
    model: onnx.ModelProto | str | os.PathLike,
    format: str | BlockFormat,
    *,
    op_types: Iterable[str] = ("MatMul", "Gemm"),
    min_elements: int = 4096,
    group_axis: GroupAxis = "input",
) -> Plan:
    """Decide which weights :func:`quantize` replaces, without encoding anything."""
    return _plan(read_model(model), _format(format), tuple(op_types), min_elements, group_axis)


def quantize(
    model: onnx.ModelProto | str | os.PathLike,
    format: str | BlockFormat,
    *,
    op_types: Iterable[str] = ("MatMul", "Gemm"),
    min_elements: int = 4096,
    group_axis: GroupAxis = "input",
) -> onnx.ModelProto:
    """A copy of ``model`` whose eligible weights are struct values in ``format``.

    A weight is eligible when it is a float32 2-D initializer with at least ``min_elements``
    elements, consumed only as the weight input (B) of nodes in ``op_types`` of the main graph
    (not a graph input or output, not used by a subgraph), and its grouped axis is a multiple of
    the format's block size. ``group_axis`` chooses that axis: "input" (K of ``X @ W``, as GGUF
    and MatMulNBits group) or "output" (N); see the module docstring for the trade-off. Adding
    "Gather" to ``op_types`` also quantizes embedding tables read by ``Gather(axis=0)``, with
    blocks along each row (the embedding vector), as GGUF stores ``token_embd``.

    An opset older than the decoder's is raised first with onnx's version converter, since
    onnxruntime resolves the decoder's operators at the model's opset.

    The payload is produced by the format's encoder in onnxruntime (:func:`onnx_struct.encode`);
    the result passes :func:`onnx_struct.check_model`, and :func:`onnx_struct.lower` turns it into
    a plain model onnxruntime runs.

    Example::

        q = quantize(onnx.load("model.onnx"), "Q4_0")
        onnx.save(q, "model.q4_0.onnx")
        session = onnxruntime.InferenceSession(onnx_struct.lower(q).SerializeToString())
    """
    stock = read_model(model)
    fmt = _format(format)
    if fmt.encoder is None:
        raise ValueError(f"format {fmt.name} has no encoder; quantizing needs one")
    planned = _plan(stock, fmt, tuple(op_types), min_elements, group_axis)
    result = onnx.ModelProto()
    result.CopyFrom(stock)
    if not planned.weights:
        return result
    result = _upgrade_opset(result, fmt, planned.weights[0].stored_shape)
    graph = result.graph
    weights = {w.name: w for w in planned.weights}
    arrays = {t.name: _weight_array(t, i) for i, t in enumerate(graph.initializer) if t.name in weights}

    kept = [t for t in graph.initializer if t.name not in weights]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    # A value_info would now describe the wrong orientation (transB) or a name no node produces.
    kept_infos = [v for v in graph.value_info if v.name not in weights]
    del graph.value_info[:]
    graph.value_info.extend(kept_infos)
    transposes = []
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "Gemm" and len(node.input) > 1 else None
        if weight is not None and weight.transpose == "transB":
            _flip_trans_b(node)
    for weight in planned.weights:
        if weight.transpose == "node":
            transposes.append(
                onnx.helper.make_node(
                    "Transpose", [weight.value_name], [weight.name], name=f"{weight.value_name}/Transpose", perm=[1, 0]
                )
            )
    # The Transposes read only struct values, so they may run first; keep the graph sorted.
    nodes = transposes + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)

    overlay = from_onnx(result)
    roots: dict[tuple[int, ...], int] = {}  # stored shape -> root declaration, shared by same-shape weights
    values = []
    for weight in planned.weights:
        array = arrays[weight.name]
        stored = np.ascontiguousarray(array.T if weight.transpose != "none" else array)
        if weight.stored_shape not in roots:
            roots[weight.stored_shape] = fmt.add_to_model(overlay, weight.stored_shape)
        values.append(encode_array(stored, roots[weight.stored_shape], overlay, weight.value_name))
    add_struct_values(overlay, *values)
    return to_onnx(overlay)


def encode_array(array: np.ndarray, root_index: int, model, name: str):
    """The StructProto ``name`` holding ``array`` as encoded by the format's encoder in onnxruntime."""
    return encode(np.asarray(array, dtype=np.float32), root_index, model, name=name)


def _upgrade_opset(model: onnx.ModelProto, fmt: BlockFormat, shape: tuple[int, ...]) -> onnx.ModelProto:
    """Raise the model's default-domain opset to the decoder's, with onnx's version converter.

    onnxruntime resolves a function's operators at the model's opset, so a model importing an older
    opset than the format's decoder could not run it. Converting now, while the model is plain ONNX,
    always works where the converter does; afterwards the struct values would be names the converter
    does not know. The conversion is lowering's (:func:`onnx_struct.lowering.opsets.convert_default_opset`),
    but where ``lower()`` raises when the converter fails, this returns the model unchanged: the
    quantized model is still valid, and lowering or running it reports which operators differ.

    The converter also runs shape inference and leaves its results behind (a value_info for every
    intermediate, refined output shapes); those are dropped again, so only the opset changes.
    """
    needed = max((o.version for o in fmt.decoder(shape).opset_import if o.domain in ("", "ai.onnx")), default=0)
    have = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if have >= needed:
        return model
    try:
        converted = convert_default_opset(model, needed)
    except OpsetConversionError:
        return model
    for field in ("value_info", "output"):
        del getattr(converted.graph, field)[:]
        getattr(converted.graph, field).extend(getattr(model.graph, field))
    return converted


# ---------------------------------------------------------------------------------- planning


def read_model(model: onnx.ModelProto | bytes | str | os.PathLike) -> onnx.ModelProto:
    """``model`` as an ``onnx.ModelProto`` with its external initializers loaded; bytes that are not
    a model, or external data onnx refuses, are a ValidationError."""
    if isinstance(model, onnx.ModelProto):
        return model
    origin = "<bytes>" if isinstance(model, (bytes, bytearray)) else os.fspath(model)
    try:
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_from_string(bytes(model))
        # onnx_struct's file rules: a FIFO is refused unopened, external tensors stay in the model's directory
        return load_with_external_data(os.fspath(model))
    except DecodeError as error:
        raise ValidationError("", f"{origin} is not an ONNX model: {error}", code="not_parsable") from None
    except onnx.checker.ValidationError as error:  # onnx's checks of external data locations
        if isinstance(error, ValidationError):
            raise
        raise ValidationError("graph.initializer", f"external data: {error}") from None


def _weight_array(tensor: onnx.TensorProto, index: int) -> np.ndarray:
    """The float32 weight, once its data is known to hold exactly as many values as its dims say
    (numpy_helper.to_array would raise a bare ValueError)."""
    n = math.prod(tensor.dims)
    held = len(tensor.raw_data) if tensor.HasField("raw_data") else 4 * len(tensor.float_data)
    if held != 4 * n:
        raise ValidationError(
            f"graph.initializer[{index}] ({tensor.name!r})",
            f"dims {list(tensor.dims)} need {4 * n} bytes of FLOAT data; the tensor holds {held}",
            expected=4 * n,
            actual=held,
        )
    return numpy_helper.to_array(tensor)


def _format(format: str | BlockFormat) -> BlockFormat:
    if isinstance(format, BlockFormat):
        return format
    return formats.get(format)


def _plan(
    stock: onnx.ModelProto, fmt: BlockFormat, op_types: Sequence[str], min_elements: int, group_axis: str
) -> Plan:
    unknown = [op for op in op_types if op not in WEIGHT_INPUT]
    if unknown:
        raise ValueError(f"op_types {unknown} are not supported; the weight input is known for {sorted(WEIGHT_INPUT)}")
    if group_axis not in ("input", "output"):
        raise ValueError(f"group_axis must be 'input' or 'output', not {group_axis!r}")
    graph = stock.graph
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, position))
    in_subgraphs = _names_used_in_subgraphs(graph)
    interface = {v.name for v in graph.input} | {v.name for v in graph.output}
    taken = _all_names(graph) | {v.name for v in load(stock).struct_values}

    weights: list[PlannedWeight] = []
    skipped: dict[str, str] = {}
    for tensor in graph.initializer:
        consumers = uses.get(tensor.name, [])
        if not any(node.op_type in op_types and position == WEIGHT_INPUT[node.op_type] for node, position in consumers):
            continue  # not a weight of an eligible op: nothing to report
        reason = _ineligible(tensor, consumers, op_types, min_elements, interface, in_subgraphs)
        if reason:
            skipped[tensor.name] = reason
            continue
        shape = tuple(int(d) for d in tensor.dims)
        # The reduction axis K of each consumer: axis 0 of W for MatMul and Gemm(transB=0), 1 for transB=1;
        # a Gather(axis=0) table keeps its rows (each block is part of one embedding vector).
        k_axes = {_k_axis(node) for node, _ in consumers}
        if len(k_axes) != 1:
            skipped[tensor.name] = "its consumers disagree on which axis is the input axis"
            continue
        (k_axis,) = k_axes
        if k_axis == "rows":
            transposed = False
        else:
            grouped_axis = k_axis if group_axis == "input" else 1 - k_axis
            transposed = grouped_axis == 0  # blocks run along the last stored dimension
        stored_shape = shape[::-1] if transposed else shape
        if stored_shape[-1] % fmt.block_size:
            skipped[tensor.name] = (
                f"its {group_axis} axis ({stored_shape[-1]}) is not a multiple of the block size {fmt.block_size}"
            )
            continue
        if not transposed:
            how, value_name = "none", tensor.name
        elif all(node.op_type == "Gemm" for node, _ in consumers):
            how, value_name = "transB", tensor.name
        else:
            how, value_name = "node", _unique(f"{tensor.name}_T", taken)
        weights.append(PlannedWeight(tensor.name, value_name, shape, stored_shape, how))
    return Plan(fmt, weights, skipped)


def _ineligible(tensor, consumers, op_types, min_elements, interface, in_subgraphs) -> str:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return "its data is external and not loaded (pass a path, or onnx.load the model with its data)"
    if tensor.data_type != onnx.TensorProto.FLOAT:
        return f"its element type is {onnx.TensorProto.DataType.Name(tensor.data_type)}, not FLOAT"
    if len(tensor.dims) != 2:
        return f"it is {len(tensor.dims)}-D, not 2-D"
    if any(d < 0 for d in tensor.dims):
        return f"its dims {list(tensor.dims)} are negative"
    if math.prod(tensor.dims) < min_elements:  # math.prod: numpy's product would wrap around
        return f"it has {math.prod(tensor.dims)} elements, fewer than min_elements={min_elements}"
    if tensor.name in interface:
        return "it is also a graph input or output"
    if tensor.name in in_subgraphs:
        return "a subgraph uses it"
    for node, position in consumers:
        if node.op_type not in op_types or position != WEIGHT_INPUT[node.op_type]:
            return f"node {node.name or node.op_type!r} uses it as input {position}, not as an eligible weight"
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if node.op_type == "Gather" and axis not in (0, -2):
            return f"node {node.name or node.op_type!r} gathers along axis {axis}, not rows"
    return ""


def _k_axis(node: onnx.NodeProto) -> int | str:
    if node.op_type == "Gather":
        return "rows"
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 1 if trans_b else 0
    return 0


def _flip_trans_b(node: onnx.NodeProto) -> None:
    for attribute in node.attribute:
        if attribute.name == "transB":
            attribute.i = 0 if attribute.i else 1
            return
    node.attribute.append(onnx.helper.make_attribute("transB", 1))


def _names_used_in_subgraphs(graph: onnx.GraphProto) -> set[str]:
    names: set[str] = set()
    for _, sub in itertools.islice(walk_graphs(graph), 1, None):  # every graph but ``graph`` itself
        for node in sub.node:
            names.update(node.input)
        names.update(o.name for o in sub.output)
    return names


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {t.name for t in graph.initializer} | {v.name for v in graph.input} | {v.name for v in graph.output}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def _unique(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate
