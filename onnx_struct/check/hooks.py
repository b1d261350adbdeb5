"""install()/uninstall(): make onnx's own entry points struct-aware, reversibly.

Importing onnx_struct changes nothing; install() swaps ``onnx.checker.check_model`` (and
``onnx.shape_inference.infer_shapes``) for struct-aware wrappers, and uninstall()
puts the original function objects back. Models without struct parts (check/stock.py's one
cheap test) go to the originals unchanged, and fail there with onnx's own exceptions.
"""

from __future__ import annotations

import functools

import onnx

from onnx_struct import originals
from onnx_struct.check import stock
from onnx_struct.check.checker import check_model as struct_check
from onnx_struct.check.inference import infer_shapes as struct_infer
from onnx_struct.errors import ValidationError

# The forms tested for struct parts, as tuples: a union written in a call is built at each call.
_IN_MEMORY = (onnx.ModelProto, bytes)
_TESTED = (*_IN_MEMORY, str)


def _route(model, paths: bool = True) -> tuple[str, object]:
    """(PLAIN, the argument for the original) or (STRUCT, None), as check/stock.py classifies
    ``model``; a form or a file the original must judge itself (another
    type, a missing or unreadable path) is (PLAIN, model), so that stock onnx fails exactly as it
    fails on it."""
    if not isinstance(model, _TESTED) and not hasattr(model, "__fspath__"):
        return stock.PLAIN, model
    try:
        kind, form = stock.classify(model, paths=paths)
    except ValidationError:  # a path naming no regular file: onnx's own error for it
        return stock.PLAIN, model
    return (stock.PLAIN if kind == stock.UNPARSABLE else kind), form


def _wrap_check_model(original):
    @functools.wraps(original)
    def check_model(model, full_check=False, skip_opset_compatibility_check=False, check_custom_domain=False):
        kind, form = _route(model)
        if kind == stock.PLAIN:
            return stock.call_check_model(
                original, form, full_check, skip_opset_compatibility_check, check_custom_domain
            )
        return struct_check(
            model,
            full_check=full_check,
            skip_opset_compatibility_check=skip_opset_compatibility_check,
            check_custom_domain=check_custom_domain,
        )

    return check_model


def _wrap_infer_shapes(original):
    @functools.wraps(original)
    def infer_shapes(model, *args, **kwargs):
        kind, form = _route(model, paths=False) if isinstance(model, _IN_MEMORY) else (stock.PLAIN, model)
        if kind == stock.PLAIN:
            return original(form, *args, **kwargs)
        result = struct_infer(model, *args, **kwargs)  # onnx's check_type, strict_mode, data_prop
        return result.SerializeToString() if isinstance(model, bytes) else result

    return infer_shapes


def install() -> None:
    """Make ``onnx.checker.check_model`` (and ``onnx.shape_inference.infer_shapes``) struct-aware.

    Installing twice changes nothing; :func:`uninstall` restores onnx's own functions. Raises
    nothing itself: the installed functions raise ValidationError for an invalid model.
    """
    if originals.replaced():
        return
    originals.replace(
        check_model=_wrap_check_model(originals.check_model), infer_shapes=_wrap_infer_shapes(originals.infer_shapes)
    )


def uninstall() -> None:
    """Restore the exact original function objects replaced by :func:`install`.

    Without an :func:`install` before, nothing changes. Raises nothing.
    """
    originals.restore()


def installed() -> bool:
    return originals.replaced()
