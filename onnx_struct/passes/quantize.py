"""Quantize the MatMul/Gemm (and on request Gather, Conv) weights of an ONNX model into a block format:
``quantize(model, "Q4_0")``.

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
tables read by ``Gather`` are quantized on request, blocks along each row, and so are Conv
kernels ``[O, I, kh, kw]``, stored as ``[O, I*kh*kw]`` (blocks along the flattened input axis)
with one ``Reshape`` restoring them.

A grouped axis that is not a multiple of the block size is padded with zeros up to one in the
stored tensor (as onnxruntime's own quantizer pads the last block), and one ``Slice`` after the
decoder drops the padding, so the model computes exactly what it computed with the unpadded
weight's quantization. The result must load in onnxruntime (lowered): a format whose decoder
onnxruntime cannot run is refused unless ``allow_reference_only=True``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import BlockFormat
from onnx_struct.lowering.lower import lower
from onnx_struct.lowering.opsets import OpsetConversionError, convert_default_opset
from onnx_struct.passes.quantize_plan import (
    DEFAULT_OP_TYPES,
    WEIGHT_INPUT,
    GroupAxis,
    Plan,
    PlannedWeight,
    build_plan,
    encodable_names,
    plan,
    read_model,
    resolve_format,
    unique_name,
)
from onnx_struct.runtime.codec import encode
from onnx_struct.runtime.delivery import external_tensors_in_memory
from onnx_struct.runtime.ort import load_onnxruntime, ort_errors
from onnx_struct.schema.model import add_struct_values, from_onnx, load, to_onnx

__all__ = [
    "WEIGHT_INPUT",
    "Plan",
    "PlannedWeight",
    "encodable_names",
    "plan",
    "quantize",
    "read_model",
    "runnable_names",
    "runtime_error",
]


def quantize(
    model: onnx.ModelProto | str | os.PathLike,
    format: str | BlockFormat,
    *,
    op_types: Iterable[str] = DEFAULT_OP_TYPES,
    min_elements: int = 4096,
    group_axis: GroupAxis = "input",
    pad: bool = True,
    allow_reference_only: bool = False,
) -> onnx.ModelProto:
    """A copy of ``model`` whose eligible weights are struct values in ``format``.

    ``format`` is a BlockFormat or a registered name (case-insensitive) of a format with an
    encoder. A weight is eligible when it is a FLOAT initializer with at least ``min_elements``
    elements, consumed only as the weight input of nodes in ``op_types`` of the main graph (not
    a graph input or output, not used by a subgraph or named by training_info): 2-D for MatMul, Gemm and Gather, a 3-D to
    5-D kernel for Conv. ``group_axis`` chooses the axis the blocks run along: "input" (K of
    ``X @ W``, as GGUF and MatMulNBits group; ``I*kh*kw`` of a Conv kernel) or "output" (N); see
    the module docstring for the trade-off. Adding "Gather" to ``op_types`` also quantizes
    embedding tables read by ``Gather(axis=0)``, with blocks along each row, as GGUF stores
    ``token_embd``. A grouped axis that is not a multiple of the block size is padded with zeros
    (``pad=False``: such a weight is kept as float instead).

    An opset older than the decoder's is raised first with onnx's version converter, since
    onnxruntime resolves the decoder's operators at the model's opset.

    The payload is produced by the format's encoder in onnxruntime (:func:`onnx_struct.encode`);
    the result passes :func:`onnx_struct.check_model`, and :func:`onnx_struct.lower` turns it into
    a plain model. That model is loaded into an onnxruntime session before it is returned: a
    ValidationError (code ``not_runnable``) if onnxruntime refuses it (e.g. OCP_MXFP4, whose
    decoder casts to FLOAT4E2M1), unless ``allow_reference_only=True`` (the model is then valid
    but only a reference decoder can run it).

    Example::

        q = quantize(onnx.load("model.onnx"), "Q4_0")
        onnx.save(q, "model.q4_0.onnx")
        session = onnxruntime.InferenceSession(onnx_struct.lower(q).SerializeToString())
    """
    stock = read_model(model)
    fmt = resolve_format(format)
    if isinstance(op_types, str):  # would be read letter by letter
        raise TypeError(f"op_types: expected a sequence of operator names, got the string {op_types!r}")
    planned = build_plan(stock, fmt, tuple(op_types), min_elements, group_axis, pad)
    result = onnx.ModelProto()
    result.CopyFrom(stock)
    if not planned.weights:
        return result
    weights = {w.name: w for w in planned.weights}
    for i, tensor in enumerate(stock.graph.initializer):  # before anything is sized by their dims
        if tensor.name in weights:
            _check_weight_data(tensor, i)
    if not allow_reference_only:
        # one block through the decoder first: a format onnxruntime cannot decode is refused before encoding
        _refuse_if(runtime_error(_probe_model(fmt, fmt.block_size)), fmt)
    result, conversion_failure = _upgrade_opset(result, fmt, planned.weights[0].stored_shape)
    graph = result.graph
    # checked above (_check_weight_data): raw_data is copied out of protobuf on every read
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name in weights}

    kept = [t for t in graph.initializer if t.name not in weights]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    # A value_info would now describe the wrong orientation (transB) or a name no node produces.
    kept_infos = [v for v in graph.value_info if v.name not in weights]
    del graph.value_info[:]
    graph.value_info.extend(kept_infos)
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "Gemm" and len(node.input) > 1 else None
        if weight is not None and weight.transpose == "transB":
            _flip_trans_b(node)
    taken = _names(graph) | {v.name for v in load(stock).struct_values} | {w.value_name for w in planned.weights}
    restoring = [node for weight in planned.weights for node in _restore_nodes(weight, graph, taken)]
    # The restoring nodes read only struct values and constants, so they may run first; keep the graph sorted.
    nodes = restoring + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)

    overlay = from_onnx(result)
    roots: dict[tuple[int, ...], int] = {}  # stored shape -> root declaration, shared by same-shape weights
    values = []
    for weight in planned.weights:
        stored = stored_array(arrays[weight.name], weight)
        if weight.stored_shape not in roots:
            roots[weight.stored_shape] = fmt.add_to_model(overlay, weight.stored_shape)
        values.append(encode_array(stored, roots[weight.stored_shape], overlay, weight.value_name))
    add_struct_values(overlay, *values)
    quantized = to_onnx(overlay)
    if not allow_reference_only:
        problem = runtime_error(quantized)
        if problem:  # is it the format? The model may not run as given, or not at the decoder's opset
            as_given = "" if conversion_failure else runtime_error(stock)
            cause = conversion_failure or (
                as_given and f"onnxruntime cannot run the model given to quantize either: {as_given}"
            )
            if cause:
                raise ValidationError(
                    "",
                    f"{cause} (allow_reference_only=True, or --allow-reference-only, writes the quantized model "
                    "anyway)",
                    code="not_runnable",
                )
        _refuse_if(problem, fmt)
    return quantized


def _refuse_if(problem: str, fmt: BlockFormat) -> None:
    if problem:
        raise ValidationError(
            "",
            f"onnxruntime cannot run the model quantized to {fmt.name}: {problem} "
            f"(allow_reference_only=True, or --allow-reference-only, writes it anyway; formats onnxruntime "
            f"runs: {', '.join(runnable_names())})",
            code="not_runnable",
        )


@functools.cache
def runnable_names() -> tuple[str, ...]:
    """The formats with an encoder whose decoder onnxruntime runs (one block of each is tried)."""
    names = []
    for name in encodable_names():
        fmt = resolve_format(name)
        if not runtime_error(_probe_model(fmt, fmt.block_size)):
            names.append(name)
    return tuple(names)


def _probe_model(fmt: BlockFormat, width: int) -> onnx.ModelProto:
    """A model decoding one zero row of ``width`` (a multiple of the block size) in ``fmt``."""
    opset = max((o.version for o in fmt.decoder((width,)).opset_import if o.domain in ("", "ai.onnx")), default=21)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["w"], ["y"])],
        "probe",
        [],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [width])],
    )
    overlay = from_onnx(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)]))
    size = fmt.num_blocks((width,)) * fmt.bytes_per_block
    add_struct_values(overlay, fmt.make_value(overlay, "w", (width,), bytes(size)))
    return to_onnx(overlay)


def stored_array(array: np.ndarray, weight: PlannedWeight) -> np.ndarray:
    """The tensor encoded for ``weight``: flattened (Conv), transposed, padded with zeros."""
    stored = array.reshape(weight.shape[0], -1) if weight.reshape else array
    stored = stored.T if weight.transpose != "none" else stored
    if weight.pad:
        stored = np.pad(stored, [(0, 0)] * (stored.ndim - 1) + [(0, weight.pad)])
    return np.ascontiguousarray(stored, dtype=np.float32)


def _restore_nodes(weight: PlannedWeight, graph: onnx.GraphProto, taken: set[str]) -> list[onnx.NodeProto]:
    """Nodes turning the decoded ``weight.value_name`` back into ``weight.name`` (in the orientation
    its consumers read: transposed for a flipped ``transB``)."""
    steps = []
    if weight.pad:
        steps.append("Slice")
    if weight.transpose == "node":
        steps.append("Transpose")
    if weight.reshape:
        steps.append("Reshape")
    nodes, source = [], weight.value_name
    for i, op in enumerate(steps):
        target = weight.name if i == len(steps) - 1 else unique_name(f"{weight.name}/{op}_out", taken)
        node_name = unique_name(f"{weight.name}/{op}", taken)
        if op == "Slice":
            kept = weight.stored_shape[-1] - weight.pad
            constants = [
                _constant(graph, taken, f"{weight.name}/{part}", value)
                for part, value in (("starts", 0), ("ends", kept), ("axes", -1))
            ]
            nodes.append(onnx.helper.make_node("Slice", [source, *constants], [target], name=node_name))
        elif op == "Transpose":
            nodes.append(onnx.helper.make_node("Transpose", [source], [target], name=node_name, perm=[1, 0]))
        else:
            shape = _constant(graph, taken, f"{weight.name}/shape", list(weight.shape))
            nodes.append(onnx.helper.make_node("Reshape", [source, shape], [target], name=node_name))
        source = target
    return nodes


def _constant(graph: onnx.GraphProto, taken: set[str], name: str, value) -> str:
    name = unique_name(name, taken)
    graph.initializer.append(numpy_helper.from_array(np.atleast_1d(np.asarray(value, dtype=np.int64)), name))
    return name


def runtime_error(model: onnx.ModelProto) -> str:
    """ "" when onnxruntime loads ``model`` lowered into a session, else why not (its first line)."""
    ort = load_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its refusal is reported here; its warnings on the way are noise
    try:
        lowered = lower(model)
        if lowered.ByteSize() >= 2**31:
            # one protobuf cannot hold it: the caller's decoder probe is the check (it ran one block)
            return ""
        # External tensors left in the model (an unloaded initializer) would be resolved by
        # onnxruntime against the working directory (found by a red-team pass): a model without a
        # directory has none to read them from, which is the refusal.
        files = external_tensors_in_memory(lowered, None)
        if files:
            names = list(files)
            options.add_external_initializers_from_files_in_memory(
                names, [files[n] for n in names], [len(files[n]) for n in names]
            )
        ort.InferenceSession(lowered.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except ValidationError as error:
        return str(error)
    except ort_errors() as error:
        first = str(error).strip().splitlines()[0]
        return first if len(first) <= 300 else first[:297] + "..."
    return ""


def encode_array(array: np.ndarray, root_index: int, model, name: str):
    """The StructProto ``name`` holding ``array`` as encoded by the format's encoder in onnxruntime."""
    return encode(np.asarray(array, dtype=np.float32), root_index, model, name=name)


def _upgrade_opset(model: onnx.ModelProto, fmt: BlockFormat, shape: tuple[int, ...]) -> tuple[onnx.ModelProto, str]:
    """Raise the model's default-domain opset to the decoder's, with onnx's version converter.

    onnxruntime resolves a function's operators at the model's opset, so a model importing an older
    opset than the format's decoder could not run it. Converting now, while the model is plain ONNX,
    always works where the converter does; afterwards the struct values would be names the converter
    does not know. The conversion is lowering's (:func:`onnx_struct.lowering.opsets.convert_default_opset`),
    but where ``lower()`` raises when the converter fails, this returns the model unchanged, with
    the converter's reason (else ""): the quantized model is still valid, and the reason is what
    quantize reports if onnxruntime then refuses the quantized model.

    The converter also runs shape inference; convert_default_opset keeps the graph's own signature
    and value_info, so only the opset and the adapted nodes change.
    """
    needed = max((o.version for o in fmt.decoder(shape).opset_import if o.domain in ("", "ai.onnx")), default=0)
    have = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if have >= needed:
        return model, ""
    try:
        converted = convert_default_opset(model, needed)
    except OpsetConversionError as error:
        return model, (
            f"the {fmt.name} decoder needs the model at opset {needed}, it imports {have}, and onnx's version "
            f"converter failed: {error}"
        )
    return converted, ""  # its signature and value_info as they were (convert_default_opset)


def _check_weight_data(tensor: onnx.TensorProto, index: int) -> None:
    """The weight's data holds exactly as many values as its dims say, in one piece
    (numpy_helper.to_array would raise a bare ValueError)."""
    where = f"graph.initializer[{index}] ({tensor.name!r})"
    if tensor.HasField("segment"):
        raise ValidationError(where, "a segmented tensor (TensorProto.segment) cannot be quantized", code="invalid")
    n = math.prod(tensor.dims)
    held = len(tensor.raw_data) if tensor.HasField("raw_data") else 4 * len(tensor.float_data)
    if held != 4 * n:
        raise ValidationError(
            where,
            f"dims {list(tensor.dims)} need {4 * n} bytes of FLOAT data; the tensor holds {held}",
            expected=4 * n,
            actual=held,
        )


def _flip_trans_b(node: onnx.NodeProto) -> None:
    for attribute in node.attribute:
        if attribute.name == "transB":
            attribute.i = 0 if attribute.i else 1
            return
    node.attribute.append(onnx.helper.make_attribute("transB", 1))


def _names(graph: onnx.GraphProto) -> set[str]:
    names = {t.name for t in graph.initializer} | {v.name for v in graph.input} | {v.name for v in graph.output}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names
