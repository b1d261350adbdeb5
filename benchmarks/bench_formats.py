"""Decode (and encode) throughput of every registered GGUF format: onnx_struct vs gguf-py.

For each format registered with ``family == "gguf"`` at run time (plain, legacy, K-quants, IQ,
TQ, MXFP4, NVFP4), the same random payload bytes of a ``rows x cols`` tensor are decoded by

* ``gguf.quants.dequantize`` (gguf-py, numpy), and
* ``onnx_struct.decode`` (the user path: view the payload, feed the leaves, run the decoder
  in onnxruntime, here in block ranges on every core, see ``onnx_struct.parallel``; sessions are
  cached after the warm-up run), once with the payload inline in ``raw_data`` and once as an
  external file (memory-mapped, the path for big weights),
* the decoder function alone, whole: one cached session over the whole tensor (onnxruntime's
  default intra-op threads) run on leaves extracted once, i.e. what the format's ONNX function
  costs without the view, the feeding and the block-range split.

With ``--encode`` the encoders of the types gguf-py can quantize run too (``onnx_struct.encode``,
payload packed, vs ``gguf.quants.quantize`` on the same standard-normal floats).

Random bytes are valid blocks for these formats (scales may be NaN or infinity; numpy's warnings
about them are silenced). gguf-py runs in a process of its own (``_peer.PeerProcess``: in
onnx_struct's process its speed would depend on what onnx_struct allocated and freed before);
``--peer-reuses-memory`` tunes that process's allocator so gguf-py never faults fresh pages in
(its fastest). The contenders of one format run in turns (one call each per round, ``--repeat``
rounds after a warm-up), so both sides see the same load; each reports its minimum wall time and
minimum process CPU time (all of onnxruntime's threads; numpy is single-threaded).
The table gives gguf-py time / our time measured in the same run (goal: >= 3) and the output
throughput of the external path. Formats gguf-py does not know get no ratio.

Run: ``python benchmarks/bench_formats.py [--rows 4096 --cols 4096 --repeat 5 --only Q4_0,Q6_K
--encode --threads 2 --peer-reuses-memory]``.
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
from _peer import PeerProcess, Timing

import onnx_struct as S
from onnx_struct import formats
from onnx_struct.functions import bindings
from onnx_struct.functions.models import tensor_type
from onnx_struct.runtime import runners as runtime
from onnx_struct.runtime.codec import decode, encode, open_value
from onnx_struct.runtime.feeds import leaf_feeds

try:
    from gguf import GGMLQuantizationType, quants
except ImportError:  # gguf-py is an optional dependency (the "bench" extra)
    GGMLQuantizationType = quants = None


def race(contenders: dict, repeat: int) -> dict[str, tuple[float, float]]:
    """name -> (minimum wall time, minimum CPU time) over ``repeat`` rounds in which every
    contender runs once, after one warm-up call each (builds and caches sessions, faults pages in).
    A contender that returns a :class:`Timing` (the peer, timed in its own process) is taken at
    its word; the others are timed here."""
    for function in contenders.values():
        function()
    best = {name: [math.inf, math.inf] for name in contenders}
    for _ in range(repeat):
        for name, function in contenders.items():
            wall, cpu = time.perf_counter(), time.process_time()
            measured = function()
            if not isinstance(measured, Timing):
                measured = (time.perf_counter() - wall, time.process_time() - cpu)
            best[name][0] = min(best[name][0], measured[0])
            best[name][1] = min(best[name][1], measured[1])
    return {name: tuple(times) for name, times in best.items()}


def decoder_only(value, model):
    """A callable running just the decoder session on leaves extracted once (what decode() does
    after viewing the payload and gathering the leaves)."""
    struct_view, declaration, where = open_value(value, model)
    bound = bindings.bind_decoder(declaration.decoder, struct_view.layout, where)
    feeds, constants = leaf_feeds(struct_view, bound)
    inputs = [(name, tensor_type(feed.elem_type, feed.shape)) for name, feed in feeds.items()]
    runner = runtime.cached_runner(declaration.decoder, where, inputs, constants, "onnxruntime")
    return lambda: runner.run(feeds)


def gguf_type(name: str):
    return None if GGMLQuantizationType is None else getattr(GGMLQuantizationType, name, None)


def bench_decoder(name: str, rows: int, cols: int, repeat: int, rng, directory: pathlib.Path, peer) -> dict:
    fmt = formats.get(name)
    cols = max(fmt.block_size, cols // fmt.block_size * fmt.block_size)
    shape = (rows, cols)
    payload = rng.integers(0, 256, fmt.num_blocks(shape) * fmt.bytes_per_block, dtype=np.uint8)
    model = onnx.ModelProto()
    value = fmt.make_value(model, name, shape, payload.tobytes())
    path = directory / f"{name}.bin"
    payload.tofile(path)
    external = S.make_struct_value(
        name, value.type, external_data={"location": f"{name}.bin", "offset": 0, "length": payload.size}
    )
    row = {"format": name, "elements": rows * cols}
    contenders = {
        "inline": lambda: decode(value, model),
        "external": lambda: decode(external, model, base_dir=directory),
        "function": decoder_only(value, model),
    }
    qtype = gguf_type(name)
    if qtype is not None:
        peer.load("payload", str(path), "uint8", (rows, payload.size // rows))
        contenders["gguf"] = lambda: peer.time("gguf.quants:dequantize", "payload", qtype)
    try:
        row.update(race(contenders, repeat))
    except NotImplementedError:  # gguf-py knows the type but cannot dequantize it
        del contenders["gguf"]
        row.update(race(contenders, repeat))
    except Exception as error:  # report and go on: the table covers every registered format
        row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return row


def bench_encoder(name: str, rows: int, cols: int, repeat: int, rng, directory: pathlib.Path, peer) -> dict | None:
    fmt, qtype = formats.get(name), gguf_type(name)
    if fmt.encoder is None or qtype is None:
        return None
    x = rng.standard_normal((rows, max(fmt.block_size, cols // fmt.block_size * fmt.block_size))).astype(np.float32)
    try:
        quants.quantize(x[:1], qtype)
    except NotImplementedError:
        return None
    model = onnx.ModelProto()
    root = fmt.add_to_model(model, x.shape)
    row = {"format": name, "elements": x.size}
    path = directory / "x.bin"
    x.tofile(path)
    peer.load("x", str(path), "float32", x.shape)
    row.update(
        race(
            {"encode": lambda: encode(x, root, model), "gguf": lambda: peer.time("gguf.quants:quantize", "x", qtype)},
            repeat,
        )
    )
    return row


def ratio(row: dict, ours: str, clock: int = 0) -> str:
    return f"{row['gguf'][clock] / row[ours][clock]:.1f}x" if "gguf" in row and ours in row else "n/a"


def decode_table(rows: list[dict]) -> str:
    lines = [
        "| format | decode inline (ms) | decode external (ms) | decoder function (ms) | gguf-py (ms) "
        "| gguf-py / inline | gguf-py / external | gguf-py / function | CPU: gguf-py / function | MB/s out |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['format']} | failed: {row['error']} | | | | | | | | |")
            continue
        times = [f"{row[k][0] * 1e3:.1f}" for k in ("inline", "external", "function")]
        gguf_ms = f"{row['gguf'][0] * 1e3:.1f}" if "gguf" in row else "n/a"
        ratios = [ratio(row, k) for k in ("inline", "external", "function")] + [ratio(row, "function", 1)]
        throughput = row["elements"] * 4 / row["external"][0] / 1e6
        lines.append(f"| {row['format']} | {' | '.join(times)} | {gguf_ms} | {' | '.join(ratios)} | {throughput:.0f} |")
    return "\n".join(lines)


def encode_table(rows: list[dict]) -> str:
    lines = [
        "| format | encode (ms) | gguf-py quantize (ms) | wall: gguf-py / encode | CPU: gguf-py / encode |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        wall = f"{row['encode'][0] * 1e3:.1f} | {row['gguf'][0] * 1e3:.1f}"
        lines.append(f"| {row['format']} | {wall} | {ratio(row, 'encode')} | {ratio(row, 'encode', 1)} |")
    return "\n".join(lines)


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated format names (default: every GGUF format)")
    parser.add_argument("--encode", action="store_true", help="also the encoders gguf-py has a quantizer for")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (default: runtime's)")
    parser.add_argument(
        "--peer-reuses-memory",
        action="store_true",
        help="run gguf-py with glibc tuned to reuse freed memory (its fastest; not a default setting)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        runtime.INTRA_OP_THREADS = args.threads
    names = [n for n in formats.names() if formats.get(n).family == "gguf"]
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n in wanted]
    rng = np.random.default_rng(0)
    decoded, encoded = [], []
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory() as tmp,
        warnings.catch_warnings(),
        np.errstate(all="ignore"),
        PeerProcess(reuse_memory=args.peer_reuses_memory) as peer,
    ):
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN/inf scales in random blocks
        directory = pathlib.Path(tmp)
        for name in names:
            decoded.append(bench_decoder(name, args.rows, args.cols, args.repeat, rng, directory, peer))
            if args.encode and (row := bench_encoder(name, args.rows, args.cols, args.repeat, rng, directory, peer)):
                encoded.append(row)
            print(f"{name}: done", flush=True)
    threads = runtime.INTRA_OP_THREADS or "onnxruntime's default"
    print(
        f"\n{args.rows} x {args.cols} elements, min of {args.repeat} alternating rounds; onnxruntime "
        f"{runtime.ort_version()}, intra-op threads: {threads}; load average (1, 5, 15 min) "
        f"{'/'.join(f'{v:.1f}' for v in load_before)} before, "
        f"{'/'.join(f'{v:.1f}' for v in os.getloadavg())} after ({os.cpu_count()} CPUs)\n"
    )
    print(decode_table(decoded))
    for column in ("inline", "external", "function"):
        # F32: gguf-py returns a view of the bytes (no work at all), so it has no meaningful ratio.
        ratios = [r["gguf"][0] / r[column][0] for r in decoded if "gguf" in r and column in r and r["format"] != "F32"]
        if ratios:
            print(f"geometric mean gguf-py / {column} (all but F32): {geometric_mean(ratios):.1f}x")
    if encoded:
        print("\n" + encode_table(encoded))


if __name__ == "__main__":
    main()
