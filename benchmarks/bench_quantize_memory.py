"""Peak RSS of ``onnx-struct quantize`` (its report included) against the goal of issue 30,
``peak <= 1.5 x the input model + 200 MiB``, and against onnxruntime's own quantizer on the same
input (the peer: ``MatMulNBitsQuantizer``, 4 bits, block 32, its model saved as onnx.save would).

Inputs are chains of MatMul layers with random float32 weights ``K x N`` (alternately ``N x K``),
saved inline or with their weights in an external data file. Each run is a fresh process
(``python -m onnx_struct quantize IN OUT --format F --quiet``, or the peer's script), its VmHWM
read by the child itself at exit; the ratio column is peak / goal (<= 1 meets it).

Run: ``python benchmarks/bench_quantize_memory.py [--large] [--no-peer] [--quick]``
(``--quick``: the same cases with 256 x 384 weights, for a test that the script runs). ``--large`` adds a
2.25 GiB input (6 x 384 MiB, external), whose F32 result (2.25 GiB) is written to OUT.data
automatically and whose Q8_0 result (612 MiB) is inline; it needs about 5 GB of disk.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

# The child reports its own VmHWM as it exits: a child's ru_maxrss would start from this
# process's peak at fork (the float models built here).
PEAK_AT_EXIT = """
import atexit, runpy, sys
def report():
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(f"VmHWM {peak}", file=sys.stderr)
atexit.register(report)
sys.argv = sys.argv[1:]
if sys.argv[0].endswith(".py"):
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""

PEER = """
import logging, sys, onnx
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
logging.disable(logging.INFO)
source, target = sys.argv[1], sys.argv[2]
model = onnx.load(source)
quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=True)
quantizer.process()
onnx.save(quantizer.model.model, target)
"""

# (label, layers, K, N, external input, format, --external)
CASES = [
    ("2 x 96 MiB, inline", 2, 4096, 6144, False, "Q4_0", False),
    ("2 x 96 MiB, external", 2, 4096, 6144, True, "Q4_0", False),
    ("2 x 96 MiB, inline, to OUT.data", 2, 4096, 6144, False, "Q4_0", True),
    ("2 x 96 MiB, inline", 2, 4096, 6144, False, "Q8_0", False),
    ("2 x 96 MiB, inline", 2, 4096, 6144, False, "F32", False),
    ("4 x 96 MiB, external, to OUT.data", 4, 4096, 6144, True, "F32", True),
    ("4 x 96 MiB, external", 4, 4096, 6144, True, "Q8_0", False),
]
LARGE = [
    ("6 x 384 MiB (2.25 GiB), external", 6, 4096, 24576, True, "F32", False),
    ("6 x 384 MiB (2.25 GiB), external", 6, 4096, 24576, True, "Q8_0", False),
]


def chain_model(layers: int, k: int, n: int) -> onnx.ModelProto:
    """MatMul layers alternating ``[k, n]`` and ``[n, k]`` random float32 weights (``layers``
    even; tests/test_quantize_memory.py and test_quantize_report_memory.py use it too)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((k, n) if i % 2 == 0 else (n, k), dtype=np.float32), f"W{i}")
        for i in range(layers)
    ]
    nodes = [oh.make_node("MatMul", ["X" if i == 0 else f"H{i - 1}", f"W{i}"], [f"H{i}"]) for i in range(layers)]
    graph = oh.make_graph(
        nodes,
        "chain",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, ["n", k])],
        [oh.make_tensor_value_info(f"H{layers - 1}", TensorProto.FLOAT, ["n", k])],
        weights,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def write_input(directory: pathlib.Path, layers: int, k: int, n: int, external: bool) -> pathlib.Path:
    model = chain_model(layers, k, n)
    path = directory / "float.onnx"
    if external:
        onnx.save(model, path, save_as_external_data=True, location="float.data")
    else:
        onnx.save(model, path)
    return path


def peak_of(argv: list[str]) -> tuple[float, float]:
    """(VmHWM in MiB, wall seconds) of ``python -c PEAK_AT_EXIT module args...``."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK_AT_EXIT, *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{argv}: exit {done.returncode}\n{done.stderr[-2000:]}")
    line = next(line for line in done.stderr.splitlines() if line.startswith("VmHWM "))
    return int(line.split()[1]) / 1024, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="add the 2.25 GiB input")
    parser.add_argument("--no-peer", action="store_true", help="skip onnxruntime's quantizer")
    parser.add_argument("--quick", action="store_true", help="256 x 384 weights (seconds)")
    args = parser.parse_args()
    # onnxruntime's quantizer imports onnx-ir (the bench extra); without it the peer column is "-".
    peer_available = not args.no_peer and importlib.util.find_spec("onnx_ir") is not None
    if not args.no_peer and not peer_available:
        print("(onnxruntime's quantizer needs onnx-ir: pip install '.[bench]'; no peer column)", file=sys.stderr)
    print("| input | format | goal MiB | peak MiB | peak / goal | s | ort quantizer (4-bit) peak MiB | ours / ort |")
    print("|---|---|---|---|---|---|---|---|")
    peers: dict[tuple, float] = {}
    for label, layers, k, n, external, fmt, to_data in CASES + (LARGE if args.large else []):
        if args.quick:
            k, n = 256, 384
            label = f"{layers} x [{k}, {n}],{label.split(',', 1)[1]}"
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as temporary:
            directory = pathlib.Path(temporary)
            source = write_input(directory, layers, k, n, external)
            size = sum(p.stat().st_size for p in directory.iterdir()) / 2**20
            goal = 1.5 * size + 200
            argv = ["onnx_struct", "quantize", str(source), str(directory / "q.onnx"), "--format", fmt, "--quiet"]
            peak, seconds = peak_of([*argv, *(["--external"] if to_data else [])])
            key = (layers, k, n, external)
            peer = ""
            if fmt == "Q4_0" and peer_available and key not in peers:
                script = directory / "peer.py"
                script.write_text(PEER)
                peers[key] = peak_of([str(script), str(source), str(directory / "ort.onnx")])[0]
            if fmt == "Q4_0" and key in peers:
                peer = f"{peers[key]:.0f} | {peak / peers[key]:.2f}"
            else:
                peer = "- | -"
            print(
                f"| {label} | {fmt} | {goal:.0f} | {peak:.0f} | {peak / goal:.2f} | {seconds:.1f} | {peer} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
