"""How a lowered model and its weights reach onnxruntime: the session's one door to
``onnxruntime.InferenceSession``.

Rule: every external tensor is read through the one resolver (:mod:`onnx_struct.payload.external`),
never by onnxruntime from the working directory or the model's folder. Repacked weights and
external tensors reach onnxruntime through a temporary external-data file (with the session's
own options or, beside a temporary copy of the model, with a caller's, which are never changed),
else in memory or inline (docs/execution.md, "Memory"; docs/security.md, "Files").

Notes: docs/modules.md.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import EncodeError

from onnx_struct.errors import ValidationError
from onnx_struct.payload import external
from onnx_struct.runtime.heap import release_free_memory
from onnx_struct.runtime.ort import ort_errors
from onnx_struct.runtime.weights_file import is_placeholder, write_weights_file

ACCURACY_LEVEL_KEY = "session.qdq_matmulnbits_accuracy_level"
SAVED_WEIGHTS_FILE = "model.data"  # beside a graph onnxruntime saves (save_graph_options)


def deliver(
    ort,
    model: onnx.ModelProto,
    arrays: dict[str, np.ndarray],
    base_dir: str | os.PathLike | None,
    sess_options,
    providers: Sequence[str] | None,
    ort_kwargs: dict[str, Any],
    *,
    threads: int | None = None,
    save_to: str | None = None,
) -> tuple[Any, bool]:
    """An ``onnxruntime.InferenceSession`` over ``model`` (repacked weights in ``arrays``, emptied
    here), and whether onnxruntime can re-create it from what it holds (self-contained model
    bytes): False once weights went outside them. ``model`` is left as it was given.

    With the session's own options (no ``sess_options``; ``threads`` its intra-op count) and
    ``save_to``, onnxruntime also saves the graph it holds after its optimizations there
    (:func:`save_graph_options`); a session that cannot save is made again without saving, so
    whether ``save_to`` exists afterwards is the caller's to check."""
    providers = list(providers or ["CPUExecutionProvider"])
    if sess_options is not None:
        return _with_callers_options(ort, model, arrays, base_dir, sess_options, providers, ort_kwargs)
    weights = write_weights_file(model, arrays, base_dir) if arrays else None
    # Onnxruntime copies the in-memory tensors while it creates the session; the options keep
    # pointing at them, which is why this session cannot be re-created (deliver's second value).
    files = external_tensors_in_memory(model, base_dir, weights.moved if weights else placeholders(model, arrays))
    self_contained = not (arrays or files)
    try:
        folder = _folder_name(weights.directory) if weights is not None else None
        if weights is not None:
            arrays.clear()
            release_free_memory()  # the arrays are in the file now: their pages, before onnxruntime's
        model_bytes = serialized(model)
        if weights is not None:
            weights.restore()  # ``lowered`` shows the placeholders, not a file about to be removed

        def create(saving: str | None):
            options = session_options(ort, threads) if saving is None else save_graph_options(ort, threads, saving)
            if folder is not None:  # where onnxruntime finds the repacked weights of a model given as bytes
                options.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
            add_in_memory(ort, options, files, arrays)
            return ort.InferenceSession(model_bytes, options, providers=providers, **ort_kwargs)

        session = None
        if save_to is not None:
            try:
                session = create(save_to)
            except (*ort_errors(), OSError):  # e.g. a full disk: made again below, without saving
                session = None
        if session is None:
            session = create(None)
    finally:
        arrays.clear()
        if weights is not None:
            weights.remove()
    return session, self_contained


def deliver_into(
    ort, model, arrays, base_dir, sess_options, providers, ort_kwargs, directory: str, threads: int | None = None
) -> Any | None:
    """:func:`deliver` for a session cache's entry: ``model`` and every external tensor it has
    (the repacked arrays, emptied here, and the model's own, copied) written to the empty
    ``directory`` as ``model.onnx`` and its weights file, and the session made from that path
    (the caller's options, never changed, or the session's own). None, with ``directory``
    removed and nothing else changed, when the files cannot be written there."""
    weights = write_weights_file(model, arrays, base_dir, copy_all=True, directory=directory)
    if weights is None:
        return None
    try:
        return _session_beside_weights(ort, weights, model, arrays, sess_options, providers, ort_kwargs, threads)
    except OSError:  # the model file could not be written (the arrays are intact): no entry
        weights.restore()
        weights.remove()
        return None
    except BaseException:
        weights.remove()
        raise


def _session_beside_weights(ort, weights, model, arrays, sess_options, providers, ort_kwargs, threads=None):
    """``model`` written beside its weights file, its references restored, the arrays freed, then
    onnxruntime's session from that path."""
    path = weights.write_model(model)
    weights.restore()
    arrays.clear()
    release_free_memory()
    return session_from_path(ort, path, sess_options, providers, ort_kwargs, threads)


def session_from_path(ort, path: str, sess_options, providers, ort_kwargs, threads: int | None = None):
    """onnxruntime's session over a model file whose external data is beside it: with the caller's
    options, never changed, or the session's own."""
    options = sess_options if sess_options is not None else session_options(ort, threads)
    return ort.InferenceSession(path, options, providers=list(providers or ["CPUExecutionProvider"]), **ort_kwargs)


def session_options(ort, threads: int | None = None):
    """The options a session without a caller's gets (``threads``: its intra-op count, None:
    onnxruntime's default)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # compact lowering makes onnxruntime warn per leaf
    if threads is not None:
        options.intra_op_num_threads = threads
    return options


def save_graph_options(ort, threads: int | None, path: str):
    """:func:`session_options` that also save onnxruntime's optimized graph to ``path`` with every
    initializer of 1 KiB or more in one file beside it, :data:`SAVED_WEIGHTS_FILE`."""
    options = session_options(ort, threads)
    options.optimized_model_filepath = path
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", SAVED_WEIGHTS_FILE)
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    return options


def add_in_memory(ort, options, files: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Hand onnxruntime, through ``options``, the bytes of external tensors (``files``: name ->
    the tensor's bytes) and initializers as arrays (``arrays``), so that neither is copied into
    the model's bytes. The session must be created while ``files`` and ``arrays`` are alive."""
    if files:
        names = list(files)
        buffers = [files[n] for n in names]
        options.add_external_initializers_from_files_in_memory(names, buffers, [len(b) for b in buffers])
    if arrays:
        names = list(arrays)
        options.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(arrays[n]) for n in names])


def _with_callers_options(ort, model, arrays, base_dir, sess_options, providers, ort_kwargs) -> tuple[Any, bool]:
    """:func:`deliver` with the caller's options, which are not changed."""
    if not any(external.is_external(t) for _, t in external.model_tensors(model)):
        return ort.InferenceSession(serialized(model), sess_options, providers=providers, **ort_kwargs), True
    weights = write_weights_file(model, arrays, base_dir, copy_all=True)
    if weights is None:  # no file can be written: the model bytes carry everything
        restore = _inline_external_tensors(model, arrays, base_dir)
        arrays.clear()
        try:
            model_bytes = serialized(model)
        finally:
            restore.restore()
        return ort.InferenceSession(model_bytes, sess_options, providers=providers, **ort_kwargs), True
    try:
        return _session_beside_weights(ort, weights, model, arrays, sess_options, providers, ort_kwargs), False
    finally:
        weights.restore()
        weights.remove()


def external_tensors_in_memory(
    model: onnx.ModelProto, base_dir, skip: frozenset[str] | set[str] = frozenset()
) -> dict[str, np.ndarray]:
    """Every external tensor of ``model`` but those at the paths in ``skip`` (handed over already) read
    under the model-directory rules and re-pointed at a file of its own, whole, in memory: file
    name -> its bytes, for ``add_external_initializers_from_files_in_memory``. Which tensors are
    skipped is decided by identity, never by location: a model's own file may have any name."""
    files: dict[str, np.ndarray] = {}
    for where, tensor in external.model_tensors(model):
        if not external.is_external(tensor) or where in skip:
            continue
        path = f"{where}.external_data"
        _require_base_dir(base_dir, path)
        file, offset, length = external.tensor_range(tensor, base_dir, path)
        name = f"onnx_struct.memory.{len(files)}"
        files[name] = external.read_range(file, offset, length, path)
        del tensor.external_data[:]
        for key, value in (("location", name), ("offset", "0"), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
    return files


def serialized(model: onnx.ModelProto) -> bytes:
    """``model``'s bytes, or a ValidationError past protobuf's own limit (a few bytes under 2 GiB)."""
    try:
        return model.SerializeToString()
    except EncodeError:
        raise ValidationError(
            "",
            "the lowered model is too large for protobuf to serialize; store the struct payloads "
            "externally (save_with_external_data)",
            code="limit_exceeded",
        ) from None


def configured_accuracy_level(sess_options) -> int | None:
    """The MatMulNBits accuracy level a caller's options ask of onnxruntime's fusion, if any."""
    try:
        text = sess_options.get_session_config_entry(ACCURACY_LEVEL_KEY)
    except RuntimeError:  # onnxruntime's answer for a key that is not set
        return None
    try:
        return int(text)
    except ValueError:
        return None  # onnxruntime's own parse of it then reports it, as it would without onnx_struct


def placeholders(model: onnx.ModelProto, arrays) -> set[str]:
    """Where ``model``'s placeholders for the arrays in ``arrays`` are (paths, as external.model_tensors gives)."""
    return {where for where, t in external.model_tensors(model) if is_placeholder(where, t, arrays)}


def _require_base_dir(base_dir, path: str) -> None:
    if base_dir is None:
        raise ValidationError(path, "an external tensor needs the model's directory (base_dir)", code="no_base_dir")


def _inline_external_tensors(model: onnx.ModelProto, arrays, base_dir) -> _Inlined:
    """Bring every external tensor of ``model`` inline (the placeholders from ``arrays``); the
    returned object's ``restore`` puts the references back."""
    undo = _Inlined([])
    try:
        for where, tensor in external.model_tensors(model):
            if not external.is_external(tensor):
                continue
            if is_placeholder(where, tensor, arrays):
                data = np.ascontiguousarray(arrays[tensor.name]).tobytes()
            else:
                path = f"{where}.external_data"
                _require_base_dir(base_dir, path)
                data = external.read_tensor_data(tensor, base_dir, path)
            undo.tensors.append((tensor, [(e.key, e.value) for e in tensor.external_data]))
            tensor.raw_data = data
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
    except BaseException:
        undo.restore()
        raise
    return undo


@dataclasses.dataclass
class _Inlined:
    tensors: list[tuple[onnx.TensorProto, list[tuple[str, str]]]]

    def restore(self) -> None:
        for tensor, entries in self.tensors:
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in entries:
                tensor.external_data.add(key=key, value=value)
        self.tensors.clear()


def _folder_name(folder: str | os.PathLike) -> str:
    """The folder as onnxruntime's session config takes it (a UTF-8 string): a directory name that
    is not valid UTF-8 made it raise TypeError."""
    name = os.fspath(folder)
    try:
        name.encode()
    except UnicodeEncodeError:
        raise ValidationError(
            "",
            f"the model's directory {name!r} is not valid UTF-8: onnxruntime cannot be given it",
            code="invalid_utf8",
        ) from None
    return name
