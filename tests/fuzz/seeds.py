"""Seed inputs: valid models with struct parts (taken whole by the generator's raw mode) and a
few structured-mode inputs, so libFuzzer starts from models that pass the checker."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as oh

import onnx_struct as S

RAW_MODE = b"\x00"  # generate.build_case: mode 0
CHOICES = [b"\x00\x00", b"\xff\x00", b"\x00\x01", b"\xff\x01"]  # (full_check, value) draws


def _decoded_model() -> onnx.ModelProto:
    """One INT4 array with a Cast+Reshape decoder (the trailing-Reshape shortcut), inline."""
    shape = oh.make_tensor("shape", T.INT64, [2], [2, 4])
    decoder = oh.make_function(
        "t",
        "dec",
        ["values"],
        ["y"],
        [
            oh.make_node("Cast", ["values"], ["c"], to=T.FLOAT),
            oh.make_node("Constant", [], ["s"], value=shape),
            oh.make_node("Reshape", ["c", "s"], ["y"]),
        ],
        [oh.make_opsetid("", 21)],
    )
    graph = oh.make_graph(
        [oh.make_node("Identity", ["X"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", T.FLOAT, [1])],
        [oh.make_tensor_value_info("Y", T.FLOAT, [1])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    declaration = S.make_structure(
        [S.make_field("values", S.make_tensor_type(T.INT4, [8])), S.make_constant_field("k", np.float32(0.5))],
        decoder=decoder,
    )
    S.add_struct_types(model, declaration)
    S.add_struct_values(
        model,
        S.make_struct_value("weight", 0, raw_data=b"\x12\x34\x56\x78"),
        S.make_struct_value("packed", 0, external_data={"location": "payload.bin", "offset": 4, "length": 4}),
    )
    S.add_value_infos(model, inputs=[S.make_struct_value_info("s", 0)])
    return model


def model_seeds() -> list[bytes]:
    try:
        from support.models import rich_model  # tests/ is on sys.path (pytest, fuzz.py)
    except ImportError:  # pragma: no cover
        rich = []
    else:
        rich = [rich_model()]
    models = [*rich, _decoded_model().SerializeToString()]
    seeds = [RAW_MODE + choice + model for model in models for choice in CHOICES]
    seeds += [bytes([mode]) + bytes(range(k, k + 96)) for mode in range(2, 16, 3) for k in (0, 64, 128)]
    return seeds


def gguf_seeds() -> list[bytes]:
    try:
        from fuzz.targets_gguf import seed_corpus
    except ImportError:
        return [_tiny_gguf()]
    return seed_corpus()


def _tiny_gguf() -> bytes:
    import struct

    def string(s: bytes) -> bytes:
        return struct.pack("<Q", len(s)) + s

    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 2)
    kv = string(b"general.name") + struct.pack("<I", 8) + string(b"seed")
    kv += string(b"tokens") + struct.pack("<IIQ", 9, 8, 2) + string(b"a") + string(b"b")
    info = string(b"f32") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2) + struct.pack("<IQ", 0, 0)
    body = header + kv + info
    body += b"\x00" * (-len(body) % 32)
    return body + np.arange(8, dtype=np.float32).tobytes()
