"""Decoders and encoders run in onnxruntime: cached sessions, zero-copy feeding, reference fallback.

This is the only module that imports onnxruntime, and it does so lazily (on the first run), so
``import onnx_struct`` and the checker never load it.

A decoder runs as a tiny *function model* (:mod:`onnx_struct.functions`): the decoder registered as
a model-local function, one graph input per bound payload leaf (fed at run time, so nothing is
constant-folded), constant leaves as initializers, and one call node. Sessions are cached per (function bytes, leaf types
and shapes, constants, runtime) in a bounded LRU, so decoding many values of one format builds
one session. Leaves are fed as ``OrtValue`` s over the payload bytes: sub-byte types (INT4, UINT4,
INT2, UINT2, FLOAT4E2M1) in ONNX's packed form, which for byte-aligned dense rows is exactly the
payload layout, and types numpy cannot name for onnxruntime (BFLOAT16, FLOAT8*) by reinterpreting
their bytes with the right ONNX element type.

Where onnxruntime cannot load the function model (no kernel for a type, as ``Cast`` from
FLOAT4E2M1, or a type it does not know, as FLOAT6E2M3), the function runs in
``onnx.reference.ReferenceEvaluator`` after a ``RuntimeWarning``; a decoder importing an opset newer
than the installed onnxruntime supports is a ValidationError naming the declaration.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import hashlib
import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnx_struct.check import decoder_inputs as bindings
from onnx_struct.check import decoder_policy

# The function models live in check/function_models.py (no onnxruntime there); they are also
# reachable here, where they were first defined.
from onnx_struct.check.function_models import (  # noqa: F401 - re-exported
    PACKED_TYPES,
    PRIVATE_DOMAIN,
    contiguous,
    function_model,
    onnx_elem_type,
    packed_rows,
    registered_function,
    tensor_type,
)
from onnx_struct.errors import ValidationError
from onnx_struct.layout import dtypes
from onnx_struct.layout.bits import pack_sub_byte, unpack_sub_byte
from onnx_struct.layout.table import Leaf, TypeTable
from onnx_struct.payload import buffer_pool, external
from onnx_struct.payload.pack import pack
from onnx_struct.payload.values import constant_tensor, declaration_or_index, load_declarations, resolve_value
from onnx_struct.payload.view import StructView, view_of
from onnx_struct.runtime import parallel
from onnx_struct.runtime.ort import load_onnxruntime, ort_errors, ort_limits, ort_version
from onnx_struct.schema.builders import make_struct_value
from onnx_struct.schema.model import StructProto, StructTypeProto

RUNTIMES = ("onnxruntime", "reference")
# Sessions kept alive at once; each holds its function model's kernels and arena, so the bound
# keeps memory flat when many distinct formats or shapes are decoded.
SESSION_CACHE_SIZE = 32
# onnxruntime's intra-op threads per decode session; 0 lets onnxruntime choose (physical cores).
# Also the threads a big value of a registered block format is decoded on, in single-threaded
# sessions over block ranges (onnx_struct.parallel; 0: the cores this process may use); 1 turns
# that off.
INTRA_OP_THREADS = 0


# ---------------------------------------------------------------------- feeds
@dataclasses.dataclass
class Feed:
    """One function input: ONNX element type, logical shape, and the data in one or both forms.

    ``array`` holds the elements as numpy / ml_dtypes values (what the reference evaluator
    takes); ``packed`` holds sub-byte types as contiguous bytes in ONNX's packing (what
    onnxruntime takes). Either is derived from the other on demand.
    """

    elem_type: int
    shape: tuple[int, ...]
    array: np.ndarray | None = None
    packed: np.ndarray | None = None

    def numpy(self) -> np.ndarray:
        if self.array is None:
            width = dtypes.bit_width(self.elem_type)
            count = math.prod(self.shape)
            raw = unpack_sub_byte(self.packed, width, count)
            self.array = raw.view(dtypes.np_dtype(self.elem_type)).reshape(self.shape)
        return self.array

    def ort_value(self):
        """An OrtValue over this feed's memory (no copy of the elements)."""
        ort = load_onnxruntime()
        if self.elem_type in PACKED_TYPES:
            if self.packed is None:
                self.packed = pack_sub_byte(self.array, dtypes.bit_width(self.elem_type))
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                _packed_carrier(self.packed, self.shape), self.elem_type
            )
        array = contiguous(self.numpy())
        if array.dtype.kind == "V" or array.dtype.type.__module__.startswith("ml_dtypes"):
            # bfloat16, float8*, float8e8m0: same-size unsigned view, typed by ONNX element type.
            carrier = array.view(np.dtype(f"u{array.dtype.itemsize}"))
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(carrier, self.elem_type)
        return ort.OrtValue.ortvalue_from_numpy(array)


def _packed_carrier(packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of the *logical* shape whose data pointer is ``packed``.

    onnxruntime takes the tensor shape from the numpy shape and reads only the packed byte count
    (ceil(count * width / 8)) from the data pointer, so this carrier, whose nominal extent exceeds
    ``packed``, is never read past ``packed`` by onnxruntime; it is never handed to numpy code.
    """
    if not shape:
        return packed[:1].reshape(())
    strides = tuple(int(math.prod(shape[k + 1 :])) for k in range(len(shape)))
    return np.lib.stride_tricks.as_strided(packed, shape=shape, strides=strides, writeable=False)


def leaf_feeds(struct_view: StructView, bound: Mapping[str, Leaf]) -> tuple[dict[str, Feed], list[TensorProto]]:
    """Feeds for the non-constant bound leaves, and the constant leaves as named TensorProtos."""
    feeds: dict[str, Feed] = {}
    constants: list[TensorProto] = []
    data = struct_view.buffer
    for name, leaf in bound.items():
        if leaf.kind == "constant":
            constants.append(constant_tensor(leaf, name))
            continue
        elem_type = onnx_elem_type(leaf)
        if elem_type in PACKED_TYPES and leaf.kind == "tensor":
            packed = packed_rows(data, leaf)
            if packed is not None:
                feeds[name] = Feed(elem_type, leaf.shape, packed=packed)
                continue
        feeds[name] = Feed(elem_type, leaf.shape, array=struct_view[leaf.path])
    return feeds, constants


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
    if shape is None or shape.ndim != 1 or shape.dtype != np.int64 or not 0 < shape.size <= _MAX_RESHAPE_RANK:
        return model, None
    if (shape < -1).any() or (shape == -1).sum() > 1:
        return model, None
    trimmed = onnx.ModelProto()
    trimmed.CopyFrom(model)
    del trimmed.graph.node[-1]
    trimmed.graph.output[0].name = data
    trimmed.graph.output[0].ClearField("type")
    return trimmed, tuple(int(d) for d in shape)


# More dimensions than any tensor onnxruntime handles: such a Reshape is left to onnxruntime.
_MAX_RESHAPE_RANK = 64


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
    ) -> None:
        """``model`` is a function model (:func:`onnx_struct.functions.function_model`); it is
        checked against the decoder safety policy first (``allowance_bytes``: the bytes an encoder
        writes to its leaves), so no runner is ever built for a function check_model refuses.
        ``fallback=False``: when onnxruntime cannot load the function, build nothing and warn
        nothing (the runner is then unusable: :meth:`output_shape` is None); for callers that
        have another way to run it."""
        decoder_policy.check_function_model(model, where, allowance_bytes)
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


def ortvalue_to_numpy(value) -> np.ndarray:
    """An output OrtValue as numpy: zero-copy for numpy's own types; a copy of the bytes viewed as
    the ml_dtypes type (unpacked for sub-byte types) for the others."""
    elem_type = value.element_type()
    dtype = dtypes.np_dtype(elem_type)
    if dtype.type.__module__ == "numpy" and elem_type not in PACKED_TYPES:
        return value.numpy()
    shape = tuple(value.shape())
    nbytes = value.tensor_size_in_bytes()
    raw = np.empty(nbytes, dtype=np.uint8)
    if nbytes:
        ctypes.memmove(raw.ctypes.data, value.data_ptr(), nbytes)
    if elem_type in PACKED_TYPES:
        raw = unpack_sub_byte(raw, dtypes.bit_width(elem_type), math.prod(shape))
    return raw.view(dtype).reshape(shape)


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
) -> FunctionRunner:
    """The runner for this function and input signature, built once (bounded LRU). ``threads``
    is onnxruntime's intra-op thread count (default :data:`INTRA_OP_THREADS`); ``fallback`` and
    ``allowance_bytes``: see :class:`FunctionRunner`."""
    threads = INTRA_OP_THREADS if threads is None else threads
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{runtime}/{threads}/{fallback}/{allowance_bytes}/{where}".encode(errors="replace"))
    digest.update(function.SerializeToString(deterministic=True))
    for name, type_proto in inputs:
        digest.update(name.encode() + b"\0" + type_proto.SerializeToString(deterministic=True))
    for tensor in initializers:
        digest.update(tensor.SerializeToString(deterministic=True))
    key = digest.digest()
    runner = _cached(key)
    if runner is not None:
        return runner
    with _build_lock:
        runner = _cached(key)  # built by another thread while this one waited
        if runner is not None:
            return runner
        runner = FunctionRunner(
            function_model(function, inputs, initializers), where, runtime, threads, fallback, allowance_bytes
        )
        with _cache_lock:
            _cache[key] = runner
            while len(_cache) > SESSION_CACHE_SIZE:
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


def _check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")


# ---------------------------------------------------------------------- decode / encode
def open_value(
    value: StructProto | str, model=None, base_dir: str | os.PathLike | None = None
) -> tuple[StructView, StructTypeProto, str]:
    """(view, root declaration, the declaration's path) of a StructProto or a named struct value.

    ``model`` is any model form, a list of declarations (resolving ``type`` and ``type_index``),
    or None. Resolved by :func:`onnx_struct.payload.values.resolve_value`, as check and view do.
    """
    resolved = resolve_value(value, model, base_dir)
    return view_of(resolved), resolved.declaration, resolved.declaration_path


def decode(
    value: StructProto | str,
    model=None,
    *,
    base_dir: str | os.PathLike | None = None,
    runtime: str = "onnxruntime",
) -> np.ndarray:
    """The logical value of a struct value: its root declaration's decoder run on its leaves.

    ``value`` is a StructProto or the name of a struct value in ``model`` (any model form).
    The decoder runs in onnxruntime with the leaves as run-time inputs (``runtime="reference"``
    forces onnx's reference evaluator); a session is reused across calls with the same decoder
    and leaf types. A root without a decoder is a ValidationError.

    >>> decode("weight", "model.onnx").shape
    (128,)
    """
    _check_runtime(runtime)
    struct_view, declaration, where = open_value(value, model, base_dir)
    if not declaration.HasField("decoder"):
        raise ValidationError(
            where, "the root declaration has no decoder, so the value has no logical value", code="no_decoder"
        )
    decoder = declaration.decoder
    decoder_path = bindings.function_label(f"{where}.decoder", decoder)
    bound = bindings.bind_decoder(decoder, struct_view.layout, f"{where}.decoder")
    external.refuse_external_tensors(decoder, decoder_path, bound.values())  # never resolved against the cwd
    feeds, constants = leaf_feeds(struct_view, bound)
    inputs = [(name, tensor_type(feed.elem_type, feed.shape)) for name, feed in feeds.items()]
    # What check_model applies to this declaration, before any session is built or range split.
    decoder_policy.check_sizes(decoder, inputs, constants, decoder_path)
    if runtime == "onnxruntime":
        result = parallel.decode_block_ranges(
            declaration,
            decoder,
            decoder_path,
            feeds,
            constants,
            intra_op_threads=INTRA_OP_THREADS,
            cached_runner=cached_runner,
        )
        if result is not None:
            return result
    runner = cached_runner(decoder, decoder_path, inputs, constants, runtime)
    return runner.run(feeds)[0]


def encode(
    array,
    struct_type: StructTypeProto | int,
    model=None,
    *,
    name: str = "",
    runtime: str = "onnxruntime",
) -> StructProto:
    """A StructProto holding ``array`` encoded by the declaration's encoder.

    ``struct_type`` is a declaration (the value gets it inline, type -1) or an index into
    ``model``'s struct_types. The encoder's outputs are packed into their leaves; non-constant
    leaves it does not produce are zero bits. ``decode(encode(x))`` is whatever the format's
    decoder makes of the encoded leaves (exactly x only for lossless formats).
    """
    _check_runtime(runtime)
    declarations = load_declarations(model, None)[1]
    table = TypeTable(declarations)
    declaration, where = declaration_or_index(struct_type, table)
    if not declaration.HasField("encoder"):
        raise ValidationError(where, "the declaration has no encoder", code="no_encoder")
    encoder = declaration.encoder
    encoder_path = bindings.function_label(f"{where}.encoder", encoder)
    layout = table.leaves(declaration, where)
    bound = bindings.bind_encoder(encoder, layout, f"{where}.encoder")
    external.refuse_external_tensors(encoder, encoder_path)  # never resolved against the cwd
    x = np.asarray(array)
    try:
        elem_type = helper.np_dtype_to_tensor_dtype(x.dtype)
    except (KeyError, ValueError, TypeError):
        raise ValidationError(
            encoder_path, f"input dtype {x.dtype} has no ONNX element type", code="unknown_element_type"
        ) from None
    if x.dtype.hasobject:
        raise ValidationError(
            encoder_path, f"input dtype {x.dtype} has no ONNX element type", code="unknown_element_type"
        )
    feed = Feed(elem_type, x.shape, array=x)
    # The policy's budget also counts the payload the encoder writes.
    written = table.size(declaration, where) // 8
    runner = cached_runner(
        encoder,
        encoder_path,
        [(encoder.input[0], tensor_type(elem_type, x.shape))],
        [],
        runtime,
        allowance_bytes=written,
    )
    outputs = runner.run({encoder.input[0]: feed})
    leaves = {}
    for (output_name, leaf), result in zip(bound.items(), outputs, strict=True):
        if result.shape != leaf.shape:
            raise ValidationError(
                encoder_path,
                f"output {output_name!r} has shape {result.shape}; leaf {leaf.path!r} is {leaf.shape}",
                code="shape_mismatch",
            )
        leaves[leaf.path] = result
    try:
        payload = pack(leaves, declaration, declarations, fill_missing=True)  # leaves it does not produce are zero
    except ValidationError as error:
        raise ValidationError(encoder_path, f"output does not fit its leaf: {error}", code="leaf_value") from None
    return make_struct_value(name, struct_type if isinstance(struct_type, int) else declaration, payload)
