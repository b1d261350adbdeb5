"""Where a generating process's memory and each generated token's time go (bench_llm.py runs these
in fresh child processes, one measurement per process).

* :func:`stage_memory`: resident memory after each stage of ``Generator`` use (imports, session
  with its tokenizer, prompt, generation), split into anonymous pages (heap, prepacked weights,
  KV cache) and file-backed ones (mapped libraries and weights), from /proc/self/status; the
  peak (VmHWM) after each.
* :func:`token_breakdown`: one generated token's time, from onnxruntime's profiler: kernel time
  per operator type, the whole ``run`` (kernels plus onnxruntime's own work between them) and
  the loop around it (feeds, the logits row, sampling, detokenizing). The profiler adds its own
  cost to each node, so the absolute figures are above an unprofiled run's; the shares are what
  it is for.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import pathlib
import tempfile

MIB = 2**20


def _status() -> dict[str, int]:
    fields = ("VmHWM", "RssAnon", "RssFile")
    out = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in fields:
            out[key] = int(line.split()[1]) * 1024
    return out


def stage_memory(onnx_path: str, threads: int | None, ids: list[int], n_new: int) -> dict:
    """{stage: {"RssAnon", "RssFile", "VmHWM"} in bytes} for a fresh process."""
    stages = {"interpreter": _status()}
    import numpy  # noqa: F401, PLC0415
    import onnx  # noqa: F401, PLC0415

    stages["numpy + onnx"] = _status()
    import onnxruntime  # noqa: F401, PLC0415

    stages["+ onnxruntime"] = _status()
    from onnx_struct.llm.generation import Generator  # noqa: PLC0415

    stages["+ onnx_struct"] = _status()
    generator = Generator(onnx_path, threads=threads)
    stages["session + tokenizer"] = _status()
    generator.generate(ids, max_new_tokens=1, stop_at_eos=False)
    stages[f"prompt ({len(ids)} tokens)"] = _status()
    generator.generate(ids, max_new_tokens=n_new, stop_at_eos=False)
    stages[f"+ {n_new} generated"] = _status()
    return stages


def token_breakdown(onnx_path: str, threads: int | None, ids: list[int], n_new: int) -> dict:
    """Per generated token, in microseconds: ``loop`` (Generator.generate's time per token),
    ``run`` (onnxruntime's model_run), ``kernels`` (their sum) and ``ops`` (op type -> time, node
    count)."""
    import onnxruntime  # noqa: PLC0415

    from onnx_struct.llm.generation import Generator  # noqa: PLC0415

    folder = tempfile.mkdtemp(prefix="bench_llm_profile_")
    base = onnxruntime.SessionOptions

    class Profiled(base):  # the options Generator creates for a thread count
        def __init__(self):
            super().__init__()
            self.enable_profiling = True
            self.profile_file_prefix = os.path.join(folder, "run")

    onnxruntime.SessionOptions = Profiled
    try:
        generator = Generator(onnx_path, threads=threads)
    finally:
        onnxruntime.SessionOptions = base
    result = generator.generate(ids, max_new_tokens=n_new + 1, stop_at_eos=False)
    steps = len(result.tokens) - 1
    events = json.loads(pathlib.Path(generator.session._session.end_profiling()).read_text())  # noqa: SLF001
    runs = [e for e in events if e.get("name") == "model_run"][-steps:]
    first = runs[0]["ts"]
    ops: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= first:
            entry = ops[event["args"].get("op_name", "?")]
            entry[0] += event["dur"] / steps
            entry[1] += 1
    for path in glob.glob(os.path.join(folder, "*")):
        os.remove(path)
    os.rmdir(folder)
    return {
        "loop": result.generation_seconds / steps * 1e6,
        "run": sum(e["dur"] for e in runs) / steps,
        "kernels": sum(t for t, _ in ops.values()),
        "ops": {op: (t, n // steps) for op, (t, n) in sorted(ops.items(), key=lambda kv: -kv[1][0])},
    }


def stage_rows(stages: dict, theirs_rss: int | None = None) -> list[str]:
    rows = [
        "| stage | anonymous MiB | file-backed MiB | resident MiB | peak so far MiB |",
        "| --- | --- | --- | --- | --- |",
    ]
    for stage, s in stages.items():
        anon, file = s["RssAnon"] / MIB, s["RssFile"] / MIB
        rows.append(f"| {stage} | {anon:.0f} | {file:.0f} | {anon + file:.0f} | {s['VmHWM'] / MIB:.0f} |")
    if theirs_rss:
        rows.append(f"| llama.cpp, same file and prompt (peak) | | | | {theirs_rss / MIB:.0f} |")
    return rows


def breakdown_rows(b: dict, top: int = 10) -> list[str]:
    loop, run, kernels = b["loop"], b["run"], b["kernels"]
    rows = [
        f"Per generated token (profiled): loop {loop / 1e3:.2f} ms = onnxruntime run {run / 1e3:.2f} ms "
        f"(kernels {kernels / 1e3:.2f} ms, {kernels / run:.0%}; onnxruntime between kernels "
        f"{(run - kernels) / 1e3:.2f} ms) + outside the run {(loop - run) / 1e3:.2f} ms "
        f"(feeds, logits row, sampling, detokenizing: {(loop - run) / loop:.0%}).",
        "",
        "| operator | nodes | us per token | share of kernel time |",
        "| --- | --- | --- | --- |",
    ]
    for op, (t, n) in list(b["ops"].items())[:top]:
        rows.append(f"| {op} | {n} | {t:.0f} | {t / kernels:.0%} |")
    return rows
