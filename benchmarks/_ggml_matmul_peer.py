"""llama.cpp's side of benchmarks/bench_matmul_nbits.py: ggml's quantized x F32 matrix products, timed.

Runs in an interpreter with llama-cpp-python (its libggml-base / libggml-cpu shared libraries,
through ctypes; nothing of it is imported by onnx_struct). Reads a JSON request on argv[1]:
``{"shapes": [[N, K, count, type], ...], "rows": M, "threads": T, "repack": bool, "repeat": R}``
(``type`` one of Q4_0, Q4_K, Q6_K; Q4_0 when left out)
and prints JSON: the best and median seconds of one graph holding every product (``count``
weights of each ``[N, K]``, the same activation ``[M, K]``). ``repack``: the weights live in the
CPU backend's repack buffer type, as llama.cpp loads them by default (Q4_0 rearranged for its
AVX-512/AVX2 GEMV/GEMM kernels); otherwise in a plain CPU buffer (the ``vec_dot_q4_0_q8_0`` path).
Both quantize the activation to Q8_0 inside the product, as llama.cpp does.
"""

from __future__ import annotations

import ctypes
import json
import pathlib
import sys
import time

import llama_cpp
import numpy as np

LIB = pathlib.Path(llama_cpp.__file__).parent / "lib"
GGML_TYPE_F32 = 0
# GGML type -> (ggml_type id, weights per block, bytes per block, byte offsets of its f16 scales)
TYPES = {"Q4_0": (2, 32, 18, (0,)), "Q4_K": (12, 256, 144, (0, 2)), "Q6_K": (14, 256, 210, (208,))}
REPACKED = {"Q4_0", "Q4_K"}  # the types the CPU backend repacks here; llama.cpp keeps the others plain


class InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _bind():
    base = ctypes.CDLL(str(LIB / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(LIB / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    p, sz, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64
    sigs = {
        (base, "ggml_init"): ([InitParams], p),
        (base, "ggml_tensor_overhead"): ([], sz),
        (base, "ggml_graph_overhead_custom"): ([sz, ctypes.c_bool], sz),
        (base, "ggml_new_tensor_2d"): ([p, ctypes.c_int, i64, i64], p),
        (base, "ggml_mul_mat"): ([p, p, p], p),
        (base, "ggml_new_graph_custom"): ([p, sz, ctypes.c_bool], p),
        (base, "ggml_build_forward_expand"): ([p, p], None),
        (base, "ggml_set_input"): ([p], None),
        (base, "ggml_backend_alloc_ctx_tensors_from_buft"): ([p, p], p),
        (base, "ggml_backend_tensor_set"): ([p, p, sz, sz], None),
        (base, "ggml_gallocr_new"): ([p], p),
        (base, "ggml_gallocr_alloc_graph"): ([p, p], ctypes.c_bool),
        (base, "ggml_backend_graph_compute"): ([p, p], ctypes.c_int),
        (base, "ggml_backend_cpu_buffer_type"): ([], p),
        (cpu, "ggml_cpu_init"): ([], None),
        (cpu, "ggml_backend_cpu_init"): ([], p),
        (cpu, "ggml_backend_cpu_set_n_threads"): ([p, ctypes.c_int], None),
        (cpu, "_Z35ggml_backend_cpu_repack_buffer_typev"): ([], p),
    }
    fns = {}
    for (lib, name), (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
        fns[name.removeprefix("_Z35").removesuffix("v")] = fn
    return fns


def run(request: dict) -> dict:
    g = _bind()
    g["ggml_cpu_init"]()
    rows = int(request["rows"])
    shapes = [(s[0], s[1], s[2], s[3] if len(s) > 3 else "Q4_0") for s in request["shapes"]]
    n_weights = sum(shape[2] for shape in shapes)
    meta = g["ggml_tensor_overhead"]() * (2 * n_weights + 8) + g["ggml_graph_overhead_custom"](4 * n_weights, False)
    # One context per buffer type: the repack buffer takes only the types it repacks (ggml crashes
    # on another), so with ``repack`` the others go to a plain buffer, as llama.cpp places them.
    contexts = {True: g["ggml_init"](InitParams(meta, None, True)), False: g["ggml_init"](InitParams(meta, None, True))}
    graph_ctx = g["ggml_init"](InitParams(meta, None, True))
    rng = np.random.default_rng(0)
    inputs, weights = {}, []
    for n, k, count, kind in shapes:
        if k not in inputs:
            inputs[k] = g["ggml_new_tensor_2d"](graph_ctx, GGML_TYPE_F32, k, rows)
            g["ggml_set_input"](inputs[k])
        ctx = contexts[bool(request["repack"]) and kind in REPACKED]
        weights += [(g["ggml_new_tensor_2d"](ctx, TYPES[kind][0], k, n), n, k, kind) for _ in range(count)]
    buffers = {True: g["ggml_backend_cpu_repack_buffer_type"](), False: g["ggml_backend_cpu_buffer_type"]()}
    for repacked, ctx in contexts.items():
        used = any((bool(request["repack"]) and kind in REPACKED) == repacked for *_, kind in shapes)
        if used and not g["ggml_backend_alloc_ctx_tensors_from_buft"](ctx, buffers[repacked]):
            raise RuntimeError("ggml could not allocate the weights")
    for tensor, n, k, kind in weights:  # random blocks: f16 scales in [0.5, 1) x 2^-8 (finite), random bytes
        _, per_block, block_bytes, offsets = TYPES[kind]
        blocks = rng.integers(0, 256, (n * k // per_block, block_bytes), dtype=np.uint8)
        for offset in offsets:
            scales = (rng.uniform(0.5, 1.0, len(blocks)) / 256).astype(np.float16)
            blocks[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
        g["ggml_backend_tensor_set"](tensor, blocks.ctypes.data, 0, blocks.nbytes)  # repacked here if repack
    graph = g["ggml_new_graph_custom"](graph_ctx, 4 * n_weights, False)
    for tensor, _, k, _ in weights:
        g["ggml_build_forward_expand"](graph, g["ggml_mul_mat"](graph_ctx, tensor, inputs[k]))
    allocator = g["ggml_gallocr_new"](g["ggml_backend_cpu_buffer_type"]())
    if not g["ggml_gallocr_alloc_graph"](allocator, graph):
        raise RuntimeError("ggml could not allocate the graph")
    for k, tensor in inputs.items():
        x = rng.standard_normal((rows, k)).astype(np.float32)
        g["ggml_backend_tensor_set"](tensor, x.ctypes.data, 0, x.nbytes)
    backend = g["ggml_backend_cpu_init"]()
    g["ggml_backend_cpu_set_n_threads"](backend, int(request["threads"]))
    g["ggml_backend_graph_compute"](backend, graph)  # warm-up
    times = []
    for _ in range(int(request["repeat"])):
        start = time.perf_counter()
        if g["ggml_backend_graph_compute"](backend, graph) != 0:
            raise RuntimeError("ggml graph compute failed")
        times.append(time.perf_counter() - start)
    return {"best": min(times), "median": float(np.median(times))}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
