"""onnx's checker over a view whose external tensors it would look for in the working directory.

Given a model's bytes, ``onnx.checker.check_model`` resolves every external tensor's location
against the process's current directory (it has no other) and checks only that a regular file is
there. The main graph's external initializers are shown to it as graph inputs (projections.py);
tensors elsewhere (Constant attributes, subgraph initializers, model functions, training graphs)
cannot be. For a model with such tensors the view is written into a new private directory beside
an empty stand-in file per location, and onnx's checker is given that path, so its verdict does
not depend on where the caller stands. The files themselves are checked under the model-directory
rules by ``check_external_tensors`` (payload/external.py); no byte of them is read here.
"""

from __future__ import annotations

import os
import pathlib
import tempfile
from collections.abc import Callable, Iterable

import onnx


def locations_outside_main_initializers(tensors: Iterable[tuple[str, onnx.TensorProto]]) -> set[str]:
    """The external locations onnx's checker would resolve against the working directory."""
    return {
        entry.value
        for where, tensor in tensors
        if tensor.data_location == onnx.TensorProto.EXTERNAL and not where.startswith("graph.initializer[")
        for entry in tensor.external_data
        if entry.key == "location"
    }


def check_beside_stand_ins(
    check: Callable[..., None], view: bytes | onnx.ModelProto, locations: Iterable[str], **options
) -> None:
    """``check(path, **options)`` on ``view`` written beside an empty file per location."""
    with tempfile.TemporaryDirectory(prefix="onnx_struct-check-") as directory:
        root = pathlib.Path(directory).resolve()
        for location in locations:
            _stand_in(root, location)
        descriptor, path = tempfile.mkstemp(suffix=".onnx", dir=root)  # a name no location took
        with open(descriptor, "wb") as file:
            file.write(view if isinstance(view, bytes) else view.SerializeToString())
        check(path, **options)


def _stand_in(root: pathlib.Path, location: str) -> None:
    # Locations onnx refuses by itself (absolute, '..', empty) get none: its verdict stays its own.
    parts = pathlib.PurePath(location).parts
    if not location or "\x00" in location or os.path.isabs(location) or ".." in parts:
        return
    target = root / location
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.parent.resolve().is_relative_to(root):
            target.touch(exist_ok=True)
    except (OSError, ValueError):  # "a" and "a/b", too long a name: onnx finds no file there
        return
