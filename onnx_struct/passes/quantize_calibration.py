"""The calibration input of quantize's report (``--calibration FILE.npz``), read and matched to the
model's inputs before any work.

An ``.npz`` is read with ``allow_pickle=False`` (an object array would run code from the file);
such an entry, and an entry naming no input of the model, is a ValidationError naming the entry,
as is a required input (a graph input that is not an initializer) without an entry: onnxruntime
would refuse the feeds with a bare ValueError deep inside the report. numpy allocates an entry's
array from the shape its header states before reading a byte, and inflates deflated entries
whole, so the archive's inflated size (limits.MAX_CALIBRATION_BYTES) and each header's shape
(against the bytes its entry inflates to) are checked before any entry is read.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Mapping

import numpy as np
import onnx

from onnx_struct import limits
from onnx_struct.errors import ValidationError

__all__ = ["read_entries", "check_calibration", "native_order"]


def read_entries(data: np.lib.npyio.NpzFile, source: str) -> dict[str, np.ndarray]:
    """Every array of an open ``.npz`` (``np.load(..., allow_pickle=False)``), entry by entry,
    once the archive's sizes are checked (:func:`_check_sizes`)."""
    try:
        _check_sizes(data, source)
    # a damaged local header, or a compression method zipfile does not implement (AES: 99)
    except (zipfile.BadZipFile, EOFError, NotImplementedError) as error:
        raise ValidationError("", f"calibration file {source}: {error}", code="invalid") from None
    entries = {}
    for name in data.files:
        try:
            entries[name] = data[name]
        # an object array under allow_pickle=False, a corrupt entry, or bytes whose CRC-32 (checked
        # by zipfile at the entry's end) differs
        except (ValueError, zipfile.BadZipFile, EOFError, NotImplementedError) as error:
            raise ValidationError("", f"calibration file {source}: entry {name!r}: {error}", code="invalid") from None
    return entries


def _check_sizes(data: np.lib.npyio.NpzFile, source: str) -> None:
    """Refuse an archive inflating past limits.MAX_CALIBRATION_BYTES, and an entry whose header
    states a shape of more bytes than the entry holds (numpy would allocate it first)."""
    members = data.zip.infolist()
    inflated = sum(member.file_size for member in members)
    if inflated > limits.MAX_CALIBRATION_BYTES:
        raise ValidationError(
            "",
            f"calibration file {source}: its entries inflate to {inflated} bytes, past "
            f"{limits.MAX_CALIBRATION_BYTES} (limits.MAX_CALIBRATION_BYTES)",
            code="invalid",
        )
    for member in members:
        name = member.filename.removesuffix(".npy")
        if member.flag_bits & 0x1:  # zipfile would raise a bare RuntimeError (a password is needed)
            raise ValidationError("", f"calibration file {source}: entry {name!r} is encrypted", code="invalid")
        with data.zip.open(member) as handle:
            if handle.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
                continue  # not an array: numpy returns its bytes, which check_calibration refuses
            handle.seek(0)
            try:
                version = np.lib.format.read_magic(handle)
                # Versions 2.0 and 3.0 differ only in the header's text encoding.
                read_header = (
                    np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(handle)
            except ValueError as error:
                raise ValidationError(
                    "", f"calibration file {source}: entry {name!r}: {error}", code="invalid"
                ) from None
            stated = math.prod(shape) * dtype.itemsize
            if stated > member.file_size:
                raise ValidationError(
                    "",
                    f"calibration file {source}: entry {name!r}: its header states shape {shape} of {dtype} "
                    f"({stated} bytes) but the entry holds {member.file_size} bytes",
                    code="invalid",
                )


def native_order(value: object) -> object:
    """An array in the machine's byte order (a copy when it is not: ``np.savez`` keeps a
    big-endian ``>f4`` as it is, and onnxruntime would read its bytes as little-endian numbers);
    anything else as given (:func:`check_calibration` refuses it)."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    return value


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
        # Complex arrays too are refused: onnxruntime takes no numpy complex feed (a bare RuntimeError).
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
            raise ValidationError(
                "",
                f"the calibration input ({source}): entry {name!r} is not an array of real numbers or booleans ({kind})",
                code="invalid",
            )
        if value.size == 0:  # every error would be 0% of nothing
            raise ValidationError(
                "",
                f"the calibration input ({source}): entry {name!r} holds no element (shape {list(value.shape)}); "
                "the errors would be measured on nothing",
                code="invalid",
            )
    missing = [name for name in required if name not in feeds]
    if missing:
        raise ValidationError(
            "", f"the calibration input ({source}): no entry for the model's input {missing[0]!r}", code="invalid"
        )
