"""Peak memory of onnxruntime sessions over a lowered model with 256 MiB of 4-bit weights.

The struct model holds INT4 weights ``Wk`` (external payloads, ``--mib`` MiB in all, 128 MiB
each, decoded as ``Cast(values) * scale``) consumed by ``Yk = MatMul(X, Wk)``. It is lowered twice, with
``compact=False`` and ``compact=True``, and each variant is loaded in a fresh subprocess that
reports its peak RSS (``ru_maxrss``) after the imports, after session creation, and after one
``run``:

* ``lower()`` - the decoder's inputs are all initializers, so onnxruntime constant-folds it at
  session creation and keeps the float32 weight (8x the payload) resident;
* ``lower(compact=True)`` - the leaves are also graph inputs (overridable initializers), so
  nothing is folded; the float32 weight exists only transiently during each run;
* ``lower()`` + ``disabled_optimizers=["ConstantFolding"]`` - the session-side alternative.

Run: ``python benchmarks/bench_lower_memory.py [--mib 256]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

VARIANTS = {
    "lower()": ("lowered.onnx", {}),
    "lower(compact=True)": ("lowered_compact.onnx", {}),
    'lower() + disabled_optimizers=["ConstantFolding"]': ("lowered.onnx", {"disabled_optimizers": ["ConstantFolding"]}),
}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(path: str, kwargs_json: str) -> None:
    import numpy as np  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    kwargs = json.loads(kwargs_json)
    report = {"imports": peak_mib()}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"], **kwargs)
    report["create_s"] = time.perf_counter() - start
    report["session"] = peak_mib()
    rows = session.get_inputs()[0].shape[1]
    start = time.perf_counter()
    session.run(None, {"X": np.ones((1, rows), np.float32)})
    report["run_s"] = time.perf_counter() - start
    report["run"] = peak_mib()
    print(json.dumps(report))


def build(directory: str, mib: int) -> None:
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    from onnx import TensorProto  # noqa: PLC0415
    from onnx import helper as oh  # noqa: PLC0415

    import onnx_struct as S  # noqa: PLC0415

    # onnxruntime does not fold a constant of 2 GiB or more (measured: a single 256 MiB INT4
    # weight, 2 GiB as float32, is left alone), so the payload is split into weights of at most
    # 128 MiB (1 GiB as float32), the size of real layers, which it does fold.
    count = max(1, -(-mib // 128))
    rows = 4096
    cols = mib * 2**20 * 2 // count // rows
    payload = np.random.default_rng(0).integers(0, 256, mib * 2**20, dtype=np.uint8)
    payload.tofile(os.path.join(directory, "weights.bin"))
    decoder = oh.make_function(
        "bench",
        "int4_linear",
        ["values", "scale"],
        ["y"],
        [oh.make_node("Cast", ["values"], ["v"], to=TensorProto.FLOAT), oh.make_node("Mul", ["v", "scale"], ["y"])],
        [oh.make_opsetid("", 21)],
    )
    declaration = S.make_structure(
        [
            S.make_field("values", S.make_tensor_type(TensorProto.INT4, [rows, cols])),
            S.make_constant_field("scale", np.float32(0.01)),
        ],
        name="INT4_LINEAR",
        decoder=decoder,
    )
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", f"W{k}"], [f"Y{k}"]) for k in range(count)],
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, rows])],
        [oh.make_tensor_value_info(f"Y{k}", TensorProto.FLOAT, [1, cols]) for k in range(count)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    (index,) = S.add_struct_types(model, declaration)
    size = rows * cols // 2
    for k in range(count):
        external = {"location": "weights.bin", "offset": k * size, "length": size}
        S.add_struct_values(model, S.make_struct_value(f"W{k}", index, external_data=external))
    path = os.path.join(directory, "model.onnx")
    onnx.save(model, path)
    for compact, name in ((False, "lowered.onnx"), (True, "lowered_compact.onnx")):
        onnx.save(S.lower(path, compact=compact), os.path.join(directory, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="payload size in MiB (4-bit weights)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "KWARGS"), help=argparse.SUPPRESS)
    parser.add_argument("--build", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.build:
        build(args.build, args.mib)
        return
    # Linux keeps ru_maxrss across fork and exec, so this process stays small (stdlib only) and
    # the model is built in a subprocess of its own.
    with tempfile.TemporaryDirectory() as directory:
        subprocess.run([sys.executable, __file__, "--build", directory, "--mib", str(args.mib)], check=True)
        results = {}
        for label, (file, kwargs) in VARIANTS.items():
            output = subprocess.run(
                [sys.executable, __file__, "--child", os.path.join(directory, file), json.dumps(kwargs)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[label] = json.loads(output.strip().splitlines()[-1])
    base = results["lower()"]
    print(
        f"{args.mib} MiB of INT4 weights in {max(1, -(-args.mib // 128))} struct values ({args.mib * 8} MiB as float32); "
        "peak RSS in MiB, each variant in a fresh process\n"
    )
    print(
        "| variant | after imports | after session creation | after 1 run | creation (s) | run (s) | creation peak / lower() |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        print(
            f"| {label} | {r['imports']:.0f} | {r['session']:.0f} | {r['run']:.0f} | {r['create_s']:.2f} | "
            f"{r['run_s']:.2f} | {r['session'] / base['session']:.2f} |"
        )


if __name__ == "__main__":
    main()
