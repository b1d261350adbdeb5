"""The calibration input of quantize's report (``--calibration FILE.npz``), read and matched to the
model's inputs before any work.

An ``.npz`` is read with ``allow_pickle=False`` (an object array would run code from the file);
such an entry, and an entry naming no input of the model, is a ValidationError naming the entry,
as is a required input (a graph input that is not an initializer) without an entry: onnxruntime
would refuse the feeds with a bare ValueError deep inside the report.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from onnx_struct.errors import ValidationError

__all__ = ["read_entries", "check_calibration"]


def read_entries(data: Mapping[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Every array of an open ``.npz`` (``np.load(..., allow_pickle=False)``), entry by entry."""
    entries = {}
    for name in data.files:
        try:
            entries[name] = data[name]
        except ValueError as error:  # an object array under allow_pickle=False, or a corrupt entry
            raise ValidationError("", f"calibration file {source}: entry {name!r}: {error}", code="invalid") from None
    return entries


def check_calibration(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], source: str) -> None:
    """Raise a ValidationError unless ``feeds`` has one array per required input of ``model``
    and nothing else (an overridable input, an initializer listed as an input, may be given)."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = [value.name for value in model.graph.input]
    required = [name for name in inputs if name not in initializers]
    for name, value in feeds.items():
        if name not in inputs:
            known = ", ".join(repr(n) for n in required) or "none"
            raise ValidationError(
                "",
                f"the calibration input ({source}): entry {name!r} names no input of the model (its inputs: {known})",
                code="invalid",
            )
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biufc":
            kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise ValidationError(
                "",
                f"the calibration input ({source}): entry {name!r} is not an array of numbers or booleans ({kind})",
                code="invalid",
            )
    missing = [name for name in required if name not in feeds]
    if missing:
        raise ValidationError(
            "", f"the calibration input ({source}): no entry for the model's input {missing[0]!r}", code="invalid"
        )
