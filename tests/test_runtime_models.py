"""Hand-written decoders/encoders and independent numpy oracles shared by the execution tests.

Every oracle here reads the payload bytes with plain numpy (structured dtypes, shifts and masks
written out per format), never through onnx_struct's views, so a wrong layout or feeding shows up.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S

OPSET = [oh.make_opsetid("", 21)]


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


def linear_int4_128(decoder=None, encoder=None, scale: float = 0.125, zero_point: int = 0) -> S.StructTypeProto:
    return S.make_structure(
        [
            S.make_field("values", S.make_tensor_type(TensorProto.INT4, [128])),
            S.make_constant_field("scale", np.float32(scale)),
            S.make_constant_field("zero_point", np.int64(zero_point)),
        ],
        name="LINEAR_INT4_128",
        decoder=linear_decoder() if decoder is None else decoder,
        encoder=encoder,
    )


def int4_oracle(payload: bytes) -> np.ndarray:
    """Signed nibbles, LSB first (element 2k is byte k's low nibble), as int64."""
    data = np.frombuffer(payload, dtype=np.uint8)
    nibbles = np.stack([data & 0x0F, data >> 4], axis=-1).reshape(-1).astype(np.int64)
    return np.where(nibbles >= 8, nibbles - 16, nibbles)


def linear_model(payload: bytes, opset: int = 21) -> onnx.ModelProto:
    """Y = Relu(X + weight), weight a LINEAR_INT4_128 struct value."""
    graph = oh.make_graph(
        [oh.make_node("Add", ["X", "weight"], ["sum"]), oh.make_node("Relu", ["sum"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [128])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [128])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)
    (index,) = S.add_struct_types(model, linear_int4_128())
    S.add_struct_values(model, S.make_struct_value("weight", index, raw_data=payload))
    return model


# ---------------------------------------------------------------------- 18-byte blocks {d: FLOAT16, qs: UINT4[32]}
BLOCK_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


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


def q4_payload(rng: np.random.Generator, n: int) -> bytes:
    blocks = np.zeros(n, dtype=BLOCK_DTYPE)
    blocks["d"] = rng.uniform(-2, 2, n).astype(np.float16)
    blocks["qs"] = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    return blocks.tobytes()


def q4_oracle(payload: bytes) -> np.ndarray:
    blocks = np.frombuffer(payload, dtype=BLOCK_DTYPE)
    qs = blocks["qs"]
    q = np.stack([qs & 0x0F, qs >> 4], axis=-1).reshape(len(blocks), 32).astype(np.float32)
    return (q - 8) * blocks["d"].astype(np.float32)[:, None]


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


def bitpack_oracle(payload: bytes) -> np.ndarray:
    return np.frombuffer(payload, dtype="<u2").astype(np.int64)


def cast_decoder(to: int = TensorProto.FLOAT, name: str = "cast", opset: int = 21) -> onnx.FunctionProto:
    nodes = [oh.make_node("Cast", ["x"], ["y"], to=to)]
    return oh.make_function("test.decoders", name, ["x"], ["y"], nodes, [oh.make_opsetid("", opset)])
