"""What quantize did, weight by weight: :func:`quantize_with_report`.

For every FLOAT tensor of the model (initializers and Constant values of every graph and model-local
function) the report says whether it was quantized, kept (with the reason) or not considered (not
a weight of the chosen op types); for a quantized one, the format, the bytes before (float32) and
after (the format's blocks of the stored, possibly padded, tensor), whether
:class:`onnx_struct.InferenceSession` (execution="quantized") runs it on its quantized codes or
decodes it to float32 at run time and why, and the relative error it introduces in its op's output
on a calibration input (:mod:`onnx_struct.passes.quantize_error`). An error above ``threshold``
is a warning.
"""

from __future__ import annotations

import dataclasses
import math
import os
import zipfile
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_struct.check.checked import CheckedModel, checked_model
from onnx_struct.errors import ValidationError
from onnx_struct.formats.affine import has_affine_form
from onnx_struct.formats.base import BlockFormat
from onnx_struct.lowering.execution import rewrite_for_execution
from onnx_struct.lowering.lower import lower_checked
from onnx_struct.passes import quantize_error, quantize_rows
from onnx_struct.passes.quantize import _Scratch as Scratch
from onnx_struct.passes.quantize import quantize_and_plan
from onnx_struct.passes.quantize_calibration import check_calibration, native_order, read_entries
from onnx_struct.passes.quantize_plan import (
    DEFAULT_OP_TYPES,
    WEIGHT_INPUT,
    DeferredData,
    GroupAxis,
    Plan,
    PlannedWeight,
    build_plan,
    read_model,
    read_model_deferred,
    resolve_format,
)
from onnx_struct.passes.quantize_sites import MAIN, Site
from onnx_struct.passes.quantize_write import QuantizeOutput
from onnx_struct.payload.external import load_external_tensors, open_regular_input
from onnx_struct.runtime.codec import decode_resolved

# A relative error of an op's output above which the report warns. Measured (docs/benchmarks.md):
# Q8_0 ~0.005 per op; Q4_0 0.07-0.09 on MatMul weights (RapidOCR's recognizer, random Gaussian
# weights), and 0.13-0.22 on the worst Conv layers of RapidOCR's models, whose errors compound
# into garbled text: those are flagged.
DEFAULT_THRESHOLD = 0.1
# Random calibration runs the float model (for each op's own input and the output errors) only up
# to this many bytes of weights left in the file: onnxruntime then holds the float model besides
# this process, about 3x the model at once, which stays within quantize's memory goal (1.5x the
# model + 200 MiB) up to here (docs/semantics.md, "Quantize"). --calibration FILE always runs it.
CALIBRATION_RUN_BYTES = 32 << 20
# Why a Conv kernel runs decoded: onnxruntime fuses a blocked DequantizeLinear into MatMul
# (MatMulNBits) only; its QLinearConv/ConvInteger take one scale per tensor or channel, not per block.
CONV_DECODED = (
    "quantized Conv kernels are decoded to float32 at run time (onnxruntime has no block-quantized Conv kernel; "
    "docs/execution.md)"
)


@dataclasses.dataclass(frozen=True)
class WeightReport:
    """One FLOAT tensor of the model, as quantize left it."""

    name: str
    where: str  # "graph" (the main graph), a subgraph's path, or "function 'domain.name'"
    kind: str  # "initializer" or "constant"
    shape: tuple[int, ...]
    op_type: str  # the op reading it ("MatMul", ...; the first when several; "-": none)
    status: str  # "quantized", "kept" (a weight of the chosen op types left as float) or "not considered"
    reason: str  # why it was kept or not considered ("" when quantized)
    format: str | None  # the format it is stored in (None: float32)
    stored_shape: tuple[int, ...] | None  # the tensor encoded: transposed, flattened, padded (see quantize)
    padded_from: int | None  # the grouped axis's length before zeros padded it to a whole block
    bytes_before: int  # float32
    bytes_after: int  # its blocks in ``format`` (the stored, padded tensor); bytes_before when float
    execution: str  # "quantized", "partly quantized", "decoded" or "float"
    execution_reason: str
    error: float | None  # relative error of its op's output (None: not quantized)
    error_input: str  # "calibration" (the op's own input in the float model) or "random" (see module doc)
    warning: bool

    @property
    def label(self) -> str:
        return self.name if self.where == MAIN else f"{self.name} (in {self.where})"


@dataclasses.dataclass(frozen=True)
class QuantizeReport:
    """The report of :func:`quantize_with_report`; ``summary()`` for people, ``to_json()`` for tools."""

    format: str
    calibration: str  # where the calibration input came from
    threshold: float
    weights: list[WeightReport]
    # model output -> relative L2 error of the quantized model's (lowered, decoded) against the float
    # model's on the calibration input: the weights' errors compounded ({} when it could not run)
    output_errors: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def quantized(self) -> list[WeightReport]:
        return [w for w in self.weights if w.status == "quantized"]

    @property
    def warnings(self) -> list[str]:
        """A warning for each error above the threshold, and for each error that is not a number
        (NaN: the float or quantized output is not finite, e.g. a weight of NaNs)."""
        texts = [
            f"{w.label}: the error of its {w.format} quantization on its op's output is {_NAN_ERROR}"
            if math.isnan(w.error)
            else f"{w.label}: its {w.format} quantization changes its op's output by {w.error:.1%} "
            f"(above {self.threshold:.0%})"
            for w in self.weights
            if w.warning
        ]
        return texts + [
            f"model output {name!r}: its error on the calibration input is {_NAN_ERROR}"
            if math.isnan(error)
            else f"model output {name!r} changes by {error:.1%} on the calibration input (above {self.threshold:.0%})"
            for name, error in self.output_errors.items()
            if exceeds(error, self.threshold)
        ]

    def to_json(self) -> dict:
        """The report as JSON-ready data (``onnx-struct quantize --json`` prints it)."""
        weights = [
            dict(
                dataclasses.asdict(w),
                shape=list(w.shape),
                stored_shape=w.stored_shape and list(w.stored_shape),
                error=_json_number(w.error),
            )
            for w in self.weights
        ]
        before = sum(w.bytes_before for w in self.weights)
        after = sum(w.bytes_after for w in self.weights)
        return {
            "format": self.format,
            "calibration": self.calibration,
            "threshold": self.threshold,
            "weights": weights,
            "totals": {"quantized": len(self.quantized), "bytes_before": before, "bytes_after": after},
            "output_errors": {name: _json_number(error) for name, error in self.output_errors.items()},
            "warnings": self.warnings,
        }

    def summary(self, op_types: Iterable[str] = DEFAULT_OP_TYPES) -> list[str]:
        """One line per tensor, then the coverage by op type and the warnings."""
        lines = []
        for w in self.weights:
            if w.status == "quantized":
                error = f"{w.error:.2%}" if w.error is not None else "-"
                stored = f"stored as {list(w.stored_shape)}"
                if w.padded_from is not None:
                    stored += f" (its grouped axis padded from {w.padded_from} to {w.stored_shape[-1]} with zeros)"
                lines.append(
                    f"quantized {w.label} {list(w.shape)}: {w.format}, {stored}, {w.bytes_before} -> {w.bytes_after} "
                    f"bytes; runs {w.execution} ({w.execution_reason}); error {error} on {w.error_input} input"
                )
            else:
                lines.append(f"{w.status} {w.label}: {w.reason}")
        total = sum(w.bytes_before for w in self.weights) // 4
        done = sum(w.bytes_before for w in self.quantized) // 4
        if total:
            lines.append(f"coverage: {done} of {total} float tensor elements quantized ({_percent(done, total)})")
        chosen = tuple(op_types)
        for op, count in self.not_quantized_by_op().items():
            why = ""
            if op in WEIGHT_INPUT and op not in chosen:
                why = f": {op} is not in --op-types (add it: --op-types {','.join((*chosen, op))})"
                if op == "Conv":
                    why += f"; {CONV_DECODED}"
            lines.append(
                f"not quantized: {'read by no node' if op == '-' else op} ({_percent(count, total)} of the float elements){why}"
            )
        lines.append(f"calibration: {self.calibration}")
        lines += [f"model output {name!r}: relative error {error:.2%}" for name, error in self.output_errors.items()]
        return lines + [f"warning: {text}" for text in self.warnings]

    def not_quantized_by_op(self) -> dict[str, int]:
        """Elements left as float, by the op type that reads them ("-" for none), largest first."""
        totals: dict[str, int] = {}
        for w in self.weights:
            if w.status != "quantized" and w.bytes_before:
                totals[w.op_type] = totals.get(w.op_type, 0) + w.bytes_before // 4
        return dict(sorted(totals.items(), key=lambda item: -item[1]))


def exceeds(error: float | None, threshold: float) -> bool:
    """Whether an error deserves a warning: above the threshold, or not a number (NaN compares
    false with everything, so ``error > threshold`` let it pass silently)."""
    return error is not None and not error <= threshold


_NAN_ERROR = "NaN: the float or the quantized output is not finite (a weight or an input holds NaN or Inf?)"


def _json_number(value: float | None) -> float | str | None:
    """A float as RFC 8259 JSON has it: NaN and the infinities have no JSON number, so they are
    the strings "NaN", "Infinity" and "-Infinity" (JSON's ``null`` stays "not measured")."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _percent(part: int, whole: int) -> str:
    share = 100 * part / whole
    return f"{share:.0f}%" if share >= 1 or share == 0 else f"{share:.2g}%"


def quantize_with_report(
    model: onnx.ModelProto | str | os.PathLike,
    format: str | BlockFormat,
    *,
    op_types: Iterable[str] = DEFAULT_OP_TYPES,
    min_elements: int = 4096,
    group_axis: GroupAxis = "input",
    pad: bool = True,
    allow_reference_only: bool = False,
    calibration: Mapping[str, np.ndarray] | str | os.PathLike | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    seed: int = 0,
    output: QuantizeOutput | None = None,
) -> tuple[onnx.ModelProto, QuantizeReport]:
    """:func:`onnx_struct.passes.quantize.quantize` (same arguments), and its report.

    Args:
        calibration: the model's inputs to measure each op's error on: a mapping of input name to
            array, or a ``.npz`` file of them; None: random inputs (:func:`quantize_error.random_feeds`
            with ``seed``).
        threshold: the relative error of an op's output above which a weight is flagged.
        output: where the result will be written; the result references payloads in its data
            file (:class:`onnx_struct.passes.quantize_write.QuantizeOutput`).

    Returns:
        (the quantized model, a :class:`QuantizeReport`). A model with a quantized weight has
        passed :func:`onnx_struct.check_model`'s rules here, once.

    Raises:
        ValidationError: as :func:`quantize`; also a calibration file that is not an ``.npz``
            of arrays.

    Example::

        model, report = quantize_with_report("model.onnx", "Q4_0", op_types=("MatMul", "Conv"))
        for line in report.summary():
            print(line)
    """
    given = _calibration(None, calibration, seed) if calibration is not None else None  # a bad file before the work
    fmt = resolve_format(format)
    options = {"op_types": op_types, "min_elements": min_elements, "group_axis": group_axis, "pad": pad}
    # The report's view of the model is never rewritten: from a path, a skeleton whose large
    # weights stay in the file (read back one at a time), while quantize reads the file itself.
    if isinstance(model, (str, os.PathLike)):
        stock, deferred = read_model_deferred(model)
    else:
        stock, deferred = read_model(model), None
    if isinstance(op_types, str):  # would be read letter by letter
        raise TypeError(f"op_types: expected a sequence of operator names, got the string {op_types!r}")
    if given is not None:  # before the work: an entry naming nothing is the caller's to fix
        check_calibration(stock, *given)
    # before the work too: a declared shape no random input can be made from is refused
    feeds, source = given or _calibration(stock, None, seed)
    planned = build_plan(stock, fmt, tuple(op_types), min_elements, group_axis, pad)
    quantized, _, _, checked = quantize_and_plan(
        model if deferred is not None else stock,
        fmt,
        **options,
        allow_reference_only=allow_reference_only,
        keep_source=False,
        output=output,
    )
    held = sum(length for _, length in deferred.runs.values()) if deferred is not None else 0
    if deferred is not None:  # and what its external data files held, read in with the skeleton
        held += sum(len(tensor.raw_data) for tensor in stock.graph.initializer)
    run_float = given is not None or held <= CALIBRATION_RUN_BYTES
    if not run_float:
        source += (
            f" not run: the model's {held / 2**20:.0f} MiB of weights would be held by onnxruntime besides "
            "this process; random op inputs instead (--calibration FILE runs it)"
        )
    base_dir = output.base_dir if output is not None and output.streaming else None
    report = build_report(
        stock, quantized, planned, feeds, source, threshold, seed, deferred, run_float, checked, base_dir
    )
    return quantized, report


def _calibration(stock: onnx.ModelProto | None, calibration, seed: int) -> tuple[dict[str, np.ndarray], str]:
    if calibration is None:
        return quantize_error.random_feeds(stock, seed), f"random inputs (seed {seed}; unfixed dimensions 1)"
    if isinstance(calibration, Mapping):
        return {k: native_order(np.asarray(v)) for k, v in calibration.items()}, "the given inputs"
    path = os.fspath(calibration)
    # A FIFO, device or directory is refused unopened (NotRegularFileError: the CLI's exit 2), as
    # every input of the CLI is; a missing or unreadable file stays an OSError (exit 2 too).
    with open_regular_input(path, "calibration file") as handle:
        try:
            data = np.load(handle, allow_pickle=False)
        except (ValueError, EOFError, zipfile.BadZipFile) as error:
            raise ValidationError(
                "", f"calibration file {path}: not an .npz of arrays: {error}", code="invalid"
            ) from None
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValidationError(
                "",
                f"calibration file {path}: one array, not an .npz of the model's inputs (np.savez(path, X=x))",
                code="invalid",
            )
        with data:
            return {k: native_order(v) for k, v in read_entries(data, path).items()}, path


def build_report(
    stock: onnx.ModelProto,
    quantized: onnx.ModelProto,
    planned: Plan,
    feeds: dict[str, np.ndarray],
    source: str,
    threshold: float,
    seed: int = 0,
    deferred: DeferredData | None = None,
    run_float: bool = True,
    checked: CheckedModel | None = None,
    base_dir: str | os.PathLike | None = None,
) -> QuantizeReport:
    """The report for ``quantized``, made from ``stock`` by ``planned`` (a plan built on ``stock``;
    ``deferred``: where the data of its large initializers is, when ``stock`` is a skeleton).
    ``run_float``: run the float model on ``feeds`` for the ops' inputs and the output errors.
    ``checked``: ``quantized`` as checked already (else it is checked here, once). ``base_dir``:
    where ``quantized``'s external payloads and tensors are."""
    fmt = planned.format
    if planned.weights and checked is None:
        checked = checked_model(quantized, base_dir=base_dir)
    names = set().union(*(quantize_error.op_input_names(planned.sites[w.label]) for w in planned.weights))
    outputs = [o.name for o in stock.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    if planned.weights:
        names |= set(outputs)
    values, failure = {}, "not run"
    if names and run_float:
        whole = _whole(stock, deferred)
        values, failure = quantize_error.activations(whole, feeds, names, owned=whole is not stock)
        del whole
    output_errors = {}
    if planned.weights and not failure:
        lowered = lower_checked(checked, keep_external=False).model
        if base_dir is not None:  # kept float tensors in the data file: onnxruntime gets them in memory
            load_external_tensors(lowered, base_dir)
        output_errors = quantize_error.output_errors(lowered, feeds, {k: values[k] for k in outputs})
        del lowered
    if failure and failure != "not run":
        source += f" (onnxruntime could not run the float model on it: {failure}; random op inputs instead)"
    execution = _execution(checked) if planned.weights else None
    weights = []
    scratch = Scratch(fmt)  # declarations of the ranges of rows the errors decode
    for label, site in planned.sites.items():
        weight = next((w for w in planned.weights if w.label == label), None)
        before = 4 * site.elements
        ops = [use.node.op_type for use in site.uses]
        op_type = planned.unquantized_ops.get(label) or (ops[0] if ops else "-")
        common = {"name": site.name, "where": site.where, "kind": site.kind, "shape": tuple(site.tensor.dims)}
        common["op_type"] = op_type
        if weight is None:
            status, reason = ("kept", planned.skipped[label]) if label in planned.skipped else ("not considered", "")
            reason = reason or planned.other.get(label, "")
            weights.append(
                WeightReport(
                    **common,
                    status=status,
                    reason=reason,
                    format=None,
                    stored_shape=None,
                    padded_from=None,
                    bytes_before=before,
                    bytes_after=before,
                    execution="float",
                    execution_reason="not quantized",
                    error=None,
                    error_input="",
                    warning=False,
                )
            )
            continue
        from_file = (
            deferred is not None and site.where == MAIN and site.kind == "initializer" and site.name in deferred.runs
        )
        if quantize_rows.measurable(site, weight):  # one range of rows of the weight at a time
            float_rows = quantize_rows.FloatRows(site.tensor, deferred if from_file else None)
            stored_rows = quantize_rows.QuantizedRows(checked, weight, fmt, scratch)
            error, measured = quantize_rows.weight_error(site, weight, float_rows, stored_rows, values, seed)
            del float_rows, stored_rows  # (an inline payload's copy) before the next weight's
        else:
            w = deferred.array(site.tensor) if from_file else numpy_helper.to_array(site.tensor)
            wq = quantize_error.restored(decode_resolved(checked.resolved_named(weight.value_name)), weight)
            error, measured = quantize_error.weight_error(site, w, wq, values, seed)
            del w, wq
        how, why = _how_it_runs(weight, site, fmt, execution)
        weights.append(
            WeightReport(
                **common,
                status="quantized",
                reason="",
                format=fmt.name,
                stored_shape=weight.stored_shape,
                padded_from=weight.stored_shape[-1] - weight.pad if weight.pad else None,
                bytes_before=before,
                bytes_after=fmt.num_blocks(weight.stored_shape) * fmt.bytes_per_block,
                execution=how,
                execution_reason=why,
                error=error,
                error_input="calibration" if measured else "random",
                warning=exceeds(error, threshold),
            )
        )
    return QuantizeReport(fmt.name, source, threshold, weights, output_errors)


def _whole(stock: onnx.ModelProto, deferred: DeferredData | None) -> onnx.ModelProto:
    """``stock`` with every weight's data (a copy, when some of it is still in the file)."""
    if deferred is None or not deferred.runs:
        return stock
    whole = onnx.ModelProto()
    whole.CopyFrom(stock)
    deferred.restore(whole.graph)
    return whole


def _execution(checked: CheckedModel):
    """What InferenceSession's quantized execution does with each struct value (no session made)."""
    try:
        return rewrite_for_execution(checked, accuracy_level=0, report_only=True).report
    except ValidationError:  # the model is valid (quantize checked it); an opset the rewrite refuses
        return None


def _how_it_runs(weight: PlannedWeight, site: Site, fmt: BlockFormat, execution) -> tuple[str, str]:
    """("quantized" | "partly quantized" | "decoded", why) under InferenceSession's default execution."""
    value = weight.value_name
    rewritten = execution.rewritten.get(value, []) if execution else []
    kept = execution.kept.get(value, "") if execution else "the execution rewrite did not apply"
    rewritten = [entry.removesuffix(" ''") for entry in rewritten]  # an unnamed node: its op type
    if rewritten and not kept:
        return "quantized", f"{', '.join(rewritten)} on the quantized codes"
    ops = sorted({use.node.op_type for use in site.uses})
    if "Conv" in ops:
        why = CONV_DECODED
    elif weight.pad:
        why = (
            f"its grouped axis is padded ({weight.stored_shape[-1] - weight.pad} to {weight.stored_shape[-1]}): "
            "quantized execution needs whole blocks, so it is decoded to float32 at run time"
        )
    elif any(use.where != MAIN or use.via_call for use in site.uses):
        places = sorted({use.where for use in site.uses if use.where != MAIN or use.via_call})
        why = (
            f"read in {', '.join(places)}: quantized execution rewrites main-graph MatMul/Gemm/Gather "
            "only, so it is decoded to float32 at run time"
        )
    elif weight.transpose == "none" and set(ops) & {"MatMul", "Gemm"}:
        why = "blocks along the output axis N (group_axis='output'): MatMulNBits needs them along K; decoded"
    elif not has_affine_form(fmt):
        why = f"{fmt.name} has no affine form (docs/execution.md): decoded to float32 at run time"
    else:
        why = kept or "no consumer the execution rewrite recognizes: decoded to float32 at run time"
    if rewritten:
        return "partly quantized", f"{', '.join(rewritten)} on the quantized codes; also {why}"
    return "decoded", why


__all__ = [
    "DEFAULT_THRESHOLD",
    "QuantizeReport",
    "WeightReport",
    "WEIGHT_INPUT",
    "build_report",
    "quantize_with_report",
]
