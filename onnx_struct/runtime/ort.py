"""The package's one door to onnxruntime: the deferred import and what the installed release supports.

Every other module reaches onnxruntime through :func:`load_onnxruntime`, so ``import onnx_struct``
and ``onnx-struct --help`` never load it (tested in a subprocess), and the layering test can name
this file as the only importer.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto, helper

from onnx_struct.errors import ValidationError


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
def refusal_class(ort_class: type[BaseException]) -> type[ValidationError]:
    """A :class:`ValidationError` that is also onnxruntime's ``ort_class``: what
    ``InferenceSession`` raises when onnxruntime refuses a model, so that a caller's ``except``
    clause for either keeps working (the session stands where onnxruntime's stood)."""
    return type(ort_class.__name__, (ValidationError, ort_class), {"__module__": __name__, "__reduce__": _reduce})


def _reduce(error: ValidationError):
    return (_rebuild, (type(error).__name__, error.path, error.reason, error.details, error.code))


def _rebuild(name: str, path: str, reason: str, details: dict, code: str) -> ValidationError:
    (ort_class,) = [c for c in ort_errors() if c.__name__ == name]
    return refusal_class(ort_class)(path, reason, code=code, **details)
