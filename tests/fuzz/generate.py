"""Structure-aware generation: fuzz bytes -> a model with struct parts (a ``Case``).

The bytes drive a grammar of the proposal's messages rather than the wire format, so most inputs
reach deep into the checker: declarations of every kind (and none), references in and out of
range (cycles, long chains, diamonds), fields carrying a type, a constant, both or neither on the
wire, constants of every dtype, dimensions near 0, 2^63 and 2^64, names that are empty, dotted,
duplicated or not UTF-8, values inline or external (hostile offsets, lengths and locations),
struct-typed graph inputs, outputs and value_info, decoders from a menu of operators (casts,
reshapes, loops, huge ConstantOfShape/Tile, external Constants, If, local and self-recursive
functions), subgraphs and training graphs holding struct values. Byte- and field-level mutations
of the serialized model then reach the wire-level oddities. Mode 0 instead takes the remaining
bytes as the model itself, so the seed corpus (valid models) is mutated by libFuzzer directly.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto as T
from onnx import helper as oh

from onnx_struct._proto import pb

try:  # run as tests/fuzz/fuzz.py (tests/ on sys.path) or imported by pytest as fuzz.*
    from fuzz.cases import Case
    from fuzz.wire import NON_UTF8, Draw, length_delimited, mutate, poison_utf8, varint_field
except ImportError:  # pragma: no cover
    from cases import Case
    from wire import NON_UTF8, Draw, length_delimited, mutate, poison_utf8, varint_field

COMMON_TYPES = [T.FLOAT, T.UINT8, T.INT8, T.FLOAT16, T.BFLOAT16, T.INT32, T.INT64, T.UINT4, T.INT4, T.BOOL]
OTHER_TYPES = [T.DOUBLE, T.UINT16, T.INT16, T.UINT32, T.UINT64, 17, 18, 19, 20, 23, 24, 25, 26, 27, 28]
BAD_TYPES = [T.UNDEFINED, T.STRING, T.COMPLEX64, 255, 256, -1]
# Element widths in bits (an independent table, used only to size payloads so values get past the
# size check; a wrong entry just makes more values fail it).
WIDTH = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64, 15: 128}
WIDTH.update({16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2, 27: 6, 28: 6})
EDGE_DIMS = [0, 1, 2, 3, 7, 8, 128, 4096, 2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
NAMES = ["values", "scale", "zero_point", "a", "b", "d", "", "x.y", "a.b.c", NON_UTF8, "q" * 100, "w0", "r"]
LOCATIONS = ["payload.bin", "payload.bin", "sub/p.bin", "../outside.bin", "/etc/hostname", "missing.bin", "", "."]
LOCATIONS += ["model.onnx", "sub", "payload.bin\x00x", NON_UTF8, "sub/../payload.bin", "./payload.bin"]
NUMBERS = ["0", "1", "2", "16", "64", "-1", "1e3", " 8", "+4", "\u0663", "9" * 40, "18446744073709551615"]
NUMBERS += ["18446744073709551616", "0x10", "", "4294967296"]
MAX_INLINE = 1 << 16  # bytes of inline payload the generator writes at most
MAX_FILE = 1 << 24  # bytes of a sparse external file


RAW_PREFIX = b"\x00"  # mode 0, then full_check and value choices, then the model's bytes


def build_case(data: bytes) -> Case:
    draw = Draw(data)
    mode = draw.int(0, 15)
    if mode == 0:  # the rest is the model itself (seeds are valid models)
        case = Case(full_check=draw.bool(30), files={"payload.bin": bytes(range(256)) * 4})
        case.value = draw.pick(["weight", "packed", "inline", "w0", "nope"])
        case.model = draw.rest()
        return case
    generator = _ModelGenerator(draw)
    case = generator.case(big=mode == 1)
    # Invalid UTF-8 makes protobuf refuse the whole model, so only some inputs keep it.
    model = poison_utf8(case.model) if draw.bool(8) else case.model.replace(NON_UTF8.encode(), b"_nonutf8_")
    if draw.bool(15):  # most byte mutations make protobuf refuse the model; keep them a minority
        model = mutate(model, draw, draw.int(1, 3))
    case.model = model
    return case


class _ModelGenerator:
    def __init__(self, draw: Draw) -> None:
        self.draw = draw
        self.shadow: list[tuple] = []  # per declaration: what the size function needs
        self.names: list[str] = []
        self.case_files: dict[str, bytes | int] = {}
        self.big_wire: tuple[int, int] | None = None  # the cached big shape that starts decls

    # -- small parts --------------------------------------------------------------------------
    def name(self) -> str:
        if self.names and self.draw.bool(15):
            return self.draw.pick(self.names)  # a duplicate
        name = self.draw.pick(NAMES)
        self.names.append(name)
        return name

    def dim(self) -> int:
        return self.draw.int(0, 40) if self.draw.bool(75) else self.draw.pick(EDGE_DIMS)

    def elem_type(self) -> int:
        choice = self.draw.int(0, 19)
        if choice < 14:
            return COMMON_TYPES[choice % len(COMMON_TYPES)]
        if choice < 18:
            return self.draw.pick(OTHER_TYPES)
        return self.draw.pick(BAD_TYPES)

    def index(self, count: int) -> int:
        if count and self.draw.bool(80):
            return self.draw.int(0, count - 1)
        return self.draw.pick([-1, count, count + 1, 2**31 - 1, -(2**31)])

    def tensor_type(self) -> tuple[pb.TypeProto, tuple]:
        elem = self.elem_type()
        if self.draw.bool(10):  # no shape, or a symbolic dimension: not a static leaf
            proto = pb.TypeProto(tensor_type=onnx.helper.make_tensor_type_proto(elem, None).tensor_type)
            if self.draw.bool():
                proto.tensor_type.shape.dim.add(dim_param="N")
            return proto, ("bad",)
        shape = [self.dim() for _ in range(self.draw.int(0, 3))]
        proto = pb.TypeProto()
        proto.tensor_type.elem_type = elem
        proto.tensor_type.shape.SetInParent()
        for d in shape:
            proto.tensor_type.shape.dim.add(dim_value=min(d, 2**63 - 1) if d < 2**63 else -1 - (d - 2**63) % 2**63)
        return proto, ("tensor", elem, tuple(shape))

    def type_proto(self, count: int) -> tuple[pb.TypeProto, tuple]:
        choice = self.draw.int(0, 19)
        if choice < 11:
            return self.tensor_type()
        if choice < 17:
            index = self.index(count)
            return pb.TypeProto(struct_type=pb.StructTypeProto(type_index=index)), ("ref", index)
        if choice == 17:
            return pb.TypeProto(struct_type=pb.StructTypeProto()), ("bad",)
        element, _ = self.tensor_type()
        wrap = self.draw.pick(["sequence", "optional", "map", "opaque", "sparse"])
        if wrap == "sequence":
            return pb.TypeProto(sequence_type=pb.TypeProto.Sequence(elem_type=element)), ("bad",)
        if wrap == "optional":
            return pb.TypeProto(optional_type=pb.TypeProto.Optional(elem_type=element)), ("bad",)
        if wrap == "map":
            return pb.TypeProto(map_type=pb.TypeProto.Map(key_type=T.INT64, value_type=element)), ("bad",)
        if wrap == "opaque":
            name = self.draw.pick(["struct_types.0", "struct_types.\u00b2", "x"])
            return pb.TypeProto(opaque_type=onnx.TypeProto.Opaque(domain="onnx_struct", name=name)), ("bad",)
        return pb.TypeProto(sparse_tensor_type=onnx.TypeProto.SparseTensor(elem_type=T.FLOAT)), ("bad",)

    def external_entries(self, nbytes: int | None) -> tuple[list[tuple[str, str]], bool]:
        """(key, value) entries of an external reference, and whether it leaves the model dir."""
        location = self.draw.pick(LOCATIONS)
        entries = [("location", location)]
        if self.draw.bool(70):
            entries.append(("offset", self.draw.pick(NUMBERS) if self.draw.bool(30) else "0"))
        if self.draw.bool(70):
            length = str(nbytes) if nbytes is not None and self.draw.bool(70) else self.draw.pick(NUMBERS)
            entries.append(("length", length))
        if self.draw.bool(10):
            entries.append(self.draw.pick([("checksum", "abc"), ("unknown", "1"), ("location", "payload.bin")]))
        if location in ("payload.bin", "sub/p.bin", "./payload.bin", "sub/../payload.bin") or self.draw.bool(5):
            name = "sub/p.bin" if location == "sub/p.bin" else "payload.bin"
            size = (nbytes or 0) + self.draw.pick([0, 0, 0, 1, -1, 100])
            if size > MAX_INLINE or self.draw.bool(5):
                self.case_files[name] = max(0, min(size, MAX_FILE))
            else:
                self.case_files[name] = bytes(i * 37 % 256 for i in range(max(0, size)))
        leaves = location.startswith(("/", "..")) or "/../" in location
        return entries, leaves

    def constant(self) -> onnx.TensorProto:
        tensor = onnx.TensorProto(name=self.draw.pick(["k", "", "scale"]))
        tensor.data_type = self.elem_type()
        dims = [self.dim() for _ in range(self.draw.int(0, 2))]
        tensor.dims.extend(d if d < 2**63 else -1 for d in dims)
        count = 1
        for d in dims:
            count *= d
        way = self.draw.int(0, 5)
        if way <= 2:
            width = WIDTH.get(tensor.data_type, 8)
            n = (count * width + 7) // 8 if count < 4096 else self.draw.int(0, 64)
            n = max(0, n + self.draw.pick([0, 0, 0, 1, -1]))
            tensor.raw_data = bytes(i % 251 for i in range(n))
        elif way == 3:
            tensor.float_data.extend([0.5] * min(count, 64) if self.draw.bool(70) else [1.0])
        elif way == 4:
            tensor.int32_data.extend([1] * min(count, 64))
        else:
            tensor.data_location = T.EXTERNAL
            entries, _ = self.external_entries(None)
            for key, value in entries:
                tensor.external_data.add(key=key, value=value)
        return tensor

    # -- declarations ------------------------------------------------------------------------
    def field(self, count: int) -> tuple[bytes, tuple, str]:
        name = self.name()
        mode = self.draw.int(0, 19)
        base = pb.StructTypeProto.Field(name=name)
        if mode < 11:
            type_proto, shadow = self.type_proto(count)
            base.type.CopyFrom(type_proto)
            return base.SerializeToString(), shadow, name
        if mode < 18:
            base.constant.CopyFrom(self.constant())
            return base.SerializeToString(), ("const",), name
        if mode == 18:  # both members of the oneof on the wire, in either order
            type_proto, shadow = self.type_proto(count)
            typed = pb.StructTypeProto.Field(type=type_proto).SerializeToString()
            constant = pb.StructTypeProto.Field(constant=self.constant()).SerializeToString()
            parts = [base.SerializeToString(), typed, constant] if self.draw.bool() else [constant, typed]
            return b"".join(parts), ("bad",), name
        return base.SerializeToString(), ("bad",), name  # neither

    def decoder(self, inputs: list[str]) -> onnx.FunctionProto:
        return _DecoderGenerator(self.draw).function(inputs)

    def declaration(self, count: int) -> bytes:
        draw = self.draw
        kind = draw.int(0, 19)
        decl = pb.StructTypeProto()
        extra = b""
        leaf_names = [""]
        if kind < 5:
            element, shadow = self.type_proto(count)
            dim = self.dim()
            decl.array.element_type.CopyFrom(element)
            decl.array.dimension = dim
            self.shadow.append(("array", shadow, dim))
        elif kind < 12:
            fields, shadows, leaf_names = [], [], []
            for _ in range(draw.int(0, 4)):
                wire, shadow, name = self.field(count)
                fields.append(length_delimited(1, wire))
                shadows.append(shadow)
                if shadow[0] != "const":
                    leaf_names.append(name)
            extra = length_delimited(2, b"".join(fields))
            self.shadow.append(("structure", shadows))
        elif kind < 16:
            widths = [draw.pick([1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 0, 65, 2**32 - 1]) for _ in range(draw.int(0, 4))]
            dim = self.dim()
            for width in widths:
                decl.bit_packing.component.add(name=self.name(), bit_width=width)
            decl.bit_packing.dimension = dim
            self.shadow.append(("bits", widths, dim))
            leaf_names = [c.name for c in decl.bit_packing.component]
        elif kind < 19:
            index = self.index(count)
            decl.type_index = index
            self.shadow.append(("ref", index))
        else:
            self.shadow.append(("bad",))  # no kind
        if draw.bool(4):  # a second kind on the wire
            extra += pb.StructTypeProto(type_index=self.index(count)).SerializeToString()
        if draw.bool(50):
            decl.decoder.ParseFromString(self.decoder(leaf_names).SerializeToString())
        if draw.bool(5):
            decl.encoder.ParseFromString(self.decoder(["x"]).SerializeToString())
        if draw.bool(40):
            decl.name = self.name()
        if draw.bool(5):
            decl.metadata_props.add(key=self.name(), value="v")
        return decl.SerializeToString() + extra

    def big_declarations(self) -> list[bytes]:
        """The shapes that make naive algorithms quadratic or exponential, at fuzz-chosen scale."""
        # 20,000 declarations cost up to a second each (validate reports every one): a twentieth
        # of the big cases, so that they do not set the campaign's pace (the smaller sizes take the
        # same code paths; tests/adversarial holds the 20,000-declaration cases under limits).
        n = self.draw.pick([20, 100, 500, 2000] * 5 + [20000])
        shape = self.draw.int(0, 4)
        if shape == 4:  # one huge array of INT4 with a Cast decoder
            decl = pb.StructTypeProto()
            decl.array.element_type.tensor_type.elem_type = T.INT4
            decl.array.element_type.tensor_type.shape.SetInParent()
            decl.array.dimension = n * 5000
            decl.decoder.ParseFromString(
                _DecoderGenerator(self.draw).function([""], force_cast=True).SerializeToString()
            )
            self.shadow.append(("array", ("tensor", T.INT4, ()), n * 5000))
            return [decl.SerializeToString()]
        self.shadow.extend([("bad",)] * n)
        self.big_wire = (n, shape)
        return list(_big_shape(n, shape))

    # -- sizes (an independent sketch of the proposal's size function) ------------------------
    def size_bits(self, shadow: tuple, depth: int = 0) -> int | None:
        if depth > 40:
            return None
        kind = shadow[0]
        if kind == "tensor":
            width = WIDTH.get(shadow[1])
            if width is None:
                return None
            count = 1
            for d in shadow[2]:
                count *= d
            return count * width
        if kind == "ref":
            index = shadow[1]
            return self.size_bits(self.shadow[index], depth + 1) if 0 <= index < len(self.shadow) else None
        if kind == "array":
            element = self.size_bits(shadow[1], depth + 1)
            return None if element is None else element * shadow[2]
        if kind == "structure":
            total = 0
            for field in shadow[1]:
                size = 0 if field[0] == "const" else self.size_bits(field, depth + 1)
                if size is None:
                    return None
                total += size
            return total
        if kind == "bits":
            return sum(shadow[1]) * shadow[2]
        return None

    # -- the model -----------------------------------------------------------------------------
    def struct_value(self, count: int, decls: list[bytes], name: str) -> tuple[bytes, bool]:
        draw = self.draw
        value = pb.StructProto(name=name)
        extra = b""
        if count and draw.bool(85):
            index = self.index(count)
            value.type = index
            shadow = self.shadow[index] if 0 <= index < len(self.shadow) else ("bad",)
        elif decls and draw.bool(70):
            which = draw.int(0, len(decls) - 1)
            value.type = -1
            extra = length_delimited(2, decls[which])
            shadow = self.shadow[which]
        else:
            value.type = draw.pick([-1, 0, 5])
            shadow = ("bad",)
        bits = self.size_bits(shadow)
        nbytes = None if bits is None else (bits + 7) // 8
        leaves_dir = False
        if draw.bool(70):
            n = nbytes if nbytes is not None and draw.bool(85) else draw.int(0, 64)
            n = max(0, n + draw.pick([0, 0, 0, 0, 1, -1]))
            if n <= MAX_INLINE:
                value.raw_data = bytes(i * 7 % 256 for i in range(n))
        else:
            entries, leaves_dir = self.external_entries(nbytes)
            for key, val in entries:
                value.external_data.add(key=key, value=val)
            if draw.bool(5):
                value.raw_data = b"\x00"
        return value.SerializeToString() + extra, leaves_dir

    def graph(self, count: int, decls: list[bytes], depth: int = 0) -> tuple[bytes, list[str], bool]:
        draw = self.draw
        graph = pb.GraphProto(name="g" if depth == 0 else f"sub{depth}")
        x = pb.ValueInfoProto(name="X")
        x.type.tensor_type.elem_type = T.FLOAT
        x.type.tensor_type.shape.dim.add(dim_value=1)
        y = pb.ValueInfoProto(name="Y")
        y.type.CopyFrom(x.type)
        graph.input.append(x)
        graph.output.append(y)
        graph.node.add(op_type="Identity", input=["X"], output=["Y"])
        values, names, leaves_dir = [], [], []
        for i in range(draw.int(0, 3) if depth == 0 else draw.int(0, 1)):
            name = f"w{i}" if draw.bool(70) else self.name()
            wire, leaves = self.struct_value(count, decls, name)
            values.append(length_delimited(17, wire))
            names.append(name)
            leaves_dir.append(leaves)
        for name in names:
            if draw.bool(25):  # a stock node consuming the struct value
                graph.node.add(op_type=draw.pick(["Relu", "Identity", "Cast"]), input=[name], output=[name + "_out"])
                if draw.bool():
                    graph.output.add(name=name + "_out").type.CopyFrom(self.type_proto(count)[0])
        for _ in range(draw.int(0, 2)):  # struct-typed inputs, outputs, value_info
            info = pb.ValueInfoProto(name=draw.pick(["s", "t", "X", "w0"]))
            if draw.bool(70):
                info.type.struct_type.SetInParent()
                if draw.bool(70):
                    info.type.struct_type.type_index = self.index(count)
            else:
                info.type.CopyFrom(self.type_proto(count)[0])
            where = draw.int(0, 2)
            if where == 0:
                graph.input.append(info)
                if draw.bool(60):
                    graph.node.add(
                        op_type=draw.pick(["Identity", "Relu"]), input=[info.name], output=[info.name + "_o"]
                    )
                    out = graph.output.add(name=info.name + "_o")
                    out.type.struct_type.type_index = self.index(count)
            elif where == 1:
                graph.output.append(info)
            else:
                graph.value_info.append(info)
        if depth < 2 and draw.bool(12):  # an If whose branches hold struct values
            cond = graph.input.add(name="c")
            cond.type.tensor_type.elem_type = T.BOOL
            cond.type.tensor_type.shape.SetInParent()
            branches = []
            for _ in range(2):
                body, sub_names, _ = self.graph(count, decls, depth + 1)
                branches.append(body)
            node = graph.node.add(op_type="If", input=["c"], output=["if_out"])
            for attr_name, body in zip(("then_branch", "else_branch"), branches, strict=True):
                attr = node.attribute.add(name=attr_name, type=onnx.AttributeProto.GRAPH)
                attr.g.ParseFromString(body)
            graph.output.add(name="if_out").type.CopyFrom(x.type)
        extra = b"".join(values)
        if draw.bool(3):
            extra += varint_field(17, 5)  # struct_initializer with the wrong wire type
        picked = any(leaves_dir[:1])
        return graph.SerializeToString() + extra, names, picked

    def case(self, big: bool) -> Case:
        draw = self.draw
        decls = self.big_declarations() if big else []
        for _ in range(draw.int(0, 6)):
            decls.append(self.declaration(len(decls) + draw.int(0, 3)))
        count = len(decls)
        model = pb.ModelProto(ir_version=draw.pick([10, 10, 10, 3, 11, 99]), producer_name="fuzz")
        model.opset_import.add(domain="", version=draw.pick([21, 21, 21, 1, 99, 25, 17]))
        if draw.bool(20):
            model.opset_import.add(domain=draw.pick(["local", "t", ""]), version=1)
        for function in _DecoderGenerator(draw).model_functions():
            model.functions.add().ParseFromString(function.SerializeToString())
        graph, names, leaves_dir = self.graph(count, decls)
        if draw.bool(5):
            body, _, _ = self.graph(count, decls, depth=1)
            training = pb.TrainingInfoProto()
            training.algorithm.ParseFromString(body)
            model.training_info.append(training)
        wire = model.SerializeToString() + length_delimited(7, graph)
        cached = _big_wire(*self.big_wire) if self.big_wire else b""
        wire += cached + b"".join(length_delimited(27, d) for d in decls[self.big_wire[0] if self.big_wire else 0 :])
        if draw.bool(3):
            wire += varint_field(27, 1)  # struct_types with the wrong wire type
        value = None
        if names and draw.bool(90):
            value = names[0] if draw.bool(70) else draw.pick(names)
        elif draw.bool(50):
            value = draw.pick(["nope", ""])
        return Case(
            model=wire,
            files=self.case_files,
            value=None if value == NON_UTF8 else value,
            full_check=draw.bool(30),
            value_leaves_dir=leaves_dir and value == names[0],
        )


class _DecoderGenerator:
    """Decoders from a menu of operators, including ones no bounded decoder may contain."""

    def __init__(self, draw: Draw) -> None:
        self.draw = draw
        self.nodes: list[onnx.NodeProto] = []
        self.counter = 0

    def fresh(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    def constant(self, values, dtype=T.INT64) -> str:
        name = self.fresh()
        tensor = oh.make_tensor(name, dtype, [len(values)], values)
        self.nodes.append(oh.make_node("Constant", [], [name], value=tensor))
        return name

    def scalar(self, value, dtype=T.INT64) -> str:
        name = self.fresh()
        self.nodes.append(oh.make_node("Constant", [], [name], value=oh.make_tensor(name, dtype, [], [value])))
        return name

    def step(self, x: str) -> str:
        draw = self.draw
        out = self.fresh()
        op = draw.int(0, 13)
        if op <= 2:
            to = draw.pick([T.FLOAT, T.FLOAT, T.FLOAT16, T.INT32, 0, 255, T.INT4, T.STRING])
            self.nodes.append(oh.make_node("Cast", [x], [out], to=to))
        elif op == 3:
            scale = self.scalar(0.5, T.FLOAT)
            cast = self.fresh()
            self.nodes.append(oh.make_node("Cast", [x], [cast], to=T.FLOAT))
            self.nodes.append(oh.make_node("Mul", [cast, scale], [out]))
        elif op == 4:
            scale = self.scalar(0.25, T.FLOAT)
            self.nodes.append(oh.make_node("DequantizeLinear", [x, scale], [out]))
        elif op <= 6:
            shape = draw.pick([[-1], [2, -1], [0], [2**62], [1, 2, 3], [-1, 1], [], [-2]])
            self.nodes.append(oh.make_node("Reshape", [x, self.constant(shape)], [out]))
        elif op == 7:
            trips = self.scalar(draw.pick([1, 3, 2**62]))
            cond = self.scalar(True, T.BOOL)
            body = oh.make_graph(
                [oh.make_node("Identity", ["c_in"], ["c_out"]), oh.make_node("Identity", ["v_in"], ["v_out"])],
                "body",
                [
                    oh.make_tensor_value_info("i", T.INT64, []),
                    oh.make_tensor_value_info("c_in", T.BOOL, []),
                    oh.make_tensor_value_info("v_in", T.UNDEFINED, None),
                ],
                [oh.make_tensor_value_info("c_out", T.BOOL, []), oh.make_tensor_value_info("v_out", T.UNDEFINED, None)],
            )
            self.nodes.append(oh.make_node("Loop", [trips, cond, x], [out], body=body))
        elif op == 8:
            shape = self.constant([draw.pick([1, 4, 2**30, 2**32, 2**40])])
            self.nodes.append(oh.make_node("ConstantOfShape", [shape], [out]))
        elif op == 9:
            repeats = self.constant([draw.pick([1, 2, 2**40])])
            flat = self.fresh()
            self.nodes.append(oh.make_node("Reshape", [x, self.constant([-1])], [flat]))
            self.nodes.append(oh.make_node("Tile", [flat, repeats], [out]))
        elif op == 10:
            tensor = onnx.TensorProto(name=out, data_type=T.FLOAT, dims=[4], data_location=T.EXTERNAL)
            location = draw.pick(["payload.bin", "../outside.bin", "/etc/hostname", "missing.bin"])
            for key, value in (("location", location), ("offset", "0"), ("length", "16")):
                tensor.external_data.add(key=key, value=value)
            self.nodes.append(oh.make_node("Constant", [], [out], value=tensor))
        elif op == 11:
            cond = self.scalar(draw.bool(), T.BOOL)
            branch = oh.make_graph(
                [oh.make_node("Identity", [x], ["b"])], "br", [], [oh.make_value_info("b", onnx.TypeProto())]
            )
            self.nodes.append(oh.make_node("If", [cond], [out], then_branch=branch, else_branch=branch))
        elif op == 12:
            fname = draw.pick(["F", "R", "missing"])
            self.nodes.append(oh.make_node(fname, [x], [out], domain="local"))
        else:
            op_type = draw.pick(["Relu", "Identity", "Size", "Shape", "NonZero", "Greater", "Neg"])
            self.nodes.append(oh.make_node(op_type, [x, x] if op_type == "Greater" else [x], [out]))
        return out

    def function(self, inputs: list[str], force_cast: bool = False) -> onnx.FunctionProto:
        draw = self.draw
        inputs = [i for i in inputs if isinstance(i, str)] or [""]
        names = list(dict.fromkeys(name or "x" for name in inputs))
        if draw.bool(10):
            names.append(draw.pick(["unbound", "scale"]))
        x = names[0] if draw.bool(80) else draw.pick(names)
        if force_cast:
            self.nodes.append(oh.make_node("Cast", [x], ["y"], to=T.FLOAT))
        else:
            for _ in range(draw.int(1, 3)):
                x = self.step(x)
            self.nodes.append(oh.make_node("Identity", [x], ["y"]))
        # Older and newer than the model's: lower converts the body with onnx's version converter
        # (Greater from 6 has no adapter; a metadata_props, a device_configurations or an attribute
        # reference below are what its IR drops or changes).
        opsets = [oh.make_opsetid("", draw.pick([21, 21, 21, 13, 1, 99, 6, 25]))]
        if self.nodes and draw.bool(10):
            node = self.nodes[draw.int(0, len(self.nodes) - 1)]
            pick = draw.int(0, 2)
            if pick == 0:
                node.metadata_props.add(key="k", value="v")
            elif pick == 1:
                node.device_configurations.add(configuration_id="c")
            else:
                node.attribute.add(name="to", ref_attr_name="to", type=onnx.AttributeProto.INT)
        if draw.bool(30):
            opsets.append(oh.make_opsetid("local", 1))
        name = "dec" if force_cast else draw.pick(["dec", "dec", "", "Relu", NON_UTF8, "F"])
        domain = "t" if force_cast else draw.pick(["t", "t", "", "ai.onnx", NON_UTF8, "local"])
        outputs = ["y"] if draw.bool(95) else ["y", "z"]
        return oh.make_function(domain, name, names, outputs, self.nodes, opsets)

    def model_functions(self) -> list[onnx.FunctionProto]:
        draw = self.draw
        out = []
        opsets = [oh.make_opsetid("", 21), oh.make_opsetid("local", 1)]
        if draw.bool(30):
            out.append(oh.make_function("local", "F", ["a"], ["b"], [oh.make_node("Identity", ["a"], ["b"])], opsets))
        if draw.bool(20):
            recurse = oh.make_node("R", ["a"], ["b"], domain="local")
            out.append(oh.make_function("local", "R", ["a"], ["b"], [recurse], opsets))
        return out


@functools.lru_cache(maxsize=32)
def _big_shape(n: int, shape: int) -> tuple[bytes, ...]:
    """Declarations of one draw-independent big shape; built once per (n, shape), since building
    20,000 declarations took most of the generator's time per fuzz input."""
    field = pb.StructTypeProto.Field
    decls = []
    for i in range(n):
        if shape == 0:  # one cycle through every declaration
            decl = pb.StructTypeProto(type_index=(i + 1) % n)
        elif shape == 1:  # a chain whose last declaration is invalid
            decl = pb.StructTypeProto(type_index=i + 1 if i + 1 < n else -5)
        elif shape == 2:  # a doubling DAG: every level has two fields referring to the next
            ref = pb.TypeProto(struct_type=pb.StructTypeProto(type_index=i + 1))
            leaf = pb.TypeProto()
            leaf.tensor_type.elem_type = T.UINT8
            leaf.tensor_type.shape.SetInParent()
            inner = ref if i + 1 < n else leaf
            decl = pb.StructTypeProto(structure=pb.StructTypeProto.Structure(field=[field(name="a", type=inner)]))
            decl.structure.field.add(name="b", type=inner)
        else:  # a chain of single fields with long names
            ref = pb.TypeProto(struct_type=pb.StructTypeProto(type_index=i + 1))
            if i + 1 == n:
                ref = pb.TypeProto()
                ref.tensor_type.elem_type = T.INT4
                ref.tensor_type.shape.dim.add(dim_value=2)
            decl = pb.StructTypeProto(structure=pb.StructTypeProto.Structure(field=[field(name="n" * 100, type=ref)]))
        decls.append(decl.SerializeToString())
    return tuple(decls)


@functools.lru_cache(maxsize=32)
def _big_wire(n: int, shape: int) -> bytes:
    """``_big_shape``'s declarations as ModelProto.struct_types records (field 27)."""
    return b"".join(length_delimited(27, d) for d in _big_shape(n, shape))
