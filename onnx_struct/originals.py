"""onnx's own entry points, captured once and swapped only here.

``check_model`` and ``infer_shapes`` are onnx's functions as they were when onnx_struct was
imported (the package imports this module, so before any :func:`onnx_struct.install`). Code that
must run onnx's own checker or inference (on a plain model, on the stock view of a struct model, on
a decoder's body) calls them, never the attribute of onnx's module: after ``install()`` that is
the struct-aware wrapper, and calling it would route back into the struct checker.
:func:`replace` and :func:`restore` are install()'s and uninstall()'s swaps.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx.checker
import onnx.shape_inference

check_model = onnx.checker.check_model
infer_shapes = onnx.shape_inference.infer_shapes

_MODULES = {"check_model": onnx.checker, "infer_shapes": onnx.shape_inference}
_replaced: dict[str, Callable] = {}


def replace(**functions: Callable) -> None:
    """Put ``functions`` in place of onnx's entry points of the same names, keeping the function
    objects they replace for :func:`restore`; an entry point already replaced is left as it is.

    Args:
        functions: ``check_model=`` and/or ``infer_shapes=``.

    Raises:
        KeyError: a name that is not one of onnx's two entry points.
    """
    for name, function in functions.items():
        module = _MODULES[name]
        if name not in _replaced:
            _replaced[name] = getattr(module, name)
            setattr(module, name, function)


def restore() -> None:
    """Put back the exact function objects :func:`replace` replaced (nothing when none are)."""
    for name in list(_replaced):
        setattr(_MODULES[name], name, _replaced.pop(name))


def replaced() -> bool:
    """Whether onnx's entry points are replaced (between :func:`replace` and :func:`restore`)."""
    return bool(_replaced)
