"""The checker's rules for declarations: concrete kinds, field and component names, constants,
static struct types, and each declaration's decoder and encoder (onnx's function checker, the
decoder safety policy, binding to the leaves, logical type inference)."""

from __future__ import annotations

import onnx

from onnx_struct.check import decoder_inputs as bindings
from onnx_struct.check import decoder_policy, inference
from onnx_struct.check.reporting import Reporter
from onnx_struct.errors import ValidationError
from onnx_struct.layout.table import LeafLookup, TypeTable, element_label, read_constant
from onnx_struct.payload import external
from onnx_struct.schema.model import StructTypeProto

CONCRETE_KINDS = ("array", "structure", "bit_packing")


class DeclarationRules(Reporter):
    """Needs ``self.table`` (the model's TypeTable) and ``self.proto`` (the model)."""

    table: TypeTable
    proto: onnx.ModelProto

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
                self.attempt(inference.logical_type, declaration, self.table, path, bound)


def check_function(function: onnx.FunctionProto, where: str, ir_version: int) -> bool:
    """A decoder/encoder as an ONNX function, with its own opset_import, and the structural rules
    of the decoder safety policy (:func:`onnx_struct.check.decoder_structure.check_structure`)."""
    decoder_policy.check_structure(function, where, ir_version)
    return True
