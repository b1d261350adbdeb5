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
N_EMBD, N_FF, N_KV, N_VOCAB = 2048, 5632, 256, 32000


def token_shapes(layers: int) -> list[list[int]]:
    """[N, K, count] of every product one token makes (weights stored [N, K], as GGUF)."""
    per_layer = [[N_EMBD, N_EMBD, 2], [N_KV, N_EMBD, 2], [N_FF, N_EMBD, 2], [N_EMBD, N_FF, 1]]
    return [[n, k, c * layers] for n, k, c in per_layer] + [[N_VOCAB, N_EMBD, 1]]


def run_ours(request: dict) -> dict:
    import onnx  # noqa: PLC0415 - the child's imports
    import onnxruntime as ort  # noqa: PLC0415
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    rng = np.random.default_rng(0)
    rows, nodes, inputs, initializers, outputs = int(request["rows"]), [], {}, [], []
    for n, k, count in request["shapes"]:
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
    feeds = {f"x{k}": rng.standard_normal((rows, k)).astype(np.float32) for k in inputs}
    session.run(None, feeds)  # warm-up
    times = []
    for _ in range(int(request["repeat"])):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return {"best": min(times), "median": float(np.median(times))}


def child(argv: list[str], request: dict) -> dict:
    result = subprocess.run([*argv, json.dumps(request)], capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-python", required=True, help="a Python with llama-cpp-python")
    parser.add_argument("--layers", type=int, default=22, help="layers of products (22: the 1.1B model)")
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
    shapes = token_shapes(args.layers)
    weight_bytes = sum(n * k * c for n, k, c in shapes) // 32 * 18
    print(f"{sum(c for *_, c in shapes)} products, {weight_bytes / 2**20:.0f} MiB of Q4_0 per pass\n")
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
