"""Function models run in onnxruntime: one :class:`FunctionRunner` per function model, cached
sessions, reference fallback. Which function runs on which value is :mod:`onnx_struct.runtime.codec`.

A decoder runs as a tiny function model (:mod:`onnx_struct.functions.models`) with its
leaves as run-time inputs; sessions are cached per function, leaf types and constants in a
bounded LRU. Where onnxruntime cannot load the function (a type it has no kernel for) it runs in
``onnx.reference`` after a RuntimeWarning; an opset newer than onnxruntime's is a ValidationError.
onnxruntime is imported on first run only.

Notes: docs/modules.md.
"""

from __future__ import annotations

import collections
import threading
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnx_struct import limits
from onnx_struct.errors import ValidationError
from onnx_struct.functions import policy as decoder_policy
from onnx_struct.functions.models import function_model, signature_digest
from onnx_struct.layout import dtypes
from onnx_struct.payload import buffer_pool
from onnx_struct.runtime.feeds import Feed, ortvalue_to_numpy
from onnx_struct.runtime.ort import load_onnxruntime, ort_errors, ort_limits, ort_version

# onnxruntime's intra-op threads per decode session; 0 lets onnxruntime choose (physical cores).
# Also the threads a big value of a registered block format is decoded on, in single-threaded
# sessions over block ranges (onnx_struct.runtime.parallel; 0: the cores this process may use); 1 turns
# that off.
INTRA_OP_THREADS = 0


def _trailing_reshape(model: onnx.ModelProto) -> tuple[onnx.ModelProto, tuple[int, ...] | None]:
    """Drop a final ``Reshape`` by a constant shape from an inlined single-output model.

    onnxruntime copies a graph output produced by Reshape (a decoder's usual last step, e.g.
    [n_blocks, 32] -> [rows, cols]) instead of aliasing it; returning the Reshape's input and
    reshaping in numpy (a view) saves one full pass over the logical value. Returns the model and
    the target shape (with 0 meaning "copy the input dimension", as Reshape's default), or None.
    """
    graph = model.graph
    if len(graph.output) != 1 or not len(graph.node):
        return model, None
    last = graph.node[-1]
    if last.op_type != "Reshape" or last.domain not in ("", "ai.onnx") or last.output[0] != graph.output[0].name:
        return model, None
    if any(a.name == "allowzero" and a.i for a in last.attribute) or len(last.input) != 2:
        return model, None
    data, shape_name = last.input
    if data not in {o for n in graph.node[:-1] for o in n.output}:  # a graph input: keep ORT's copy
        return model, None
    shape = _constant_value(graph, shape_name)
    # Only a plain 1-D int64 shape is taken over; anything else stays a Reshape for onnxruntime,
    # which reports it (the policy has refused most such decoders before).
    if shape is None or shape.ndim != 1 or shape.dtype != np.int64 or not 0 < shape.size <= limits.MAX_RESHAPE_RANK:
        return model, None
    if (shape < -1).any() or (shape == -1).sum() > 1:
        return model, None
    trimmed = onnx.ModelProto()
    trimmed.CopyFrom(model)
    del trimmed.graph.node[-1]
    trimmed.graph.output[0].name = data
    trimmed.graph.output[0].ClearField("type")
    return trimmed, tuple(int(d) for d in shape)


def _constant_value(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    """The value of an initializer or Constant node named ``name``, or None when there is none
    or it cannot be read as an array."""
    try:
        for tensor in graph.initializer:
            if tensor.name == name:
                return numpy_helper.to_array(tensor)
        for node in graph.node:
            if node.op_type == "Constant" and list(node.output) == [name]:
                for attribute in node.attribute:
                    if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR:
                        return numpy_helper.to_array(attribute.t)
                    if attribute.name == "value_ints" and attribute.type == onnx.AttributeProto.INTS:
                        return np.array(attribute.ints, dtype=np.int64)
    except Exception:  # noqa: BLE001 - numpy_helper raises assorted types for malformed tensors
        return None
    return None


def _apply_reshape(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """numpy's reshape with Reshape's 0 (copy the input dimension); ValueError when impossible."""
    if any(d == 0 and k >= array.ndim for k, d in enumerate(shape)):
        raise ValueError(f"cannot copy dimension {array.ndim} or beyond of a {array.ndim}-d array")
    target = [array.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    return array.reshape(target)


# ---------------------------------------------------------------------- runners
class FunctionRunner:
    """One function model ready to run: an onnxruntime session, or the reference evaluator."""

    def __init__(
        self,
        model: onnx.ModelProto,
        where: str,
        runtime: str,
        threads: int | None = None,
        fallback: bool = True,
        allowance_bytes: int = 0,
        expansion: int | None = None,
    ) -> None:
        """``model`` is a function model (:func:`onnx_struct.functions.models.function_model`); it is
        checked against the decoder safety policy first (``allowance_bytes``: the bytes an encoder
        writes to its leaves; ``expansion``: the policy's bytes per input byte, default
        :data:`~onnx_struct.limits.FUNCTION_EXPANSION`), so no runner is ever built for a function check_model refuses.
        ``fallback=False``: when onnxruntime cannot load the function, build nothing and warn
        nothing (the runner is then unusable: :meth:`output_shape` is None); for callers that
        have another way to run it."""
        decoder_policy.check_function_model(model, where, allowance_bytes, expansion)
        self.where = where
        self.model = model
        self.threads = INTRA_OP_THREADS if threads is None else threads
        self._fetch = [o.name for o in model.graph.output]
        self.runtime = runtime
        self._session = None
        self._reference = None
        self._reshape: tuple[int, ...] | None = None
        if runtime == "onnxruntime":
            self._check_opsets()
            try:
                self._session = self._create_session()
            except ort_errors() as error:
                if not fallback:
                    self.runtime = "unavailable"
                    return
                warnings.warn(
                    f"{where}: onnxruntime {ort_version()} cannot run this function "
                    f"({_first_line(error)}); using onnx.reference.ReferenceEvaluator",
                    RuntimeWarning,
                    stacklevel=4,
                )
                self.runtime = "reference"
        if self.runtime == "reference":
            self._reference = self._create_reference()

    def _check_opsets(self) -> None:
        max_ir, max_opset = ort_limits()
        for opset in self.model.opset_import:
            if opset.domain in ("", "ai.onnx") and opset.version > max_opset:
                raise ValidationError(
                    self.where,
                    f"imports opset {opset.version} of the default domain; the installed onnxruntime "
                    f"{ort_version()} supports up to {max_opset} (runtime='reference' runs it in onnx's evaluator)",
                    opset=opset.version,
                    supported=max_opset,
                    code="unsupported_opset",
                )

    def _create_session(self):
        ort = load_onnxruntime()
        import onnx.inliner  # noqa: PLC0415 - not imported by "import onnx"

        try:
            inlined = onnx.inliner.inline_local_functions(self.model)
        except onnx.checker.ValidationError as error:  # onnx's own, e.g. recursive model-local functions
            if isinstance(error, ValidationError):
                raise
            raise ValidationError(
                self.where, f"functions cannot be inlined: {_first_line(error)}", code="runtime_failure"
            ) from None
        inlined.ir_version = min(inlined.ir_version, ort_limits()[0])
        inlined, self._reshape = _trailing_reshape(inlined)
        self._fetch = [o.name for o in inlined.graph.output]
        options = ort.SessionOptions()
        options.log_severity_level = 3  # warnings about unused constants would be noise here
        options.intra_op_num_threads = self.threads
        # A decode is one short run: spinning workers only burn the cores the caller (and other
        # processes) need next, which slows decodes on a loaded machine (docs/benchmarks.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(
            inlined.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def _create_reference(self):
        from onnx.reference import ReferenceEvaluator  # noqa: PLC0415 - only on fallback

        try:
            return ReferenceEvaluator(self.model)
        except Exception as error:  # the evaluator raises assorted types for unsupported models
            raise ValidationError(
                self.where, f"onnx's reference evaluator cannot run this function: {error}", code="runtime_failure"
            ) from None

    def run(self, feeds: Mapping[str, Feed]) -> list[np.ndarray]:
        """The function's outputs for ``feeds`` (input name -> Feed), as numpy arrays."""
        if self.runtime == "unavailable":
            raise ValidationError(
                self.where, "onnxruntime cannot run this function (built without a fallback)", code="runtime_failure"
            )
        if self._session is not None:
            try:
                values = self._session.run_with_ort_values(
                    self._fetch, {name: feed.ort_value() for name, feed in feeds.items()}
                )
            except ort_errors() as error:
                raise ValidationError(
                    self.where, f"failed in onnxruntime: {_first_line(error)}", code="runtime_failure"
                ) from None
            outputs = [ortvalue_to_numpy(v) for v in values]
            if self._reshape is not None:
                try:
                    outputs[0] = _apply_reshape(outputs[0], self._reshape)
                except ValueError as error:
                    raise ValidationError(
                        self.where, f"failed in onnxruntime: Reshape: {error}", code="runtime_failure"
                    ) from None
            return outputs
        try:
            # IEEE results (inf * 0 = NaN in a scale) are the format's semantics, as in onnxruntime,
            # not numpy warnings.
            with np.errstate(all="ignore"):
                results = self._reference.run(None, {name: feed.numpy() for name, feed in feeds.items()})
        except Exception as error:
            raise ValidationError(
                self.where, f"failed in onnx's reference evaluator: {error}", code="runtime_failure"
            ) from None
        return [np.asarray(r) for r in results]

    def output_shape(self) -> tuple[int, ...] | None:
        """The static shape of onnxruntime's output (before the numpy reshape), or None when a
        dimension is not known before running (or the function runs in the reference evaluator)."""
        if self._session is None:
            return None
        shape = self._session.get_outputs()[0].shape
        return tuple(shape) if all(isinstance(d, int) for d in shape) else None

    def output_dtype(self) -> np.dtype | None:
        """The numpy dtype of onnxruntime's first output when numpy has one (e.g. not BFLOAT16);
        None as well when the function does not run in onnxruntime."""
        if self._session is None:
            return None
        kind = self._session.get_outputs()[0].type.removeprefix("tensor(").removesuffix(")")  # "float"
        try:  # onnxruntime's names are ONNX's in lower case
            dtype = dtypes.np_dtype(TensorProto.DataType.Value(kind.upper()))
        except (ValueError, KeyError):
            return None
        return dtype if dtype.type.__module__ == "numpy" else None

    def run_into(self, feeds: Mapping[str, Feed], out: np.ndarray) -> None:
        """Run onnxruntime with the first output written straight into ``out``, a C-contiguous
        array of :meth:`output_shape` and the output's dtype (onnxruntime checks both)."""
        # The OrtValues stay referenced here until the run ends: some onnxruntime versions (1.22)
        # keep only a raw pointer in the binding, and a contiguous copy made by ort_value() would
        # otherwise be freed before the run reads it.
        inputs = {name: feed.ort_value() for name, feed in feeds.items()}
        io = self._session.io_binding()
        for name, value in inputs.items():
            io.bind_ortvalue_input(name, value)
        io.bind_output(self._fetch[0], "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
        try:
            self._session.run_with_iobinding(io)
        except (*ort_errors(), RuntimeError) as error:  # IOBinding runs raise RuntimeError
            raise ValidationError(
                self.where, f"failed in onnxruntime: {_first_line(error)}", code="runtime_failure"
            ) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_cache: collections.OrderedDict[bytes, FunctionRunner] = collections.OrderedDict()
_cache_lock = threading.Lock()  # guards _cache; held only for lookups and inserts
# Serializes building runners, so threads missing the cache for one key at once build it once
# (a session build is what costs; it uses every core anyway). Lookups never wait for it.
_build_lock = threading.Lock()


def cached_runner(
    function: onnx.FunctionProto,
    where: str,
    inputs: Sequence[tuple[str, onnx.TypeProto]],
    initializers: Sequence[TensorProto],
    runtime: str,
    threads: int | None = None,
    fallback: bool = True,
    allowance_bytes: int = 0,
    expansion: int | None = None,
) -> FunctionRunner:
    """The runner for this function and input signature, built once (bounded LRU). ``threads``
    is onnxruntime's intra-op thread count (default :data:`INTRA_OP_THREADS`); ``fallback`` and
    ``allowance_bytes`` and ``expansion``: see :class:`FunctionRunner`."""
    threads = INTRA_OP_THREADS if threads is None else threads
    key = signature_digest(
        function,
        inputs,
        initializers,
        runtime,
        str(threads),
        str(fallback),
        str(allowance_bytes),
        str(expansion),
        where,
    )
    runner = _cached(key)
    if runner is not None:
        return runner
    with _build_lock:
        runner = _cached(key)  # built by another thread while this one waited
        if runner is not None:
            return runner
        runner = FunctionRunner(
            function_model(function, inputs, initializers),
            where,
            runtime,
            threads,
            fallback,
            allowance_bytes,
            expansion,
        )
        with _cache_lock:
            _cache[key] = runner
            while len(_cache) > limits.SESSION_CACHE_SIZE:
                _cache.popitem(last=False)
    return runner


def _cached(key: bytes) -> FunctionRunner | None:
    with _cache_lock:
        runner = _cache.get(key)
        if runner is not None:
            _cache.move_to_end(key)
        return runner


def clear_cache() -> None:
    """Drop every cached session and recycled output buffer (e.g. to release memory)."""
    with _cache_lock:
        _cache.clear()
    buffer_pool.clear()


def cache_size() -> int:
    return len(_cache)
