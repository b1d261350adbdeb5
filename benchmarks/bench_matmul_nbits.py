"""The speed floor of issue 29: onnxruntime's MatMulNBits alone against ggml's Q4_0 product.

    python benchmarks/bench_matmul_nbits.py --llama-python /path/to/python-with-llama-cpp

Every matrix product one token of the ~1.1B Q4_0 llama of benchmarks/bench_llm.py multiplies
(22 layers x q 2048x2048, k and v 256x2048, o 2048x2048, gate and up 5632x2048, down
2048x5632, and the 32000x2048 output head: 555 MiB of Q4_0), as one graph per side, random
Q4_0 blocks, nothing else in it:

- ours: one onnxruntime session of ``com.microsoft.MatMulNBits`` nodes (4-bit symmetric, block 32,
  no zero point: what ``InferenceSession`` emits for Q4_0), at onnxruntime's default accuracy
  level 4 (int8 activations, as llama.cpp's Q8_0 ones), ``intra_op_num_threads`` T;
- llama.cpp: ggml's ``ggml_mul_mat`` of Q4_0 weights by F32 activations through the CPU
  backend (benchmarks/_ggml_matmul_peer.py, ctypes on llama-cpp-python's libggml), with the
  weights in the repack buffer type as llama.cpp loads them by default, and in a plain buffer.

For 1 activation row (generation) and 64 (prompt processing), 1 and 2 threads: the best and
median seconds of one pass over all products (``--repeat`` passes after a warm-up), each side in
its own process, ``--rounds`` processes per side in turns (the best of all). A ratio ours / ggml near the full model's ratio (docs/benchmarks.md) says the
gap is the kernel. Prints a markdown table (docs/benchmarks.md, "LLM generation").
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

PEER = pathlib.Path(__file__).resolve().parent / "_ggml_matmul_peer.py"
# Model shapes: (layers, n_embd, n_ff, n_kv (KV heads x head size), n_vocab). tinyllama: the 1.1B
# of bench_llm.py; family: bench_llm.py --family's small shape (16 layers, 1024 wide, MLP 2816).
SHAPES = {"tinyllama": (22, 2048, 5632, 256, 32000), "family": (16, 1024, 2816, 256, 32000)}
# Weight types: the matrices' and the output head's, as the benchmark's files mix them.
MIXES = {"q4_0": ("Q4_0", "Q4_0"), "q4_k": ("Q4_K", "Q6_K")}
BLOCK_BYTES = {"Q4_0": (32, 18), "Q4_K": (256, 144), "Q6_K": (256, 210)}  # weights, bytes per block


def token_shapes(layers: int, shape: str = "tinyllama", mix: str = "q4_0") -> list[list]:
    """[N, K, count, type] of every product one token makes (weights stored [N, K], as GGUF)."""
    _, n_embd, n_ff, n_kv, n_vocab = SHAPES[shape]
    kind, head = MIXES[mix]
    per_layer = [[n_embd, n_embd, 2], [n_kv, n_embd, 2], [n_ff, n_embd, 2], [n_embd, n_ff, 1]]
    return [[n, k, c * layers, kind] for n, k, c in per_layer] + [[n_vocab, n_embd, 1, head]]


def run_ours_struct(request: dict) -> dict:
    """Ours for any mix: struct values of the GGUF types (random blocks, external payloads) run by
    ``onnx_struct.InferenceSession``, so the products are exactly what it emits (MatMulNBits, and
    for a format with a minimum its block sums and minimum product; siblings fused)."""
    import onnx  # noqa: PLC0415 - the child's imports
    import onnxruntime as ort  # noqa: PLC0415
    from bench_execution import payload  # noqa: PLC0415
    from onnx import TensorProto, helper  # noqa: PLC0415

    import onnx_struct as S  # noqa: PLC0415
    from onnx_struct import formats  # noqa: PLC0415

    rows, directory = int(request["rows"]), pathlib.Path(request["workdir"])
    model = helper.make_model(helper.make_graph([], "products", [], []), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 21)])  # fmt: skip
    graph, inputs, j = model.graph, set(), 0
    with open(directory / "products.bin", "wb") as file:
        for n, k, count, kind in request["shapes"]:
            if k not in inputs:
                inputs.add(k)
                graph.input.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [rows, k]))
            for _ in range(count):
                data = payload(kind, (n, k), j)
                value = formats.get(kind).make_value(model, f"w{j}", (n, k), b"")
                value.ClearField("raw_data")
                for key, text in (("location", "products.bin"), ("offset", file.tell()), ("length", len(data))):
                    value.external_data.add(key=key, value=str(text))
                S.add_struct_values(model, value)
                file.write(data)
                graph.node.extend([helper.make_node("Transpose", [f"w{j}"], [f"w{j}t"], perm=[1, 0]),
                                   helper.make_node("MatMul", [f"x{k}", f"w{j}t"], [f"y{j}"])])  # fmt: skip
                graph.output.append(helper.make_tensor_value_info(f"y{j}", TensorProto.FLOAT, [rows, n]))
                j += 1
    onnx.save(model, directory / "products.onnx")
    del model, graph
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(request["threads"])
    session = S.InferenceSession(str(directory / "products.onnx"), options)
    return _timed(session, {f"x{k}": (rows, k) for k in inputs}, int(request["repeat"]))


def _timed(session, feeds: dict[str, tuple[int, int]], repeat: int) -> dict:
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in feeds.items()}
    session.run(None, arrays)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, arrays)
        times.append(time.perf_counter() - start)
    return {"best": min(times), "median": float(np.median(times))}


def run_ours(request: dict) -> dict:
    import onnx  # noqa: PLC0415 - the child's imports
    import onnxruntime as ort  # noqa: PLC0415
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    if any(kind != "Q4_0" for *_, kind in request["shapes"]):
        return run_ours_struct(request)
    rng = np.random.default_rng(0)
    rows, nodes, inputs, initializers, outputs = int(request["rows"]), [], {}, [], []
    for n, k, count, _ in request["shapes"]:
        if k not in inputs:
            inputs[k] = helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [rows, k])
        for _ in range(count):
            j = len(nodes)
            codes = rng.integers(0, 256, (n, k // 32, 16), dtype=np.uint8)
            scales = rng.uniform(0.5, 1.0, n * k // 32).astype(np.float32) / 256
            initializers += [numpy_helper.from_array(codes, f"b{j}"), numpy_helper.from_array(scales, f"s{j}")]
            nodes.append(
                helper.make_node(
                    "MatMulNBits",
                    [f"x{k}", f"b{j}", f"s{j}"],
                    [f"y{j}"],
                    domain="com.microsoft",
                    K=k,
                    N=n,
                    bits=4,
                    block_size=32,
                    accuracy_level=int(request["accuracy_level"]),
                )
            )
            outputs.append(helper.make_tensor_value_info(f"y{j}", TensorProto.FLOAT, [rows, n]))
    graph = helper.make_graph(nodes, "products", list(inputs.values()), outputs, initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    path = pathlib.Path(request["workdir"]) / "products.onnx"
    onnx.save(model, path, save_as_external_data=True, location="products.bin")
    del model, graph, initializers
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(request["threads"])
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return _timed(session, {f"x{k}": (rows, k) for k in inputs}, int(request["repeat"]))


def child(argv: list[str], request: dict) -> dict:
    result = subprocess.run([*argv, json.dumps(request)], capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-python", required=True, help="a Python with llama-cpp-python")
    parser.add_argument("--layers", type=int, default=None, help="layers of products (default: the shape's)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tinyllama", help="the model shape")
    parser.add_argument("--mix", choices=sorted(MIXES), default="q4_0", help="q4_0; q4_k: Q4_K matrices, a Q6_K head")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rows", default="1,64", help="activation rows: 1 (generation), 64 (a prompt)")
    parser.add_argument("--repeat", type=int, default=10, help="timed passes per process (after a warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per side, in turns (best of all)")
    parser.add_argument("--workdir", default="/tmp")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_ours(json.loads(args.child))))
        return 0
    shapes = token_shapes(args.layers or SHAPES[args.shape][0], args.shape, args.mix)
    weight_bytes = sum(n * k * c // BLOCK_BYTES[t][0] * BLOCK_BYTES[t][1] for n, k, c, t in shapes)
    kinds = "/".join(dict.fromkeys(t for *_, t in shapes))
    print(f"{sum(c for _, _, c, _ in shapes)} products, {weight_bytes / 2**20:.0f} MiB of {kinds} per pass\n")
    print("| rows | threads | ours MatMulNBits ms | ggml repack ms | ggml plain ms | ours / repack | ours / plain |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for rows in (int(r) for r in args.rows.split(",")):
        for threads in (int(t) for t in args.threads.split(",")):
            request = {"shapes": shapes, "rows": rows, "threads": threads, "repeat": args.repeat}
            best = {"ours": [], "repack": [], "plain": []}
            for _ in range(args.rounds):  # in turns, so that a load phase of the machine hits every side
                ours = [sys.executable, __file__, "--llama-python", args.llama_python, "--child"]
                best["ours"].append(child(ours, {**request, "accuracy_level": 4, "workdir": args.workdir})["best"])
                for side in ("repack", "plain"):
                    peer = child([args.llama_python, str(PEER)], {**request, "repack": side == "repack"})
                    best[side].append(peer["best"])
            o, r, p = (min(best[side]) * 1e3 for side in ("ours", "repack", "plain"))
            print(f"| {rows} | {threads} | {o:.1f} | {r:.1f} | {p:.1f} | {o / r:.2f} | {o / p:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
