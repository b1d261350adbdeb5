"""GGUF to a running LLM against llama.cpp (issue 29): accuracy, speed, memory, conversion time.

    python benchmarks/bench_llm.py --llama-python /path/to/python-with-llama-cpp [--small]

1. Accuracy, on tiny random llama files (tests/support/llm.py): F32 weights with an F32 KV
   cache, our logits against llama.cpp's and 40 greedy tokens; Q4_0, each side's distance from
   the float64 forward of the file's weights.
2. A ~1.1B-parameter Q4_0 llama (TinyLlama's shape: 22 layers, 2048 wide, 5632 MLP, 32 heads,
   4 KV heads, 32000 tokens; random blocks), written once into the work directory: conversion
   time of ``from-gguf --graph --reference``; then, per thread count, ours and llama.cpp in
   fresh processes in turns (best of ``--repeat``): prompt processing (64 tokens) and generation
   (32 tokens) in tokens/s, peak RSS (VmHWM); generation against the memory-bandwidth limit
   (bytes of weights read per token / a measured copy bandwidth). ``--small`` skips it.

Prints markdown tables (docs/benchmarks.md, "LLM generation"). llama.cpp runs in its own
interpreter (benchmarks/_llama_cpp_peer.py), so this one needs no llama-cpp-python.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _llm_accounting import breakdown_rows, stage_memory, stage_rows, token_breakdown  # noqa: E402
from _process_clock import since_process_start  # noqa: E402
from support.llm import (  # noqa: E402
    TinyLlama,
    forward,
    prompt_feeds,
    read_weights,
    relative_rms,
    run_llama_cpp,
    spm_vocab,
    write_gguf,
)

BIG = {
    "n_layers": 22,
    "n_embd": 2048,
    "n_ff": 5632,
    "n_heads": 32,
    "n_kv_heads": 4,
    "context_length": 2048,
    "tied": False,
    "random_blocks": True,
    "default_type": "Q4_0",
}
PROMPT_TOKENS, NEW_TOKENS = 64, 32


def _vmhwm() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------------------- accuracy
def accuracy(llama_python: str, work: pathlib.Path) -> list[str]:
    from onnx_struct.convert import convert
    from onnx_struct.llm.generation import Generator

    rows = [
        "| file | ours vs llama.cpp (rel. RMS of logits) | ours vs float64 | llama.cpp vs float64 | 40 greedy tokens |"
    ]
    rows.append("| --- | --- | --- | --- | --- |")
    for name, kind, kv in (("F32, F32 KV cache", "F32", "f32"), ("Q4_0, F16 KV cache", "Q4_0", "f16")):
        config = TinyLlama(**spm_vocab(), default_type=kind, seed=3)
        path = work / f"tiny-{kind}.gguf"
        write_gguf(path, config)
        generator = Generator(convert(path, graph=True, all_logits=True), accuracy_level=0)
        ids = generator.tokenizer.encode("hello world and the café")
        ours = generator.session.run(["logits"], prompt_feeds(config, ids))[0][0]
        exact, _ = forward(read_weights(path), config, np.array(ids))
        request = {"model": str(path), "task": "logits", "tokens": ids, "kv": kv}
        theirs = run_llama_cpp(llama_python, request, work)["logits"]
        request = {"model": str(path), "task": "greedy", "tokens": ids, "n_new": 40, "kv": kv}
        their_tokens = run_llama_cpp(llama_python, request, work)["generated"].tolist()
        our_tokens = generator.generate(ids, max_new_tokens=40, stop_at_eos=False).tokens
        same = sum(a == b for a, b in zip(our_tokens, their_tokens, strict=True))
        rows.append(
            f"| {name} | {relative_rms(ours, theirs):.1e} | {relative_rms(ours, exact):.1e} | "
            f"{relative_rms(theirs, exact):.1e} | {same}/40 identical |"
        )
    return rows


# ----------------------------------------------------------------------------- the 1.1B model
def big_model(work: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, float, TinyLlama]:
    from onnx_struct.convert import convert

    config = TinyLlama(**{**spm_vocab(32000), **BIG})
    path = work / "llama-1.1b-q4_0.gguf"
    stamp = work / "llama-1.1b-q4_0.json"
    if not path.exists() or not stamp.exists() or stamp.read_text() != repr(config):
        write_gguf(path, config)
        stamp.write_text(repr(config))
    start = time.perf_counter()
    model = convert(path, graph=True, reference=True)
    onnx_path = work / "llama-1.1b-q4_0.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    return path, onnx_path, time.perf_counter() - start, config


def child_ours(
    onnx_path: str, threads: int | None, ids: list[int], mode: str = "generate", cache_dir: str | None = None
) -> dict:
    if mode == "stages":
        return stage_memory(onnx_path, threads, ids, NEW_TOKENS)
    if mode == "profile":
        return token_breakdown(onnx_path, threads, ids, NEW_TOKENS)
    if mode == "save":
        return {"saved": str(save_ort_graph(onnx_path))}
    from onnx_struct.llm.generation import Generator

    start = time.perf_counter()
    generator = Generator(onnx_path, threads=threads, cache_dir=cache_dir)
    session_seconds = time.perf_counter() - start
    before_prompt = since_process_start()
    result = generator.generate(ids, max_new_tokens=NEW_TOKENS, stop_at_eos=False)
    return {
        "session_seconds": session_seconds,
        "first_token_seconds": session_seconds + result.prompt_seconds,
        "since_start_seconds": (before_prompt or float("nan")) + result.prompt_seconds,
        "prompt_tps": len(ids) / result.prompt_seconds,
        "gen_tps": (len(result.tokens) - 1) / result.generation_seconds,
        "rss": _vmhwm(),
        "tokens": result.tokens,
    }


def run_ours(
    onnx_path: pathlib.Path, threads: int | None, ids: list[int], mode: str = "generate", cache_dir=None
) -> dict:
    options = json.dumps({"threads": threads, "ids": ids, "mode": mode, "cache_dir": cache_dir and str(cache_dir)})
    argv = [sys.executable, __file__, "--child", str(onnx_path), options]
    return _child_json(argv, f"our child ({mode}, {len(ids)} prompt ids)")


def _child_json(argv: list[str], what: str) -> dict:
    """The JSON a child process prints last; its stderr's end in the error when it fails."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if result.returncode:
        raise SystemExit(f"{what} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def ort_graph_path(onnx_path: pathlib.Path | str) -> pathlib.Path:
    return pathlib.Path(onnx_path).with_suffix(".ort.onnx")


def save_ort_graph(onnx_path: str) -> pathlib.Path:
    """The graph onnxruntime holds inside ``Generator`` over ``onnx_path``, after its optimizations,
    saved beside it with its weights in an external file (benchmarks/_ort_floor.py loads it)."""
    import onnxruntime

    from onnx_struct.llm.generation import Generator

    out = ort_graph_path(onnx_path)
    base = onnxruntime.SessionOptions

    class Saving(base):  # the options Generator creates for a thread count
        def __init__(self):
            super().__init__()
            self.optimized_model_filepath = str(out)
            self.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{out.name}.data")
            self.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")

    onnxruntime.SessionOptions = Saving
    try:
        Generator(onnx_path, threads=1)
    finally:
        onnxruntime.SessionOptions = base
    return out


def run_floor(saved: pathlib.Path, threads: int | None, ids: list[int]) -> dict:
    """onnxruntime alone on the saved graph, in a process importing only numpy and onnxruntime."""
    request = json.dumps({"threads": threads, "ids": ids, "n_new": NEW_TOKENS})
    argv = [sys.executable, str(ROOT / "benchmarks" / "_ort_floor.py"), str(saved), request]
    return _child_json(argv, "the onnxruntime-alone child")


def run_theirs(llama_python: str, path: pathlib.Path, threads: int, ids: list[int], work: pathlib.Path) -> dict:
    request = {
        "model": str(path),
        "task": "greedy",
        "tokens": ids,
        "n_new": NEW_TOKENS,
        "threads": threads,
        "n_ctx": max(2048, len(ids) + NEW_TOKENS),  # llama.cpp holds (and clears) the whole context's cache
        "rss": True,
    }
    out = run_llama_cpp(llama_python, request, work)
    return {
        "first_token_seconds": float(out["load_seconds"]) + float(out["prompt_seconds"]),
        "since_start_seconds": float(out["since_start_seconds"]),
        "prompt_tps": len(ids) / float(out["prompt_seconds"]),
        "gen_tps": NEW_TOKENS / float(out["token_seconds"].sum()),
        "rss": int(out["rss"]),
        "tokens": out["generated"].tolist(),
    }


def copy_bandwidth() -> float:
    """Bytes per second numpy copies a 256 MiB array (best of 20: other processes only ever
    lower it): the memory-bandwidth figure."""
    source = np.ones(256 * 2**20, np.uint8)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return source.nbytes / best


def weight_bytes_per_token(config: TinyLlama) -> int:
    """Q4_0 bytes of every matrix a token multiplies (the embedding's one row is left out)."""
    q, kv = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    per_layer = config.n_embd * (2 * q + 2 * kv) + 3 * config.n_embd * config.n_ff
    elements = config.n_layers * per_layer + config.n_vocab * config.n_embd
    return elements // 32 * 18


def ratio_rows(llama_python, path, onnx_path, ids, threads_list, repeat, work, limit=None) -> list[str]:
    """Per thread count, ours, llama.cpp and onnxruntime alone on our graph (the floor) in fresh
    processes in turns (best of ``repeat``): the ratio table, then the floor table."""
    saved = pathlib.Path(run_ours(onnx_path, 1, [], "save")["saved"])
    cache = pathlib.Path(tempfile.mkdtemp(prefix="bench_llm_cache_", dir=work))
    run_ours(onnx_path, 1, ids, cache_dir=cache)  # makes the entry the timed starts below load
    rows = [
        "| threads | prompt tok/s ours / llama.cpp (ratio) | generation tok/s ours / llama.cpp (ratio) | "
        + ("generation / bandwidth limit (ours, llama.cpp) | " if limit else "")
        + "peak RSS ours / llama.cpp (MiB) | first token (load + prompt) ours / llama.cpp | "
        "first token from process start ours / llama.cpp | same greedy tokens |",
        "| --- | --- | --- | --- | --- | --- | " + ("--- | " if limit else "") + "--- |",
    ]
    floor_rows = [
        "onnxruntime alone on our graph (saved after its optimizations, loaded by a process that imports "
        "only numpy and onnxruntime: no check, repack or tokenizer; benchmarks/_ort_floor.py), the floor "
        "under ours; cached: ours again with `cache_dir` (`--cache-dir`), its entry made by a start before:",
        "",
        "| threads | first token (load + prompt) ours / cached / floor / llama.cpp | from process start ours / "
        "cached / floor / llama.cpp | peak RSS ours / cached / floor / llama.cpp (MiB) | generation tok/s ours / "
        "floor / llama.cpp | floor's and cached tokens = ours |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for threads in threads_list:
        ours, theirs, floor, cached = [], [], [], []
        for _ in range(repeat):  # in turns, so that a load phase of the machine hits every side
            ours.append(run_ours(onnx_path, threads, ids))
            theirs.append(run_theirs(llama_python, path, threads, ids, work))
            floor.append(run_floor(saved, threads, ids))
            cached.append(run_ours(onnx_path, threads, ids, cache_dir=cache))
        best = {
            key: [pick(r[key] for r in side) for side in (ours, floor, theirs, cached)]
            for key, pick in (("prompt_tps", max), ("gen_tps", max), ("first_token_seconds", min),
                              ("since_start_seconds", min), ("rss", min))
        }  # fmt: skip
        (o_p, _, t_p, _), (o_g, f_g, t_g, _) = best["prompt_tps"], best["gen_tps"]
        (o_f, f_f, t_f, c_f), (o_s, f_s, t_s, c_s) = best["first_token_seconds"], best["since_start_seconds"]
        o_r, f_r, t_r, c_r = (r / 2**20 for r in best["rss"])
        same = sum(a == b for a, b in zip(ours[0]["tokens"], theirs[0]["tokens"], strict=True))
        rows.append(
            f"| {threads} | {o_p:.1f} / {t_p:.1f} ({o_p / t_p:.2f}x) | {o_g:.1f} / {t_g:.1f} ({o_g / t_g:.2f}x) | "
            + (f"{o_g / limit:.0%}, {t_g / limit:.0%} | " if limit else "")
            + f"{o_r:.0f} / {t_r:.0f} | {o_f:.2f} / {t_f:.2f} s | {o_s:.2f} / {t_s:.2f} s | {same}/{NEW_TOKENS} |"
        )
        same_as_ours = "yes" if floor[0]["tokens"] == ours[0]["tokens"] == cached[0]["tokens"] else "no"
        floor_rows.append(
            f"| {threads} | {o_f:.2f} / {c_f:.2f} / {f_f:.2f} / {t_f:.2f} s | {o_s:.2f} / {c_s:.2f} / {f_s:.2f} / "
            f"{t_s:.2f} s | {o_r:.0f} / {c_r:.0f} / {f_r:.0f} / {t_r:.0f} | {o_g:.1f} / {f_g:.1f} / {t_g:.1f} | "
            f"{same_as_ours} |"
        )
    shutil.rmtree(cache, ignore_errors=True)
    return [*rows, "", *floor_rows]


def speed(llama_python: str, work: pathlib.Path, threads_list: list[int], repeat: int) -> list[str]:
    path, onnx_path, convert_seconds, config = big_model(work)
    rng = np.random.default_rng(0)
    ids = [1] + rng.integers(300, config.n_vocab, PROMPT_TOKENS - 1).tolist()
    gguf_bytes = path.stat().st_size
    kv_bytes = 2 * config.n_layers * config.n_kv_heads * config.head_dim * (PROMPT_TOKENS + NEW_TOKENS) * 4
    bandwidth = copy_bandwidth()
    limit = bandwidth / weight_bytes_per_token(config)
    rows = [
        f"Model: {gguf_bytes / 2**20:.0f} MiB Q4_0 GGUF, {config.n_layers} layers; conversion with "
        f"`--graph --reference`: {convert_seconds:.1f} s; copy bandwidth {bandwidth / 1e9:.1f} GB/s, "
        f"{weight_bytes_per_token(config) / 2**20:.0f} MiB of weights per token: limit {limit:.1f} tok/s.",
        "",
    ]
    rows += ratio_rows(llama_python, path, onnx_path, ids, threads_list, repeat, work, limit)
    default = run_ours(onnx_path, None, ids)
    goal = (1.2 * (gguf_bytes + kv_bytes) + 150 * 2**20) / 2**20
    rows += [
        "",
        f"Without a thread count (InferenceSession's low-memory route, onnxruntime's default threads): "
        f"generation {default['gen_tps']:.1f} tok/s, session created in {default['session_seconds']:.1f} s, "
        f"peak RSS {default['rss'] / 2**20:.0f} MiB (goal: <= 1.2 x (GGUF + KV cache) + 150 MiB = {goal:.0f} MiB).",
    ]
    return rows


def speed_file(
    llama_python: str, path: pathlib.Path, work: pathlib.Path, threads_list, repeat, lengths: list[int] | None = None
) -> list[str]:
    """A real GGUF file (any supported family): conversion time, then the ratio table."""
    from onnx_struct.convert import convert

    start = time.perf_counter()
    model = convert(path, graph=True, reference=True, model_dir=path.parent)
    onnx_path = path.parent / f"{path.stem}.bench.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    seconds = time.perf_counter() - start
    arch = next(p.value for p in model.metadata_props if p.key == "general.architecture")
    del model
    rng = np.random.default_rng(0)
    ids = rng.integers(300, 20000, PROMPT_TOKENS).tolist()
    rows = [
        f"{path.name} ({arch}, {path.stat().st_size / 2**20:.0f} MiB): `--graph --reference` in {seconds:.1f} s.",
        "",
    ]
    rows += ratio_rows(llama_python, path, onnx_path, ids, threads_list, repeat, work)
    if lengths:
        rows += ["", *accounting_rows(llama_python, path, onnx_path, threads_list[0], lengths, work)]
    return rows


# A 135M-class llama (SmolLM2-135M's shape): 30 layers, 576 wide, 1536 MLP, 9 heads, 3 KV heads and
# a tied 49152 x 576 embedding, in random blocks of two mixes people download.
SMALL_LLAMA = {
    "n_layers": 30,
    "n_embd": 576,
    "n_ff": 1536,
    "n_heads": 9,
    "n_kv_heads": 3,
    "context_length": 8192,  # SmolLM2's: the growth table's 2048-token prompt and its new tokens fit
    "tied": True,
    "random_blocks": True,
}
SMALL_MIXES = {
    "Q4_1": ("Q4_1", {"token_embd": "Q8_0"}),  # as SmolLM2-135M-Instruct.Q4_1.gguf
    # As llama.cpp's quantize writes Q4_K_M at 576 columns (not a multiple of a K-quant's 256):
    # Q4_K falls back to Q5_0 and Q6_K to Q8_0; only ffn_down (1536 columns) keeps a K-quant.
    "Q4_K_M": ("Q5_0", {"token_embd": "Q8_0", "attn_v": "Q8_0", "ffn_down": "Q4_K"}),
}


def small_llama(mix: str, work: pathlib.Path) -> pathlib.Path:
    default, types = SMALL_MIXES[mix]
    path = work / f"llama-135m-{mix.lower()}.gguf"
    write_gguf(path, TinyLlama(**{**spm_vocab(49152), **SMALL_LLAMA, "default_type": default, "types": types}))
    return path


def scale_rows(llama_python, path, onnx_path, threads: int, lengths: list[int], work) -> list[str]:
    """Prompt speed, generation speed and peak memory as the prompt grows, ours beside llama.cpp."""
    rows = [
        f"Growth with the prompt ({threads} thread(s), {NEW_TOKENS} tokens generated after it):",
        "",
        "| prompt tokens | prompt tok/s ours / llama.cpp | generation tok/s ours / llama.cpp | peak RSS ours / llama.cpp (MiB) |",
        "| --- | --- | --- | --- |",
    ]
    rng = np.random.default_rng(1)
    for n in lengths:
        ids = rng.integers(300, 20000, n).tolist()
        ours, theirs = run_ours(onnx_path, threads, ids), run_theirs(llama_python, path, threads, ids, work)
        rows.append(
            f"| {n} | {ours['prompt_tps']:.0f} / {theirs['prompt_tps']:.0f} ({ours['prompt_tps'] / theirs['prompt_tps']:.2f}x) | "
            f"{ours['gen_tps']:.1f} / {theirs['gen_tps']:.1f} ({ours['gen_tps'] / theirs['gen_tps']:.2f}x) | "
            f"{ours['rss'] / 2**20:.0f} / {theirs['rss'] / 2**20:.0f} ({ours['rss'] / theirs['rss']:.2f}x) |"
        )
    return rows


def accounting_rows(llama_python, path, onnx_path, threads: int, lengths: list[int], work) -> list[str]:
    """The stage-by-stage memory table, the per-token time breakdown and the growth table."""
    rng = np.random.default_rng(0)
    ids = rng.integers(300, 20000, PROMPT_TOKENS).tolist()
    theirs = run_theirs(llama_python, path, threads, ids, work)
    rows = [f"Memory by stage ({threads} thread(s), a {PROMPT_TOKENS}-token prompt):", ""]
    rows += stage_rows(run_ours(onnx_path, threads, ids, "stages"), theirs["rss"])
    rows += ["", *breakdown_rows(run_ours(onnx_path, threads, ids, "profile")), ""]
    return rows + scale_rows(llama_python, path, onnx_path, threads, lengths, work)


# --family: a random Q4_K file of a realistic small shape per family (the family's own test writer,
# tests/support/families/), Q6_K embedding and head, as Q4_K_M files mix them.
SMALL_SHAPE = {"n_layers": 16, "n_embd": 1024, "n_ff": 2816, "n_heads": 16, "n_kv_heads": 4, "context_length": 4096}
FAMILY_SHAPES = {
    "qwen3": ("qwen3-gqa", {"n_layers": 28, "n_ff": 3072, "n_kv_heads": 8, "head_dim": 128}),  # Qwen3-0.6B
    "gemma3": ("gemma3-swa", {"head_dim": 256, "n_kv_heads": 1, "sliding_window": 512, "linear_rope_factor": None}),
    "granite": ("granite-f32", {}),
    "olmo2": ("olmo2-gqa", {}),
    "phi3": ("phi3-mini-f32", {"n_kv_heads": 16}),
    "smollm3": ("smollm3-gqa", {"head_dim": 64}),
}


def family_file(family: str, work: pathlib.Path) -> pathlib.Path:
    import dataclasses

    from support.family_cases import CASES

    case, changes = FAMILY_SHAPES[family]
    module, base = CASES[case]
    fields = {f.name for f in dataclasses.fields(base)}
    shape = {k: v for k, v in {**SMALL_SHAPE, **changes}.items() if k in fields}
    config = dataclasses.replace(
        base,
        **shape,
        **spm_vocab(32000),
        default_type="Q4_K",
        types={"token_embd": "Q6_K", "output": "Q6_K"},
    )
    path = work / f"{family}-small-q4_k.gguf"
    module.write_gguf(path, config)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-python", default=sys.executable, help="a Python with llama-cpp-python")
    parser.add_argument("--small", action="store_true", help="accuracy only: skip the 1.1B model")
    parser.add_argument("--workdir", default=None, help="where the 1.1B file is written (kept for reuse)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--gguf", action="append", default=[], help="also a real .gguf file (repeatable)")
    parser.add_argument(
        "--family", action="append", default=[], help=f"also a random file of a family ({', '.join(FAMILY_SHAPES)})"
    )
    parser.add_argument(
        "--prompt-lengths",
        default="64,512,2048",
        help="the growth table's prompt lengths (135M-class model and --gguf files; empty: no accounting)",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        options = json.loads(args.child[1])
        mode, cache_dir = options.get("mode", "generate"), options.get("cache_dir")
        print(json.dumps(child_ours(args.child[0], options["threads"], options["ids"], mode, cache_dir)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        print("### Accuracy against llama.cpp\n")
        print("\n".join(accuracy(args.llama_python, pathlib.Path(scratch))))
    threads = [int(t) for t in args.threads.split(",")]
    lengths = [int(n) for n in args.prompt_lengths.split(",") if n]
    for mix in () if args.small else SMALL_MIXES:
        with tempfile.TemporaryDirectory() as scratch:
            path = small_llama(mix, pathlib.Path(scratch))
            print(f"\n### 135M-class llama (tied 49152 x 576 embedding), {mix}, random blocks\n")
            rows = speed_file(args.llama_python, path, pathlib.Path(scratch), threads, args.repeat, lengths)
            print("\n".join(rows), flush=True)
    for family in args.family:
        with tempfile.TemporaryDirectory() as scratch:
            path = family_file(family, pathlib.Path(scratch))
            print(f"\n### {family}, random Q4_K blocks\n")
            print("\n".join(speed_file(args.llama_python, path, pathlib.Path(scratch), threads, args.repeat)))
    for file in args.gguf:
        print(f"\n### {pathlib.Path(file).name}\n")
        with tempfile.TemporaryDirectory() as scratch:
            print(
                "\n".join(
                    speed_file(
                        args.llama_python, pathlib.Path(file), pathlib.Path(scratch), threads, args.repeat, lengths
                    )
                )
            )
    if not args.small:
        work = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench_llm_"))
        work.mkdir(parents=True, exist_ok=True)
        print("\n### ~1.1B-parameter Q4_0 llama\n")
        print("\n".join(speed(args.llama_python, work, threads, args.repeat)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
