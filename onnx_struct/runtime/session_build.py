"""What a session does that a cache hit skips: the model loaded and checked, lowered, its
quantized weights repacked and delivered to onnxruntime, and the cache entry written
(runtime/session.py calls :func:`build` on a miss). A module apart, so that a cached start imports
none of the checker, the lowering or the formats."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Sequence
from typing import Any

import onnx

from onnx_struct.check.checked import checked_model
from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import element_label
from onnx_struct.limits import PROTOBUF_LIMIT
from onnx_struct.lowering.lower import StructInput, lower_checked, lower_model
from onnx_struct.lowering.scope import has_struct_parts
from onnx_struct.runtime import session_cache
from onnx_struct.runtime.delivery import deliver, deliver_into
from onnx_struct.runtime.file_backed import held_lightly, inline_own_file_tensors
from onnx_struct.runtime.ort import load_refusal, ort_errors, refusal_class
from onnx_struct.schema.model import ModelLike, StructTypeProto, load


@dataclasses.dataclass
class Built:
    """The session a miss made and what :class:`~onnx_struct.runtime.session.InferenceSession`
    keeps of it."""

    session: Any  # onnxruntime.InferenceSession
    recreatable: bool  # whether onnxruntime may re-create it (self-contained model bytes)
    lowered: onnx.ModelProto
    base_dir: Any
    declarations: list[StructTypeProto]
    struct_inputs: dict[str, StructInput]


def build(
    ort,
    model_or_path: ModelLike,
    handed: list,
    cache: session_cache.CacheSlot | None,
    *,
    base_dir,
    compact: bool,
    execution: str,
    accuracy_level: int | None,
    in_memory: bool,
    saves_graph: bool,
    sess_options,
    providers: Sequence[str] | None,
    ort_kwargs: dict,
    threads: int | None,
) -> Built:
    """The session of ``model_or_path`` (``handed``: the one-element list of the bytes the cache
    key hashed, or of None; emptied here, so that only the loaded model holds them), written to
    ``cache``'s new entry where it can be kept."""
    try:  # a miss parses the bytes its key hashed: the file is read once, and what is kept is what was hashed
        loaded = load(model_or_path, base_dir, serialized=handed.pop())
    except ValidationError as error:  # also onnxruntime's class for the same refusal of the file
        raise load_refusal(error) from None
    model_dir = loaded.base_dir  # the directory its external files are read from
    # The referenced files as they are before the check reads them (session_cache.referenced_files).
    referenced = session_cache.referenced_files(loaded) if cache is not None else []
    if referenced is None:
        cache = None
    owned = loaded is not model_or_path  # read or parsed here: nobody else holds it
    model_file = model_or_path if isinstance(model_or_path, (str, os.PathLike)) else None

    # The quantized weights' MatMulNBits nodes are emitted directly (what onnxruntime's fusion
    # would make of DequantizeLinear + MatMul, at its default accuracy level 4) and their
    # repacked arrays handed to onnxruntime outside the model bytes (docs/execution.md,
    # "Memory"), with or without a caller's options: those are never changed (runtime/delivery.py).
    backed = False  # whether the checked model was made file-backed
    declarations: list[StructTypeProto] = []
    if not has_struct_parts(loaded):
        cache = None  # onnxruntime loads it as it is: nothing to keep
        lowering = lower_model(loaded)  # as given: onnxruntime judges it
    else:
        # The stock part is onnxruntime's to judge (docs/semantics.md). The table is built over
        # standalone copies of the declarations: a message parsed with the model keeps the
        # whole parse (inline payloads included) alive for as long as it is referenced.
        checked = checked_model(loaded, stock_check=False, standalone=True)
        declarations = checked.table.declarations
        if owned:  # read or parsed here: hold less while the weights are repacked
            lighter = held_lightly(checked.loaded, model_file)  # runtime/file_backed.py
            backed = lighter is not checked.loaded
            checked = checked.replaced(lighter)
        lowering = lower_checked(
            checked,
            compact=compact,
            execution=execution,
            accuracy_level=(4 if accuracy_level is None else int(accuracy_level)) if in_memory else None,
            in_memory=in_memory,
        )
        del checked
    arrays = lowering.arrays
    if lowering.struct_inputs:
        cache = None  # split through the lowering's views at run time: not cached
    del loaded  # a model read from a file holds its bytes and inline payloads: not needed any more
    struct_inputs: dict[str, StructInput] = {
        name: dataclasses.replace(info, declaration=StructTypeProto.FromString(info.declaration.SerializeToString()))
        for name, info in lowering.struct_inputs.items()
    }
    if backed:
        inline_own_file_tensors(lowering.model, model_dir, model_file)
    lowered = lowering.model
    _refuse_unnameable_signature(lowering.model.graph)
    if lowering.model.ByteSize() > PROTOBUF_LIMIT:
        raise ValidationError(
            "",
            "the lowered model exceeds protobuf's 2 GiB limit; store the struct payloads externally "
            "(save_with_external_data) so that their leaves are referenced, not copied",
            code="limit_exceeded",
            actual=lowering.model.ByteSize(),
            limit=PROTOBUF_LIMIT,
        )
    entry = None
    try:
        delivery = (ort, lowering.model, arrays, model_dir, sess_options, providers, ort_kwargs)
        entry = cache.new_directory() if cache is not None else None
        if entry is not None and saves_graph:  # onnxruntime saves its graph into the entry
            saved = os.path.join(entry, session_cache.MODEL_FILE)
            session, recreatable = deliver(*delivery, threads=threads, save_to=saved)
            session_cache.publish_saved_graph(cache, entry, lowering.model, referenced)
        else:
            session = deliver_into(*delivery, entry, threads) if entry is not None else None
            recreatable = False
            if session is not None:  # the lowered model's entry: published once the session exists
                cache.publish(entry, referenced)
            else:  # no cache, or an entry that could not be written: the session without it
                session, recreatable = deliver(*delivery, threads=threads)
    except ort_errors() as error:  # e.g. a decoder needing a kernel onnxruntime lacks (FLOAT4E2M1 Cast)
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        what, hint = "the model", ""
        if lowering.has_decoders:
            what = "the lowered model"
            hint = " (onnx_struct.decode falls back to onnx's reference evaluator for such decoders)"
        raise refusal_class(type(error))(
            _refused_tensor(lowering.model.graph, message),
            f"onnxruntime {ort.__version__} cannot load {what}: {message}{hint}",
            code="runtime_failure",
        ) from None
    finally:
        arrays.clear()  # the Python copies go now; only onnxruntime's remain
        if entry is not None:  # an entry not published (a failure, no room): nothing left of it
            shutil.rmtree(entry, ignore_errors=True)
    return Built(session, recreatable, lowered, model_dir, declarations, struct_inputs)


def _refuse_unnameable_signature(graph) -> None:
    """onnxruntime creates a session whose input or output name is not valid UTF-8, and its
    Python API then fails on every run (UnicodeDecodeError reading the names): refused here."""
    for kind in ("input", "output"):
        for i, info in enumerate(getattr(graph, kind)):
            if not isinstance(info.name, str):
                raise ValidationError(
                    f"graph.{kind}[{i}] ({info.name!r}).name",
                    "name is not valid UTF-8: onnxruntime's Python API cannot feed or fetch it",
                    code="invalid_utf8",
                )


# onnxruntime names the tensor it refuses: "TensorProto: W external data size mismatch",
# "Deserialize tensor W failed".
_TENSOR_IN_MESSAGE = re.compile(r"(?:TensorProto:|[Tt]ensor)\s+'?([^\s':]+)'?")


def _refused_tensor(graph: onnx.GraphProto, message: str) -> str:
    """The path of the main-graph initializer onnxruntime's refusal ``message`` names ("" if none):
    ``graph.initializer[3] ('W')``, with ``.external_data`` when the refusal is about its external data."""
    positions = {tensor.name: i for i, tensor in enumerate(graph.initializer)}
    for name in _TENSOR_IN_MESSAGE.findall(message):
        if name in positions:
            path = element_label(f"graph.initializer[{positions[name]}]", name)
            return path + (".external_data" if "external data" in message else "")
    return ""
