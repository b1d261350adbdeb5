"""The proposal's rules as path-bearing diagnostics: ``check_model`` raises the first,
``validate`` returns all of them. No payload byte is read; external files are only ``stat``-ed,
except the sampled bytes of a file the model records (payload/file_identity.py).

The parts stock ONNX understands are checked by ``onnx.checker.check_model`` itself, on a view
of the model it accepts: struct types shown as Opaque types, struct values as defined names.
"""

from __future__ import annotations

import functools
import os

import onnx
import onnx.checker

from onnx_struct import originals
from onnx_struct.check import inference, lost_parts, stock
from onnx_struct.check.declaration_rules import CONCRETE_KINDS
from onnx_struct.check.graph_rules import GraphRules
from onnx_struct.check.reporting import DISABLED_CODES, FirstFound
from onnx_struct.check.stand_ins import check_beside_stand_ins, resolved_in_working_directory
from onnx_struct.errors import ModelValueError, ValidationError, from_stock
from onnx_struct.layout.table import TypeTable, element_label
from onnx_struct.payload import external, file_identity
from onnx_struct.payload import values as resolver
from onnx_struct.schema import utf8, wire
from onnx_struct.schema.model import LoadedModel, ModelLike, StructTypeProto, accepted_form, load
from onnx_struct.schema.projections import (
    checker_view,
    stock_view,
)
from onnx_struct.schema.walk import graph_parts


class _Checker(GraphRules):
    """One check of one model: the declaration and graph rules (check/declaration_rules.py,
    check/graph_rules.py), the value rules here, then onnx's own checker on the stock view."""

    def __init__(self, loaded: LoadedModel, stock_options: dict | None = None, table: TypeTable | None = None) -> None:
        super().__init__()
        self.stock_options = stock_options or {}  # onnx checker flags, passed through
        self.loaded = loaded
        self.proto = loaded.proto
        self.table = table if table is not None else TypeTable(loaded.struct_types)
        self.value_names: dict[str, StructTypeProto | None] = {}
        # Every main-graph value holds only type, raw_data and a UTF-8 name (all_plain proved it).
        self.values_plain = False
        graph = self.proto.graph
        # The wire scan first: besides what the parse hid, it tells which main-graph nodes may have
        # attributes and which struct values hold exactly type, raw_data and name, so that neither
        # the walk nor the value rules read the others one message at a time (docs/benchmarks.md).
        data = loaded.serialized
        if data is None:  # an overlay object: a oneof's lost member is gone, wrong wire types are not
            data = self.proto.SerializeToString()
        self.scan = wire.scan_model(data, (len(graph.node), len(graph.struct_initializer)))
        self.main_nodes = self.scan.nodes if self.scan.node_count == len(graph.node) else None
        # One walk collects every place a struct part can be below the model-level ones.
        self.graphs, self.struct_type_protos = graph_parts(self.proto, self.main_nodes)
        external = onnx.TensorProto.EXTERNAL
        self.external_initializers = [i for i, t in enumerate(graph.initializer) if t.data_location == external]
        self.needs_stand_ins = False  # check_external_tensors: see check/stand_ins.py

    @functools.cached_property
    def values(self) -> list:
        # list(): iterating a upb repeated field directly costs more per element (docs/benchmarks.md), and
        # reusing the element objects makes every later read of them cheaper.
        return list(self.proto.graph.struct_initializer)

    def run(self, full_check: bool, first_only: bool = False) -> list[ValidationError]:
        if first_only and self.scan.error is not None:
            return [self.scan.error]  # reported first whatever else is found (check_wire)
        self.first_only = first_only
        try:
            self.run_rules(full_check)
        except FirstFound:  # only check_wire puts a diagnostic first; the scan found none here
            pass
        return self.diagnostics

    def run_rules(self, full_check: bool) -> None:
        # Links at locations whose identity the model records are followed once verified
        # (external.resolve, docs/security.md "Links"): admitted before any reference is resolved.
        self.attempt(file_identity.admit_recorded_links, self.proto.metadata_props, self.loaded.base_dir)
        # The table's declarations: the model's own, or their standalone copies (check/checked.py).
        for i, declaration in enumerate(self.table.declarations):
            self.check_root(declaration, self.table.path(i), i)
        self.check_values()
        self.check_wire()
        self.check_external_tensors()
        if not self.diagnostics:  # the references are valid: the files they name can be read
            self.check_referenced_files()
        self.check_graph_rules()
        if not self.diagnostics:  # after the rules, which name the strings they bind more precisely
            self.check_strings()
        if not self.diagnostics:  # onnx's findings only count on a model that follows the proposal
            self.check_stock(full_check)

    def check_strings(self) -> None:
        """Every string in the model is UTF-8 (schema/utf8.py): what passes the check never hands
        ``bytes`` to code that expects a name, whichever field it is in."""
        try:
            utf8.check_model_utf8(self.loaded, plain_values=self.values_plain)
        except ValidationError as error:
            self.report(error)

    # ------------------------------------------------------------------ values
    def check_values(self) -> None:
        graph = self.proto.graph
        defined = {t.name for t in graph.initializer}
        defined |= {t.values.name for t in graph.sparse_initializer}
        defined |= {i.name for i in graph.input}
        # The scan's facts about each value (its count is the parse's: checked, as it costs nothing).
        facts = self.scan.error is None and len(self.scan.value_types) == len(graph.struct_initializer)
        payloads = self.plain_payloads()
        if not (facts and self.all_plain(payloads, defined)):
            self.check_each_value(payloads, defined, facts)
        for path, subgraph in self.graphs:
            if path != "graph" and len(subgraph.struct_initializer):
                self.report(
                    ValidationError(
                        f"{path}.struct_initializer",
                        "struct values are only allowed in the main graph",
                        code="misplaced_value",
                    )
                )

    def all_plain(self, payloads: dict[int, int], defined: set[str]) -> bool:
        """The common case at C speed: every value holds exactly type, raw_data and name (the scan
        read it in its bytes), of a valid byte-aligned declaration with as many payload bytes, under
        a valid, new name. Then nothing is to report and ``value_names`` is filled; else False."""
        types, sizes = self.scan.value_types, self.scan.value_payloads
        if not types:
            return True
        if types.count(types[0]) == len(types) and sizes.count(sizes[0]) == len(sizes):
            kinds = {(types[0], sizes[0])}  # one declaration (the common case): no pass over pairs
        else:
            kinds = set(zip(types, sizes, strict=True))
        if any(payloads.get(t) != size for t, size in kinds):  # None: a value of another shape
            return False
        names = _decoded(self.scan.value_names)
        if names is None:
            return False
        declarations = self.table.declarations
        if len(kinds) == 1:
            value_names = dict.fromkeys(names, declarations[types[0]])
        else:
            value_names = dict(zip(names, map(declarations.__getitem__, types), strict=True))
        if len(value_names) != len(names) or "" in value_names or not value_names.keys().isdisjoint(defined):
            return False  # a name twice, an empty one, one of an initializer or input: reported one by one
        self.value_names = value_names
        self.value_declarations = [declarations[index] for index in {t for t, _ in kinds}]
        self.values_plain = True
        return True

    def check_each_value(self, payloads: dict[int, int], defined: set[str], facts: bool) -> None:
        declarations = self.table.declarations
        value_names = self.value_names
        types, sizes, raw_names = self.scan.value_types, self.scan.value_payloads, self.scan.value_names
        for k in range(len(self.proto.graph.struct_initializer)):
            if facts and types[k] is not None:  # exactly type, raw_data and name (read in its bytes)
                name = _decoded([raw_names[k]])
                if (
                    name is not None
                    and name[0]
                    and payloads.get(types[k]) == sizes[k]
                    and name[0] not in value_names
                    and name[0] not in defined
                ):
                    value_names[name[0]] = declarations[types[k]]
                    continue
            value = self.values[k]
            where = element_label(f"graph.struct_initializer[{k}]", value.name)
            if not isinstance(value.name, str):
                self.report(ValidationError(where, "struct value name is not valid UTF-8", code="invalid_utf8"))
            elif not value.name:
                self.report(ValidationError(where, "struct value has no name", code="missing_name"))
            elif value.name in self.value_names:
                self.report(ValidationError(where, "duplicate struct value name", code="duplicate_name"))
            elif value.name in defined:
                self.report(
                    ValidationError(
                        where, "struct value name clashes with an initializer or graph input", code="name_clash"
                    )
                )
            declaration = self.value_declaration(value, where)
            self.value_names.setdefault(value.name, declaration)
            if declaration is None:
                continue
            if value.HasField("struct_type"):
                size = self.check_root(declaration, f"{where}.struct_type")
            else:
                size = self.attempt(self.table.size_of_index, value.type, f"{where}.type")
            if size is not None:
                self.check_payload(value, size, where)

    def check_wire(self) -> None:
        """What the parse hid: two members of a oneof, our fields with the wrong wire type
        (``wire.py``; scanned when the check began). Reported first: the parsed model does not say
        what its bytes say."""
        error = self.scan.error
        if error is not None and str(error) not in self._messages:
            self._messages.add(str(error))
            self.diagnostics.insert(0, error)

    def check_external_tensors(self) -> None:
        """Every external stock tensor (initializers and node attributes of every graph, model
        function and training graph) by the rules used for struct payloads (tensors inside types
        are refused by check_constant and check_functions). In the main graph only the initializers
        the parse shows as external and the nodes the scan shows may have attributes are read."""
        tensors = external.model_tensors(self.proto, initializers=self.external_initializers, nodes=self.main_nodes)
        tensors = [(where, tensor) for where, tensor in tensors if external.is_external(tensor)]
        for where, tensor in tensors:
            self.attempt(external.check_tensor, tensor, self.loaded.base_dir, where)
        self.needs_stand_ins = resolved_in_working_directory(tensors)

    def check_referenced_files(self) -> None:
        """A file the model records (payload/file_identity.py) and still references is the file
        recorded: its size and sampled bytes (read only for a model holding the record)."""
        props = self.proto.metadata_props
        if not any(p.key == file_identity.REFERENCED_FILES_KEY for p in props):
            return
        tensors = external.model_tensors(self.proto, initializers=self.external_initializers, nodes=self.main_nodes)
        referenced = file_identity.referenced_locations(self.values, tensors)
        self.attempt(file_identity.check_referenced_files, props, self.loaded.base_dir, referenced)

    def plain_payloads(self) -> dict[int, int]:
        """Payload bytes of every valid, byte-aligned model-level declaration (its size is cached)."""
        payloads = {}
        for index in range(len(self.table.declarations)):
            try:
                bits = self.table.size_of_index(index)
            except (ValidationError, RecursionError):
                continue  # reported by check_root; values of this type take the full path
            if bits % 8 == 0 and self.table.declarations[index].WhichOneof("kind") in CONCRETE_KINDS:
                payloads[index] = bits // 8
        return payloads

    def value_declaration(self, value, where: str) -> StructTypeProto | None:
        return self.attempt(resolver.value_declaration, value, self.table, where)

    def check_payload(self, value, size_bits: int, where: str) -> None:
        """The resolver's payload checks (as view and decode make them), reported, not raised."""
        try:
            resolver.value_payload(value, size_bits, self.loaded.base_dir, where, read=False)
        except ValidationError as error:
            self.report(error)

    # ------------------------------------------------------------------ stock onnx
    def check_stock(self, full_check: bool) -> None:
        if full_check:
            # The plain check first: the full check's view is rebuilt without unknown fields, so
            # bytes onnx cannot parse (field 0 in an unknown group, which upb accepts) reach only it.
            self.check_stock(False)
            if self.diagnostics:
                return
        types = inference.LogicalTypes(self.loaded, self.table) if full_check else None  # one for both rules
        if full_check:
            for conflict in inference.declared_type_conflicts(self.loaded, types):
                self.report(conflict)
            if self.diagnostics:
                return
        try:
            if full_check:
                # Struct values get their logical (decoded) types, so onnx's shape inference sees
                # what the consuming nodes will see.
                view = inference.logical_view(self.loaded, stock_view(self.loaded, self.struct_type_protos), types)
            else:
                view = checker_view(
                    self.loaded,
                    self.struct_type_protos,
                    bool(self.external_initializers),
                    self.stock_options.get("check_custom_domain", False),
                    list(self.value_names),  # every value, in order: the stock check runs only on a valid model
                )
            if self.needs_stand_ins:  # onnx would look for external files in the working directory
                check_beside_stand_ins(originals.check_model, view, full_check=full_check, **self.stock_options)
            else:
                originals.check_model(view, full_check=full_check, **self.stock_options)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, RuntimeError) as error:
            self.report(from_stock(error, stock.prefix(error)))
        except UnicodeDecodeError:  # stock onnx's error message itself fails on non-UTF-8 names
            self.report(
                ModelValueError(
                    "", "onnx.checker: the model contains a string that is not valid UTF-8", code="invalid_utf8"
                )
            )
        except ValueError as error:  # onnx's word for an element type it does not know, path lost
            view_graph = onnx.ModelProto.FromString(view).graph if isinstance(view, bytes) else view.graph
            self.report(inference.unknown_element_type(view_graph) or from_stock(error, "onnx.checker: "))


def _decoded(raw_names) -> list[str] | None:
    """The names as str, or None if one is not valid UTF-8: one decode for all of them, joined by a
    NUL (UTF-8 is valid in pieces joined by an ASCII byte iff it is valid in each piece)."""
    try:
        names = b"\0".join(raw_names).decode().split("\0")
        if len(names) != len(raw_names):  # a name holds a NUL (or there is none)
            names = [name.decode() for name in raw_names]
    except UnicodeDecodeError:
        return None
    return names


def validate(
    model: ModelLike, *, full_check: bool = False, base_dir: str | os.PathLike | None = None, **stock_options: bool
) -> list[ValidationError]:
    """Every diagnostic of ``model`` (empty when valid). See :func:`check_model`: a model without
    struct parts has onnx's one finding, or none, as check_model raises it.

    Args:
        model: an ``onnx.ModelProto``, serialized bytes, a path, or a LoadedModel.
        full_check: as for :func:`check_model`.
        base_dir: as for :func:`check_model`.
        **stock_options: ``skip_opset_compatibility_check`` and ``check_custom_domain``, passed
            to onnx's checker.

    Returns:
        The ValidationErrors found, in model order; empty when the model is valid.

    Raises:
        TypeError: ``model`` is not a model form.
    """
    serialized = None
    if base_dir is None:
        # An onnx.ModelProto is serialized once: the plain test and the struct-aware check read the same bytes.
        serialized = model.SerializeToString() if type(model) is onnx.ModelProto else None
        try:
            # unparsable: our message names the file
            plain = stock.plain_form(model if serialized is None else serialized, unparsable=False)
            if plain is not None:
                flags = [stock_options.get(k, False) for k in ("skip_opset_compatibility_check", "check_custom_domain")]
                try:
                    stock.check_model(plain, full_check, *flags)
                except ValidationError as error:
                    return [lost_parts.explained(plain, error)]
                stand_ins = lost_parts.stand_in_inputs(plain)
                return [stand_ins] if stand_ins is not None else []
        except ValidationError as error:  # a missing file, or onnx's finding
            return [error]
    return _diagnostics(model, full_check, base_dir, stock_options, first_only=False, serialized=serialized)


def _diagnostics(
    model, full_check: bool, base_dir, stock_options: dict, first_only: bool, serialized: bytes | None = None
) -> list[ValidationError]:
    """``first_only``: the first diagnostic is all that is needed (check_model): a wire-level
    problem, always reported first, ends the check without the rules that would follow it.
    ``serialized``: an ``onnx.ModelProto`` ``model``'s serialization, if made already."""
    try:
        loaded = load(model, base_dir, serialized=serialized)
    except ValidationError as error:  # unparsable bytes are a diagnostic too
        diagnostics = [error]
    else:
        diagnostics = _Checker(loaded, stock_options).run(full_check, first_only)
    # The test-only switch (check/reporting.py) reaches what is found before the rules run too.
    return [d for d in diagnostics if d.code not in DISABLED_CODES] if DISABLED_CODES else diagnostics


def check_model(
    model: ModelLike,
    full_check: bool = False,
    skip_opset_compatibility_check: bool = False,
    check_custom_domain: bool = False,
    *,
    base_dir: str | os.PathLike | None = None,
) -> None:
    """Check a model, struct parts included; raise the first :class:`ValidationError` found.

    A drop-in for ``onnx.checker.check_model``, with its arguments in its order. ``model`` is an
    ``onnx.ModelProto`` (struct parts as unknown fields), serialized bytes, or a path (external
    payloads are then resolved against the file's directory, or ``base_dir``). A model without
    struct parts is handed to ``onnx.checker.check_model`` itself (check/stock.py); otherwise the
    proposal's rules run first, then onnx's checker on the stock parts. ``full_check`` adds
    struct-aware shape inference, as onnx's ``full_check`` does; ``skip_opset_compatibility_check``
    and ``check_custom_domain`` are passed to onnx's checker.

    Args:
        model: an ``onnx.ModelProto``, serialized bytes, a path, or a LoadedModel.
        full_check: also run struct-aware shape inference (strict mode).
        skip_opset_compatibility_check: passed to onnx's checker.
        check_custom_domain: passed to onnx's checker.
        base_dir: the directory external payloads are resolved against (default: the file's).

    Raises:
        ValidationError: the model is invalid. Where stock onnx raises another class for the same
            fault, the error is also an instance of it (docs/errors.md, "Exception classes"):
            InferenceError, ModelValueError (a ValueError), ModelFileNotFoundError (a
            FileNotFoundError), NotRegularFileError and ModelRuntimeError (RuntimeErrors).
    """
    serialized = None
    if base_dir is None:
        # An onnx.ModelProto is serialized once: the plain test and the struct-aware check read the same bytes.
        serialized = model.SerializeToString() if type(model) is onnx.ModelProto else None
        plain = stock.plain_form(model if serialized is None else serialized)
        if plain is not None:
            try:
                stock.check_model(plain, full_check, skip_opset_compatibility_check, check_custom_domain)
            except ValidationError as error:  # onnx's finding, or what a model that lost its struct parts shows
                raise lost_parts.explained(plain, error) from None
            stand_ins = lost_parts.stand_in_inputs(plain)
            if stand_ins is not None:
                raise stand_ins
            return None
        if not accepted_form(model):  # stock onnx raises what it raises for it
            return stock.check_model(model, full_check, skip_opset_compatibility_check, check_custom_domain)
    stock_options = {
        "skip_opset_compatibility_check": skip_opset_compatibility_check,
        "check_custom_domain": check_custom_domain,
    }
    diagnostics = _diagnostics(model, full_check, base_dir, stock_options, first_only=True, serialized=serialized)
    if diagnostics:
        raise diagnostics[0]


class _StructPartsChecker(_Checker):
    """check_model's rules without onnx's checker on the stock part (see check_struct_parts)."""

    def check_stock(self, full_check: bool) -> None:
        """The stock part is the runtime's to judge."""


def check_struct_parts(model: ModelLike, *, base_dir: str | os.PathLike | None = None) -> None:
    """Check a model's struct parts fully and its stock part only by the file-safety rules
    (external tensors inside the model directory, no link escapes); raise the first
    :class:`ValidationError` found.

    What ``InferenceSession`` checks: a runtime judges the stock part as it judges any model
    (onnxruntime runs unsorted nodes, duplicate metadata keys or ``ir_version`` 0, which
    ``onnx.checker`` refuses). docs/semantics.md, "Drop-in behaviour".
    """
    check_loaded(load(model, base_dir), stock_check=False)


def check_loaded(loaded: LoadedModel, table: TypeTable | None = None, *, stock_check: bool = True) -> None:
    """``check_model`` (``stock_check``) or ``check_struct_parts`` of an already loaded model
    with struct parts.

    Args:
        loaded: the model.
        table: its declarations' TypeTable, when the caller holds one (else one is built).
        stock_check: also run onnx's checker on the stock part, as ``check_model`` does.

    Raises:
        ValidationError: the first diagnostic found.
    """
    rules = _Checker if stock_check else _StructPartsChecker
    stock_options = {"skip_opset_compatibility_check": False, "check_custom_domain": False} if stock_check else None
    diagnostics = rules(loaded, stock_options, table).run(False, first_only=True)
    if diagnostics:
        raise diagnostics[0]
