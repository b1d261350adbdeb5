"""Run by an interpreter with llama-cpp-python: tokenize strings with llama.cpp.

Usage: ``python llama_cpp_tokenize.py VOCAB.gguf REQUEST.json RESULT.json``; the request holds
``{"texts": [...], "add_bos": false, "special": false}``, the result ``{"ids": [[...], ...]}``
(``Llama(path, vocab_only=True).tokenize(text.encode(), add_bos=..., special=...)``). Kept free
of onnx_struct imports: the peer's interpreter need not have it.
"""

import json
import sys


def main() -> None:
    import llama_cpp  # noqa: PLC0415

    path, request_path, result_path = sys.argv[1:4]
    request = json.load(open(request_path, encoding="utf-8"))
    model = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    ids = [
        model.tokenize(
            text.encode("utf-8"), add_bos=request.get("add_bos", False), special=request.get("special", False)
        )
        for text in request["texts"]
    ]
    json.dump({"ids": ids}, open(result_path, "w", encoding="utf-8"))


if __name__ == "__main__":
    main()
