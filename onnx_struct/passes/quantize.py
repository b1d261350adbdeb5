"""Quantize the MatMul/Gemm (and on request Gather, Conv) weights of an ONNX model into a block format:
``quantize(model, "Q4_0")``.

Each eligible float32 weight becomes a struct value whose bytes come from the format's own
encoder, and its decoder gives every consumer the logical weight; nothing else changes. By
default (``group_axis="input"``) blocks run along the reduction axis, storing ``W^T`` plus a
``Transpose``, so the bytes are a GGUF tensor's. A grouped axis that is no multiple of the block
size is zero-padded and sliced back. The result must load in onnxruntime unless
``allow_reference_only=True``.

Notes: docs/modules.md.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_struct.check.checked import CheckedModel, checked_model
from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import BlockFormat
from onnx_struct.layout.table import TypeTable, type_table
from onnx_struct.lowering.lower import lower, lower_checked
from onnx_struct.lowering.names import graph_names, unique_name
from onnx_struct.lowering.opsets import OpsetConversionError, convert_default_opset
from onnx_struct.passes.quantize_detach import detach_weights
from onnx_struct.passes.quantize_opset import keeps_data_left_out, raise_unchanged_opset
from onnx_struct.passes.quantize_plan import (
    DEFAULT_OP_TYPES,
    WEIGHT_INPUT,
    DeferredData,
    GroupAxis,
    Plan,
    PlannedWeight,
    build_plan,
    encodable_names,
    plan,
    read_model,
    read_model_deferred,
    resolve_format,
)
from onnx_struct.passes.quantize_write import COPY_CHUNK, QuantizeOutput
from onnx_struct.payload.external_io import read_external_payloads
from onnx_struct.runtime.codec import encode
from onnx_struct.runtime.delivery import add_in_memory, external_tensors_in_memory, placeholders
from onnx_struct.runtime.heap import release_free_memory
from onnx_struct.runtime.ort import load_onnxruntime, ort_errors
from onnx_struct.runtime.runners import clear_cache
from onnx_struct.schema.builders import make_struct_value
from onnx_struct.schema.model import (
    add_struct_values,
    from_onnx,
    load,
    model_directory,
    resolve_path,
    struct_values_bytes,
    to_onnx,
)

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
    encoder. A weight is eligible when it is a FLOAT tensor with at least ``min_elements``
    elements, read only as the weight input of nodes in ``op_types``, wherever it is defined: an
    initializer or a ``Constant`` node of the main graph or of a subgraph (If/Loop/Scan bodies), or
    a ``Constant`` node of a model-local function; its readers are followed into subgraphs and
    through function calls (:mod:`onnx_struct.passes.quantize_sites`); a weight shared by several
    nodes is one struct value. Not eligible: a graph input or output, a name training_info uses.
    Struct values live in the main graph: a subgraph reads its weight from the outer scope, a
    function gets it as a new input (:mod:`onnx_struct.passes.quantize_detach`). 2-D for MatMul,
    Gemm and Gather, a 3-D to 5-D kernel for Conv. ``group_axis`` chooses the axis the blocks run
    along: "input" (K of ``X @ W``, as GGUF and MatMulNBits group; ``I*kh*kw`` of a Conv kernel)
    or "output" (N); see the module docstring for the trade-off. Adding "Gather" to ``op_types`` also quantizes
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

    Args:
        model: the model, or a path to it (external initializers are loaded).
        format: a BlockFormat or a registered name of a format with an encoder.
        op_types: the op types whose weight input is quantized (MatMul, Gemm, Gather, Conv).
        min_elements: smaller weights are kept as float.
        group_axis: "input" (blocks along the reduction axis) or "output" (docs/formats.md
            compares the two).
        pad: zero-pad a grouped axis that is no multiple of the block size (else keep the weight).
        allow_reference_only: return a model whose decoder onnxruntime cannot run.

    Returns:
        A new model; ``model`` is not changed.

    Raises:
        ValidationError: the model is not readable, the result is invalid, or onnxruntime cannot
            run it (code ``not_runnable``) without ``allow_reference_only``.
        KeyError: an unknown format name.
        ValueError: a format without an encoder, an unsupported op type or ``group_axis``.
        TypeError: ``format`` is neither a name nor a BlockFormat.

    Example::

        q = quantize(onnx.load("model.onnx"), "Q4_0")
        onnx.save(q, "model.q4_0.onnx")
        session = onnxruntime.InferenceSession(onnx_struct.lower(q).SerializeToString())
    """
    return quantize_and_plan(
        model,
        format,
        op_types=op_types,
        min_elements=min_elements,
        group_axis=group_axis,
        pad=pad,
        allow_reference_only=allow_reference_only,
        keep_source=False,
    )[0]


def quantize_and_plan(
    model: onnx.ModelProto | str | os.PathLike,
    format: str | BlockFormat,
    *,
    op_types: Iterable[str] = DEFAULT_OP_TYPES,
    min_elements: int = 4096,
    group_axis: GroupAxis = "input",
    pad: bool = True,
    allow_reference_only: bool = False,
    keep_source: bool = True,
    output: QuantizeOutput | None = None,
) -> tuple[onnx.ModelProto, Plan | None, onnx.ModelProto | None, CheckedModel | None]:
    """:func:`quantize`, also returning its plan, the model it read (the plan's sites point
    into that model, which is left as it was) and the quantized model as checked (None when
    nothing was quantized or ``allow_reference_only`` skipped the run check): what
    :mod:`.quantize_report` describes.

    ``keep_source=False`` (what :func:`quantize` does): a model read here from a path or bytes is
    rewritten in place, not copied, and dropped once its skeleton is in the result; the plan and
    model returned are then None. Together with encoding one weight at a time (in row chunks),
    this keeps quantize's peak memory near the size of the model once (docs/semantics.md).

    ``output``: where the result will be written (:class:`.quantize_write.QuantizeOutput`). Each
    payload is written to its data file as it is produced and the result holds references into it,
    read from ``output.base_dir``; it decides before the first weight is encoded whether the result
    is external (OUT.data, which then also takes each large kept initializer's data)."""
    rewrite_in_place = not keep_source and not isinstance(model, onnx.ModelProto)
    if rewrite_in_place and not isinstance(model, (bytes, bytearray)):
        stock, deferred = read_model_deferred(model)  # its large initializers' data stays in the file
    else:
        stock, deferred = read_model(model), None
    stock = _own_payloads(stock, model, output)
    fmt = resolve_format(format)
    if isinstance(op_types, str):  # would be read letter by letter
        raise TypeError(f"op_types: expected a sequence of operator names, got the string {op_types!r}")
    options = (fmt, tuple(op_types), min_elements, group_axis, pad)
    planned = build_plan(stock, *options)
    if rewrite_in_place:
        result = stock
    else:
        result = onnx.ModelProto()
        result.CopyFrom(stock)
    if not planned.weights:
        if deferred is not None:  # nothing is rewritten: every initializer gets its data back
            deferred.restore(result.graph)
        return result, planned, stock, None
    first_plan = planned if keep_source else None
    for w in planned.weights:  # before anything is sized by their dims
        held = deferred.runs[w.name][1] if _is_deferred(w, deferred) else None
        _check_weight_data(planned.sites[w.label].tensor, _site_path(planned.sites[w.label]), held)
    if not allow_reference_only:
        # one block through the decoder first: a format onnxruntime cannot decode is refused before encoding
        _refuse_if(_probe_error(fmt), fmt)
    shape = planned.weights[0].stored_shape
    if _needs_upgrade(result, fmt, shape):  # the imports alone, where no operator differs (quantize_opset.py)
        raise_unchanged_opset(result, _decoder_opset(fmt, shape))
    if deferred is not None and _needs_upgrade(result, fmt, shape):
        # onnx's converter on the skeleton (its adapters rewrite nodes, never a weight's data); a
        # converted model that does not keep each left-out initializer as it was gets the whole model
        converted, failure = _upgrade_opset(result, fmt, shape)
        if not failure and keeps_data_left_out(converted, result, deferred.runs):
            result = converted
        else:
            deferred.restore(result.graph)
            deferred = None
    result, conversion_failure = _upgrade_opset(result, fmt, planned.weights[0].stored_shape)
    planned = build_plan(result, *options)  # its sites are the copy's own nodes, rewritten below
    taken = graph_names(result.graph) | {v.name for v in load(stock).struct_values}
    taken |= {w.value_name for w in planned.weights} | {w.decoded_name for w in planned.weights}
    # Each payload goes to the output's data file as it is encoded (passes/quantize_write.py); an
    # external result also moves its large kept initializers there.
    external = output is not None and output.start(lambda: estimate_bytes(result, fmt, planned, deferred))
    # One weight at a time: its float array, the stored (transposed, padded) copy and its encoding
    # live together, never two weights' arrays (docs/semantics.md, "Quantize's memory"). The roots
    # are declared in a scratch model first and again, identically, in the result below.
    scratch = _Scratch(fmt)
    values = []
    for weight in planned.weights:
        # checked above (_check_weight_data): raw_data is copied out of protobuf on every read
        tensor = planned.sites[weight.label].tensor
        array = deferred.array(tensor) if _is_deferred(weight, deferred) else numpy_helper.to_array(tensor)
        stored = stored_array(array, weight)
        del array
        # each chunk's payload written out as it is encoded, or joined here
        chunks = _encode_rows(stored, fmt, scratch, weight.value_name)
        if output is not None:
            values.append(output.store_payload(make_struct_value(weight.value_name, 0), chunks))
        else:
            values.append(make_struct_value(weight.value_name, 0, raw_data=b"".join(chunks)))
        del stored, chunks
        if 4 * math.prod(weight.shape) >= RELEASE_BYTES:
            release_free_memory()  # this weight's arrays and the encoder's buffers, before the next weight's
    detach_weights(result, planned)
    graph = result.graph
    restoring = [node for weight in planned.weights for node in _restore_nodes(weight, graph, taken)]
    # The restoring nodes read only struct values and constants, so they may run first; keep the graph sorted.
    nodes = restoring + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)

    if deferred is not None and external:  # the initializers kept as float: copied file to file
        for tensor in result.graph.initializer:
            if tensor.name in deferred.runs and not tensor.raw_data:
                output.store_tensor(tensor, deferred.chunks(tensor.name, COPY_CHUNK))
    elif deferred is not None:  # the initializers kept as float get their data back
        deferred.restore(result.graph)
    # Declarations first, while the model holds no payload (each is found by reading the model's
    # struct parts); then the values one at a time, each merged in as its own small fragment.
    roots: dict[tuple[int, ...], int] = {}  # stored shape -> root declaration, shared by same-shape weights
    for weight, value in zip(planned.weights, values, strict=True):
        if weight.stored_shape not in roots:
            roots[weight.stored_shape] = fmt.add_to_model(result, weight.stored_shape)
        value.type = roots[weight.stored_shape]
    while values:
        add_struct_values(result, values.pop(0))
    quantized = result
    if rewrite_in_place:  # nothing else refers to the source any more
        del result, stock, graph, nodes, restoring
        planned.sites = {}
    base_dir = output.base_dir if output is not None else None
    checked = None
    if sum(4 * math.prod(weight.shape) for weight in planned.weights) >= RELEASE_BYTES:
        # The encoder sessions (one per chunk shape) and their arenas are done with; freed pages go
        # back to the system before the check's session takes its own.
        clear_cache()
        release_free_memory()
    if not allow_reference_only:
        checked, problem = _checked_and_run(quantized, base_dir)
        if problem:  # is it the format? The model may not run as given, or not at the decoder's opset
            source = read_model(model) if rewrite_in_place else stock  # as given, before the rewrite
            # read from its own directory, where its external payloads are (their sizes are checked too)
            home = model_directory(model) if isinstance(model, (str, os.PathLike)) else None
            given = checked_model(source, base_dir=home)  # a model invalid as given raises its own error (its path)
            as_given = "" if conversion_failure else runtime_error(given, home)
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
    return quantized, first_plan, (stock if keep_source else None), checked


def _own_payloads(stock: onnx.ModelProto, model, output: QuantizeOutput | None) -> onnx.ModelProto:
    """``stock`` with the struct payloads it keeps in external files read in, unless the result
    is written into the model's own directory: their locations are relative to that directory
    alone, and a result held in memory or written elsewhere would name files it does not have."""
    if isinstance(model, (onnx.ModelProto, bytes, bytearray)):  # no directory: its references stay as given
        return stock
    if not struct_values_bytes(stock):  # no struct value at all: nothing to read in
        return stock
    directory = model_directory(model)
    here = output is not None and directory.resolved_file_directory is None
    if here and resolve_path(output.base_dir) == directory:
        return stock  # OUT's own directory: the references resolve there as they did
    return read_external_payloads(stock, directory)


def _checked_and_run(
    model: onnx.ModelProto, base_dir: str | os.PathLike | None = None
) -> tuple[CheckedModel | None, str]:
    """``model`` checked once (None when it is invalid), and :func:`runtime_error`'s answer for it.
    ``base_dir``: where a streamed result's payloads are."""
    try:
        checked = checked_model(model, base_dir=base_dir)
    except ValidationError as error:
        return None, str(error)
    return checked, runtime_error(checked, base_dir)


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
    return tuple(name for name in encodable_names() if not _probe_error(resolve_format(name)))


@functools.cache
def _probe_error(fmt: BlockFormat) -> str:
    """:func:`runtime_error` of one block of ``fmt`` (the answer depends on the format and the
    installed onnxruntime alone: asked once per format)."""
    return runtime_error(_probe_model(fmt, fmt.block_size))


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
        target = weight.decoded_name if i == len(steps) - 1 else unique_name(f"{weight.name}/{op}_out", taken)
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


def runtime_error(model: onnx.ModelProto | CheckedModel, base_dir: str | os.PathLike | None = None) -> str:
    """ "" when onnxruntime loads ``model`` (or a checked model) lowered into a session, else why
    not (its first line). ``base_dir``: where the model's external payloads and tensors are."""
    ort = load_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its refusal is reported here; its warnings on the way are noise
    # Loading is the question (kernels, types, opsets), not speed: without graph optimizations
    # onnxruntime does not fold the decoders into float32 weights, a copy as large as the float model.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        # The payload leaves go to onnxruntime as arrays, not as copies inside the model's bytes
        # (the bytes, and onnxruntime's parse of them, would each hold every weight once more).
        arrays: dict[str, np.ndarray] = {}
        if isinstance(model, CheckedModel):
            lowering = lower_checked(model, leaves_in_memory=True)
            lowered, arrays = lowering.model, lowering.arrays
            del lowering
        else:
            lowered = lower(model, base_dir=base_dir)
        if lowered.ByteSize() >= 2**31:
            # one protobuf cannot hold it: the caller's decoder probe is the check (it ran one block)
            return ""
        # External tensors left in the model (an unloaded initializer) would be resolved by
        # onnxruntime against the working directory: a model without a directory has none to read
        # them from, which is the refusal. A streamed result's leaves stay in its data file, whose
        # every reference lower() has just resolved under the model-directory rules: onnxruntime
        # reads them there (a copy in memory doubles the peak).
        files = external_tensors_in_memory(lowered, None, placeholders(lowered, arrays)) if base_dir is None else {}
        if base_dir is not None:
            options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
        add_in_memory(ort, options, files, arrays)
        ort.InferenceSession(lowered.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except ValidationError as error:
        return str(error)
    except ort_errors() as error:
        first = str(error).strip().splitlines()[0]
        return first if len(first) <= 300 else first[:297] + "..."
    return ""


ENCODE_CHUNK = 1 << 20  # elements per encoder run: its intermediate tensors stay a few MiB
# Float weights of at least this many bytes (one, or all together) are worth giving memory back
# after: below it the encoder's arenas and freed heap are a few MiB, and re-creating the cached
# encoder sessions on the next call would cost more time than they hold.
RELEASE_BYTES = 16 << 20


class _Scratch:
    """The declarations the encoder runs on: the format's block and one root per chunk shape, in
    a model of their own, with their TypeTable (built again only when a root is added)."""

    def __init__(self, fmt: BlockFormat) -> None:
        self.fmt = fmt
        self.model = from_onnx(onnx.helper.make_model(onnx.helper.make_graph([], "scratch", [], [])))
        self.roots: dict[tuple[int, ...], int] = {}  # chunk shape -> root index
        self._table: TypeTable | None = None

    def root(self, shape: tuple[int, ...]) -> int:
        if shape not in self.roots:
            self.roots[shape] = self.fmt.add_to_model(self.model, shape)
            self._table = None
        return self.roots[shape]

    @property
    def table(self) -> TypeTable:
        if self._table is None:
            self._table = type_table(self.model)
        return self._table


def _encode_rows(stored: np.ndarray, fmt: BlockFormat, scratch: _Scratch, name: str) -> Iterator[bytes]:
    """The payload of ``stored``, encoded ``ENCODE_CHUNK`` elements of whole rows at a time:
    blocks run along the last axis, so a row's blocks never depend on another row's and the
    payload is the chunks' payloads in order."""
    rows = max(1, ENCODE_CHUNK // max(1, stored.shape[-1]))
    for start in range(0, stored.shape[0], rows):
        chunk = stored[start : start + rows]
        yield encode_array(chunk, scratch.root(chunk.shape), scratch.table, name).raw_data


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
    needed = _decoder_opset(fmt, shape)
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


def estimate_bytes(model: onnx.ModelProto, fmt: BlockFormat, planned: Plan, deferred: DeferredData | None) -> int:
    """The quantized model's size in bytes, before any weight is encoded: the model as read (its
    skeleton and struct values, plus the data left in the file) less each planned weight's float
    data plus its payload, and the declarations (a root with its decoder and encoder per stored
    shape)."""
    # Part by part: ByteSize of a model past 2 GiB (the data it is estimated for) raises.
    graph = model.graph
    parts = [*graph.initializer, *graph.node, *graph.input, *graph.output, *graph.value_info, *model.functions]
    size = sum(part.ByteSize() for part in parts) + sum(len(entry.value) for entry in model.metadata_props)
    size += struct_values_bytes(model)  # the input's own, kept in the result
    size += sum(length for _, length in deferred.runs.values()) if deferred is not None else 0
    for weight in planned.weights:
        size += fmt.num_blocks(weight.stored_shape) * fmt.bytes_per_block - 4 * math.prod(weight.shape)
    shapes = {weight.stored_shape for weight in planned.weights}
    size += sum(fmt.root_declaration(shape, 0).ByteSize() for shape in shapes)
    return max(size + (fmt.block_declaration().ByteSize() if shapes else 0), 0)


def _site_path(site) -> str:
    """The weight's path: ``graph.initializer[0] ('W')``, ``<graph>.node[3] ('W').attribute ('value')``."""
    if site.kind == "initializer":
        index = next(i for i, t in enumerate(site.owner.initializer) if t.name == site.name)
        return f"{site.where}.initializer[{index}] ({site.name!r})"
    index = next(i for i, n in enumerate(site.owner.node) if n.op_type == "Constant" and n.output[:1] == [site.name])
    return f"{site.where}.node[{index}] ({site.name!r}).attribute ({site.node.attribute[0].name!r})"


def _is_deferred(weight: PlannedWeight, deferred: DeferredData | None) -> bool:
    """Whether ``weight``'s data was left in the model file (a main-graph initializer)."""
    return (
        deferred is not None
        and weight.where == "graph"
        and weight.kind == "initializer"
        and weight.name in deferred.runs
    )


def _decoder_opset(fmt: BlockFormat, shape: tuple[int, ...]) -> int:
    """The default-domain opset the format's decoder for ``shape`` imports (0: none)."""
    return max((o.version for o in fmt.decoder(shape).opset_import if o.domain in ("", "ai.onnx")), default=0)


def _needs_upgrade(model: onnx.ModelProto, fmt: BlockFormat, shape: tuple[int, ...]) -> bool:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0) < _decoder_opset(fmt, shape)


def _check_weight_data(tensor: onnx.TensorProto, where: str, held: int | None = None) -> None:
    """The weight's data holds exactly as many values as its dims say, in one piece
    (numpy_helper.to_array would raise a bare ValueError); ``held``: the bytes of data left in
    the file for it."""
    if tensor.HasField("segment"):
        raise ValidationError(where, "a segmented tensor (TensorProto.segment) cannot be quantized", code="invalid")
    n = math.prod(tensor.dims)
    if held is None:
        held = len(tensor.raw_data) if tensor.HasField("raw_data") else 4 * len(tensor.float_data)
    if held != 4 * n:
        raise ValidationError(
            where,
            f"dims {list(tensor.dims)} need {4 * n} bytes of FLOAT data; the tensor holds {held}",
            expected=4 * n,
            actual=held,
        )
