"""``InferenceSession``: an onnxruntime session over ``lower(model)`` that takes struct values.

Struct-typed graph inputs (an exact ``type_index``) accept a StructProto of that type, or the raw
payload bytes, and are split into their leaf inputs at run time through a view (zero-copy where
the layout allows); every other input and every output is onnxruntime's. Inputs of the
unconstrained struct category and sequences/maps of structs are rejected when the session is
created: their leaves (hence the lowered graph's inputs) are unknown until run time.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from onnx_struct.errors import ValidationError
from onnx_struct.runtime import session_cache
from onnx_struct.runtime.delivery import configured_accuracy_level, session_from_path
from onnx_struct.runtime.ort import load_onnxruntime, load_refusal, ort_file_errors
from onnx_struct.runtime.threads import checked_threads
from onnx_struct.schema.model import ModelLike, StructProto, read_model_file

if TYPE_CHECKING:  # the struct-input path's, imported where it runs (runtime/session_build.py too)
    from onnx_struct.lowering.lower import StructInput
    from onnx_struct.payload.view import StructView
    from onnx_struct.runtime.feeds import Feed


class InferenceSession:
    """Run a model with struct parts in onnxruntime: ``InferenceSession(model).run(None, feeds)``.

    ``model_or_path`` is any model form :func:`onnx_struct.schema.model.load` accepts; ``compact`` is
    :func:`onnx_struct.lower`'s (keep 4-bit weights compact in memory, decode on every run);
    ``execution`` is :func:`onnx_struct.lower`'s, "quantized" by default: MatMul/Gemm/Gather
    weights of a registered block format run quantized (docs/execution.md) at MatMulNBits'
    ``accuracy_level``: None (default) leaves onnxruntime's choice (4: activations quantized to
    int8 per block, the fastest, ~5e-3 relative error); 0 multiplies float32 activations (error
    ~1e-6, but 8-bit codes take a slow path there: docs/execution.md);
    ``sess_options``, ``providers`` and ``**ort_kwargs`` go to ``onnxruntime.InferenceSession``.
    External payloads are read from the model's directory (or ``base_dir``).

    Memory: quantized weights are repacked range by range straight into
    ``com.microsoft.MatMulNBits``' inputs, written to a temporary external-data file that
    onnxruntime reads (removed once the session exists), so the model bytes stay small and no
    Python copy outlives the creation; ``lowered`` shows those initializers as placeholders
    (external data at ``onnx_struct.in_memory``). A caller's ``sess_options`` is never changed
    (the model then goes to onnxruntime by path, beside that file): set thread counts there, or
    give ``threads`` for the session's own.
    docs/execution.md, "Memory". A model without struct parts is handed to onnxruntime as it is,
    and the stock part of any model is onnxruntime's to judge (docs/semantics.md, "Drop-in
    behaviour"); onnxruntime's refusal is a ValidationError that is also its own exception class.

    Args:
        model_or_path: the model (any form: ModelProto, bytes, path, LoadedModel).
        sess_options (onnxruntime.SessionOptions | None): onnxruntime's options, never changed.
        providers: onnxruntime's execution providers.
        compact: as for :func:`onnx_struct.lower`.
        base_dir: the directory external payloads are read from (default: the model file's).
        execution: "quantized" (default) or "decode", as for :func:`onnx_struct.lower`.
        accuracy_level: MatMulNBits' ``accuracy_level`` (None: onnxruntime's choice).
        cache_dir: a session cache directory (None: none): what onnxruntime loads (its optimized
            graph, or the lowered model) and its weights are kept there, and a later session over
            the same model file and files loads them without checking, lowering or repacking
            (runtime/session_cache.py; docs/llm.md, "Start-up and the session cache"). The model
            must be given as a path.
        threads: onnxruntime's intra-op thread count in the session's own options (None: its
            default); with ``sess_options``, set it there instead.
        **ort_kwargs: passed to ``onnxruntime.InferenceSession``.

    Raises:
        ValidationError: the model is invalid, or onnxruntime refuses it or would refuse its
            file (then also an instance of onnxruntime's own exception class: docs/errors.md);
            ``cache_dir`` with a model that is not a path, ``threads`` that is not an integer from
            1 to MAX_INTRA_OP_THREADS or is given with ``sess_options`` (``bad_argument``).
        ValueError: ``execution`` is neither "decode" nor "quantized" (for a model with struct
            parts).

    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> from onnx_struct import add_struct_values, formats
    >>> x_info = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1])
    >>> y_info = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32])
    >>> graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "g", [x_info], [y_info])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    >>> block = bytes([0x00, 0x3C]) + bytes([0x9A]) * 16  # Q4_0: d = 1.0; 16 weights 2.0, 16 weights 1.0
    >>> add_struct_values(model, formats.get("Q4_0").make_value(model, "W", (1, 32), block))
    >>> session = InferenceSession(model, accuracy_level=0)
    >>> (y,) = session.run(None, {"X": np.full((1, 1), 2.0, np.float32)})
    >>> y[0, [0, 16]]
    array([4., 2.], dtype=float32)
    """

    def __init__(
        self,
        model_or_path: ModelLike,
        sess_options=None,
        providers: Sequence[str] | None = None,
        *,
        compact: bool = False,
        base_dir: str | os.PathLike | None = None,
        execution: str = "quantized",
        accuracy_level: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        threads: int | None = None,
        **ort_kwargs: Any,
    ) -> None:
        ort = load_onnxruntime()
        threads = checked_threads(threads, "InferenceSession(threads)")
        if threads is not None and sess_options is not None:
            raise ValidationError(
                "InferenceSession(threads)",
                "give the thread count in sess_options (intra_op_num_threads), which are never changed",
                code="bad_argument",
            )
        in_memory = execution == "quantized"
        if in_memory and accuracy_level is None and sess_options is not None:
            accuracy_level = configured_accuracy_level(sess_options)
        cache = None
        model_bytes = None  # the model file's bytes as the cache key read them (a miss parses them)
        # Onnxruntime's optimized graph is what an entry keeps when nothing but the key shapes it:
        # the session's own options, the CPU provider, no other onnxruntime arguments.
        saves_graph = (
            sess_options is None and not ort_kwargs and list(providers or []) in ([], ["CPUExecutionProvider"])
        )
        if cache_dir is not None:
            level = (4 if accuracy_level is None else int(accuracy_level)) if in_memory else None
            settings = {"execution": execution, "compact": bool(compact), "accuracy_level": level,
                        "base_dir": None if base_dir is None else str(pathlib.Path(base_dir).resolve()),
                        "graph": session_cache.machine() if saves_graph else "lowered"}  # fmt: skip
            cache, model_bytes = _cache_slot(cache_dir, model_or_path, settings, ort)
            lowered_path = cache.usable()
            if lowered_path:
                model_bytes = None  # a hit holds no copy of the file; a broken entry's miss reads it again
                if self._open_cached(ort, cache, lowered_path, sess_options, providers, ort_kwargs, threads):
                    return
        from onnx_struct.runtime import session_build  # noqa: PLC0415 - what a cache hit skips

        handed = [model_bytes]  # emptied by the miss: no frame here holds the bytes while onnxruntime loads
        del model_bytes
        built = session_build.build(
            ort, model_or_path, handed, cache, base_dir=base_dir, compact=compact, execution=execution,
            accuracy_level=accuracy_level, in_memory=in_memory, saves_graph=saves_graph,
            sess_options=sess_options, providers=providers, ort_kwargs=ort_kwargs, threads=threads,
        )  # fmt: skip
        self.lowered: onnx.ModelProto = built.lowered
        self._session, self._recreatable, self._base_dir = built.session, built.recreatable, built.base_dir
        self._declarations, self._struct_inputs = built.declarations, built.struct_inputs
        if not self._recreatable:
            self._forbid_recreation()

    def _forbid_recreation(self) -> None:
        # What onnxruntime would re-create the session from is gone or may go (a removed temporary
        # file, freed buffers, a cache entry): it must not try (its run-time provider fallback,
        # set_providers); set_providers refuses instead.
        self._session.disable_fallback()
        self._session._sess_options_initial = None  # noqa: SLF001

    def _open_cached(self, ort, cache: session_cache.CacheSlot, lowered_path: str, sess_options, providers, ort_kwargs,
                     threads) -> bool:  # fmt: skip
        """The session from the cache's entry (runtime/session_cache.py); False, with the entry
        removed, when onnxruntime cannot load it (the session is then made as on a miss)."""
        try:
            lowered = onnx.load_model(lowered_path, load_external_data=False)
            session = session_from_path(ort, cache.model_path(), sess_options, providers, ort_kwargs, threads)
        except (OSError, DecodeError, *ort_file_errors()):  # a truncated or foreign entry
            cache.remove()
            return False
        self._base_dir = cache.directory
        self._declarations, self._struct_inputs = [], {}
        self.lowered, self._session, self._recreatable = lowered, session, False
        self._forbid_recreation()
        return True

    def set_providers(self, providers=None, provider_options=None) -> None:
        """onnxruntime's, for a session created from self-contained model bytes; a session whose
        weights reached onnxruntime outside them (repacked weights, external tensors: they exist
        only inside onnxruntime now) refuses: create a new InferenceSession with ``providers=...``.

        Args:
            providers (Sequence[str] | None): onnxruntime's execution providers (None: its default).
            provider_options (Sequence[dict] | None): their options, as onnxruntime takes them.

        Raises:
            NotImplementedError: the session's weights reached onnxruntime outside the model bytes.
        """
        if not self._recreatable:
            raise NotImplementedError(
                "this onnx_struct.InferenceSession handed its weights to onnxruntime outside the model bytes "
                "and cannot re-create its session; create a new one with providers=..."
            )
        self._session.set_providers(providers, provider_options)

    @property
    def struct_inputs(self) -> dict[str, list[str]]:
        """Struct-typed graph input name -> the lowered leaf input names it is split into."""
        return {name: list(info.leaf_inputs) for name, info in self._struct_inputs.items()}

    def __getattr__(self, name: str):
        # get_inputs, get_outputs, get_providers, end_profiling, ...: onnxruntime's, unchanged.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._session, name)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options=None) -> list:
        """Like ``onnxruntime.InferenceSession.run``; struct inputs take a StructProto or bytes.

        Args:
            output_names: the outputs to compute (None: all).
            input_feed: arrays by input name; a struct input takes a StructProto or its payload.
            run_options (onnxruntime.RunOptions | None): onnxruntime's run options.

        Returns:
            The outputs' arrays, in ``output_names`` order.

        Raises:
            ValueError: a struct input is missing from ``input_feed``, or fed with the names of
                its leaves as well.
            ValidationError: a struct input's payload does not fit its declaration.
        """
        missing = [name for name in self._struct_inputs if name not in input_feed]
        if missing:  # onnxruntime would name their lowered leaves (``W::values``), not them
            raise ValueError(f"Required struct inputs ({missing}) are missing from input_feed")
        hidden = {leaf: info.name for info in self._struct_inputs.values() for leaf in info.leaf_inputs}
        fed = [name for name in input_feed if name in hidden]
        if fed:  # a leaf fed by name would silently replace the leaf split from the struct input
            raise ValueError(
                f"input_feed names {fed[0]!r}, a leaf of the struct input {hidden[fed[0]]!r} that is fed "
                f"from it; pass {hidden[fed[0]]!r} only"
            )
        feeds: dict[str, Feed] = {}
        plain: dict[str, Any] = {}
        for name, value in input_feed.items():
            if name in self._struct_inputs:
                feeds.update(self._split(self._struct_inputs[name], value))
            else:
                plain[name] = value
        if not feeds:
            return self._session.run(output_names, plain, run_options)
        from onnx_struct.runtime.feeds import ortvalue_to_numpy  # noqa: PLC0415 - struct inputs only

        ort = load_onnxruntime()
        values = {name: feed.ort_value() for name, feed in feeds.items()}
        for name, value in plain.items():
            values[name] = value if isinstance(value, ort.OrtValue) else _plain_feed(value).ort_value()
        names = list(output_names) if output_names else [o.name for o in self._session.get_outputs()]
        results = self._session.run_with_ort_values(names, values, run_options)
        return [ortvalue_to_numpy(r) if r.is_tensor() else r for r in results]

    def _split(self, info: StructInput, value) -> dict[str, Feed]:
        from onnx_struct.payload.view import view_buffer  # noqa: PLC0415 - struct inputs only
        from onnx_struct.runtime.feeds import leaf_feeds  # noqa: PLC0415

        where = f"input {info.name!r}"
        if isinstance(value, StructProto):
            struct_view = self._view_of_value(info, value, where)
        elif isinstance(value, (bytes, bytearray, memoryview, np.ndarray)):
            struct_view = view_buffer(_payload_bytes(value, where), info.type_index, self._declarations, name=info.name)
        else:
            raise ValidationError(
                where,
                f"expects a StructProto or payload bytes of struct_types[{info.type_index}], "
                f"not {type(value).__name__}",
                code="wrong_input",
            )
        return leaf_feeds(struct_view, info.leaf_inputs)[0]

    def _view_of_value(self, info: StructInput, value: StructProto, where: str) -> StructView:
        if value.HasField("struct_type"):
            same = value.struct_type.SerializeToString(deterministic=True) == info.declaration.SerializeToString(
                deterministic=True
            )
        else:
            same = value.type == info.type_index
        if not same:
            raise ValidationError(
                where,
                f"expects a value of struct_types[{info.type_index}]; the StructProto has another type",
                code="type_mismatch",
            )
        from onnx_struct.payload.view import view  # noqa: PLC0415 - struct inputs only

        return view(value, self._declarations, base_dir=self._base_dir)


def _cache_slot(cache_dir, model_or_path, settings: dict, ort) -> tuple[session_cache.CacheSlot, bytes]:
    """The cache slot of a model given by path and the file's bytes its key hashed (a miss
    parses them instead of reading the file again)."""
    session_cache.check_arguments(cache_dir, model_or_path)
    record = session_cache.file_record(os.path.abspath(model_or_path))  # before the bytes: a later change is a miss
    try:
        model_bytes = read_model_file(model_or_path)
    except ValidationError as error:
        raise load_refusal(error) from None
    return session_cache.slot(cache_dir, record, model_bytes, settings, ort.__version__), model_bytes


def _payload_bytes(value, where: str) -> bytes | np.ndarray:
    """Payload bytes from any buffer: bytes as they are; an array or memoryview of fixed-size
    numbers as its elements' bytes in C order (a copy only when it is not C-contiguous, as for a
    strided slice or a Fortran-order array). Object arrays carry no bytes: ValidationError."""
    if isinstance(value, (bytes, bytearray)):
        return value
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, BufferError) as error:
        raise ValidationError(where, f"payload buffer cannot be read: {error}", code="wrong_input") from None
    if array.dtype.hasobject or array.dtype.kind not in "biufcV" or array.dtype.itemsize == 0:
        raise ValidationError(
            where,
            f"payload must be bytes or an array of fixed-size numbers, not dtype {array.dtype}",
            code="wrong_input",
        )
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _plain_feed(value) -> Feed:
    from onnx import helper  # noqa: PLC0415

    from onnx_struct.runtime.feeds import Feed  # noqa: PLC0415 - struct inputs only

    array = np.asarray(value)
    return Feed(helper.np_dtype_to_tensor_dtype(array.dtype), array.shape, array=array)
