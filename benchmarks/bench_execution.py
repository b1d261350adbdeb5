"""Quantized execution: a stack of linear layers run with ``lower(execution="quantized")``.

For each format and weight shape ``K x N`` the model is ``y = sum_i x @ W_i`` over ``--layers``
weights (each a struct value ``W_i^T [N, K]`` + ``Transpose``, as ``quantize`` and GGUF store it;
random blocks with finite scales). Timed in one run, interleaved (minimum of ``--repeat`` rounds),
at 1 and 32 rows of activations, on ``--threads`` intra-op threads:

* ``ours@0`` / ``ours@4``: the quantized lowering at MatMulNBits accuracy level 0 (float32
  activations) and 4 (int8 activations, onnxruntime's default);
* ``float32``: the same model with the same dequantized weights as float32 initializers;
* ``ort-q@0`` / ``ort-q@4``: that float32 model quantized by onnxruntime's own
  ``matmul_nbits_quantizer`` (symmetric, block 32, bits of our codes), when it imports (it needs
  the ``onnx-ir`` package).

Also reported: the output error of ``ours@0`` against ``x @ dequantize(W)`` in float64 (max abs
error / max abs value), and the peak RSS of a fresh process after ``onnx_struct.InferenceSession``
over the model saved with external payloads (goal: <= 1.5x quantized bytes + 100 MiB).

Run: ``python benchmarks/bench_execution.py [--full] [--formats Q4_0,Q4_K] [--shapes 4096x4096]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from _timing import best_of, interleaved_minimum
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.payload.affine import affine_form

FORMATS = ["Q4_0", "Q4_K", "Q6_K", "Q8_0", "IQ4_XS", "MXFP4"]
SHAPES = [(4096, 4096), (4096, 11008)]
# Byte offsets of the FLOAT16 scales in each GGUF block (ggml-common.h); MXFP4: E8M0 byte 0.
F16_OFFSETS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
               "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,)}  # fmt: skip


def payload(name: str, shape: tuple[int, int], seed: int) -> bytes:
    fmt = formats.get(name)
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (fmt.num_blocks(shape), fmt.bytes_per_block), dtype=np.uint8)
    for offset in F16_OFFSETS.get(name, ()):
        scales = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16)
        blocks[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    if name == "MXFP4":
        blocks[:, 0] = rng.integers(118, 124, len(blocks))  # 2^-9 .. 2^-4
    return blocks.tobytes()


def models(name: str, k: int, n: int, layers: int, directory: str):
    """(struct model path, float32 model, quantized bytes, dequantized weights [K, N])."""
    fmt = formats.get(name)
    nodes, weights, total = [], [], 0
    graph_outputs = [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])]
    for i in range(layers):
        nodes += [
            oh.make_node("Transpose", [f"W{i}"], [f"W{i}t"], perm=[1, 0]),
            oh.make_node("MatMul", ["x", f"W{i}t"], [f"y{i}"]),
        ]
    nodes.append(oh.make_node("Sum", [f"y{i}" for i in range(layers)], ["y"]))
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])]
    model = oh.make_model(
        oh.make_graph(nodes, "g", inputs, graph_outputs), opset_imports=[oh.make_opsetid("", 21)], ir_version=10
    )
    with open(os.path.join(directory, "weights.bin"), "wb") as file:
        for i in range(layers):
            data = payload(name, (n, k), i)
            value = fmt.make_value(model, f"W{i}", (n, k), b"")
            value.ClearField("raw_data")
            for key, text in (("location", "weights.bin"), ("offset", total), ("length", len(data))):
                value.external_data.add(key=key, value=str(text))
            S.add_struct_values(model, value)
            file.write(data)
            total += len(data)
            weights.append(affine_form(fmt, data, (n, k)).dequantize().T.copy())
    path = os.path.join(directory, "model.onnx")
    onnx.save(model, path)
    float_nodes = [oh.make_node("MatMul", ["x", f"W{i}t"], [f"y{i}"]) for i in range(layers)] + [nodes[-1]]
    inits = [numpy_helper.from_array(w, f"W{i}t") for i, w in enumerate(weights)]
    plain = oh.make_model(
        oh.make_graph(float_nodes, "g", inputs, graph_outputs, inits),
        opset_imports=[oh.make_opsetid("", 21)],
        ir_version=10,
    )
    return path, plain, total, weights


def session(ort, model, threads: int, level: int | None):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    if level is not None:
        options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", str(level))
    data = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def ort_quantized(plain, bits: int, level: int):
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: PLC0415
    except ImportError:
        return None
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # one INFO line per node
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)
    copy = type(plain)()  # the quantizer rewrites the model it is given, in place
    copy.CopyFrom(plain)
    quantizer = MatMulNBitsQuantizer(copy, bits=bits, block_size=32, is_symmetric=True, accuracy_level=level)
    quantizer.process()
    return quantizer.model.model


def peak_mib() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: a child's ru_maxrss starts from its
    parent's peak at fork (it survives execve), which would count the benchmark's float models."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_child(path: str) -> None:
    before = peak_mib()
    import onnx_struct  # noqa: PLC0415

    onnx_struct.InferenceSession(path)
    print(json.dumps({"imports": before, "session": peak_mib()}))


def measure(name: str, k: int, n: int, args) -> dict:
    import onnxruntime as ort  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as directory:
        path, plain, nbytes, weights = models(name, k, n, args.layers, directory)
        lowered = S.lower(path, execution="quantized")
        bits = 4 if any(t.data_type in (TensorProto.INT4, TensorProto.UINT4) for t in lowered.graph.initializer) else 8
        runners = {"ours@0": session(ort, lowered, args.threads, 0), "ours@4": session(ort, lowered, args.threads, 4)}
        runners["float32"] = session(ort, plain, args.threads, None)
        for level in (0, 4):
            quantized = ort_quantized(plain, bits, level)
            if quantized is not None:
                runners[f"ort-q@{level}"] = session(ort, quantized, args.threads, level)
        rng = np.random.default_rng(0)
        result = {"format": name, "shape": f"{k}x{n}", "bits": bits, "mib": nbytes / 2**20}
        for rows in args.rows:
            x = rng.standard_normal((rows, k)).astype(np.float32)
            calls = {label: (lambda s=s, x=x: s.run(None, {"x": x})) for label, s in runners.items()}
            warm = {label: best_of(call, 1) for label, call in calls.items()}
            # A slow path (8-bit codes at accuracy level 0: tens of times float32's time) is timed
            # once more on its own; interleaving it would take minutes and change no conclusion.
            slow = [label for label in calls if warm[label] > 10 * warm["float32"]]
            fast = [label for label in calls if label not in slow]
            for label, seconds in zip(fast, interleaved_minimum([calls[f] for f in fast], args.repeat), strict=True):
                result[f"{label}/{rows}"] = seconds * 1e3
            for label in slow:
                result[f"{label}/{rows}"] = min(warm[label], best_of(calls[label], 1, warmup=False)) * 1e3
        x = rng.standard_normal((1, k)).astype(np.float32)
        reference = sum(x.astype(np.float64) @ w.astype(np.float64) for w in weights)
        for level in (0, 4):
            (y,) = runners[f"ours@{level}"].run(None, {"x": x})
            result[f"error@{level}"] = float(np.max(np.abs(y - reference)) / np.max(np.abs(reference)))
        print(f"{name} {k}x{n}: done", file=sys.stderr, flush=True)
        del runners, plain, weights
        if not args.no_rss:
            out = subprocess.run(
                [sys.executable, __file__, "--rss-child", path], capture_output=True, text=True, check=True
            )
            rss = json.loads(out.stdout.strip().splitlines()[-1])
            result["rss"], result["rss_imports"] = rss["session"], rss["imports"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--full", action="store_true", help="8 layers")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES), help="KxN,...")
    parser.add_argument("--rows", default="1,32")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child process")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child)
        return
    args.layers = 8 if args.full else args.layers
    args.rows = [int(r) for r in args.rows.split(",")]
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    print(f"{args.layers} layers, {args.threads} thread(s), minimum of {args.repeat} interleaved rounds; ms per run\n")
    results = [measure(name, k, n, args) for k, n in shapes for name in args.formats.split(",")]
    labels = [
        label
        for label in ("ours@0", "ours@4", "float32", "ort-q@0", "ort-q@4")
        if f"{label}/{args.rows[0]}" in results[0]
    ]
    header = ["format", "K x N", "bits"] + [f"{label} {r}" for r in args.rows for label in labels]
    header += [f"float32/ours@0 {r}" for r in args.rows]
    if "ort-q@0" in labels:
        header += [f"ours@0/ort-q@0 {r}" for r in args.rows] + [f"ours@4/ort-q@4 {r}" for r in args.rows]
    header += ["error@0", "error@4", "peak RSS MiB (after imports)", "goal MiB"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for res in results:
        cells = [res["format"], res["shape"], str(res["bits"])]
        cells += [f"{res[f'{label}/{r}']:.2f}" for r in args.rows for label in labels]
        cells += [f"{res[f'float32/{r}'] / res[f'ours@0/{r}']:.2f}x" for r in args.rows]
        if "ort-q@0" in labels:
            cells += [f"{res[f'ours@0/{r}'] / res[f'ort-q@0/{r}']:.2f}x" for r in args.rows]
            cells += [f"{res[f'ours@4/{r}'] / res[f'ort-q@4/{r}']:.2f}x" for r in args.rows]
        cells += [
            f"{res['error@0']:.1e}",
            f"{res['error@4']:.1e}",
            f"{res['rss']:.0f} ({res['rss_imports']:.0f})" if "rss" in res else "-",
            f"{1.5 * res['mib'] + 100:.0f}",
        ]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
