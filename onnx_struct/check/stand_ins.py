"""onnx's checker over a view whose external tensors it would look for in the working directory.

Rule: onnx's verdict does not depend on where the caller stands, and no location a model chose is
created on disk. Each distinct location of a tensor outside the main graph's initializers is
renamed, in the view only, to a flat stand-in; the view is written into a new private directory
beside an empty file per stand-in and checked there. The real files are checked under the
model-directory rules by ``check_external_tensors`` (payload/external.py); no byte of them is read.

Notes: docs/modules.md.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable

import onnx
from google.protobuf.message import DecodeError

from onnx_struct.payload.external import is_external, is_main_initializer, model_tensors


def resolved_in_working_directory(tensors: Iterable[tuple[str, onnx.TensorProto]]) -> bool:
    """Whether onnx's checker would resolve any of these tensors against the working directory."""
    return any(is_external(tensor) and not is_main_initializer(where) for where, tensor in tensors)


def check_beside_stand_ins(check: Callable[..., None], view: bytes | onnx.ModelProto, **options) -> None:
    """``check(path, **options)`` on ``view`` with its external locations renamed to stand-ins
    that exist. Where no temporary directory can be written, ``check(view)`` as onnx would."""
    try:
        model = onnx.ModelProto.FromString(view) if isinstance(view, bytes) else _copy(view)
        temporary = tempfile.TemporaryDirectory(prefix="onnx_struct-check-", ignore_cleanup_errors=True)
    except (DecodeError, OSError):  # near protobuf's limits, no temporary directory: onnx's behaviour
        check(view, **options)
        return
    names: dict[str, str] = {}  # location -> stand-in, in document order (a stable verdict)
    for _, tensor in model_tensors(model):
        if is_external(tensor):
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = names.setdefault(entry.value, f"stand-in-{len(names)}.bin")
    with temporary as directory:
        try:
            for name in names.values():
                open(os.path.join(directory, name), "xb").close()
            descriptor, path = tempfile.mkstemp(suffix=".onnx", dir=directory)  # a name no stand-in has
            with open(descriptor, "wb") as file:
                file.write(model.SerializeToString())
        except OSError:  # a full temporary directory: onnx's own behaviour
            path = None
        check(path if path is not None else view, **options)


def _copy(view: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(view)
    return copy
