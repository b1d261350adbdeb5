"""Peak RSS of ``onnx_struct.InferenceSession`` over quantized weights, and where it goes.

For each format, weight shape ``K x N`` and layer count the struct model is ``y = sum_i x @ W_i``
(each ``W_i`` a struct value ``W_i^T [N, K]`` + ``Transpose``, random blocks with finite scales,
as bench_execution.py builds them), its payloads in an external file (``ext``) or inline
(``inline``). Two fresh processes per case:

* **session**: imports numpy, onnxruntime and onnx_struct (``imports``: the baseline the goal's
  100 MiB is for), then ``onnx_struct.InferenceSession(path)``; reports VmHWM after it
  (``peak``) and VmRSS (``after``: what the session keeps). Goal (issue 12): ``peak <= 1.5 x
  quantized bytes + 100 MiB``.
* **steps**: the same session creation taken apart, the peak of each phase measured on its own
  (VmHWM reset through ``/proc/self/clear_refs`` before each): ``load`` (the struct model as
  read), ``lower`` (check, repack into MatMulNBits arrays, the lowered model), ``ort`` (the
  arrays written to the temporary weights file and freed, then the onnxruntime session reading
  it and prepacking), and the RSS the process keeps (``ort kept``). With ``--trace`` also
  tracemalloc's peak of Python allocations during ``lower`` (slower).

``--peer`` adds the peer's figure: the float32 model of the same (dequantized) weights, quantized by
onnxruntime's own ``MatMulNBitsQuantizer`` at the same bits (block 32, accuracy level 4), saved with
its weights in an external file, and a fresh process's VmHWM after ``onnxruntime.InferenceSession``
over it (``ort-q peak``; the same imports first). It says what onnxruntime's fused kernels cost
by themselves, whoever made the model.

``--in-memory`` adds a third process: the ``ort`` phase when the arrays are handed to onnxruntime
in memory (``add_external_initializers``; what InferenceSession falls back to where no temporary
file can be written): onnxruntime copies them while ours still exist.

Run: ``python benchmarks/bench_session_memory.py [--formats Q4_0,Q4_K,Q8_0] [--cases 4096x4096x2,4096x11008x4]
[--inline Q4_0] [--trace] [--in-memory] [--peer]``; numbers in MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

F16_OFFSETS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,), "IQ4_XS": (0,)}


def status() -> dict[str, float]:
    with open("/proc/self/status") as file:
        return {line[:5]: int(line.split()[1]) / 1024 for line in file if line.startswith(("VmHWM", "VmRSS"))}


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def payload(fmt, shape: tuple[int, int], seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (fmt.num_blocks(shape), fmt.bytes_per_block), dtype=np.uint8)
    for offset in F16_OFFSETS.get(fmt.name, ()):
        scales = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16)
        blocks[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.tobytes()


def build(name: str, k: int, n: int, layers: int, directory: str, inline: bool) -> tuple[str, int]:
    """(model path, quantized bytes)."""
    import onnx_struct as S  # noqa: PLC0415
    from onnx_struct import formats  # noqa: PLC0415

    fmt = formats.get(name)
    nodes = []
    for i in range(layers):
        nodes += [
            oh.make_node("Transpose", [f"W{i}"], [f"W{i}t"], perm=[1, 0]),
            oh.make_node("MatMul", ["x", f"W{i}t"], [f"y{i}"]),
        ]
    nodes.append(oh.make_node("Sum", [f"y{i}" for i in range(layers)], ["y"]))
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    total = 0
    with open(os.path.join(directory, "weights.bin"), "wb") as file:
        for i in range(layers):
            data = payload(fmt, (n, k), i)
            value = fmt.make_value(model, f"W{i}", (n, k), data if inline else b"")
            if not inline:
                value.ClearField("raw_data")
                for key, text in (("location", "weights.bin"), ("offset", total), ("length", len(data))):
                    value.external_data.add(key=key, value=str(text))
                file.write(data)
            S.add_struct_values(model, value)
            total += len(data)
    path = os.path.join(directory, "model.onnx")
    with open(path, "wb") as file:
        file.write(model.SerializeToString())
    return path, total


# ---------------------------------------------------------------------------------- children
def child_session(path: str) -> dict:
    import onnxruntime  # noqa: F401, PLC0415

    import onnx_struct  # noqa: PLC0415

    report = {"imports": status()["VmHWM"]}
    session = onnx_struct.InferenceSession(path)
    report["peak"], report["after"] = status()["VmHWM"], status()["VmRSS"]
    del session
    return report


def child_peer(path: str) -> dict:
    import onnxruntime  # noqa: PLC0415

    import onnx_struct  # noqa: F401, PLC0415 - the same baseline as child_session

    report = {"imports": status()["VmHWM"]}
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    report["peak"] = status()["VmHWM"]
    del session
    return report


def build_peer(name: str, k: int, n: int, layers: int, directory: str) -> str:
    """onnxruntime's MatMulNBits quantizer's model of the same weights, external data; its path."""
    import onnx  # noqa: PLC0415
    from bench_execution import models, ort_quantized  # noqa: PLC0415 - this directory

    _, plain, _, weights = models(name, k, n, layers, directory)
    del weights
    bits = 8 if name.startswith("Q8") else 4
    quantized = ort_quantized(plain, bits, 4)
    del plain
    path = os.path.join(directory, "ort-q.onnx")
    onnx.save(quantized, path, save_as_external_data=True, location="ort-q.bin", size_threshold=0)
    return path


def child_steps(path: str, trace: bool, in_memory: bool) -> dict:
    import onnxruntime as ort  # noqa: PLC0415

    from onnx_struct.check.checked import checked_model  # noqa: PLC0415
    from onnx_struct.lowering.lower import lower_checked  # noqa: PLC0415
    from onnx_struct.runtime.file_backed import held_lightly  # noqa: PLC0415
    from onnx_struct.runtime.heap import release_free_memory  # noqa: PLC0415
    from onnx_struct.runtime.weights_file import write_weights_file  # noqa: PLC0415
    from onnx_struct.schema.model import load  # noqa: PLC0415

    report = {"imports": status()["VmHWM"], "phases": reset_peak()}

    def phase(label: str) -> None:
        now = status()
        report[label], report[f"{label} rss"] = now["VmHWM"], now["VmRSS"]
        reset_peak()

    loaded = load(path)
    phase("load")
    if trace:
        import tracemalloc  # noqa: PLC0415

        tracemalloc.start()
    checked = checked_model(loaded, standalone=True)
    checked = checked.replaced(held_lightly(checked.loaded, path))
    lowering = lower_checked(checked, execution="quantized", accuracy_level=4, in_memory=True)
    arrays = lowering.arrays
    del checked
    if trace:
        report["lower python peak"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    report["arrays"] = sum({id(a): a.nbytes for a in arrays.values()}.values()) / 2**20
    report["lowered bytes"] = lowering.model.ByteSize() / 2**20
    base_dir = loaded.base_dir
    del loaded
    phase("lower")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    weights = None
    if in_memory:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
        names = list(arrays)
        options.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(arrays[n]) for n in names])
    else:  # what InferenceSession does
        weights = write_weights_file(lowering.model, arrays, base_dir)
        arrays.clear()
        release_free_memory()
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", weights.directory)
    session = ort.InferenceSession(lowering.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    phase("ort")
    arrays.clear()
    if weights is not None:
        weights.remove()
    report["ort kept"] = status()["VmRSS"]
    del session
    return report


# ---------------------------------------------------------------------------------- driver
def run_child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="Q4_0,Q4_K,Q8_0")
    parser.add_argument("--cases", default="4096x4096x2,4096x11008x4", help="KxNxLAYERS,...")
    parser.add_argument("--inline", default="Q4_0", help="formats also measured with inline payloads")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--in-memory", action="store_true", help="also the ort phase of the in-memory fallback")
    parser.add_argument("--peer", action="store_true", help="also onnxruntime's quantizer's model (ort-q peak)")
    parser.add_argument("--no-steps", action="store_true", help="the session process only (any onnx_struct version)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path = args.child[:2]
        if kind == "session":
            print(json.dumps(child_session(path)))
        elif kind == "peer":
            print(json.dumps(child_peer(path)))
        else:
            print(json.dumps(child_steps(path, "trace" in args.child, kind == "memory")))
        return
    header = "| format | K x N x layers | payload | MiB | imports | peak | goal | peak/goal | after |"
    header += " load | lower | arrays | ort | ort kept |" + (" python peak |" if args.trace else "")
    header += " in-memory ort |" if args.in_memory else ""
    header += " ort-q peak | ort-q peak/goal |" if args.peer else ""
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    inline = set(filter(None, args.inline.split(",")))
    for case in args.cases.split(","):
        k, n, layers = (int(v) for v in case.split("x"))
        for name in args.formats.split(","):
            for where in ("ext", "inline") if name in inline else ("ext",):
                with tempfile.TemporaryDirectory() as directory:
                    path, nbytes = build(name, k, n, layers, directory, where == "inline")
                    mib = nbytes / 2**20
                    headline = run_child("session", path)
                    steps = {} if args.no_steps else run_child("steps", path, *(["trace"] if args.trace else []))
                    goal = 1.5 * mib + 100
                    cells = [name, f"{k}x{n}x{layers}", where, f"{mib:.1f}", f"{headline['imports']:.0f}"]
                    cells += [f"{headline['peak']:.0f}", f"{goal:.0f}", f"{headline['peak'] / goal:.2f}"]
                    cells.append(f"{headline['after']:.0f}")
                    for key in ("load", "lower", "arrays", "ort", "ort kept"):
                        cells.append(f"{steps[key]:.0f}" if key in steps else "-")
                    if args.trace and steps:
                        cells.append(f"{steps['lower python peak']:.0f}")
                    if args.in_memory:
                        cells.append(f"{run_child('memory', path)['ort']:.0f}")
                    if args.peer and where == "ext":
                        peer = run_child("peer", build_peer(name, k, n, layers, directory))
                        cells += [f"{peer['peak']:.0f}", f"{peer['peak'] / goal:.2f}"]
                    elif args.peer:
                        cells += ["-", "-"]
                    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
