"""onnx-ir and the onnxscript optimizer with struct parts kept (the ``ir`` extra).

onnx-ir's serde reads only the fields onnx declares, so a struct model's parts (unknown fields)
vanish in ``onnx_ir.load``/``serde``. :func:`to_ir` hands onnx-ir the carried form
(:mod:`onnx_struct.ecosystem.carried`: each struct value a graph input of its logical type,
the value's record in that input's ``metadata_props``, the declarations in the model's), which
onnx-ir and its passes keep; :func:`from_ir` restores the parts, renamed as the passes renamed
the inputs, dropped where the passes dropped every user.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import onnx

from onnx_struct.ecosystem.carried import carry, restore

if TYPE_CHECKING:  # the ir extra: annotations only, imported on use
    import onnx_ir

_INSTALL = "pip install 'onnx-struct[ir]'"


def _onnx_ir():
    try:
        import onnx_ir  # noqa: PLC0415 - the ir extra, imported on use
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"onnx_struct.ecosystem.ir needs onnx-ir: {_INSTALL}", name=error.name) from None
    return onnx_ir


def to_ir(model: onnx.ModelProto) -> onnx_ir.Model:
    """An ``onnx_ir.Model`` of ``model`` that keeps its struct parts (carried, see the module docstring).

    Args:
        model: a stock ``onnx.ModelProto`` with struct parts.

    Returns:
        The ``onnx_ir.Model``; :func:`from_ir` gives the struct model back.

    Raises:
        ValidationError: the model's struct parts cannot be carried (a struct value named as a
            graph input or initializer).
        ModuleNotFoundError: onnx-ir is not installed (``pip install 'onnx-struct[ir]'``).
    """
    return _onnx_ir().serde.deserialize_model(carry(model))


def from_ir(ir_model: onnx_ir.Model) -> onnx.ModelProto:
    """The struct model of an ``onnx_ir.Model`` made by :func:`to_ir` (after any passes).

    Args:
        ir_model: the ``onnx_ir.Model``.

    Returns:
        A stock ``onnx.ModelProto`` with its struct parts.

    Raises:
        ValidationError: the carried records were altered.
    """
    return restore(_onnx_ir().serde.serialize_model(ir_model))


def load(path: str | os.PathLike) -> onnx_ir.Model:
    """``onnx_ir.load`` that keeps struct parts: the file's model as :func:`to_ir` gives it.

    Args:
        path: the .onnx file; external tensors are read from its directory when used.

    Returns:
        The ``onnx_ir.Model``.

    Raises:
        ValidationError: as for :func:`to_ir`.
    """
    onnx_ir = _onnx_ir()
    ir_model = to_ir(onnx.load(path, load_external_data=False))
    onnx_ir.external_data.set_base_dir(ir_model.graph, os.path.dirname(os.fspath(path)))
    return ir_model


def save(ir_model: onnx_ir.Model, path: str | os.PathLike) -> None:
    """``onnx_ir.save`` that keeps struct parts: :func:`from_ir`'s model written to ``path``.

    External tensors and payloads keep their references (relative to the directory the model was
    loaded from): save beside them.

    Args:
        ir_model: an ``onnx_ir.Model`` from :func:`to_ir` or :func:`load`.
        path: where to write the .onnx file.

    Raises:
        ValidationError: as for :func:`from_ir`.
    """
    onnx.save(from_ir(ir_model), path)


def optimize(model: onnx.ModelProto, **options: object) -> onnx.ModelProto:
    """``onnxscript.optimizer.optimize`` on a struct model, its struct parts kept.

    Args:
        model: a stock ``onnx.ModelProto`` with struct parts.
        **options: passed to ``onnxscript.optimizer.optimize`` (``num_iterations``,
            ``onnx_shape_inference``, ...).

    Returns:
        The optimized struct model (a new ``onnx.ModelProto``).

    Raises:
        ValidationError: as for :func:`to_ir`.
        ModuleNotFoundError: onnxscript is not installed.
    """
    try:
        import onnxscript.optimizer  # noqa: PLC0415 - the ir extra, imported on use
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"optimize needs onnxscript: {_INSTALL}", name=error.name) from None

    ir_model = to_ir(model)
    onnxscript.optimizer.optimize(ir_model, **options)
    return from_ir(ir_model)
