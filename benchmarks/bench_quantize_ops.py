"""Which ops run faster quantized: one model per op, float32 against ``quantize(..., fmt)``.

For MatMul, Gemm(transB=1), Gather and Conv, a model of ``--layers`` such nodes in a chain is
quantized (Q8_0, Q4_0; ``op_types`` = that op) and run in ``onnx_struct.InferenceSession`` with
its default ``execution="quantized"`` (MatMul/Gemm/Gather weights on their codes through
``MatMulNBits``/``GatherBlockQuantized``; Conv kernels decoded to float32, no block-quantized
Conv kernel exists in onnxruntime), and with ``execution="decode"`` (every weight decoded by its
decoder in the graph). Reported: the run time of each against the float32 model's in stock
onnxruntime (minimum of ``--repeat`` interleaved rounds, one intra-op thread), at a small and a
large activation batch. Nothing is asserted: ratios for docs/execution.md.

Run: ``python benchmarks/bench_quantize_ops.py [--repeat 20] [--layers 4]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from _timing import interleaved_minimum
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct.passes.quantize import quantize

RNG = np.random.default_rng(0)


def _options():
    import onnxruntime as ort  # noqa: PLC0415

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return options


def chain(op: str, layers: int, width: int) -> tuple[onnx.ModelProto, dict]:
    """``layers`` nodes of ``op`` in a chain, and the input's name -> shape builder."""
    nodes, weights = [], []
    source = "X"
    for i in range(layers):
        name, out = f"W{i}", f"H{i}" if i < layers - 1 else "Y"
        if op == "Conv":
            w = RNG.standard_normal((width, width, 3, 3)).astype(np.float32) / np.sqrt(9 * width)
            nodes.append(oh.make_node("Conv", [source, name], [out], pads=[1, 1, 1, 1]))
        elif op == "Gather":  # an embedding lookup, then MatMul-free sums so each layer reads a table
            w = RNG.standard_normal((4 * width, width)).astype(np.float32)
            nodes.append(oh.make_node("Gather", [name, "ids"], [out]))
        elif op == "Gemm":
            w = RNG.standard_normal((width, width)).astype(np.float32) / np.sqrt(width)
            nodes.append(oh.make_node("Gemm", [source, name], [out], transB=1))
        else:
            w = RNG.standard_normal((width, width)).astype(np.float32) / np.sqrt(width)
            nodes.append(oh.make_node("MatMul", [source, name], [out]))
        weights.append(numpy_helper.from_array(w.astype(np.float32), name))
        source = out
    if op == "Gather":  # the tables all read the same ids; their outputs summed
        nodes = [oh.make_node(n.op_type, n.input, [f"G{i}"]) for i, n in enumerate(nodes)]
        nodes.append(oh.make_node("Sum", [f"G{i}" for i in range(layers)], ["Y"]))
        inputs = [oh.make_tensor_value_info("ids", TensorProto.INT64, ["n"])]
    elif op == "Conv":
        inputs = [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, width, "h", "w"])]
    else:
        inputs = [oh.make_tensor_value_info("X", TensorProto.FLOAT, ["n", width])]
    out_shape = [1, width, "h", "w"] if op == "Conv" else ["n", width]
    graph = oh.make_graph(nodes, op, inputs, [oh.make_tensor_value_info("Y", TensorProto.FLOAT, out_shape)], weights)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10), inputs[0].name


def feeds(op: str, width: int, batch: int) -> dict[str, np.ndarray]:
    if op == "Gather":
        return {"ids": RNG.integers(0, 4 * width, batch).astype(np.int64)}
    if op == "Conv":
        side = int(np.sqrt(batch))
        return {"X": RNG.standard_normal((1, width, side, side)).astype(np.float32)}
    return {"X": RNG.standard_normal((batch, width)).astype(np.float32)}


CASES = {  # op -> (width, (small batch, large batch)); a Conv batch is the number of pixels
    "MatMul": (2048, (1, 64)),
    "Gemm": (2048, (1, 64)),
    "Gather": (2048, (1, 256)),
    "Conv": (64, (16 * 16, 56 * 56)),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    import onnxruntime as ort  # noqa: PLC0415

    print(f"onnxruntime {ort.__version__}, 1 intra-op thread, {args.layers} layers, minimum of {args.repeat} rounds\n")
    print("| op | weight | batch | float32 (ms) | Q8_0 quantized | Q8_0 decode | Q4_0 quantized | Q4_0 decode |")
    print("|---|---|---|---|---|---|---|---|")
    for op, (width, batches) in CASES.items():
        model, _ = chain(op, args.layers, width)
        sessions = [ort.InferenceSession(model.SerializeToString(), _options(), providers=["CPUExecutionProvider"])]
        for fmt in ("Q8_0", "Q4_0"):
            q = quantize(model, fmt, op_types=(op,), min_elements=1)
            sessions.append(S.InferenceSession(q, _options()))
            sessions.append(S.InferenceSession(q, _options(), execution="decode"))
        shape = "x".join(map(str, model.graph.initializer[0].dims))
        for batch in batches:
            feed = feeds(op, width, batch)
            times = interleaved_minimum([lambda s=s, f=feed: s.run(None, f) for s in sessions], args.repeat)
            ratios = " | ".join(f"{t / times[0]:.2f}x" for t in times[1:])
            print(f"| {op} | {shape} | {batch} | {times[0] * 1e3:.2f} | {ratios} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
