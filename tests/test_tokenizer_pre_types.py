"""Every pre type of the table against llama.cpp: llama.cpp's gpt-2 vocabulary file rewritten with
one ``tokenizer.ggml.pre`` name of each pre type (the same tokens and merges; only the pre-split
changes), 500 generated strings tokenized by llama-cpp-python and here: identical.

Not covered here: gemma4 and sarvam-moe (raw-UTF-8 BPE: a byte-level vocabulary does not fit;
gemma4 is covered by its own vocabulary file in tests/test_tokenizer_llama_cpp.py) and
``whitespace`` (llama.cpp crashes on a ``gpt2`` file naming it: its pre type needs the
``whitespace`` tokenizer model).

Slow tier, llama_cpp marker (tests/test_tokenizer_llama_cpp.py says how it is found).
"""

from __future__ import annotations

import pytest
from support.llama_cpp_runner import llama_cpp_encodings, llama_cpp_python
from support.llama_cpp_source import llama_cpp_source
from support.text_generator import generate_strings

from onnx_struct.llm.tokenizer import pre_types
from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.llama_cpp]
SKIPPED = {"gemma4", "sarvam_moe", "whitespace"}
NAMES = {}
for _name, (_pre, _) in pre_types.PRE_NAMES.items():
    NAMES.setdefault(_pre, _name)  # the first name of each pre type


@pytest.fixture(scope="module")
def gpt2_fields():
    """The gpt-2 vocabulary file's key-value fields as (key, value, type, element type)."""
    gguf = pytest.importorskip("gguf")
    python = llama_cpp_python()
    if python is None:
        pytest.skip("llama_cpp is not importable (ONNX_STRUCT_LLAMA_CPP_PYTHON)")
    source = llama_cpp_source(fetch=True)
    if source is None:
        pytest.skip("llama.cpp's source is not at hand")
    reader = gguf.GGUFReader(source / "models" / "ggml-vocab-gpt-2.gguf")
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind, element = field.types[0], field.types[-1]
        if kind == gguf.GGUFValueType.ARRAY and element == gguf.GGUFValueType.STRING:
            value = [bytes(field.parts[i]).decode() for i in field.data]
        elif kind == gguf.GGUFValueType.ARRAY:
            value = [field.parts[i][0].item() for i in field.data]
        elif kind == gguf.GGUFValueType.STRING:
            value = bytes(field.parts[-1]).decode()
        else:
            value = field.parts[-1][0].item()
        fields.append((key, value, kind, element if kind == gguf.GGUFValueType.ARRAY else None))
    return gguf, fields, python


@pytest.mark.parametrize("pre", sorted(set(pre_types.REGEX_LISTS) - SKIPPED))
def test_the_pre_type_splits_as_llama_cpp(gpt2_fields, tmp_path, pre):
    gguf, fields, python = gpt2_fields
    path = tmp_path / f"{pre}.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    for key, value, kind, element in fields:
        writer.add_key_value(key, NAMES[pre] if key == "tokenizer.ggml.pre" else value, kind, sub_type=element)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    texts = generate_strings(500, seed=11)
    (theirs,), _ = llama_cpp_encodings(python, path, texts, [(False, False)], tmp_path)
    tokenizer = load_tokenizer(path)
    assert tokenizer.vocab.pre == pre
    wrong = [(t, a, b) for t, a in zip(texts, theirs, strict=True) if (b := tokenizer.encode(t, add_bos=False)) != a]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, first: {wrong[0]}"
