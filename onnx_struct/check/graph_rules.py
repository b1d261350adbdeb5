"""The checker's rules for struct types in graphs: where a declaration may appear, static struct
types by reference (byte-aligned), a struct value or input keeping its type where it is declared
again, and no node (or non-struct-typed graph output) consuming a struct without a decoder."""

from __future__ import annotations

import hashlib

import onnx
import onnx.checker

from onnx_struct import originals
from onnx_struct.check.declaration_rules import CONCRETE_KINDS, DeclarationRules
from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import element_label
from onnx_struct.schema.model import StructTypeProto
from onnx_struct.schema.walk import locate


class GraphRules(DeclarationRules):
    """Needs, besides :class:`DeclarationRules`' attributes, ``self.graphs`` and
    ``self.struct_type_protos`` (from :func:`onnx_struct.schema.walk.graph_parts`), ``self.values``
    (the struct values) and ``self.value_names`` (name -> declaration, filled by the value rules)."""

    graphs: list
    struct_type_protos: list
    values: list
    value_names: dict[str, StructTypeProto | None]
    # The distinct declarations among value_names' values, when the value rules know them (a few,
    # where value_names holds thousands); None: found from value_names.
    value_declarations: list[StructTypeProto] | None = None

    def check_graph_rules(self) -> None:
        self.check_graph_types()
        self.check_signature_names()
        self.check_domain_names()
        self.check_struct_references()
        self.check_consumers()
        self.check_old_ir_local_functions()

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

    def check_signature_names(self) -> None:
        """A struct-typed input, output or value_info is bound by name (``lower`` names its leaves
        and its decoder call after it), so its name must be valid UTF-8: proto2 does not check it
        on parse, nor does onnx's C++ checker."""
        for path, _, _, info, _, _ in self.struct_signatures():
            if not isinstance(info.name, str):
                self.report(ValidationError(f"{path}.name", "name is not valid UTF-8", code="invalid_utf8"))

    def check_domain_names(self) -> None:
        """Opset and model-local function domains must be valid UTF-8: ``lower`` merges the graph's
        and the decoders' opset imports by domain (onnx's checker lets them through)."""
        places = [(f"opset_import[{i}]", o) for i, o in enumerate(self.proto.opset_import)]
        for i, function in enumerate(self.proto.functions):
            places.append((f"functions[{i}]", function))
            places += [(f"functions[{i}].opset_import[{j}]", o) for j, o in enumerate(function.opset_import)]
        for where, message in places:
            if not isinstance(message.domain, str):
                self.report(ValidationError(f"{where}.domain", "domain is not valid UTF-8", code="invalid_utf8"))

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
        source = self._serialized(inline) if inline is not None else self._serialized(table[index])
        return source == self._serialized(table[declared])

    def _serialized(self, declaration: StructTypeProto) -> bytes:
        """A digest of a declaration's deterministic bytes, once per declaration, so N entries
        naming values of one declaration do not serialize it N times."""
        cache = self.__dict__.setdefault("_serialized_declarations", {})
        known = cache.get(id(declaration))
        if known is None:  # the declaration is held beside its digest, so its id is not reused
            data = declaration.SerializeToString(deterministic=True)
            known = cache[id(declaration)] = (declaration, hashlib.blake2b(data, digest_size=32).digest())
        return known[1]

    def check_consumers(self) -> None:
        used = self.value_declarations
        if used is None:
            used = self.value_names.values()
            used = dict(zip(map(id, used), used, strict=True)).values()  # a few distinct ones, at C speed
        undecoded_inputs = set()
        for name, struct_type in self.struct_inputs().items():
            if struct_type.WhichOneof("kind") == "type_index":
                index = struct_type.type_index
                table = self.table.declarations
                if 0 <= index < len(table) and not table[index].HasField("decoder"):
                    undecoded_inputs.add(name)
        if not undecoded_inputs and all(d is None or d.HasField("decoder") for d in used):
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
            # An output typed otherwise than by a struct type asks for the logical value too, so it
            # needs a decoder (lower would otherwise write an output no node makes).
            for j, info in enumerate(graph.output):
                if info.name in undecoded and info.type.WhichOneof("value") != "struct_type":
                    self.report(
                        ValidationError(
                            element_label(f"{path}.output[{j}]", info.name),
                            f"names struct {'input' if info.name in undecoded_inputs else 'value'} {info.name!r}, "
                            "whose type has no decoder to define its logical value, without a struct type",
                            code="no_decoder",
                        )
                    )

    def check_old_ir_local_functions(self) -> None:
        """Model-local functions must have distinct ids and not call each other in a cycle. onnx's
        checker says so from IR version 8 on (where model-local functions exist); below it, it
        ignores them, yet ``lower`` raises the IR version for its own functions and would keep
        model-local functions that onnx then refuses. So the rules are checked here for those IR
        versions (at 8 and later, onnx's own finding is reported instead, once)."""
        if self.proto.ir_version >= 8 or not len(self.proto.functions):
            return
        seen: set[tuple[str, str, str]] = set()
        for i, function in enumerate(self.proto.functions):
            key = (function.domain, function.name, function.overload)
            if key in seen:
                self.report(
                    ValidationError(
                        element_label(f"functions[{i}]", function.name),
                        "another model-local function has the same id "
                        + ":".join(
                            k if isinstance(k, str) else repr(k) for k in key if k
                        ),  # onnx's: domain:name[:overload]
                        code="invalid_function",
                    )
                )
                return
            seen.add(key)
        functions = {(f.domain, f.name): i for i, f in enumerate(self.proto.functions)}
        calls = {
            key: [(n.domain, n.op_type) for n in self.proto.functions[i].node if (n.domain, n.op_type) in functions]
            for key, i in functions.items()
        }
        state: dict[tuple[str, str], int] = {}  # 1: on the current path, 2: done
        for start in functions:
            stack = [(start, iter(calls[start]))]
            path = [start]
            state[start] = state.get(start, 0) or 1
            if state[start] == 2:
                continue
            while stack:
                key, pending = stack[-1]
                callee = next(pending, None)
                if callee is None:
                    state[key] = 2
                    stack.pop()
                    path.pop()
                elif state.get(callee) == 1:
                    cycle = path[path.index(callee) :] + [callee]
                    i = functions[callee]
                    self.report(
                        ValidationError(
                            element_label(f"functions[{i}]", self.proto.functions[i].name),
                            "model-local functions must not be recursive: "
                            + " -> ".join(f"{d}::{n}" for d, n in cycle),
                            code="invalid_function",
                        )
                    )
                    return
                elif not state.get(callee):
                    state[callee] = 1
                    stack.append((callee, iter(calls[callee])))
                    path.append(callee)
        self._check_functions_as_onnx_does_from_ir_8()

    def _check_functions_as_onnx_does_from_ir_8(self) -> None:
        """onnx's own checks of model-local functions (opsets their nodes use, and the rest), on the
        functions alone in an empty model of IR 10, whatever the model's IR version: what the
        lowered model would refuse (a function calling a domain it does not import) is refused here."""
        shell = onnx.ModelProto(ir_version=10, graph=onnx.GraphProto(name="functions"))
        shell.opset_import.extend(
            onnx.OperatorSetIdProto.FromString(o.SerializeToString()) for o in self.proto.opset_import
        )
        shell.functions.extend(onnx.FunctionProto.FromString(f.SerializeToString()) for f in self.proto.functions)
        try:
            originals.check_model(shell, **getattr(self, "stock_options", {}))
        except onnx.checker.ValidationError as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            self.report(
                ValidationError(
                    "functions",
                    f"{reason} (onnx checks model-local functions from IR 8 on; lower() writes IR 8 or later)",
                    code="invalid_function",
                )
            )
        except (UnicodeDecodeError, ValueError, RuntimeError) as error:  # onnx's other failures, path lost
            self.report(
                ValidationError("functions", f"onnx cannot check them: {type(error).__name__}", code="invalid_function")
            )
