"""The models the checker cases are built from: small struct models, decoders, and byte-level
edits for what protobuf's builders refuse (a name that is not UTF-8, a field of the wrong wire type)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.external_data_helper
from onnx import TensorProto as T
from onnx import helper as oh

from onnx_struct.schema import builders as B
from onnx_struct.schema.model import StructTypeProto, add_struct_types, add_struct_values, add_value_infos

OPSET = [oh.make_opsetid("", 21)]
Files = dict[str, bytes]


NIBBLES = B.make_array(T.UINT8, 4)  # 4 bytes


def base_model(nodes=(), inputs=(), outputs=None) -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"]), *nodes],
        "g",
        [oh.make_tensor_value_info("X", T.FLOAT, [1]), *inputs],
        outputs or [oh.make_tensor_value_info("Y", T.FLOAT, [1])],
    )
    return oh.make_model(graph, opset_imports=OPSET, ir_version=10)


def model_with(declarations=(), values=(), nodes=(), **infos) -> onnx.ModelProto:
    model = base_model(nodes)
    if declarations:
        add_struct_types(model, *declarations)
    if values:
        add_struct_values(model, *values)
    if infos:
        add_value_infos(model, **infos)
    return model


def files(model: onnx.ModelProto, **extra: bytes) -> Files:
    return {"model.onnx": model.SerializeToString(), **extra}


def value(name="weight", index=0, size=4, **kwargs):
    return B.make_struct_value(name, index, raw_data=bytes(size), **kwargs)


def external_value(name="weight", index=0, **entries):
    return B.make_struct_value(name, index, external_data={"location": "weight.bin", **entries})


def cast_decoder(inputs=("v",), outputs=("y",), name="dec", op="Cast", domain=""):
    nodes = [oh.make_node(op, [inputs[0]], [outputs[0]], to=T.FLOAT, domain=domain)]
    nodes += [oh.make_node("Identity", [outputs[0]], [o]) for o in outputs[1:]]
    return oh.make_function("test", name, list(inputs), list(outputs), nodes, OPSET)


def linear(decoder=None, encoder=None) -> StructTypeProto:
    """The proposal's LINEAR_INT4_128: values INT4[128], constants scale and zero_point (64 bytes)."""
    return B.make_structure(
        [
            B.make_field("values", B.make_tensor_type(T.INT4, [128])),
            B.make_constant_field("scale", np.float32(0.125)),
            B.make_constant_field("zero_point", np.int64(0)),
        ],
        name="LINEAR_INT4_128",
        decoder=decoder,
        encoder=encoder,
    )


def consumer(declaration, name="weight"):
    model = base_model([oh.make_node("Relu", [name], ["R"])])
    add_struct_types(model, declaration)
    add_struct_values(model, value(name))
    return model


DECODED = B.make_array(T.UINT8, 4, decoder=cast_decoder())


def dynamic_tensor():
    tensor = B.make_tensor_type(T.UINT8, [2])
    tensor.tensor_type.shape.dim[0].dim_param = "N"
    return tensor


def subgraph_values():
    """(valid, invalid): an If whose else branch holds a struct value in the invalid one."""

    def with_if(else_values):
        branch = oh.make_graph(
            [oh.make_node("Identity", ["X"], ["Z"])], "b", [], [oh.make_tensor_value_info("Z", T.FLOAT, [1])]
        )
        holder = oh.make_model(oh.make_graph([], "holder", [], []))
        holder.graph.CopyFrom(branch)
        if else_values:
            add_struct_values(holder, *else_values)  # the branch as a main graph, then moved below the If
        model = model_with([NIBBLES])
        model.graph.node.append(oh.make_node("If", ["C"], ["W"], then_branch=branch, else_branch=holder.graph))
        model.graph.input.append(oh.make_tensor_value_info("C", T.BOOL, []))
        return model

    return with_if(()), with_if((value(),))


def inline_with_type(type_index):
    v = B.make_struct_value("weight", NIBBLES, bytes(4))
    v.type = type_index
    return v


def named_reference():
    info = B.make_struct_value_info("s", 0)
    info.type.struct_type.name = "oops"
    return info


def concrete_in_graph():
    type_proto = B.make_struct_type_proto()
    type_proto.struct_type.CopyFrom(NIBBLES)
    return B.make_value_info("s", type_proto)


def with_encoder(outputs):
    encoder = oh.make_function(
        "test", "enc", ["x"], list(outputs), [oh.make_node("Identity", ["x"], [o]) for o in outputs], OPSET
    )
    return linear(encoder=encoder)


def external_constant():
    tensor = onnx.numpy_helper.from_array(np.zeros(2, np.float32), "k")
    onnx.external_data_helper.set_external_data(tensor, "k.bin")
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    return tensor


def bad_constant():
    tensor = onnx.numpy_helper.from_array(np.zeros(2, np.float32), "k")
    tensor.dims[0] = 3  # 8 bytes of raw_data for 3 floats
    return tensor


def clash_with_initializer():
    model = model_with([NIBBLES], [value("W")])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), "W"))
    return model


def renamed(model: onnx.ModelProto, old: bytes, new: bytes) -> bytes:
    """The model's bytes with one string replaced by another of the same length (a byte string
    protobuf's builders would refuse, such as one that is not UTF-8)."""
    data = model.SerializeToString()
    assert len(old) == len(new) and data.count(old) == 1
    return data.replace(old, new)


def wrong_wire_type(model: onnx.ModelProto) -> bytes:
    """ModelProto.struct_types (field 27) written as a varint instead of a length-delimited message."""
    return model.SerializeToString() + bytes([0xD8, 0x01, 0x01])  # tag varint(27 << 3 | 0), value 1


def unparsable_struct_types(model: onnx.ModelProto) -> bytes:
    """A second struct_types entry (field 27, length-delimited) holding bytes that are no message."""
    return model.SerializeToString() + bytes([0xDA, 0x01, 0x02, 0xFF, 0xFF])


def deep_chain(depth: int) -> list[StructTypeProto]:
    """struct_types[i] = Array(type_index i+1, 1), ending in NIBBLES: ``depth`` references deep."""
    return [B.make_array(B.make_type_reference(i + 1), 1) for i in range(depth)] + [NIBBLES]


def policy_decoder():
    """A decoder calling an operator of another domain (com.microsoft), which the policy refuses."""
    node = oh.make_node("Gelu", ["v"], ["y"], domain="com.microsoft")
    return oh.make_function("test", "dec", ["v"], ["y"], [node], [*OPSET, oh.make_opsetid("com.microsoft", 1)])


def cast_to(elem_type: int) -> onnx.FunctionProto:
    """The Cast decoder with ``to`` set to ``elem_type`` (99 is no ONNX element type)."""
    decoder = cast_decoder()
    decoder.node[0].attribute[0].i = elem_type
    return decoder


def add_one_decoder(one: dict) -> onnx.FunctionProto:
    """y = Cast(v, FLOAT) + Constant(**one): a type error inside the decoder when ``one`` is an int64."""
    nodes = [
        oh.make_node("Cast", ["v"], ["c"], to=T.FLOAT),
        oh.make_node("Constant", [], ["one"], **one),
        oh.make_node("Add", ["c", "one"], ["y"]),
    ]
    return oh.make_function("test", "dec", ["v"], ["y"], nodes, OPSET)


def identity_record(size: int, digest_of: bytes) -> onnx.ModelProto:
    import hashlib

    from onnx_struct.payload.file_identity import FileIdentity, record

    model = model_with([NIBBLES], [external_value(offset=0, length=4)])
    identity = FileIdentity("weight.bin", size, ((0, len(digest_of)),), hashlib.sha256(digest_of).hexdigest())
    record(model.metadata_props, [identity])
    return model
