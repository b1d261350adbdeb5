"""llama.cpp's tokenizer as an oracle: one batch of tokenize / detokenize / token_to_piece requests for
one vocabulary, answered by llama-cpp-python in the interpreter ``ONNX_STRUCT_LLAMA_CPP_PYTHON``
names (a separate venv: llama-cpp-python is never a requirement of this project).

The test process calls :func:`llama_cpp_python` (the interpreter, or None where llama_cpp does not
import) and :func:`run_vocab_batch`; the batch goes through a JSON file to this same file run as a
script in that interpreter (it imports nothing but the standard library and llama_cpp there):

    python llama_cpp_runner.py REQUEST.json RESULT.json

REQUEST: ``model`` (a .gguf, loaded with ``vocab_only``), and any of

- ``info``: true -> ``n_tokens``, ``bos``, ``eos``, ``add_bos``, ``add_eos``, ``eog`` (every id
  ``llama_vocab_is_eog`` accepts), ``special`` ([id, text, attr] of every control / user-defined /
  unknown token, llama.cpp's attributes after its own fix-ups);
- ``encode``: [[text, add_special, parse_special], ...] -> ``encode``: the ids of each
  (``Llama.tokenize(text.encode(), add_bos=add_special, special=parse_special)``, i.e. llama_tokenize);
- ``decode``: [[ids, special], ...] -> ``decode``: hex bytes of ``llama_detokenize(ids,
  remove_special=False, unparse_special=special)``;
- ``decode_encoded``: true -> ``decoded``: [[plain, special], ...], each ``encode`` result
  detokenized with unparse_special false and true (as ``decode``);
- ``pieces``: true -> ``pieces``: {"plain": [...], "special": [...]}, hex bytes of
  ``llama_token_to_piece(id, lstrip=0, special=...)`` for every id.

Bytes travel as hex (they need not be UTF-8).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ENV = "ONNX_STRUCT_LLAMA_CPP_PYTHON"
TIMEOUT = 1800


def llama_cpp_python() -> str | None:
    """The interpreter named by ONNX_STRUCT_LLAMA_CPP_PYTHON (default: this one) if it imports
    llama_cpp, else None. Starts a child process: call it from slow-tier tests only."""
    python = os.environ.get(ENV, sys.executable)
    try:
        done = subprocess.run([python, "-c", "import llama_cpp"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if done.returncode == 0 else None


def run_vocab_batch(python: str, request: dict, workdir: pathlib.Path, name: str = "batch") -> dict:
    """llama.cpp's answers to ``request`` (see the module docstring), run by ``python``."""
    request_path, result_path = workdir / f"{name}.request.json", workdir / f"{name}.result.json"
    request_path.write_text(json.dumps(request))
    done = subprocess.run(
        [python, str(pathlib.Path(__file__).resolve()), str(request_path), str(result_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    if done.returncode:
        raise RuntimeError(f"llama.cpp runner failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(result_path.read_text())


def llama_cpp_encodings(
    python: str, model: pathlib.Path, texts: list[str], modes: list[tuple[bool, bool]], workdir: pathlib.Path
) -> tuple[list[list[list[int]]], list[list[bytes]]]:
    """llama.cpp's ids of ``texts`` in each ``(add_special, parse_special)`` mode, and the first
    mode's ids detokenized with unparse_special false and true (bytes)."""
    request = {"model": str(model), "encode": [[t, a, s] for a, s in modes for t in texts], "decode_encoded": True}
    result = run_vocab_batch(python, request, workdir)
    n = len(texts)
    ids = [result["encode"][i * n : (i + 1) * n] for i in range(len(modes))]
    decoded = [[bytes.fromhex(pair[k]) for pair in result["decoded"][:n]] for k in (0, 1)]
    return ids, decoded


# ---- the llama_cpp side (runs in ONNX_STRUCT_LLAMA_CPP_PYTHON) ----

ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED = 1 << 0, 1 << 3, 1 << 4


def _answer(request: dict) -> dict:
    import ctypes  # noqa: PLC0415

    import llama_cpp  # noqa: PLC0415

    llm = llama_cpp.Llama(request["model"], vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    lib = llama_cpp.llama_cpp
    n_tokens = lib.llama_vocab_n_tokens(vocab)
    buffer = ctypes.create_string_buffer(1 << 16)

    def piece(token: int, special: bool) -> str:
        n = lib.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, special)
        if n < 0:
            raise RuntimeError(f"token {token}: piece longer than {len(buffer)} bytes")
        return buffer.raw[:n].hex()

    def detokenize(ids: list[int], special: bool) -> str:
        tokens = (lib.llama_token * max(len(ids), 1))(*ids)
        size = 64 + 16 * len(ids)
        while True:
            text = ctypes.create_string_buffer(size)
            n = lib.llama_detokenize(vocab, tokens, len(ids), text, size, False, special)
            if n >= 0:
                return text.raw[:n].hex()
            size = -n + 1

    out: dict = {}
    if request.get("info"):
        special = []
        for token in range(n_tokens):
            attr = lib.llama_vocab_get_attr(vocab, token)
            if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED):
                text = lib.llama_vocab_get_text(vocab, token).decode("utf-8", "replace")
                special.append([token, text, int(attr)])
        out.update(
            n_tokens=n_tokens,
            bos=lib.llama_vocab_bos(vocab),
            eos=lib.llama_vocab_eos(vocab),
            add_bos=bool(lib.llama_vocab_get_add_bos(vocab)),
            add_eos=bool(lib.llama_vocab_get_add_eos(vocab)),
            eog=[t for t in range(n_tokens) if lib.llama_vocab_is_eog(vocab, t)],
            special=special,
        )
    if "encode" in request:
        out["encode"] = [
            llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
            for text, add_special, parse_special in request["encode"]
        ]
    if request.get("decode_encoded"):
        out["decoded"] = [[detokenize(ids, False), detokenize(ids, True)] for ids in out["encode"]]
    if "decode" in request:
        out["decode"] = [detokenize(ids, special) for ids, special in request["decode"]]
    if request.get("pieces"):
        out["pieces"] = {
            "plain": [piece(t, False) for t in range(n_tokens)],
            "special": [piece(t, True) for t in range(n_tokens)],
        }
    return out


def main(request_path: str, result_path: str) -> None:
    """Answer the request in ``request_path`` into ``result_path`` (the script's entry point)."""
    request = json.loads(pathlib.Path(request_path).read_text())
    pathlib.Path(result_path).write_text(json.dumps(_answer(request)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
