"""llama.cpp's side of benchmarks/bench_llm.py and tests/test_llm_llama_cpp.py, run by a Python that
has llama-cpp-python (it needs nothing else: numpy and llama_cpp).

    python _llama_cpp_peer.py REQUEST.json RESULT.npz

REQUEST is a JSON object: ``model`` (the .gguf), ``task`` and its arguments:

- ``tokenize``: ``texts`` -> ``ids_<i>`` (llama_tokenize with BOS, parse_special false);
- ``logits``: ``tokens`` -> ``logits`` [n, vocab] of every position (F32 KV cache);
- ``greedy``: ``tokens``, ``n_new`` -> ``generated`` (greedy ids), ``prompt_seconds``,
  ``token_seconds`` (each step's eval), ``since_start_seconds`` (process start to the prompt's
  logits), ``rss`` (peak resident bytes), with ``threads``; ``kv`` "f32" or "f16" (default f16).

The model is loaded with ``use_extra_bufts`` as ``extra_bufts`` says (default true): on some CPUs
llama.cpp's AMX buffer type crashed on quantized models, and false avoids it.
"""

from __future__ import annotations

import json
import sys
import time

import llama_cpp
import numpy as np
from _process_clock import since_process_start

GGML_TYPE = {"f32": 0, "f16": 1}


def _load(request: dict, *, logits_all: bool = False, vocab_only: bool = False) -> llama_cpp.Llama:
    defaults = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = defaults()
        p.use_extra_bufts = bool(request.get("extra_bufts", True))
        return p

    llama_cpp.llama_cpp.llama_model_default_params = params  # Llama() reads its model params from here
    kv = GGML_TYPE[request.get("kv", "f16")]
    threads = int(request.get("threads", 1))
    return llama_cpp.Llama(
        request["model"],
        n_ctx=int(request.get("n_ctx", 512)),
        n_batch=int(request.get("n_batch", 512)),
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=logits_all,
        vocab_only=vocab_only,
        type_k=kv,
        type_v=kv,
        seed=0,
        verbose=False,
    )


def _vmhwm() -> int:
    """This process's peak resident set in bytes (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def _last_logits(llm: llama_cpp.Llama) -> np.ndarray:
    """The last evaluated position's logits (without logits_all, llama-cpp-python 0.3 no longer
    copies them into ``scores``: read llama.cpp's own buffer, which holds that one row)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()


def main(request_path: str, result_path: str) -> None:
    with open(request_path) as handle:
        request = json.load(handle)
    out: dict[str, np.ndarray] = {}
    if request["task"] == "tokenize":
        llm = _load(request, vocab_only=True)
        for i, text in enumerate(request["texts"]):
            out[f"ids_{i}"] = np.array(llm.tokenize(text.encode(), add_bos=True, special=False), np.int64)
    elif request["task"] == "logits":
        llm = _load(request, logits_all=True)
        tokens = request["tokens"]
        llm.eval(tokens)
        out["logits"] = np.array(llm.scores[: len(tokens)], np.float32)
    elif request["task"] == "greedy":
        start = time.perf_counter()
        llm = _load(request)
        out["load_seconds"] = np.array(time.perf_counter() - start)
        tokens = request["tokens"]
        start = time.perf_counter()
        llm.eval(tokens)
        out["prompt_seconds"] = np.array(time.perf_counter() - start)
        out["since_start_seconds"] = np.array(since_process_start() or float("nan"))
        generated, seconds = [], []
        for _ in range(int(request["n_new"])):
            token = int(np.argmax(_last_logits(llm)))
            generated.append(token)
            start = time.perf_counter()
            llm.eval([token])
            seconds.append(time.perf_counter() - start)
        out["generated"] = np.array(generated, np.int64)
        out["token_seconds"] = np.array(seconds)
        out["rss"] = np.array(_vmhwm())
    else:
        raise SystemExit(f"unknown task {request['task']!r}")
    np.savez(result_path, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
