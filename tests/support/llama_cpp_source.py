"""llama.cpp's source as llama-cpp-python's source distribution ships it: the vocabulary-only GGUF
files with their tokenizer test data (``models/ggml-vocab-*.gguf``, ``.inp`` / ``.out``) and the
real chat templates (``models/templates/*.jinja``).

Found, in order: ``ONNX_STRUCT_LLAMA_CPP_SOURCE`` (a ``vendor/llama.cpp`` directory or the
directory holding it), the cache ``~/.cache/onnx_struct/llama_cpp_python-VERSION``; otherwise
(only where ``fetch=True``: the slow tier) ``pip download`` fetches the sdist from PyPI and unpacks
it into the cache. The default tier never downloads.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile

VERSION = "0.3.36"
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "onnx_struct"
SEPARATOR = "\n__ggml_vocab_test__\n"  # llama.cpp's tests/test-tokenizer-0 case separator


def _llama_cpp_dir(root: pathlib.Path) -> pathlib.Path | None:
    for candidate in (
        root,
        root / "vendor" / "llama.cpp",
        root / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp",
    ):
        if (candidate / "src" / "llama-vocab.cpp").is_file():
            return candidate
    return None


def llama_cpp_source(*, fetch: bool = False) -> pathlib.Path | None:
    """The ``vendor/llama.cpp`` directory, or None where it is not at hand (and not fetched)."""
    named = os.environ.get("ONNX_STRUCT_LLAMA_CPP_SOURCE")
    if named:
        return _llama_cpp_dir(pathlib.Path(named))
    cache = CACHE / f"llama_cpp_python-{VERSION}"
    found = _llama_cpp_dir(cache)
    if found is not None or not fetch:
        return found
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={VERSION}",
                "-d",
                download,
            ],
            check=True,
            timeout=900,
        )
        (archive,) = pathlib.Path(download).glob("*.tar.gz")
        staging = pathlib.Path(tempfile.mkdtemp(dir=CACHE.parent if CACHE.parent.exists() else None))
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name and (m.isfile() or m.isdir())]
            tar.extractall(staging, members=members, filter="data")
        cache.parent.mkdir(parents=True, exist_ok=True)
        (staging / f"llama_cpp_python-{VERSION}").rename(cache)  # whole or not at all
    return _llama_cpp_dir(cache)


def vocab_cases(path: pathlib.Path) -> list[tuple[str, list[int]]]:
    """(text, expected ids) of one ``ggml-vocab-NAME.gguf``'s ``.inp`` / ``.out`` pair, split as
    tests/test-tokenizer-0.cpp splits them (the input at each separator, nothing after the last
    one; one output line a case), to be tokenized with add_special and parse_special false."""
    raw = (path.parent / (path.name + ".inp")).read_bytes().decode("utf-8")
    texts, position = [], 0
    while position < len(raw):
        end = raw.find(SEPARATOR, position)
        if end < 0:
            texts.append(raw[position:])
            break
        texts.append(raw[position:end])
        position = end + len(SEPARATOR)
    lines = (path.parent / (path.name + ".out")).read_bytes().decode("utf-8").split("\n")
    lines = lines[:-1] if lines and lines[-1] == "" else lines
    if len(texts) != len(lines):
        raise ValueError(f"{path}: {len(texts)} inputs, {len(lines)} outputs")
    return [(text, [int(t) for t in line.split()]) for text, line in zip(texts, lines, strict=True)]


def vocab_files(source: pathlib.Path) -> list[pathlib.Path]:
    """Every ``models/ggml-vocab-*.gguf`` (those with and without test data)."""
    return sorted((source / "models").glob("ggml-vocab-*.gguf"))
