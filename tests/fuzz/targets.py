"""The fuzz targets and the one acceptance rule: a target may succeed or raise
``onnx_struct.ValidationError``; anything else it raises is an escape (a finding).

Each target takes a materialized :class:`~fuzz.cases.Case` (its model path). Some targets also
check an oracle after success: ``validate`` returns only ValidationErrors, ``view`` reads every
leaf and never succeeds on a payload outside the model directory, ``lower``'s result passes
``onnx.checker`` (a model without struct parts: it is the model as given, checked or not, as
stock onnx has nothing to lower; docs/semantics.md, "Drop-in behaviour").
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

import onnx_struct as S
from onnx_struct.schema.plain import has_struct_parts

try:
    from fuzz.cases import Case
except ImportError:  # pragma: no cover - run as a script from tests/fuzz
    from cases import Case


class OracleFailure(AssertionError):
    """A target returned, but with a result that breaks a rule (also a finding)."""


def check_model(case: Case, path: Path) -> None:
    S.check_model(path, full_check=case.full_check)


def validate(case: Case, path: Path) -> None:
    diagnostics = S.validate(path, full_check=case.full_check)
    for diagnostic in diagnostics:
        if not isinstance(diagnostic, S.ValidationError) or not str(diagnostic):
            raise OracleFailure(f"validate returned {type(diagnostic).__name__}: {diagnostic!r}")


def view(case: Case, path: Path) -> None:
    if case.value is None:
        return
    viewed = S.view(case.value, path)
    viewed.leaves()
    if case.value_leaves_dir:
        raise OracleFailure("view read a payload whose location leaves the model directory")


def decode(case: Case, path: Path) -> None:
    if case.value is None:
        return
    S.decode(case.value, path)


def lower(case: Case, path: Path) -> None:
    lowered = S.lower(path)
    given = path.read_bytes()
    if has_struct_parts(given) is False:
        if lowered.SerializeToString() != onnx.ModelProto.FromString(given).SerializeToString():
            raise OracleFailure("lower changed a model without struct parts")
        return
    beside = path.with_name("lowered.onnx")  # its external references are relative to the model's directory
    beside.write_bytes(lowered.SerializeToString())
    try:
        onnx.checker.check_model(str(beside))
    except onnx.checker.ValidationError as error:
        raise OracleFailure(f"the lowered model fails onnx.checker: {str(error)[:300]}") from None


def infer_shapes(case: Case, path: Path) -> None:
    S.infer_shapes(path, data_prop=case.full_check)


def from_gguf(case: Case, path: Path) -> None:
    try:  # the GGUF target proper (tests/fuzz/targets_gguf.py), when present
        from fuzz.targets_gguf import fuzz_from_gguf
    except ImportError:
        fuzz_from_gguf = _from_gguf_minimal
    fuzz_from_gguf(case.gguf or b"")


def _from_gguf_minimal(data: bytes) -> None:
    """Convert ``data`` as a .gguf inline and by reference; each accepted model must pass the check."""
    from onnx_struct.convert import convert

    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "input.gguf"
        source.write_bytes(data)
        for reference in (False, True):
            try:
                model = convert(source, reference=reference, keep_unknown=reference)
            except S.ValidationError:
                continue
            try:
                S.check_model(model.SerializeToString(), base_dir=directory)
            except S.ValidationError as error:
                raise OracleFailure(f"from-gguf wrote a model check_model rejects: {error}") from None


TARGETS: dict[str, Callable[[Case, Path], None]] = {
    "check_model": check_model,
    "validate": validate,
    "view": view,
    "decode": decode,
    "lower": lower,
    "infer_shapes": infer_shapes,
    "from_gguf": from_gguf,
}


def is_accepted(error: BaseException) -> bool:
    """The only exception a target may let out."""
    return isinstance(error, S.ValidationError) and not isinstance(error, OracleFailure)
