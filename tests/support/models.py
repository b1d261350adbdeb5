"""Models and declarations shared by the tests: the stock base model, the proposal's
LINEAR_INT4_128 example, hand-written decoders/encoders, and the models the execution tests run.

Their numpy oracles are in support/oracles.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S

OPSET = [oh.make_opsetid("", 21)]


def base_model(nodes=(), outputs=None, opset: int = 21) -> onnx.ModelProto:
    """A small valid stock model: Y = Identity(X); struct parts are added by each test."""
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"]), *nodes],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        outputs or [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def model_with(declarations=(), values=(), **infos) -> onnx.ModelProto:
    """base_model() plus the given struct types, struct values and value infos (inputs=..., ...)."""
    model = base_model()
    if declarations:
        S.add_struct_types(model, *declarations)
    if values:
        S.add_struct_values(model, *values)
    if infos:
        S.add_value_infos(model, **infos)
    return model


def const(name: str, elem_type: int, dims, values) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], value=oh.make_tensor(name, elem_type, dims, values))


# ---------------------------------------------------------------------- LINEAR_INT4_128 (the proposal's example)
def linear_decoder(name: str = "linear", domain: str = "test.decoders") -> onnx.FunctionProto:
    """y = (values - zero_point) * scale."""
    nodes = [
        oh.make_node("Cast", ["values"], ["v"], to=TensorProto.INT64),
        oh.make_node("Sub", ["v", "zero_point"], ["centered"]),
        oh.make_node("Cast", ["centered"], ["c"], to=TensorProto.FLOAT),
        oh.make_node("Mul", ["c", "scale"], ["y"]),
    ]
    return oh.make_function(domain, name, ["values", "scale", "zero_point"], ["y"], nodes, OPSET)


def linear_encoder() -> onnx.FunctionProto:
    """values = QuantizeLinear(x, 0.125, int4 0): round half to even, saturating to [-8, 7]."""
    nodes = [
        const("s", TensorProto.FLOAT, [], [0.125]),
        const("z", TensorProto.INT4, [], [0]),
        oh.make_node("QuantizeLinear", ["x", "s", "z"], ["values"]),
    ]
    return oh.make_function("test.encoders", "linear_encode", ["x"], ["values"], nodes, OPSET)


def linear_int4_128(
    decoder: onnx.FunctionProto | None = None,
    encoder: onnx.FunctionProto | None = None,
    scale: float = 0.125,
    zero_point: int = 0,
) -> S.StructTypeProto:
    """The proposal's example declaration (no decoder or encoder unless given; the execution tests
    pass ``decoder=linear_decoder()``)."""
    return S.make_structure(
        [
            S.make_field("values", S.make_tensor_type(TensorProto.INT4, [128])),
            S.make_constant_field("scale", np.float32(scale)),
            S.make_constant_field("zero_point", np.int64(zero_point)),
        ],
        name="LINEAR_INT4_128",
        decoder=decoder,
        encoder=encoder,
    )


def linear_model(payload: bytes, opset: int = 21) -> onnx.ModelProto:
    """Y = Relu(X + weight), weight a LINEAR_INT4_128 struct value."""
    graph = oh.make_graph(
        [oh.make_node("Add", ["X", "weight"], ["sum"]), oh.make_node("Relu", ["sum"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [128])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [128])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)
    (index,) = S.add_struct_types(model, linear_int4_128(decoder=linear_decoder()))
    S.add_struct_values(model, S.make_struct_value("weight", index, raw_data=payload))
    return model


# ---------------------------------------------------------------------- 18-byte blocks {d: FLOAT16, qs: UINT4[32]}
def q4_block_decoder() -> onnx.FunctionProto:
    """(qs - 8) * d per block: d [n], qs [n, 32] -> [n, 32]."""
    nodes = [
        const("eight", TensorProto.FLOAT, [], [8.0]),
        const("axis", TensorProto.INT64, [1], [1]),
        oh.make_node("Cast", ["qs"], ["q"], to=TensorProto.FLOAT),
        oh.make_node("Sub", ["q", "eight"], ["centered"]),
        oh.make_node("Cast", ["d"], ["scale"], to=TensorProto.FLOAT),
        oh.make_node("Unsqueeze", ["scale", "axis"], ["scale2"]),
        oh.make_node("Mul", ["centered", "scale2"], ["y"]),
    ]
    return oh.make_function("test.decoders", "q4_blocks", ["d", "qs"], ["y"], nodes, OPSET)


def q4_block_model(payload: bytes, n: int) -> tuple[onnx.ModelProto, int]:
    """A model holding the blocks as struct value "w" (root Array(type_index -> block, n))."""
    block = S.make_structure(
        [S.make_field("d", TensorProto.FLOAT16), S.make_field("qs", S.make_tensor_type(TensorProto.UINT4, [32]))],
        name="Q4_block",
    )
    graph = oh.make_graph(
        [oh.make_node("Identity", ["w"], ["Y"])], "g", [], [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [n, 32])]
    )
    model = oh.make_model(graph, opset_imports=OPSET, ir_version=10)
    (block_index,) = S.add_struct_types(model, block)
    root = S.make_array(S.make_type_reference(block_index), n, name="Q4_blocks", decoder=q4_block_decoder())
    (root_index,) = S.add_struct_types(model, root)
    S.add_struct_values(model, S.make_struct_value("w", root_index, raw_data=payload))
    return model, root_index


# ---------------------------------------------------------------------- bit packing (a: 3, b: 7, c: 6) x n
def bitpack_declaration(n: int) -> S.StructTypeProto:
    """16-bit records; the decoder rebuilds each record as a + 8 b + 1024 c (int64)."""
    nodes = [
        const("k8", TensorProto.INT64, [], [8]),
        const("k1024", TensorProto.INT64, [], [1024]),
        oh.make_node("Cast", ["a"], ["a64"], to=TensorProto.INT64),
        oh.make_node("Cast", ["b"], ["b64"], to=TensorProto.INT64),
        oh.make_node("Cast", ["c"], ["c64"], to=TensorProto.INT64),
        oh.make_node("Mul", ["b64", "k8"], ["b8"]),
        oh.make_node("Mul", ["c64", "k1024"], ["c1024"]),
        oh.make_node("Add", ["a64", "b8"], ["ab"]),
        oh.make_node("Add", ["ab", "c1024"], ["y"]),
    ]
    decoder = oh.make_function("test.decoders", "records", ["a", "b", "c"], ["y"], nodes, OPSET)
    return S.make_bit_packing([("a", 3), ("b", 7), ("c", 6)], n, name="RECORDS", decoder=decoder)


def cast_decoder(to: int = TensorProto.FLOAT, name: str = "cast", opset: int = 21) -> onnx.FunctionProto:
    nodes = [oh.make_node("Cast", ["x"], ["y"], to=to)]
    return oh.make_function("test.decoders", name, ["x"], ["y"], nodes, [oh.make_opsetid("", opset)])


def rich_model() -> bytes:
    """A valid model using most features, as the seed the fuzzer mutates."""
    decoder = oh.make_function(
        "t",
        "dec",
        ["values"],
        ["y"],
        [oh.make_node("Cast", ["values"], ["y"], to=TensorProto.FLOAT)],
        [oh.make_opsetid("", 21)],
    )
    model = base_model([oh.make_node("Relu", ["weight"], ["R"])])
    S.add_struct_types(
        model,
        linear_int4_128(decoder),
        S.make_bit_packing([("a", 3), ("b", 5)], 4),
        S.make_structure(
            [
                S.make_field("d", TensorProto.FLOAT16),
                S.make_field("r", S.make_type_reference(1)),
                S.make_constant_field("k", np.arange(4, dtype=np.float32)),
            ]
        ),
        S.make_array(S.make_type_reference(2), 3),
    )
    S.add_struct_values(
        model,
        S.make_struct_value("weight", 0, raw_data=bytes(range(64))),
        S.make_struct_value("packed", 3, external_data={"location": "payload.bin", "offset": 2, "length": 18}),
        S.make_struct_value("inline", S.make_array(TensorProto.UINT16, 2), raw_data=b"\x01\x02\x03\x04"),
    )
    S.add_value_infos(model, inputs=[S.make_struct_value_info("s", 3), S.make_struct_value_info("any")])
    return model.SerializeToString()
