"""onnxruntime alone on the graph our session runs: the floor under bench_llm.py's figures.

bench_llm.py saves the graph onnxruntime holds inside ``Generator`` (after its optimizations,
``optimized_model_filepath``, weights in an external file: MatMulNBits' repacked arrays, not a
struct value left). This script loads that file in a process that imports only numpy and
onnxruntime, as any runtime built on onnxruntime would at best: no check, no repack, no
tokenizer. It runs the prompt (empty past) and greedy tokens, feeding each step's ``present.*``
back as ``past_key_values.*``, and prints JSON: session seconds, prompt seconds, generation
tokens/s, seconds from process start to the prompt's logits, peak RSS (VmHWM) and the tokens.

    python benchmarks/_ort_floor.py saved.onnx '{"threads": 1, "ids": [...], "n_new": 32}'

What ours adds above these figures is ours; what they are above llama.cpp's is onnxruntime's.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import onnxruntime as ort
from _process_clock import since_process_start


def _peak_rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))


def run(path: str, threads: int | None, ids: list[int], n_new: int) -> dict:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session_seconds = time.perf_counter() - start
    before_prompt = since_process_start()
    pasts = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    feeds = {p.name: np.zeros((1, p.shape[1], 0, p.shape[3]), np.float32) for p in pasts}
    outputs = ["logits", *(p.name.replace("past_key_values.", "present.") for p in pasts)]
    tokens, step_ids, seconds = [], ids, []
    for _ in range(n_new):  # the prompt (the first new token), then one token per step
        total = len(ids) + len(tokens)
        feeds["input_ids"] = np.asarray([step_ids], np.int64)
        feeds["attention_mask"] = np.ones((1, total), np.int64)
        began = time.perf_counter()
        logits, *presents = session.run(outputs, feeds)
        seconds.append(time.perf_counter() - began)
        tokens.append(int(np.argmax(logits[0, -1])))
        feeds.update({p.name: present for p, present in zip(pasts, presents, strict=True)})
        step_ids = tokens[-1:]
    return {
        "session_seconds": session_seconds,
        "first_token_seconds": session_seconds + seconds[0],
        "since_start_seconds": (before_prompt or float("nan")) + seconds[0],
        "prompt_tps": len(ids) / seconds[0],
        "gen_tps": (n_new - 1) / sum(seconds[1:]),
        "rss": _peak_rss(),
        "tokens": tokens,
    }


if __name__ == "__main__":
    request = json.loads(sys.argv[2])
    print(json.dumps(run(sys.argv[1], request["threads"], request["ids"], request["n_new"])))
