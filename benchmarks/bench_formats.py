"""Decode throughput of every registered GGUF format: onnx_struct.decode (onnxruntime) vs gguf-py.

For each format registered with ``family == "gguf"`` at run time (so every GGUF module's types,
not only the legacy and K-quants), the same random payload bytes of a ``rows x cols`` tensor are
decoded by

* ``gguf.quants.dequantize`` (gguf-py, numpy), and
* ``onnx_struct.decode`` (the user path: view the payload, feed the leaves, run the decoder
  function in onnxruntime; the session is cached after the warm-up run), once with the payload
  inline in ``raw_data`` and once as an external file (memory-mapped, the path for big weights),
* the decoder function alone: the cached session run on leaves extracted once, i.e. what the
  format's ONNX function costs without the view and feeding.

Random bytes are valid blocks for these formats (scales may be NaN or infinity; numpy's warnings
about them are silenced). Every timing is the best of ``--repeat`` runs after one warm-up, all in
this process; the table reports the ratio gguf-py time / decode time measured in the same run
(goal: >= 3) and the output throughput in MB/s of float32. Formats gguf-py does not know get no
ratio. The machine's other load shows up as noise, hence best-of.

Run: ``python benchmarks/bench_formats.py [--rows 4096 --cols 4096 --repeat 5 --only Q4_0,Q6_K]``.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import tempfile
import time
import warnings

import numpy as np
import onnx

import onnx_struct as S
from onnx_struct import bindings, formats, runtime
from onnx_struct.runtime import decode

try:
    from gguf import GGMLQuantizationType, quants
except ImportError:  # gguf-py is an optional dependency (the "bench" extra)
    GGMLQuantizationType = quants = None


def best_of(function, repeat: int) -> float:
    function()  # warm-up: builds and caches the session, faults the pages in
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def decoder_only(value, model):
    """A callable running just the decoder session on leaves extracted once (what decode() does
    after viewing the payload and gathering the leaves)."""
    struct_view, declaration, where = runtime.open_value(value, model)
    bound = bindings.bind_decoder(declaration.decoder, struct_view.layout, where)
    feeds, constants = runtime.leaf_feeds(struct_view, bound)
    inputs = [(name, runtime.tensor_type(feed.elem_type, feed.shape)) for name, feed in feeds.items()]
    runner = runtime.cached_runner(declaration.decoder, where, inputs, constants, "onnxruntime")
    return lambda: runner.run(feeds)


def gguf_type(name: str):
    if GGMLQuantizationType is None:
        return None
    return getattr(GGMLQuantizationType, name, None)


def bench_format(
    name: str, rows: int, cols: int, repeat: int, rng: np.random.Generator, directory: pathlib.Path
) -> dict:
    fmt = formats.get(name)
    cols = max(fmt.block_size, cols // fmt.block_size * fmt.block_size)
    shape = (rows, cols)
    payload = rng.integers(0, 256, fmt.num_blocks(shape) * fmt.bytes_per_block, dtype=np.uint8)
    model = onnx.ModelProto()
    value = fmt.make_value(model, name, shape, payload.tobytes())
    payload.tofile(directory / f"{name}.bin")
    external = S.make_struct_value(
        name, value.type, external_data={"location": f"{name}.bin", "offset": 0, "length": payload.size}
    )
    row = {"format": name, "shape": f"{rows}x{cols}", "elements": rows * cols}
    try:
        row["decode"] = best_of(lambda: decode(value, model), repeat)
        row["external"] = best_of(lambda: decode(external, model, base_dir=directory), repeat)
        row["function"] = best_of(decoder_only(value, model), repeat)
    except Exception as error:  # report and go on: the table covers every registered format
        row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
        return row
    qtype = gguf_type(name)
    if qtype is not None:
        data = payload.reshape(rows, -1)
        try:
            row["gguf"] = best_of(lambda: quants.dequantize(data, qtype), repeat)
        except NotImplementedError:
            pass
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| format | decode, inline (ms) | decode, external (ms) | decoder function (ms) | gguf-py (ms) "
        "| gguf-py / decode inline | gguf-py / decode external | gguf-py / function | MB/s out (external) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['format']} | failed: {row['error']} | | | | | | | |")
            continue
        times = [f"{row[k] * 1e3:.1f}" for k in ("decode", "external", "function")]
        gguf_ms = f"{row['gguf'] * 1e3:.1f}" if "gguf" in row else "n/a"
        ratios = [
            f"{row['gguf'] / row[k]:.1f}x" if "gguf" in row else "n/a" for k in ("decode", "external", "function")
        ]
        throughput = row["elements"] * 4 / row["external"] / 1e6
        lines.append(f"| {row['format']} | {' | '.join(times)} | {gguf_ms} | {' | '.join(ratios)} | {throughput:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated format names (default: every GGUF format)")
    args = parser.parse_args()
    names = [n for n in formats.names() if formats.get(n).family == "gguf"]
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n in wanted]
    rng = np.random.default_rng(0)
    results = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN/inf scales in random blocks
        for name in names:
            results.append(bench_format(name, args.rows, args.cols, args.repeat, rng, pathlib.Path(tmp)))
            print(f"{name}: done", flush=True)
    print(
        f"\n{args.rows} x {args.cols} elements, best of {args.repeat}; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)\n"
    )
    print(markdown(results))
    for column in ("decode", "external", "function"):
        # F32: gguf-py returns a view of the bytes (no work at all), so it has no meaningful ratio.
        ratios = [r["gguf"] / r[column] for r in results if "gguf" in r and column in r and r["format"] != "F32"]
        if ratios:
            mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"geometric mean gguf-py / {column} (all but F32): {mean:.1f}x")


if __name__ == "__main__":
    main()
