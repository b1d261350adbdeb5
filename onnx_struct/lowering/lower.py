"""``lower()``: a model with struct parts -> a plain ONNX model that any runtime runs.

Each struct value becomes its leaf tensors (initializers named ``"<value>::<leaf path>"``) plus one
call of its root decoder, registered once per distinct decoder as a model-local function, whose
output carries the struct value's name: the nodes that consumed the struct value now consume its
logical value, unchanged. An exactly typed struct graph input ``X`` becomes one graph input
``"X::<leaf path>"`` per payload leaf (its constants become initializers) plus the same call.

See docs/semantics.md, "Decoders, encoders and execution", for every decision taken here
(naming, external payloads, opsets, ``compact``).
"""

from __future__ import annotations

import dataclasses
import os

import onnx
from onnx import TensorProto, helper

from onnx_struct.check.checked import CheckedModel, checked_model
from onnx_struct.errors import ValidationError
from onnx_struct.functions import bindings
from onnx_struct.functions.models import (
    PRIVATE_DOMAIN,
    onnx_elem_type,
    registered_function,
    tensor_type,
)
from onnx_struct.layout.table import Leaf, element_label
from onnx_struct.lowering.execution.emit import in_memory_placeholder
from onnx_struct.lowering.leaf_tensors import dense_byte_run, leaf_array, leaf_to_tensor
from onnx_struct.lowering.names import SEPARATOR, leaf_tensor_name, read_names, short_name
from onnx_struct.lowering.opsets import reconcile_opsets
from onnx_struct.lowering.scope import has_struct_parts
from onnx_struct.payload import external
from onnx_struct.payload.values import constant_tensor, value_declaration
from onnx_struct.payload.view import StructView, view_of
from onnx_struct.schema.model import LoadedModel, ModelLike, StructTypeProto, load, to_onnx
from onnx_struct.schema.opaque import exact_index as _exact_index
from onnx_struct.schema.opaque import (
    innermost_type,
)
from onnx_struct.schema.opaque import opaque_inside as _opaque_inside
from onnx_struct.schema.projections import stock_view
from onnx_struct.schema.walk import walk_graphs, walk_nodes

# The highest IR version the oldest supported onnxruntime (pyproject: onnxruntime>=1.32) loads. A
# constant, not a probe of the installed onnxruntime: lowering never imports it, and its output
# does not depend on what is installed (tests/test_lower.py checks the constant against the probe).
ORT_MAX_IR_VERSION = 14
# The first IR version that has each leaf element type (onnx.proto's IR_VERSION comments).
_TYPE_IR = {
    TensorProto.FLOAT8E4M3FN: 9,
    TensorProto.FLOAT8E4M3FNUZ: 9,
    TensorProto.FLOAT8E5M2: 9,
    TensorProto.FLOAT8E5M2FNUZ: 9,
    **{
        getattr(TensorProto, n): ir
        for n, ir in (("UINT4", 10), ("INT4", 10), ("FLOAT4E2M1", 11))
        if hasattr(TensorProto, n)
    },
    **{
        getattr(TensorProto, n): ir
        for n, ir in (("FLOAT8E8M0", 12), ("UINT2", 13), ("INT2", 13))
        if hasattr(TensorProto, n)
    },
    **{getattr(TensorProto, n): 14 for n in ("FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n)},
}


@dataclasses.dataclass(frozen=True)
class StructInput:
    """How a struct-typed graph input was lowered: its payload leaves became graph inputs."""

    name: str
    type_index: int
    declaration: StructTypeProto
    leaf_inputs: dict[str, Leaf]  # lowered graph input name -> leaf (non-constant leaves only)


@dataclasses.dataclass
class Lowering:
    model: onnx.ModelProto
    struct_inputs: dict[str, StructInput]
    has_decoders: bool = False  # decoder functions were added (a model without them is stock's)
    # repacked weights the model holds placeholders for (lower_checked's in_memory), else empty
    arrays: dict = dataclasses.field(default_factory=dict)


def lower(
    model: ModelLike,
    *,
    compact: bool = False,
    base_dir: str | os.PathLike | None = None,
    keep_external: bool = True,
    execution: str = "decode",
) -> onnx.ModelProto:
    """A plain ONNX model computing what ``model`` computes, with decoders as local functions.

    A model without struct parts is returned as given (a copy, not checked: nothing in it is
    lowered, and a runtime judges it as it judges any model). Any other model is checked first
    (``check_model``); only the struct values the graph reads (subgraphs included) are lowered,
    and the IR version is raised only as far as what is added needs (docs/semantics.md,
    "Drop-in behaviour"). ``compact=True`` also lists every leaf
    initializer as a graph input (an *overridable* initializer): onnxruntime then does not
    constant-fold the decoders at session creation, so weights stay in their compact payload form
    in memory and are decoded on every run (see docs/semantics.md for measured peak memory).
    ``keep_external``: leaves of external payloads that are contiguous, byte-aligned runs of the
    file are referenced in place (same ``location``, offset and length), others are read into
    ``raw_data``; the lowered model must then be saved next to the original (same directory).
    ``execution="quantized"``: weights of MatMul/Gemm/Gather in a registered block format stay
    quantized (standard blocked DequantizeLinear, see docs/execution.md); ``"decode"`` (the
    default, the reference) decodes every struct value with its own decoder.

    Args:
        model: the model (any form: ModelProto, bytes, path, LoadedModel).
        compact: list leaf initializers as graph inputs, so weights stay compact in memory.
        base_dir: the directory external payloads are read from (default: the model file's).
        keep_external: reference contiguous external leaves in place instead of reading them.
        execution: "decode" (every value decoded by its decoder) or "quantized".

    Returns:
        A new plain ``onnx.ModelProto``.

    Raises:
        ValidationError: the model is invalid (as :func:`onnx_struct.check_model` raises it).
        ValueError: ``execution`` is neither "decode" nor "quantized" (for a model with struct
            parts).
    """
    return lower_model(
        model, compact=compact, base_dir=base_dir, keep_external=keep_external, execution=execution
    ).model


def lower_model(
    model: ModelLike,
    *,
    compact: bool = False,
    base_dir: str | os.PathLike | None = None,
    keep_external: bool = True,
    execution: str = "decode",
    accuracy_level: int | None = None,
    stock_check: bool = True,
) -> Lowering:
    """:func:`lower`, also returning how struct-typed graph inputs map to lowered leaf inputs.

    ``accuracy_level`` (``execution="quantized"`` only): emit onnxruntime's ``MatMulNBits``
    directly; ``stock_check=False``: the stock part is left to the runtime
    (:func:`onnx_struct.check.checker.check_struct_parts`)."""
    loaded = load(model, base_dir)
    if not has_struct_parts(loaded):
        return Lowering(_as_given(model, loaded), {})
    checked = checked_model(loaded, stock_check=stock_check)
    return lower_checked(
        checked, compact=compact, keep_external=keep_external, execution=execution, accuracy_level=accuracy_level
    )


def lower_checked(
    checked: CheckedModel,
    *,
    compact: bool = False,
    keep_external: bool = True,
    execution: str = "decode",
    accuracy_level: int | None = None,
    in_memory: bool = False,
    leaves_in_memory: bool = False,
) -> Lowering:
    """:func:`lower` of a model with struct parts, checked already, on its declaration table.

    Args:
        checked: the model and what its check built (:func:`onnx_struct.check.checked.checked_model`).
        compact, keep_external, execution: as :func:`lower`'s.
        accuracy_level: for ``execution="quantized"``, emit onnxruntime's ``MatMulNBits`` directly.
        in_memory: for ``execution="quantized"``, the repacked arrays are returned in
            ``Lowering.arrays`` and the model holds placeholders for them
            (:func:`onnx_struct.lowering.execution.rewrite_for_execution`).
        leaves_in_memory: the payload leaves numpy holds as they are (not referenced in place in
            an external file) go to ``Lowering.arrays`` too, the model holding placeholders for
            them, so that they are never copied into the model's bytes.

    Returns:
        The :class:`Lowering`: the lowered model, its struct inputs and the repacked arrays.

    Raises:
        ValidationError: a part that cannot be lowered. ValueError: an unknown ``execution``.
    """
    from onnx_struct.lowering import execution as quantized  # noqa: PLC0415 - only this mode needs it

    if execution not in quantized.EXECUTION_MODES:
        raise ValueError(f"execution must be one of {quantized.EXECUTION_MODES}, not {execution!r}")
    arrays: dict = {}
    if execution == "quantized":
        rewrite = quantized.rewrite_for_execution(checked, accuracy_level=accuracy_level, in_memory=in_memory)
        checked, arrays = rewrite.checked, rewrite.arrays
    loaded = checked.loaded
    stock = stock_view(loaded, external_initializers=False)
    lowering = _Lowerer(checked, compact, keep_external, stock, arrays if leaves_in_memory else None).run()
    lowering.arrays = arrays
    return lowering


@dataclasses.dataclass(frozen=True)
class _Binding:
    declaration: StructTypeProto  # held, so that its id (the key) is not reused
    decoder: onnx.FunctionProto
    decoder_where: str
    bound: dict  # decoder input name -> Leaf
    inputs: list[str]  # the decoder's input names, in order


class _Lowerer:
    def __init__(self, checked: CheckedModel, compact: bool, keep_external: bool, stock, arrays=None) -> None:
        self.checked = checked
        self.arrays = arrays  # leaf name -> its array, when the leaves are handed over in memory
        self.loaded = checked.loaded
        self.compact = compact
        self.keep_external = keep_external
        self.out: onnx.ModelProto = stock
        self.types = checked.types
        self.table = checked.table
        self.functions: dict[bytes, onnx.FunctionProto] = {}
        self.function_paths: dict[bytes, str] = {}
        # id(decoder) -> (the decoder, its key): a decoder shared by many values is serialized
        # once (the reference held keeps the id from being reused).
        self.function_keys: dict[int, tuple[onnx.FunctionProto, bytes]] = {}
        self.function_ids = {(f.domain, f.name) for f in stock.functions}  # taken by the model's own, then decoders
        self.bindings: dict[int, _Binding] = {}  # id(declaration) -> its decoder's binding
        self.calls: list[onnx.NodeProto] = []
        self.leaf_types: set[int] = set()
        self.struct_inputs: dict[str, StructInput] = {}
        self.decoded: list[str] = []  # names the decoder calls produce (struct values and inputs)
        graph = stock.graph
        self.read = read_names(graph)  # a struct value no one reads is not lowered (scope.py)
        self.taken = {t.name for t in graph.initializer} | {i.name for i in graph.input}
        self.taken |= {o for n in walk_nodes(graph) for o in n.output}

    def run(self) -> Lowering:
        graph = self.out.graph
        del graph.input[len(self.loaded.proto.graph.input) :]  # the struct values stock_view added
        self.lower_inputs()
        for k, value in enumerate(self.loaded.struct_values):
            self.lower_value(k, value)
        self.retype_outputs()
        self.check_no_struct_types()
        self.reconcile_opsets()  # may replace self.out (version conversion of the graph)
        graph = self.out.graph
        nodes = list(graph.node)
        del graph.node[:]
        graph.node.extend(self.calls + nodes)  # decoders first: they only read leaves
        self.out.functions.extend(self.functions.values())
        source_ir = self.out.ir_version
        self.out.ir_version = self.ir_version()
        if source_ir < 4 <= self.out.ir_version:
            _initializers_stay_constant(self.out.graph)
        return Lowering(self.out, self.struct_inputs, bool(self.functions))

    # ------------------------------------------------------------------ names and functions
    def claim(self, name: str, where: str) -> str:
        if name in self.taken:
            raise ValidationError(where, f"lowered leaf name {name!r} is already used in the graph", code="name_clash")
        self.taken.add(name)
        return name

    def register(self, decoder: onnx.FunctionProto, where: str) -> onnx.FunctionProto:
        """The model-local function for ``decoder``: one per distinct decoder; a different
        decoder reusing a (domain, name) already registered gets a suffixed name."""
        known = self.function_keys.get(id(decoder))
        if known is None:
            known = self.function_keys[id(decoder)] = (decoder, decoder.SerializeToString(deterministic=True))
        key = known[1]
        if key in self.functions:
            return self.functions[key]
        fn = registered_function(decoder)
        fn.name = short_name(fn.name)  # each call node repeats it
        base, k = fn.name, 1
        while (fn.domain, fn.name) in self.function_ids:
            k += 1
            fn.name = f"{base}_{k}"
        self.function_ids.add((fn.domain, fn.name))
        self.functions[key] = fn
        self.function_paths[key] = where
        return fn

    def decoder_binding(self, declaration: StructTypeProto, where: str, leaves) -> _Binding:
        """The declaration's decoder bound to its leaves, once per declaration: values of one
        declaration share it (every read of a name from protobuf copies it, and labels repeat
        names, so N values must not cost N copies of a long name)."""
        known = self.bindings.get(id(declaration))
        if known is None:  # the declaration is held in the entry, so its id is not reused
            decoder = declaration.decoder
            decoder_where = bindings.function_label(f"{where}.decoder", decoder)
            bound = bindings.bind_decoder(decoder, leaves, f"{where}.decoder")
            known = self.bindings[id(declaration)] = _Binding(
                declaration, decoder, decoder_where, bound, list(decoder.input)
            )
        return known

    def call(self, binding: _Binding, output: str, inputs: dict[str, str]) -> None:
        self.decoded.append(output)
        fn = self.register(binding.decoder, binding.decoder_where)
        self.calls.append(
            helper.make_node(
                fn.name,
                [inputs[name] for name in binding.inputs],
                [output],
                domain=fn.domain,
                name=f"decode{SEPARATOR}{output}",
            )
        )

    # ------------------------------------------------------------------ struct values
    def lower_value(self, k: int, value) -> None:
        where = element_label(f"graph.struct_initializer[{k}]", value.name)
        if not value_declaration(value, self.table, where).HasField("decoder"):
            return  # never consumed (the checker ensures it): it has no logical value to lower
        if value.name not in self.read:
            return  # no node and no output reads it: neither its decoder nor its weights are needed
        # The same path and errors as check and view; the model's table: sizes computed once per declaration.
        resolved = self.checked.resolved(k, where)
        declaration, decl_where = resolved.declaration, resolved.declaration_path
        struct_view = view_of(resolved)
        binding = self.decoder_binding(declaration, decl_where, struct_view.layout)
        bound = binding.bound
        ref = (
            external.parse_external_data(value.external_data, f"{where}.external_data")
            if len(value.external_data)
            else None
        )
        names = {}
        for input_name, leaf in bound.items():
            tensor_name = self.claim(leaf_tensor_name(value.name, leaf.path), where)
            names[input_name] = tensor_name
            tensor = self.leaf_tensor(tensor_name, leaf, struct_view, ref)
            self.out.graph.initializer.append(tensor)
            if self.compact and leaf.kind != "constant":
                self.out.graph.input.append(
                    helper.make_value_info(tensor_name, tensor_type(tensor.data_type, leaf.shape))
                )
        self.call(binding, value.name, names)

    def leaf_tensor(self, name: str, leaf: Leaf, struct_view: StructView, ref) -> TensorProto:
        if leaf.kind == "constant":
            tensor = constant_tensor(leaf, name)
            self.leaf_types.add(tensor.data_type)
            return tensor
        elem_type = onnx_elem_type(leaf)
        self.leaf_types.add(elem_type)
        run = dense_byte_run(leaf)
        if ref is not None and self.keep_external and run is not None:
            tensor = TensorProto(name=name, data_type=elem_type, dims=leaf.shape)
            tensor.data_location = TensorProto.EXTERNAL
            for key, text in (("location", ref.location), ("offset", ref.offset + run[0]), ("length", run[1])):
                tensor.external_data.add(key=key, value=str(text))
            return tensor
        array = leaf_array(leaf, struct_view, elem_type) if self.arrays is not None else None
        if array is not None:
            self.arrays[name] = array
            return in_memory_placeholder(name, elem_type, leaf.shape, array.nbytes)
        return leaf_to_tensor(name, leaf, struct_view, elem_type)

    # ------------------------------------------------------------------ struct inputs and types
    def lower_inputs(self) -> None:
        graph = self.out.graph
        kept = []
        declared = self.loaded.proto.graph.input  # the same inputs, in order, with their struct types
        for j, info in enumerate(graph.input):
            where = element_label(f"graph.input[{j}]", info.name)
            which = info.type.WhichOneof("value")
            # Only a real struct_type is a struct input: a stock Opaque type of the same domain and
            # name as a stand-in is the model's own and stays as it is.
            if not _struct_inside(declared[j].type):
                kept.append(info)
                continue
            index = _exact_index(info.type) if which == "opaque_type" else None
            if index is None:
                what = (
                    "the unconstrained struct category"
                    if which == "opaque_type"
                    else "a struct type nested in a " + which
                )
                raise ValidationError(
                    where,
                    f"cannot lower an input of {what}: its leaves are unknown until run time; "
                    "declare the input with an exact type_index",
                    code="cannot_lower",
                )
            declaration = self.table.declaration(index, where)
            decl_where = element_label(self.table.path(index), declaration.name)
            if not declaration.HasField("decoder"):
                raise ValidationError(
                    where, f"cannot lower a struct input whose type {decl_where} has no decoder", code="cannot_lower"
                )
            binding = self.decoder_binding(declaration, decl_where, self.table.leaves(declaration, decl_where))
            bound = binding.bound
            names, leaf_inputs = {}, {}
            for input_name, leaf in bound.items():
                tensor_name = self.claim(leaf_tensor_name(info.name, leaf.path), where)
                names[input_name] = tensor_name
                if leaf.kind == "constant":
                    graph.initializer.append(constant_tensor(leaf, tensor_name))
                    continue
                elem_type = onnx_elem_type(leaf)
                self.leaf_types.add(elem_type)
                kept.append(helper.make_value_info(tensor_name, tensor_type(elem_type, leaf.shape)))
                leaf_inputs[tensor_name] = leaf
            self.struct_inputs[info.name] = StructInput(info.name, index, declaration, leaf_inputs)
            self.call(binding, info.name, names)
        del graph.input[:]
        graph.input.extend(kept)

    def retype_outputs(self) -> None:
        """Struct-typed outputs and value_info of the main graph: an output becomes the logical
        value (logical type), a value_info entry is dropped (inference will retype it)."""
        graph = self.out.graph
        values = {v.name: (k, v) for k, v in enumerate(self.loaded.struct_values)}
        for j, info in enumerate(graph.output):
            if not _opaque_inside(info.type):
                continue
            where = element_label(f"graph.output[{j}]", info.name)
            logical = None
            if info.name in values:
                k, value = values[info.name]
                logical = self.types.of_value(value, element_label(f"graph.struct_initializer[{k}]", value.name))
            elif info.name in self.struct_inputs:
                logical = self.types.of_index(self.struct_inputs[info.name].type_index)
            elif _exact_index(info.type) is not None:
                logical = self.types.of_index(_exact_index(info.type))
            if logical is None:
                raise ValidationError(
                    where, "cannot lower a struct-typed output without a decoder for its type", code="cannot_lower"
                )
            info.type.CopyFrom(logical)
        kept = [info for info in graph.value_info if not _opaque_inside(info.type)]
        del graph.value_info[:]
        graph.value_info.extend(kept)

    def check_no_struct_types(self) -> None:
        for path, graph in walk_graphs(self.out.graph, "graph"):
            if path == "graph":
                continue
            for field in ("input", "output", "value_info"):
                for j, info in enumerate(getattr(graph, field)):
                    if _opaque_inside(info.type):
                        raise ValidationError(
                            element_label(f"{path}.{field}[{j}]", info.name),
                            "struct types in subgraph signatures cannot be lowered",
                            code="cannot_lower",
                        )

    # ------------------------------------------------------------------ versions
    def reconcile_opsets(self) -> None:
        decoders = [(self.function_paths[k], fn) for k, fn in self.functions.items()]
        domains = [fn.domain for fn in self.functions.values()]
        self.out = reconcile_opsets(self.out, decoders, domains, self.logical_inputs)

    def logical_inputs(self) -> list[onnx.ValueInfoProto]:
        values = {v.name: (k, v) for k, v in enumerate(self.loaded.struct_values)}
        infos = []
        for name in self.decoded:
            if name in self.struct_inputs:
                logical = self.types.of_index(self.struct_inputs[name].type_index)
            else:
                k, value = values[name]
                logical = self.types.of_value(value, element_label(f"graph.struct_initializer[{k}]", name))
            infos.append(helper.make_value_info(name, logical))
        return infos

    def ir_version(self) -> int:
        """The source's IR version, raised to what the opsets, local functions (8, when decoders
        were added) and leaf types need; lowered to ORT_MAX_IR_VERSION when the source's is
        higher than anything needs."""
        needed = max(
            [8 if self.functions else 0, helper.find_min_ir_version_for(list(self.out.opset_import), True)]
            + [_TYPE_IR.get(t, 0) for t in self.leaf_types]
        )
        chosen = max(needed, self.out.ir_version)
        if chosen > ORT_MAX_IR_VERSION >= needed:
            chosen = ORT_MAX_IR_VERSION
        return min(chosen, max(needed, onnx.IR_VERSION))


# ---------------------------------------------------------------------- helpers
def _as_given(model: ModelLike, loaded: LoadedModel) -> onnx.ModelProto:
    """A model without struct parts, as a stock ModelProto equal to what was given."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    data = loaded.serialized
    return onnx.ModelProto.FromString(data) if data is not None else to_onnx(loaded.proto)


def _initializers_stay_constant(graph: onnx.GraphProto) -> None:
    """Before IR 4 every initializer is also a graph input and runtimes treat it as a constant;
    from IR 4 an initializer listed as an input is an overridable default (onnxruntime then
    neither folds it nor hides it). A model raised past IR 3 keeps its meaning: the main graph's
    inputs that name an initializer are dropped."""
    constants = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    kept = [info for info in graph.input if info.name not in constants]
    if len(kept) != len(graph.input):
        del graph.input[:]
        graph.input.extend(kept)


def _struct_inside(type_proto) -> bool:
    """True when an overlay TypeProto is, or contains, a struct_type."""
    return innermost_type(type_proto).WhichOneof("value") == "struct_type"


__all__ = [
    "lower",
    "lower_model",
    "lower_checked",
    "leaf_tensor_name",
    "Lowering",
    "StructInput",
    "SEPARATOR",
    "PRIVATE_DOMAIN",
]
