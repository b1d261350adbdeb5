"""Dequantization of the GGUF IQ and TQ types: ``onnx_struct.decode`` vs ``gguf.quants.dequantize``.

Goal (issue 5): each decoder at least 3x faster than gguf-py on the same blocks. Both sides get
the same random blocks (4M values, 64 rows); ours is the public path, ``onnx_struct.decode`` on a
struct value in a model (view, zero-copy feeds, cached onnxruntime session with the format's
constant tables as initializers). Runs alternate between the two sides and the minimum of
``REPEAT`` runs is reported, which is robust to other load on the machine:

* CPU: process CPU time (all of onnxruntime's threads; numpy is single-threaded), i.e. work;
* wall: elapsed time.

Also reported: the TQ encoders (``onnx_struct.encode``, payload packed) vs ``gguf.quants.quantize``.

    python benchmarks/bench_gguf_iq.py [TYPE ...]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import onnxruntime as ort
from gguf import GGMLQuantizationType
from gguf import quants as gq
from onnx import helper as oh

import onnx_struct
from onnx_struct.formats.gguf._iq_graph import OPSET
from onnx_struct.formats.gguf.iq import FORMATS

VALUES = 1 << 22
ROWS = 64
REPEAT = 10


def best_times(ours, theirs, clock) -> tuple[float, float]:
    """Minimum of REPEAT alternating runs of each callable, after one warm-up each."""
    ours(), theirs()
    best = [float("inf"), float("inf")]
    for _ in range(REPEAT):
        for k, fn in enumerate((ours, theirs)):
            start = clock()
            fn()
            best[k] = min(best[k], clock() - start)
    return best[0], best[1]


def measure(ours, theirs) -> list[float]:
    """[ours CPU, theirs CPU, ours wall, theirs wall] in seconds."""
    with np.errstate(all="ignore"):
        return [*best_times(ours, theirs, time.process_time), *best_times(ours, theirs, time.perf_counter)]


def empty_model():
    return oh.make_model(oh.make_graph([], "g", [], []), opset_imports=[oh.make_opsetid("", OPSET)])


def bench_decoder(name: str, rng: np.random.Generator) -> list[float]:
    fmt = FORMATS[name]
    shape = (ROWS, VALUES // ROWS)
    raw = rng.integers(0, 256, VALUES // fmt.block_size * fmt.bytes_per_block, dtype=np.uint8)
    model = empty_model()
    value = fmt.make_value(model, "w", shape, raw.tobytes())
    data = raw.reshape(ROWS, -1)
    qtype = GGMLQuantizationType[name]
    return measure(lambda: onnx_struct.decode(value, model), lambda: gq.dequantize(data, qtype))


def bench_encoder(name: str, rng: np.random.Generator) -> list[float]:
    fmt = FORMATS[name]
    x = rng.standard_normal((ROWS, VALUES // ROWS)).astype(np.float32)
    model = empty_model()
    root = fmt.add_to_model(model, x.shape)
    qtype = GGMLQuantizationType[name]
    return measure(lambda: onnx_struct.encode(x, root, model), lambda: gq.quantize(x, qtype))


def main(names: list[str]) -> int:
    rng = np.random.default_rng(0)
    print(f"{VALUES} values per run, {ROWS} rows, min of {REPEAT} alternating runs; onnxruntime {ort.__version__}\n")
    print(
        "| type | direction | CPU ours (ms) | CPU gguf-py (ms) | CPU ratio | wall ours (ms) | wall gguf-py (ms) | wall ratio |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = [(n, "decode", bench_decoder) for n in FORMATS] + [(n, "encode", bench_encoder) for n in ("TQ1_0", "TQ2_0")]
    for name, direction, bench in rows:
        if names and name not in names:
            continue
        cpu_ours, cpu_theirs, wall_ours, wall_theirs = (t * 1e3 for t in bench(name, rng))
        print(
            f"| {name} | {direction} | {cpu_ours:.1f} | {cpu_theirs:.1f} | {cpu_theirs / cpu_ours:.1f}x "
            f"| {wall_ours:.1f} | {wall_theirs:.1f} | {wall_theirs / wall_ours:.1f}x |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
