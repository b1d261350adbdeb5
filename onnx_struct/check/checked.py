"""CheckedModel: a model loaded and checked once, with what checking built, handed down.

Lowering, the runtime and the passes receive this object instead of a model form, so that the
model is parsed and checked once and its declaration table (sizes, leaves, root layouts and
failures memoized) and logical types are built once, whoever asks next.
"""

from __future__ import annotations

import functools
import os

from onnx_struct.check import checker
from onnx_struct.check.inference import LogicalTypes
from onnx_struct.layout.table import TypeTable, element_label
from onnx_struct.payload.values import ResolvedValue, resolve_value
from onnx_struct.schema.model import LoadedModel, ModelLike, StructTypeProto, load


class CheckedModel:
    """A model that passed the check, its :class:`TypeTable`, logical types and value resolution.

    ``stock_checked`` says whether onnx's checker judged the stock part too (``check_model``) or
    only the struct parts and file-safety rules were checked (``check_struct_parts``).
    """

    def __init__(self, loaded: LoadedModel, table: TypeTable, *, stock_checked: bool) -> None:
        self.loaded = loaded
        self.table = table
        self.stock_checked = stock_checked

    @functools.cached_property
    def types(self) -> LogicalTypes:
        """The logical types of the declarations, memoized, on the model's table."""
        return LogicalTypes(self.loaded, self.table)

    def resolved(self, index: int, where: str) -> ResolvedValue:
        """``loaded.struct_values[index]`` resolved on the model's table (its root layout is
        memoized there). Not kept: an inline payload read from protobuf is a copy, held only
        while its caller uses it."""
        return resolve_value(self.loaded.struct_values[index], self.loaded, where=where, table=self.table)

    def resolved_named(self, name: str) -> ResolvedValue:
        """The struct value named ``name`` resolved (an unknown name raises, listing the known ones)."""
        index = self.loaded.find_value(name)[0]
        return self.resolved(index, element_label(f"graph.struct_initializer[{index}]", name))

    def replaced(self, loaded: LoadedModel) -> CheckedModel:
        """The same check for ``loaded``, an equivalent model with the same declarations in the
        same order (a lighter copy, or the quantized-execution rewrite): the table and the
        logical types are kept (they depend on the declarations alone); the values may have moved."""
        other = CheckedModel(loaded, self.table, stock_checked=self.stock_checked)
        if "types" in self.__dict__:  # computed already (functools.cached_property's slot)
            other.__dict__["types"] = self.types
        return other


def standalone_table(loaded: LoadedModel) -> TypeTable:
    """A table over copies of ``loaded``'s declarations: it keeps no part of the model's parse
    alive, so the model can be replaced by a lighter equivalent (``InferenceSession``)."""
    return TypeTable([StructTypeProto.FromString(d.SerializeToString()) for d in loaded.struct_types])


def checked_model(
    model: ModelLike | LoadedModel,
    *,
    base_dir: str | os.PathLike | None = None,
    stock_check: bool = True,
    standalone: bool = False,
) -> CheckedModel:
    """Load and check ``model`` once; raise the first :class:`ValidationError` found.

    Args:
        model: any model form :func:`onnx_struct.schema.model.load` accepts, or a LoadedModel.
        base_dir: the directory external payloads are resolved against.
        stock_check: run onnx's checker on the stock part (``check_model``); False checks the
            struct parts and the file-safety rules only (``check_struct_parts``).
        standalone: build the table over copies of the declarations (see :func:`standalone_table`).

    Returns:
        The CheckedModel holding the loaded model and the table the check built.

    Raises:
        ValidationError: the model is invalid, as ``check_model`` or ``check_struct_parts`` raise it.
    """
    loaded = load(model, base_dir)
    loaded.proto  # noqa: B018 - parsed whole (the check reads it all): the table holds its declarations
    table = standalone_table(loaded) if standalone else TypeTable(loaded.struct_types)
    checker.check_loaded(loaded, table, stock_check=stock_check)
    return CheckedModel(loaded, table, stock_checked=stock_check)


__all__ = ["CheckedModel", "checked_model", "standalone_table"]
