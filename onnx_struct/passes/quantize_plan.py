"""Which weights :func:`onnx_struct.passes.quantize.quantize` replaces, how each is stored, and
why every other float initializer is left alone: :func:`plan`, without encoding anything.

A weight's stored tensor has the blocks along its last axis; how the logical weight is restored
from the decoded one is part of the plan (``PlannedWeight.steps``): a ``Slice`` dropping the
zeros that padded the grouped axis up to a multiple of the block size, a ``Transpose`` (or a
flipped ``transB``) when the blocks group the first axis, a ``Reshape`` back to a Conv kernel
whose ``[O, I, kh, kw]`` was stored as ``[O, I*kh*kw]``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import pathlib
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from onnx_struct import formats
from onnx_struct.errors import ValidationError
from onnx_struct.formats.base import BlockFormat
from onnx_struct.layout.table import element_label
from onnx_struct.lowering.names import graph_names, read_names, unique_name
from onnx_struct.passes.quantize_sites import MAIN, Site, find_sites
from onnx_struct.payload.external import is_external, load_external_tensors, read_range, tensor_range
from onnx_struct.schema.model import load, model_directory, read_model_file, read_stock_model
from onnx_struct.schema.skeleton import read_run, split_initializer_data
from onnx_struct.schema.wire_format import Malformed

GroupAxis = Literal["input", "output"]
# The input position of the weight, per supported op type (Gather: the table of an embedding lookup).
WEIGHT_INPUT = {"MatMul": 1, "Gemm": 1, "Gather": 0, "Conv": 1}
DEFAULT_OP_TYPES = ("MatMul", "Gemm")


@dataclasses.dataclass(frozen=True)
class PlannedWeight:
    """One weight :func:`quantize` replaces (see :func:`plan`)."""

    name: str  # the initializer replaced
    value_name: str  # the struct value holding it (``name`` when no node restores it)
    shape: tuple[int, ...]  # the logical weight
    stored_shape: tuple[int, ...]  # the tensor encoded (blocks along its last dimension, padded)
    transpose: Literal["none", "node", "transB"]  # how the consumers see the original orientation
    pad: int = 0  # zeros appended to the stored tensor's last axis (sliced off after decoding)
    reshape: bool = False  # a Conv kernel stored as [O, I*kh*kw] (Reshape restores it)
    where: str = MAIN  # the graph or function that defined it ("graph": the main graph)
    kind: Literal["initializer", "constant"] = "initializer"
    decoded_name: str = ""  # the main-graph value holding the restored weight ("": ``name``)

    @property
    def label(self) -> str:
        """The name, with its scope unless it is the main graph (the key of a :class:`Plan`'s dicts)."""
        return self.name if self.where == MAIN else f"{self.name} (in {self.where})"


@dataclasses.dataclass
class Plan:
    """What :func:`quantize` will do: the weights it replaces and why others are left alone.

    ``skipped``: weights of the chosen op types kept as they are, with the reason; ``other``:
    every other FLOAT tensor (initializer or Constant, in any graph or function), with the reason
    it was not considered (another op type, not a weight); ``elements``: element counts of every
    FLOAT tensor, for coverage figures. Keys are labels (:attr:`PlannedWeight.label`): the name, with
    its scope when it is not the main graph's.
    """

    format: BlockFormat
    weights: list[PlannedWeight]
    skipped: dict[str, str]
    other: dict[str, str] = dataclasses.field(default_factory=dict)
    elements: dict[str, int] = dataclasses.field(default_factory=dict)
    unquantized_ops: dict[str, str] = dataclasses.field(default_factory=dict)  # label -> its consumers' op type
    sites: dict[str, Site] = dataclasses.field(default_factory=dict, repr=False, compare=False)  # label -> site

    def coverage(self) -> tuple[int, int]:
        """(elements quantized, elements of all FLOAT initializers)."""
        return sum(math.prod(w.shape) for w in self.weights), sum(self.elements.values())

    def not_quantized_by_op(self) -> dict[str, int]:
        """Elements left as float, by the op type that reads them ("-" for none), largest first."""
        totals: dict[str, int] = {}
        for name in itertools.chain(self.skipped, self.other):
            op = self.unquantized_ops.get(name, "-")
            totals[op] = totals.get(op, 0) + self.elements.get(name, 0)
        return dict(sorted(totals.items(), key=lambda item: -item[1]))


def plan(
    model: onnx.ModelProto | str | os.PathLike,
    format: str | BlockFormat,
    *,
    op_types: Iterable[str] = DEFAULT_OP_TYPES,
    min_elements: int = 4096,
    group_axis: GroupAxis = "input",
    pad: bool = True,
) -> Plan:
    """Decide which weights :func:`quantize` replaces, without encoding anything.

    Args:
        model: the model, or a path to it.
        format: a BlockFormat or a registered name of a format with an encoder.
        op_types: as for :func:`quantize`.
        min_elements: as for :func:`quantize`.
        group_axis: as for :func:`quantize`.
        pad: as for :func:`quantize`.

    Returns:
        The Plan: the weights to replace, and why every other float tensor is kept.

    Raises:
        ValidationError: the model is not readable.
        KeyError: an unknown format name.
        ValueError: a format without an encoder, an unsupported op type or ``group_axis``.
        TypeError: ``format`` is neither a name nor a BlockFormat.
    """
    return build_plan(read_model(model), resolve_format(format), tuple(op_types), min_elements, group_axis, pad)


def encodable_names() -> list[str]:
    """The registered formats :func:`quantize` can write (those with an encoder)."""
    return [name for name in formats.names() if formats.get(name).encoder is not None]


def resolve_format(format: str | BlockFormat) -> BlockFormat:
    """The format named ``format`` (case-insensitive), refused unless it has an encoder: a
    KeyError for an unknown name, a ValueError for a format quantize cannot write; both list
    only the names it can."""
    if isinstance(format, BlockFormat):
        if format.encoder is None:
            raise ValueError(f"format {format.name} has no encoder; quantizing needs one")
        return format
    if not isinstance(format, str):
        raise TypeError(f"format: expected a format name or a BlockFormat, got {type(format).__name__}")
    by_folded = {name.casefold(): name for name in formats.names()}
    name = by_folded.get(format.casefold())
    usable = ", ".join(encodable_names())
    if name is None:
        raise KeyError(f"unknown format {format!r}; quantize can write: {usable}")
    fmt = formats.get(name)
    if fmt.encoder is None:
        raise ValueError(
            f"format {name} has no encoder: it can be read and decoded (e.g. from a GGUF file) but not "
            f"produced; quantize can write: {usable}"
        )
    return fmt


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
        stock, directory = read_stock_model(os.fspath(model))
        load_external_tensors(stock, directory)
        return stock
    except DecodeError as error:
        raise ValidationError("", f"{origin} is not an ONNX model: {error}", code="not_parsable") from None
    except onnx.checker.ValidationError as error:  # onnx's checks of external data locations
        if isinstance(error, ValidationError):
            raise
        raise ValidationError("graph.initializer", f"external data: {error}") from None


@dataclasses.dataclass(frozen=True)
class DeferredData:
    """The raw_data of main-graph initializers left in the model file (``runs``: name -> (offset,
    length)), or in the external data file of an initializer stored there (``files``: name ->
    that file, checked under the model-directory rules), read back one tensor at a time
    (:func:`read_model_deferred`)."""

    path: str
    runs: dict[str, tuple[int, int]]
    files: dict[str, pathlib.Path] = dataclasses.field(default_factory=dict)

    def source(self, name: str) -> tuple[str | pathlib.Path, int, int]:
        """(file, offset, length) of the data of the initializer ``name``."""
        return (self.files.get(name, self.path), *self.runs[name])

    def data(self, name: str, skip: int = 0, length: int | None = None):
        """``length`` bytes (default: to the end) of the data of the initializer ``name``, from
        byte ``skip`` of it: a read-only buffer."""
        file, offset, total = self.source(name)
        length = total - skip if length is None else length
        if name in self.files:  # read as every external byte is, checked again as it is read
            return read_range(file, offset + skip, length, f"graph.initializer ({name!r}).external_data")
        return read_run(file, offset + skip, length)

    def chunks(self, name: str, size: int):
        """The data of the initializer ``name``, ``size`` bytes at a time (read as :meth:`data`)."""
        total = self.runs[name][1]
        for skip in range(0, total, size):
            yield self.data(name, skip, min(size, total - skip))

    def _read(self, name: str) -> bytes:
        return bytes(self.data(name))

    def array(self, tensor: onnx.TensorProto) -> np.ndarray:
        return np.frombuffer(self._read(tensor.name), dtype="<f4").reshape(tuple(tensor.dims))

    def restore(self, graph: onnx.GraphProto) -> None:
        """Bring the data back into every initializer of ``graph`` that still lacks it."""
        for tensor in graph.initializer:
            if tensor.name in self.runs and not tensor.raw_data:
                tensor.raw_data = self._read(tensor.name)


def read_model_deferred(path: str | os.PathLike) -> tuple[onnx.ModelProto, DeferredData]:
    """:func:`read_model` of a file, with the data of its large main-graph initializers left in
    the file (:mod:`onnx_struct.schema.skeleton`): the model is held once, for an instant, as
    bytes, and its weights are then read one at a time."""
    path = os.fspath(path)
    data = read_model_file(path)
    try:
        skeleton, runs = split_initializer_data(data)
        del data
        stock = onnx.ModelProto.FromString(skeleton)
    except (Malformed, DecodeError):
        return read_model(path), DeferredData(path, {})  # raises the parse error read_model gives
    directory = model_directory(path)
    try:
        files = _defer_external(stock, directory, runs)
        load_external_tensors(stock, directory)  # the rest: tensors of subgraphs, nodes, functions
    except onnx.checker.ValidationError as error:
        if isinstance(error, ValidationError):
            raise
        raise ValidationError("graph.initializer", f"external data: {error}") from None
    return stock, DeferredData(path, runs, files)


def _defer_external(stock: onnx.ModelProto, directory, runs: dict[str, tuple[int, int]]) -> dict[str, pathlib.Path]:
    """Leave the data of each main-graph initializer stored in an external file in that file,
    like the large inline ones (a model past 2 GiB keeps its weights there): its range goes into
    ``runs``, and the tensor looks like one whose raw_data was left out. Returns name -> file."""
    files: dict[str, pathlib.Path] = {}
    names = [tensor.name for tensor in stock.graph.initializer]
    for index, tensor in enumerate(stock.graph.initializer):
        if not is_external(tensor) or not tensor.name or names.count(tensor.name) != 1 or tensor.name in runs:
            continue
        where = element_label(f"graph.initializer[{index}]", tensor.name) + ".external_data"
        file, offset, length = tensor_range(tensor, directory, where)
        runs[tensor.name] = (offset, length)
        files[tensor.name] = file
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    return files


def build_plan(
    stock: onnx.ModelProto, fmt: BlockFormat, op_types: Sequence[str], min_elements: int, group_axis: str, pad: bool
) -> Plan:
    """The plan for ``stock`` (see :func:`plan`); its sites point into ``stock`` itself."""
    unknown = [op for op in op_types if op not in WEIGHT_INPUT]
    if unknown:
        raise ValueError(f"op_types {unknown} are not supported; the weight input is known for {sorted(WEIGHT_INPUT)}")
    if group_axis not in ("input", "output"):
        raise ValueError(f"group_axis must be 'input' or 'output', not {group_axis!r}")
    in_training = _names_used_in_training(stock)
    inputs = {v.name for v in stock.graph.input}
    taken = graph_names(stock.graph) | {v.name for v in load(stock).struct_values}

    result = Plan(fmt, [], {})
    for site in find_sites(stock):
        tensor = site.tensor
        if tensor is None or tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        label = site.label
        result.sites[label] = site
        consumers = [(use.node, use.position) for use in site.uses]
        result.elements[label] = site.elements
        weight_ops = [n.op_type for n, p in consumers if WEIGHT_INPUT.get(n.op_type) == p]
        result.unquantized_ops[label] = (weight_ops or [n.op_type for n, _ in consumers] or ["-"])[0]
        if not any(node.op_type in op_types and position == WEIGHT_INPUT[node.op_type] for node, position in consumers):
            result.other[label] = _why_not_considered(consumers, op_types, site.pinned)
            continue
        reason = _ineligible(tensor, consumers, op_types, min_elements)
        if not reason and site.where == MAIN and site.name in inputs:
            reason = "it is also a graph input"
        if not reason and site.pinned:
            reason = f"it is {site.pinned}"
        if not reason and site.where == MAIN and site.name in in_training:
            # a binding or training graph would name a value no longer there
            reason = "training_info uses it (a training graph or binding names it)"
        if not reason:
            reason, weight = _planned(site, fmt, group_axis, pad, taken)
            if weight is not None:
                result.weights.append(weight)
                result.unquantized_ops.pop(label, None)
                continue
        result.skipped[label] = reason
    return result


def _planned(site: Site, fmt: BlockFormat, group_axis: str, pad: bool, taken: set[str]):
    shape = tuple(int(d) for d in site.tensor.dims)
    # The reduction axis K of each consumer: axis 0 of W for MatMul and Gemm(transB=0), 1 for transB=1;
    # a Gather(axis=0) table keeps its rows (each block is part of one embedding vector); a Conv
    # kernel [O, I, kh, kw] is flattened to [O, I*kh*kw], whose axis 1 is K.
    k_axes = {_k_axis(use.node) for use in site.uses}
    if group_axis == "input" and k_axes == {"rows", 1}:
        # A tied embedding: Gather reads whole rows and Gemm(transB=1) reduces along axis 1, so
        # both read blocks along each row, as GGUF stores token_embd for both.
        k_axes = {1}
    if len(k_axes) != 1:
        return "its consumers disagree on which axis is the input axis", None
    (k_axis,) = k_axes
    reshape = k_axis == "conv"
    base = (shape[0], math.prod(shape[1:])) if reshape else shape
    if k_axis == "rows":
        transposed = False
    else:
        k = 1 if reshape else k_axis
        grouped_axis = k if group_axis == "input" else 1 - k
        transposed = grouped_axis == 0  # blocks run along the last stored dimension
    unpadded = base[::-1] if transposed else base
    extra = -unpadded[-1] % fmt.block_size
    if extra and not pad:
        return (
            f"its {group_axis} axis ({unpadded[-1]}) is not a multiple of the block size {fmt.block_size} "
            "(pad=True stores it padded with zeros)"
        ), None
    stored_shape = (*unpadded[:-1], unpadded[-1] + extra)
    # transB is flipped on the Gemm nodes themselves: not on a function body's node reading a
    # formal input, which other call sites share.
    if not transposed:
        how = "none"
    elif all(use.node.op_type == "Gemm" and not use.via_call for use in site.uses):
        how = "transB"
    else:
        how = "node"
    suffix = ("_T" if how == "node" else "") + ("_padded" if extra else "") + ("_2d" if reshape else "")
    main = site.where == MAIN
    # A struct value lives in the main graph: a subgraph's or function's weight gets a fresh
    # main-graph name there (the scope that read it is pointed at that name).
    value_name = unique_name(site.name + suffix, taken) if suffix or not main else site.name
    restored = (suffix and not main) and unique_name(site.name, taken)
    decoded = site.name if main else (restored or value_name)
    weight = PlannedWeight(
        site.name, value_name, shape, stored_shape, how, extra, reshape, site.where, site.kind, decoded
    )
    return "", weight


def _why_not_considered(consumers, op_types: Sequence[str], pinned: str) -> str:
    weight_of = sorted({n.op_type for n, p in consumers if WEIGHT_INPUT.get(n.op_type) == p} - set(op_types))
    if weight_of:
        return f"a {'/'.join(weight_of)} weight; {'/'.join(weight_of)} is not in op_types"
    if not consumers:
        return f"no node reads it; it is {pinned}" if pinned else "no node reads it, in any graph or function"
    ops = sorted({f"{n.op_type} (input {p})" for n, p in consumers})
    return f"not a weight: read by {', '.join(ops)}"


def _ineligible(tensor, consumers, op_types, min_elements) -> str:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return "its data is external and not loaded (pass a path, or onnx.load the model with its data)"
    if tensor.data_type != onnx.TensorProto.FLOAT:
        return f"its element type is {onnx.TensorProto.DataType.Name(tensor.data_type)}, not FLOAT"
    conv = any(node.op_type == "Conv" for node, _ in consumers)
    if conv and not 3 <= len(tensor.dims) <= 5:
        return f"it is {len(tensor.dims)}-D, not a 3-D to 5-D Conv kernel"
    if not conv and len(tensor.dims) != 2:
        return f"it is {len(tensor.dims)}-D, not 2-D"
    if any(d < 0 for d in tensor.dims):
        return f"its dims {list(tensor.dims)} are negative"
    if math.prod(tensor.dims) < min_elements:  # math.prod: numpy's product would wrap around
        return f"it has {math.prod(tensor.dims)} elements, fewer than min_elements={min_elements}"
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
    if node.op_type == "Conv":
        return "conv"
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 1 if trans_b else 0
    return 0


def _names_used_in_training(model: onnx.ModelProto) -> set[str]:
    names: set[str] = set()
    for info in model.training_info:
        names.update(b.key for b in (*info.initialization_binding, *info.update_binding))
        for root in (info.initialization, info.algorithm):
            names |= read_names(root)
    return names
