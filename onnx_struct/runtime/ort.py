"""The package's one door to onnxruntime: the deferred import and what the installed release supports.

Every other module reaches onnxruntime through :func:`load_onnxruntime`, so ``import onnx_struct``
and ``onnx-struct --help`` never load it (tested in a subprocess), and the layering test can name
this file as the only importer.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto, helper

from onnx_struct.errors import ModelFileNotFoundError, ModelValueError, NotRegularFileError, ValidationError


def load_onnxruntime():
    """onnxruntime, imported on first use so that ``import onnx_struct`` never loads it."""
    import onnxruntime  # noqa: PLC0415, TID251 - the package's only import of onnxruntime, deferred

    return onnxruntime


# ---------------------------------------------------------------------- what onnxruntime supports
@functools.cache
def ort_limits() -> tuple[int, int]:
    """(highest IR version, highest default-domain opset) the installed onnxruntime loads.

    Found by loading a one-node model at decreasing versions, starting at what the installed onnx
    writes, since onnxruntime publishes no API for either number.
    """
    ort = load_onnxruntime()

    def loads(ir_version: int, opset: int) -> bool:
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "probe",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
        try:
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime raises its own exception classes for either refusal
            return False
        return True

    ir_version = next((v for v in range(onnx.IR_VERSION, 6, -1) if loads(v, 13)), 7)
    opset = next((v for v in range(onnx.defs.onnx_opset_version(), 12, -1) if loads(ir_version, v)), 13)
    return ir_version, opset


def ort_version() -> str:
    return load_onnxruntime().__version__


@functools.cache
def ort_errors() -> tuple[type[BaseException], ...]:
    """onnxruntime's exception classes (they derive from Exception only, not RuntimeError)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415, TID251

    names = ("Fail", "InvalidGraph", "NotImplemented", "InvalidArgument", "RuntimeException", "EPFail")
    return tuple(getattr(state, n) for n in names if hasattr(state, n))


@functools.cache
def ort_file_errors() -> tuple[type[BaseException], ...]:
    """:func:`ort_errors` and onnxruntime's classes for a model file it cannot read or parse."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415, TID251

    return ort_errors() + tuple(getattr(state, n) for n in ("NoSuchFile", "InvalidProtobuf") if hasattr(state, n))


# The onnx_struct classes a refusal may also be (the dual classes of docs/errors.md), by name.
_BASES = {cls.__name__: cls for cls in (ValidationError, ModelFileNotFoundError, NotRegularFileError, ModelValueError)}
# What onnxruntime raises where loading the model file fails: the class each of our load refusals
# is also, so that a caller's ``except`` for onnxruntime's class keeps catching it.
_LOAD_REFUSALS = (
    (ModelFileNotFoundError, "NoSuchFile"),
    (NotRegularFileError, "InvalidProtobuf"),
    (ModelValueError, "InvalidProtobuf"),
)


def _ort_class(name: str) -> type[BaseException]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415, TID251

    return getattr(state, name)


@functools.cache
def refusal_class(ort_class: type[BaseException], base: type[ValidationError] = ValidationError) -> type:
    """A ``base`` (a :class:`ValidationError`) that is also onnxruntime's ``ort_class``: what
    ``InferenceSession`` raises when onnxruntime refuses a model, or where onnxruntime would have
    refused its file, so that a caller's ``except`` clause for either keeps working (the session
    stands where onnxruntime's stood)."""
    return type(ort_class.__name__, (base, ort_class), {"__module__": __name__, "__reduce__": _reduce})


def load_refusal(error: ValidationError) -> ValidationError:
    """``error``, raised loading a model file, as the dual class of onnxruntime's refusal of that
    file (missing: NoSuchFile; unparsable or a directory: InvalidProtobuf; empty: InvalidArgument);
    other errors unchanged."""
    name = next((n for cls, n in _LOAD_REFUSALS if type(error) is cls), None)
    if name is None and type(error) is ValidationError and error.code == "not_parsable":
        name = "InvalidArgument"  # an empty file
    if name is None:
        return error
    return refusal_class(_ort_class(name), type(error))(error.path, error.reason, code=error.code, **error.details)


def _reduce(error: ValidationError):
    base = next(c for c in type(error).__mro__[1:] if c.__name__ in _BASES)
    return (_rebuild, (type(error).__name__, base.__name__, error.path, error.reason, error.details, error.code))


def _rebuild(name: str, base: str, path: str, reason: str, details: dict, code: str) -> ValidationError:
    return refusal_class(_ort_class(name), _BASES[base])(path, reason, code=code, **details)
