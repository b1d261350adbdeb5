"""Decode a 4096 x 4096 Q4_0 weight: onnx_struct.decode (onnxruntime) vs gguf-py vs the memory limit.

Q4_0 (llama.cpp): blocks of 32 weights, 18 bytes each: ``d`` (FLOAT16 scale) then ``qs``
(UINT8[16]; low nibbles are elements 0..15, high nibbles 16..31), ``y = (q - 8) * d``.
Every timing is the best of ``--repeat`` runs after one warm-up run; gguf-py runs in a process of
its own (``_peer.PeerProcess``: in this one its speed would depend on what onnx_struct allocated
and freed before), the rest in this process. The table reports ratios measured in the same run:

* gguf / decode: ``gguf.quants.dequantize`` time over ``decode`` time (goal >= 3, stretch 10);
* decode / fill: ``decode`` time over the time to allocate and write the float32 output once
  (``np.empty`` + ``fill``), the memory-bound lower limit of any decoder.

Run: ``python benchmarks/bench_decode.py [--rows 4096 --cols 4096 --repeat 7]``.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

import numpy as np
import onnx
from _peer import PeerProcess
from _timing import best_of
from onnx import TensorProto
from onnx import helper as oh

import onnx_struct as S
from onnx_struct.runtime.codec import decode
from onnx_struct.runtime.ort import ort_version


def q4_0_decoder(rows: int, cols: int) -> onnx.FunctionProto:
    """Q4_0 leaves (d: FLOAT16[n], qs: UINT8[n, 16]) -> FLOAT[rows, cols].

    Shaped for onnxruntime's CPU kernels, whose BitwiseAnd/BitShift/Div on uint8 are several
    times slower than Sub/Mul: one BitShift gives the high nibbles, ``qs - hi * 16`` the low ones,
    and the single float32-sized pass is ``DequantizeLinear`` per block (axis 0, zero point 8).
    """

    def const(name, dtype, dims, values):
        return oh.make_node("Constant", [], [name], value=oh.make_tensor(name, dtype, dims, values))

    nodes = [
        const("c4", TensorProto.UINT8, [], [4]),
        const("c16", TensorProto.UINT8, [], [16]),
        const("zp8", TensorProto.UINT8, [1], [8]),
        const("shape", TensorProto.INT64, [2], [rows, cols]),
        oh.make_node("BitShift", ["qs", "c4"], ["hi"], direction="RIGHT"),
        oh.make_node("Mul", ["hi", "c16"], ["hi16"]),
        oh.make_node("Sub", ["qs", "hi16"], ["lo"]),
        oh.make_node("Concat", ["lo", "hi"], ["q"], axis=1),  # [n, 32]: elements 0..15, then 16..31
        oh.make_node("Shape", ["d"], ["n"]),
        oh.make_node("Expand", ["zp8", "n"], ["zero_point"]),
        oh.make_node("Cast", ["d"], ["scale"], to=TensorProto.FLOAT),
        oh.make_node("DequantizeLinear", ["q", "scale", "zero_point"], ["blocks"], axis=0),
        oh.make_node("Reshape", ["blocks", "shape"], ["y"]),
    ]
    return oh.make_function("bench.q4_0", "Q4_0", ["d", "qs"], ["y"], nodes, [oh.make_opsetid("", 21)])


def own_q4_0_value(payload: bytes, rows: int, cols: int) -> tuple[onnx.ModelProto, str]:
    block = S.make_structure(
        [S.make_field("d", TensorProto.FLOAT16), S.make_field("qs", S.make_tensor_type(TensorProto.UINT8, [16]))],
        name="Q4_0_block",
    )
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    (block_index,) = S.add_struct_types(model, block)
    root = S.make_array(
        S.make_type_reference(block_index), rows * cols // 32, name="Q4_0", decoder=q4_0_decoder(rows, cols)
    )
    (root_index,) = S.add_struct_types(model, root)
    S.add_struct_values(model, S.make_struct_value("w", root_index, raw_data=payload))
    return model, "w"


def library_q4_0_value(payload: bytes, rows: int, cols: int) -> tuple[onnx.ModelProto, str] | None:
    try:
        from onnx_struct import formats  # noqa: PLC0415

        fmt = formats.get("Q4_0")
    except (ImportError, KeyError):
        return None
    model = oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    S.add_struct_values(model, fmt.make_value(model, "w", (rows, cols), payload))
    return model, "w"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import gguf  # noqa: PLC0415
    from gguf.quants import dequantize, quantize  # noqa: PLC0415

    rows, cols = args.rows, args.cols
    weights = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    payload = quantize(weights, gguf.GGMLQuantizationType.Q4_0).tobytes()
    raw = np.frombuffer(payload, dtype=np.uint8)
    expected = dequantize(raw, gguf.GGMLQuantizationType.Q4_0).reshape(rows, cols)

    candidates = {"decode (own Q4_0 decoder)": own_q4_0_value(payload, rows, cols)}
    library = library_q4_0_value(payload, rows, cols)
    if library is not None:
        candidates['decode (formats.get("Q4_0"))'] = library
    else:
        print('formats.get("Q4_0") is not available; timing the benchmark\'s own decoder only\n')

    with tempfile.TemporaryDirectory() as tmp, PeerProcess() as peer:
        path = pathlib.Path(tmp) / "q4_0.bin"
        raw.tofile(path)
        peer.load("payload", str(path), "uint8", raw.shape)
        peer.time("gguf.quants:dequantize", "payload", gguf.GGMLQuantizationType.Q4_0)  # warm-up
        t_gguf = min(
            peer.time("gguf.quants:dequantize", "payload", gguf.GGMLQuantizationType.Q4_0).wall
            for _ in range(args.repeat)
        )
    t_fill = best_of(lambda: np.empty((rows, cols), np.float32).fill(1.0), args.repeat)
    print(
        f"{rows} x {cols} Q4_0 ({len(payload) / 2**20:.1f} MiB payload -> {rows * cols * 4 / 2**20:.0f} MiB float32), "
        f"onnxruntime {ort_version()}\n"
    )
    print("| decoder | time (ms) | gguf / decode | decode / fill | exact vs gguf |")
    print("|---|---:|---:|---:|---|")
    print(f"| gguf.quants.dequantize | {t_gguf * 1e3:.1f} | 1.00 | {t_gguf / t_fill:.2f} | (oracle) |")
    print(f"| np.empty + fill (memory limit) | {t_fill * 1e3:.1f} | {t_gguf / t_fill:.2f} | 1.00 | - |")
    for label, (model, name) in candidates.items():
        result = decode(name, model)
        exact = np.array_equal(result.reshape(rows, cols), expected)
        t = best_of(lambda m=model, n=name: decode(n, m), args.repeat)
        print(f"| {label} | {t * 1e3:.1f} | {t_gguf / t:.2f} | {t / t_fill:.2f} | {'yes' if exact else 'NO'} |")


if __name__ == "__main__":
    main()
