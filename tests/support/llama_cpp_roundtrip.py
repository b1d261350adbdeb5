"""Run in llama-cpp-python's interpreter (ONNX_STRUCT_LLAMA_CPP_PYTHON): tokenize and detokenize
texts with a GGUF file's vocabulary, as llama.cpp does.

    python llama_cpp_roundtrip.py VOCAB.gguf CASES.json  ->  JSON on stdout

CASES.json: {"texts": [...], "modes": [[add_special, parse_special], ...]}. Output: {"ids":
[[ids per text] per mode], "text": [llama_detokenize(ids, remove_special=False,
unparse_special) of the first mode's ids, for unparse_special False then True]}.
"""

import ctypes
import json
import sys

import llama_cpp


def detokenize(vocab, ids: list[int], special: bool) -> bytes:
    size = 64 + 16 * len(ids)
    while True:
        buffer = ctypes.create_string_buffer(size)
        array = (llama_cpp.llama_token * len(ids))(*ids)
        n = llama_cpp.llama_detokenize(vocab, array, len(ids), buffer, size, False, special)
        if n >= 0:
            return buffer.raw[:n]
        size = -n + 1


def main() -> None:
    path, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as handle:
        cases = json.load(handle)
    llm = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    ids = [[llm.tokenize(t.encode("utf-8"), add_bos=a, special=s) for t in cases["texts"]] for a, s in cases["modes"]]
    text = [[detokenize(vocab, i, special).decode("utf-8", "replace") for i in ids[0]] for special in (False, True)]
    json.dump({"ids": ids, "text": text}, sys.stdout)


if __name__ == "__main__":
    main()
