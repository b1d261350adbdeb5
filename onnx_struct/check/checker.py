"""The proposal's rules as path-bearing diagnostics: ``check_model`` raises the first,
``validate`` returns all of them. No payload byte is read; external files are only ``stat``-ed.

The parts stock ONNX understands are checked by ``onnx.checker.check_model`` itself, on a view
of the model it accepts: struct types shown as Opaque types, struct values as defined names.
"""

from __future__ import annotations

import os

import onnx
import onnx.checker

from onnx_struct.check import decoder_inputs as bindings
from onnx_struct.check import decoder_policy, inference
from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import LeafLookup, TypeTable, element_label, read_constant
from onnx_struct.payload import external
from onnx_struct.payload import values as resolver
from onnx_struct.schema import wire
from onnx_struct.schema.model import LoadedModel, ModelLike, StructTypeProto, load
from onnx_struct.schema.opaque import OPAQUE_DOMAIN  # noqa: F401 - kept importable from here
from onnx_struct.schema.projections import (  # noqa: F401 - VALUES_DOMAIN kept importable from here
    VALUES_DOMAIN,
    checker_view,
    name_field_size,
    plain_value_size,
    stock_view,
)
from onnx_struct.schema.walk import graph_parts, locate

# Captured at import so that install() (which replaces onnx.checker.check_model) cannot recurse.
_stock_check_model = onnx.checker.check_model

CONCRETE_KINDS = ("array", "structure", "bit_packing")


class _Checker:
    def __init__(self, loaded: LoadedModel, stock_options: dict | None = None) -> None:
        self.stock_options = stock_options or {}  # onnx checker flags, passed through
        self.loaded = loaded
        self.proto = loaded.proto
        self.table = TypeTable(loaded.struct_types)
        self.diagnostics: list[ValidationError] = []
        self._messages: set[str] = set()
        self.value_names: dict[str, StructTypeProto | None] = {}
        self.plain_values: set[int] = set()  # struct values proven to hold only type, raw_data, name
        # One walk collects every place a struct part can be below the model-level ones.
        self.graphs, self.struct_type_protos = graph_parts(self.proto)
        graph = self.proto.graph
        # list(): iterating a upb repeated field directly costs more per element (docs/benchmarks.md), and
        # reusing the element objects makes every later read of them cheaper.
        self.values = list(graph.struct_initializer)
        external = onnx.TensorProto.EXTERNAL
        self.external_initializers = [i for i, t in enumerate(graph.initializer) if t.data_location == external]

    def report(self, error: ValidationError) -> None:
        if str(error) not in self._messages:  # one cause reached from several places, once
            self._messages.add(str(error))
            self.diagnostics.append(error)

    def attempt(self, function, *args):
        try:
            return function(*args)
        except ValidationError as error:
            self.report(error)
        except RecursionError:
            self.report(ValidationError(str(args[-1]), "nesting is too deep", code="nesting_too_deep"))
        return None

    def run(self, full_check: bool) -> list[ValidationError]:
        for i, declaration in enumerate(self.proto.struct_types):
            self.check_root(declaration, self.table.path(i), i)
        self.check_values()
        self.check_wire()
        self.check_external_tensors()
        self.check_graph_types()
        self.check_struct_references()
        self.check_consumers()
        if not self.diagnostics:  # onnx's findings only count on a model that follows the proposal
            self.check_stock(full_check)
        return self.diagnostics

    # ------------------------------------------------------------------ declarations
    def check_root(self, declaration: StructTypeProto, path: str, index: int | None = None) -> int | None:
        """``index``: the declaration is ``struct_types[index]`` (its results are then memoized)."""
        kind = declaration.WhichOneof("kind")
        if kind not in CONCRETE_KINDS:
            what = "a type_index" if kind == "type_index" else "an unset kind (the unconstrained category)"
            self.report(ValidationError(path, f"a concrete declaration may not be {what}", code="not_concrete"))
            return None
        self.check_tree(declaration, path)
        if index is not None:
            size = self.attempt(self.table.size_of_index, index, path)
        else:
            size = self.attempt(self.table.size, declaration, path)
        if size is not None:
            # Leaf limits and names, counted per declaration; the leaves themselves are looked
            # up by the decoder's and encoder's names only, never listed.
            leaves = self.attempt(self.table.leaf_lookup, declaration, path, index)
            self.check_functions(declaration, path, leaves)
        return size

    def check_tree(self, declaration: StructTypeProto, path: str) -> None:
        kind = declaration.WhichOneof("kind")
        if kind == "structure":
            names: set[str] = set()
            for i, field in enumerate(declaration.structure.field):
                where = element_label(f"{path}.structure.field[{i}]", field.name)
                self.check_name(field.name, names, where, "field")
                content = field.WhichOneof("content")
                if content == "constant":
                    self.check_constant(field.constant, f"{where}.constant")
                elif content == "type":
                    self.check_physical_type(field.type, f"{where}.type")
        elif kind == "bit_packing":
            names = set()
            for i, component in enumerate(declaration.bit_packing.component):
                where = element_label(f"{path}.bit_packing.component[{i}]", component.name)
                self.check_name(component.name, names, where, "component")
        elif kind == "array":
            self.check_physical_type(declaration.array.element_type, f"{path}.array.element_type")

    def check_name(self, name: str, seen: set[str], where: str, what: str) -> None:
        if not isinstance(name, str):  # proto2 does not validate UTF-8 on parse
            self.report(ValidationError(where, f"{what} name is not valid UTF-8", code="invalid_utf8"))
        elif not name:
            self.report(ValidationError(where, f"{what} has no name", code="missing_name"))
        elif "." in name:
            self.report(
                ValidationError(where, f"{what} name {name!r} contains '.', the leaf path separator", code="bad_name")
            )
        elif name in seen:
            self.report(ValidationError(where, f"duplicate {what} name", code="duplicate_name"))
        seen.add(name)

    def check_constant(self, tensor: onnx.TensorProto, where: str) -> None:
        self.attempt(read_constant, tensor, where)

    def check_physical_type(self, type_proto, where: str) -> None:
        if type_proto.WhichOneof("value") == "struct_type":
            self.check_static_form(type_proto.struct_type, f"{where}.struct_type")

    def check_static_form(self, struct_type: StructTypeProto, where: str) -> None:
        kind = struct_type.WhichOneof("kind")
        if kind in CONCRETE_KINDS:
            return  # reported by the size function (physical position) or by check_graph_types
        for attribute in ("decoder", "encoder", "name"):
            if struct_type.HasField(attribute):
                self.report(
                    ValidationError(where, f"a static struct type may not carry {attribute}", code="static_type_fields")
                )
        if len(struct_type.metadata_props):
            self.report(
                ValidationError(where, "a static struct type may not carry metadata_props", code="static_type_fields")
            )
        if kind == "type_index":
            self.attempt(self.table.declaration, struct_type.type_index, f"{where}.type_index")

    def check_functions(self, declaration: StructTypeProto, path: str, leaves: LeafLookup | None) -> None:
        """Each function by onnx's function checker and the decoder safety policy; the decoder also
        for its leaves (static shapes within the policy's budget: decode runs nothing else)."""
        if not (declaration.HasField("decoder") or declaration.HasField("encoder")):
            return
        for role, bind in (("decoder", bindings.bind_decoder), ("encoder", bindings.bind_encoder)):
            if not declaration.HasField(role):
                continue
            function = getattr(declaration, role)
            where = bindings.function_label(f"{path}.{role}", function)
            valid = self.attempt(check_function, function, where, self.proto.ir_version)
            self.attempt(external.refuse_external_tensors, function, where)
            bound = self.attempt(bind, function, leaves, f"{path}.{role}") if leaves is not None else None
            if role == "decoder" and valid and bound is not None:
                self.attempt(inference.logical_type, declaration, self.table, path)

    # ------------------------------------------------------------------ values
    def check_values(self) -> None:
        graph = self.proto.graph
        defined = {t.name for t in graph.initializer}
        defined |= {t.values.name for t in graph.sparse_initializer}
        defined |= {i.name for i in graph.input}
        # Fast path for the common case (a valid inline value of a model-level type): four field
        # reads per value; anything unusual takes the full path below, which builds messages.
        plain_sizes = self.plain_value_sizes()
        declarations = self.table.declarations
        value_names = self.value_names
        plain = self.plain_values
        for k, value in enumerate(self.values):
            name = value.name
            type_index = value.type
            sizes = plain_sizes.get(type_index)
            if (
                sizes is not None
                and type(name) is str  # noqa: E721 - proto2 hands non-UTF-8 strings over as bytes
                and name
                and name not in value_names
                and name not in defined
                and len(value.raw_data) == sizes[0]
            ):
                # The serialized size of exactly type, raw_data and name proves that no other
                # field (struct_type, external_data, unknown ones) is present: one call, cheaper
                # than reading external_data alone (docs/benchmarks.md). type is present
                # when not 0; an absent type 0 could leave room for a 2-byte field.
                if value.ByteSize() == sizes[1] + name_field_size(len(name.encode())) and (
                    type_index or value.HasField("type")
                ):
                    value_names[name] = declarations[type_index]
                    plain.add(k)
                    continue
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
        for path, subgraph in self.graphs:
            if path != "graph" and len(subgraph.struct_initializer):
                self.report(
                    ValidationError(
                        f"{path}.struct_initializer",
                        "struct values are only allowed in the main graph",
                        code="misplaced_value",
                    )
                )

    def check_wire(self) -> None:
        """What the parse hid: two members of a oneof, our fields with the wrong wire type
        (``wire.py``). Reported first: the parsed model does not say what its bytes say."""
        data = self.loaded.serialized
        if data is None:  # an overlay object: a oneof's lost member is gone, wrong wire types are not
            data = self.proto.SerializeToString()
        error = wire.scan_model(data, self.plain_values)
        if error is not None and str(error) not in self._messages:
            self._messages.add(str(error))
            self.diagnostics.insert(0, error)

    def check_external_tensors(self) -> None:
        """Every external stock tensor (initializers and node attributes of every graph, model
        function and training graph) by the rules used for struct payloads (tensors inside types
        are refused by check_constant and check_functions)."""
        if not external.may_hold_external_tensors(self.proto, self.loaded.serialized):
            return  # no tensor anywhere has data_location = EXTERNAL: skip the walk over nodes
        for where, tensor in external.model_tensors(self.proto):
            if external.is_external(tensor):
                self.attempt(external.check_tensor, tensor, self.loaded.base_dir, where)

    def plain_value_sizes(self) -> dict[int, tuple[int, int]]:
        """For every valid, byte-aligned model-level declaration (its size is cached): its payload
        bytes, and the serialized size of a value of it holding only ``type`` and ``raw_data``."""
        sizes = {}
        for index in range(len(self.table.declarations)):
            try:
                bits = self.table.size_of_index(index)
            except (ValidationError, RecursionError):
                continue  # reported by check_root; values of this type take the full path
            if bits % 8 == 0 and self.table.declarations[index].WhichOneof("kind") in CONCRETE_KINDS:
                payload = bits // 8
                sizes[index] = (payload, plain_value_size(index, payload))
        return sizes

    def value_declaration(self, value, where: str) -> StructTypeProto | None:
        return self.attempt(resolver.value_declaration, value, self.table, where)

    def check_payload(self, value, size_bits: int, where: str) -> None:
        """The resolver's payload checks (as view and decode make them), reported, not raised."""
        try:
            resolver.value_payload(value, size_bits, self.loaded.base_dir, where, read=False)
        except ValidationError as error:
            self.report(error)

    # ------------------------------------------------------------------ graph-level struct types
    def check_graph_types(self) -> None:
        for path, _, message in self.struct_type_protos:
            struct_type = message.struct_type
            where = f"{path}.struct_type"
            kind = struct_type.WhichOneof("kind")
            if kind in CONCRETE_KINDS:
                self.report(
                    ValidationError(
                        where,
                        "a concrete declaration may only appear in ModelProto.struct_types or StructProto.struct_type; "
                        "use type_index or the unconstrained category here",
                        code="misplaced_declaration",
                    )
                )
                continue
            self.check_static_form(struct_type, where)
            if kind == "type_index" and 0 <= struct_type.type_index < len(self.table.declarations):
                size = self.attempt(self.table.size_of_index, struct_type.type_index, f"{where}.type_index")
                if size is not None and size % 8:
                    self.report(
                        ValidationError(
                            where,
                            f"referenced declaration is {size} bits, not a whole number of bytes",
                            code="not_byte_aligned",
                            size_bits=size,
                        )
                    )

    def struct_signatures(self) -> list[tuple[str, str, int, object, StructTypeProto]]:
        """Every struct-typed ValueInfoProto of a graph: (its path, graph field, index, the
        ValueInfoProto, the struct TypeProto's StructTypeProto); ``graph field`` is input, output
        or value_info, and the struct type may be nested in a sequence/map/optional."""
        out = []
        for path, locator, message in self.struct_type_protos:
            for k in range(len(locator) - 1, 0, -1):
                field, index = locator[k - 1]
                if locator[k] == ("type", None) and field in ("input", "output", "value_info") and index is not None:
                    holder = locate(self.proto, locator[: k - 1])
                    if holder.DESCRIPTOR.name == "GraphProto":
                        info = getattr(holder, field)[index]
                        suffix = sum(len(name) + 1 for name, _ in locator[k:])
                        nested = len(locator) - k - 1  # steps from the ValueInfo's type to this one
                        out.append((path[: len(path) - suffix], field, locator, info, message.struct_type, nested))
                    break
        return out

    def struct_inputs(self) -> dict[str, StructTypeProto]:
        """Main-graph inputs typed directly by a struct type: name -> that static type."""
        return {
            info.name: struct_type
            for _, field, locator, info, struct_type, nested in self.struct_signatures()
            if field == "input" and len(locator) == 3 and locator[0] == ("graph", None) and not nested
        }

    def check_struct_references(self) -> None:
        """A struct value or struct input keeps its type wherever it is declared again (graph
        output, value_info): an exact reference must name the same declaration."""
        targets = [entry for entry in self.struct_signatures() if entry[1] != "input"]
        if not targets:  # nothing declared again (the common case): no pass over the values
            return
        wanted = {entry[3].name for entry in targets}
        sources: dict[str, tuple[int | None, StructTypeProto | None]] = {}
        for value in self.values:
            if value.name in wanted and value.name in self.value_names:
                inline = value.struct_type if value.HasField("struct_type") else None
                sources.setdefault(value.name, (None if inline is not None else value.type, inline))
        for name, struct_type in self.struct_inputs().items():
            if struct_type.WhichOneof("kind") == "type_index":
                sources.setdefault(name, (struct_type.type_index, None))
        if not sources:
            return
        for path, _, _, info, struct_type, nested in targets:
            if info.name not in sources:
                continue  # an input defines its name; other names are not known struct values
            index, inline = sources[info.name]
            what = f"struct_types[{index}]" if inline is None else "an inline declaration"
            if nested:
                self.report(
                    ValidationError(
                        path, f"{info.name!r} is a struct of {what}, not a container of structs", code="type_mismatch"
                    )
                )
            elif struct_type.WhichOneof("kind") == "type_index" and not self.same_declaration(
                index, inline, struct_type.type_index
            ):
                self.report(
                    ValidationError(
                        path,
                        f"declared as struct_types[{struct_type.type_index}], but {info.name!r} is of {what}",
                        code="type_mismatch",
                    )
                )

    def same_declaration(self, index: int | None, inline: StructTypeProto | None, declared: int) -> bool:
        if index == declared:
            return True
        table = self.table.declarations
        if not 0 <= declared < len(table) or (index is not None and not 0 <= index < len(table)):
            return True  # an index out of range is reported where it is declared
        source = inline if inline is not None else table[index]
        return source.SerializeToString(deterministic=True) == table[declared].SerializeToString(deterministic=True)

    def check_consumers(self) -> None:
        used = self.value_names.values()
        declarations = dict(zip(map(id, used), used, strict=True))  # a few distinct ones, at C speed
        undecoded_inputs = set()
        for name, struct_type in self.struct_inputs().items():
            if struct_type.WhichOneof("kind") == "type_index":
                index = struct_type.type_index
                table = self.table.declarations
                if 0 <= index < len(table) and not table[index].HasField("decoder"):
                    undecoded_inputs.add(name)
        if not undecoded_inputs and all(d is None or d.HasField("decoder") for d in declarations.values()):
            return
        undecoded = {name for name, d in self.value_names.items() if d is not None and not d.HasField("decoder")}
        undecoded |= undecoded_inputs
        for path, graph in self.graphs:
            for i, node in enumerate(graph.node):
                for j, name in enumerate(node.input):
                    if name in undecoded:
                        where = element_label(f"{path}.node[{i}]", node.name)
                        self.report(
                            ValidationError(
                                f"{where}.input[{j}]",
                                f"consumes struct {'input' if name in undecoded_inputs else 'value'} {name!r}, "
                                "whose type has no decoder to define its logical value",
                                code="no_decoder",
                            )
                        )

    # ------------------------------------------------------------------ stock onnx
    def check_stock(self, full_check: bool) -> None:
        try:
            if full_check:
                # Struct values get their logical (decoded) types, so onnx's shape inference sees
                # what the consuming nodes will see.
                view = inference.logical_view(self.loaded, stock_view(self.loaded, self.struct_type_protos))
            else:
                view = checker_view(
                    self.loaded,
                    self.struct_type_protos,
                    bool(self.external_initializers),
                    self.stock_options.get("check_custom_domain", False),
                    list(self.value_names),  # every value, in order: the stock check runs only on a valid model
                )
            _stock_check_model(view, full_check=full_check, **self.stock_options)
        except onnx.checker.ValidationError as error:
            self.report(ValidationError("", f"onnx.checker: {error}", code="onnx_checker"))
        except UnicodeDecodeError:  # stock onnx's error message itself fails on non-UTF-8 names
            self.report(
                ValidationError(
                    "", "onnx.checker: the model contains a string that is not valid UTF-8", code="invalid_utf8"
                )
            )
        except onnx.shape_inference.InferenceError as error:
            self.report(ValidationError("", f"onnx.shape_inference: {error}", code="onnx_checker"))
        except ValueError as error:  # onnx's word for an element type it does not know, path lost
            view_graph = onnx.ModelProto.FromString(view).graph if isinstance(view, bytes) else view.graph
            self.report(
                inference.unknown_element_type(view_graph)
                or ValidationError("", f"onnx.checker: {error}", code="onnx_checker")
            )


def check_function(function: onnx.FunctionProto, where: str, ir_version: int) -> bool:
    """A decoder/encoder as an ONNX function, with its own opset_import, and the structural rules
    of the decoder safety policy (:func:`onnx_struct.decoder_policy.check_structure`)."""
    decoder_policy.check_structure(function, where, ir_version)
    return True


def validate(
    model: ModelLike, *, full_check: bool = False, base_dir: str | os.PathLike | None = None, **stock_options: bool
) -> list[ValidationError]:
    """Every diagnostic of ``model`` (empty when valid). See :func:`check_model`."""
    try:
        loaded = load(model, base_dir)
    except ValidationError as error:  # unparsable bytes are a diagnostic too
        return [error]
    return _Checker(loaded, stock_options).run(full_check)


def check_model(
    model: ModelLike,
    full_check: bool = False,
    *,
    base_dir: str | os.PathLike | None = None,
    skip_opset_compatibility_check: bool = False,
    check_custom_domain: bool = False,
) -> None:
    """Check a model with struct parts; raise the first :class:`ValidationError` found.

    ``model`` is an ``onnx.ModelProto`` (struct parts as unknown fields), serialized bytes, or a
    path (external payloads are then resolved against the file's directory, or ``base_dir``).
    The stock parts are checked by ``onnx.checker.check_model``; ``full_check`` adds struct-aware
    shape inference, as onnx's ``full_check`` does; ``skip_opset_compatibility_check`` and
    ``check_custom_domain`` are passed to onnx's checker.
    """
    diagnostics = validate(
        model,
        full_check=full_check,
        base_dir=base_dir,
        skip_opset_compatibility_check=skip_opset_compatibility_check,
        check_custom_domain=check_custom_domain,
    )
    if diagnostics:
        raise diagnostics[0]
