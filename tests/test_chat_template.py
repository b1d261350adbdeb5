"""apply_chat_template in-process: real templates (tests/data/chat_templates) and built-ins against
expected strings written by hand from the template text and llama.cpp's formatter code, how the
template is chosen, the messages checked, and what the environment provides."""

from __future__ import annotations

import datetime
import json
import pathlib

import onnx
import pytest

import onnx_struct as S
from onnx_struct.formats.gguf.metadata import VALUE_TYPES_KEY
from onnx_struct.limits import MAX_TEMPLATE_CHARS
from onnx_struct.llm.chat.template import builtin_templates, resolve_chat_template

pytest.importorskip("jinja2")

DATA = pathlib.Path(__file__).parent / "data" / "chat_templates"
TOKENS = ["<s>", "</s>", "<unk>"]
META = {"tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
]
TOOL = {"type": "function", "function": {"name": "f", "description": "café <b>", "parameters": {}}}


def render(template: str, messages, **kwargs) -> str:
    return S.apply_chat_template(META, messages, chat_template=template, **kwargs)


def data(name: str) -> str:
    return str(DATA / f"{name}.jinja")


def test_phi35_with_and_without_generation_prompt():
    expected = "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n"
    assert render(data("microsoft-Phi-3.5-mini-instruct"), TURNS) == expected + "<|assistant|>\n"
    # without the prompt the template closes with eos_token: the text of tokenizer.ggml.eos_token_id
    assert render(data("microsoft-Phi-3.5-mini-instruct"), TURNS, add_generation_prompt=False) == expected + "</s>"


def test_gemma2_trims_and_maps_roles():
    messages = [
        {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "Hello\n"},
        {"role": "user", "content": "Bye"},
    ]
    assert render(data("google-gemma-2-2b-it"), messages) == (
        "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    )


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (TURNS, "System role not supported"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "Conversation roles must alternate"),
    ],
)
def test_raise_exception_is_a_bad_template_error(messages, message):
    with pytest.raises(S.ValidationError, match=message) as caught:
        render(data("google-gemma-2-2b-it"), messages)
    assert caught.value.code == "bad_template"
    assert caught.value.path.startswith("chat_template")


def test_qwen25_tools_tojson_without_html_escapes():
    got = render(data("Qwen-Qwen2.5-7B-Instruct"), TURNS[:2], tools=[TOOL])
    assert got == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
        "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "f", "description": "café <b>", "parameters": {}}}'
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_qwen25_tool_call_with_content_none():
    # transformers drops keys whose value is None: `message.content` is undefined, not "None"
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "22"},
    ]
    assert render(data("Qwen-Qwen2.5-7B-Instruct"), messages, add_generation_prompt=False) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n22\n</tool_response><|im_end|>\n"
    )


def test_rwkv_world_extra_variables():
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "<think>x</think> Yo "},
    ]
    template = data("llama-cpp-rwkv-world")
    expected = "<s>System: S\n\nUser: Hi\n\nAssistant: Yo\n\nAssistant:"
    assert render(template, messages) == expected
    assert render(template, messages, enable_thinking=False) == expected + " <think>\n</think>"
    assert render(template, messages, enable_thinking=True) == expected + " <think>"


# llama.cpp's src/llama-chat.cpp, read by hand (the llama_cpp tier compares every built-in with it).
BUILTIN_EXPECTED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello"
    "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
    "llama2": "[INST] Be brief.\nHi [/INST]Hello</s>[INST] Bye [/INST]",
    "llama2-sys": "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello</s>[INST] Bye [/INST]",
    "mistral": "[INST] Be brief.\nHi [/INST]Hello</s>[INST] Bye [/INST]",
    "mistral-v7": "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello</s>[INST] Bye[/INST]",
    "llama3": "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
    "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user"
    "<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "gemma": "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n",
    "phi3": "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n"
    "<|assistant|>\n",
}


@pytest.mark.parametrize("name", sorted(BUILTIN_EXPECTED))
def test_builtin(name):
    assert render(name, TURNS) == BUILTIN_EXPECTED[name]


def test_builtin_trim_is_c_isspace():
    # llama.cpp's trim() strips \v and \f but not U+00A0 (Python's str.strip() would)
    messages = [{"role": "user", "content": "\x0b\x0c\t hi \xa0"}]
    assert render("llama3", messages, add_generation_prompt=False) == (
        "<|start_header_id|>user<|end_header_id|>\n\nhi \xa0<|eot_id|>"
    )


def test_builtins_cover_the_common_families():
    assert {"chatml", "llama2", "llama3", "gemma", "phi3", "mistral"} <= set(builtin_templates())


def test_no_template_names_the_option():
    with pytest.raises(S.ValidationError, match="--chat-template") as caught:
        S.apply_chat_template(META, TURNS)
    assert caught.value.code == "no_chat_template"
    assert caught.value.path == "gguf.kv['tokenizer.chat_template']"


def test_unknown_name_is_refused():
    with pytest.raises(S.ValidationError) as caught:
        render("no-such-template", TURNS)
    assert caught.value.code == "no_chat_template"
    assert "chatml" in caught.value.reason


def test_file_template_and_named_templates():
    meta = {**META, "tokenizer.chat_template": "{{ 'default' }}", "tokenizer.chat_template.tool_use": "{{ 'tools' }}"}
    assert S.apply_chat_template(meta, TURNS) == "default"
    assert S.apply_chat_template(meta, TURNS, chat_template="tool_use") == "tools"
    assert S.apply_chat_template(meta, TURNS, chat_template="{{ messages|length }}") == "4"
    assert resolve_chat_template(meta, "chatml") == builtin_templates()["chatml"]


def test_template_from_an_onnx_model(tmp_path):
    model = onnx.ModelProto()
    entries = {
        "tokenizer.chat_template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}",
        "tokenizer.ggml.tokens": json.dumps(["<|begin|>", "<|end|>"]),
        "tokenizer.ggml.bos_token_id": "0",
        "tokenizer.ggml.eos_token_id": "1",
        VALUE_TYPES_KEY: json.dumps(
            {
                "tokenizer.chat_template": "STRING",
                "tokenizer.ggml.tokens": "ARRAY[STRING]",
                "tokenizer.ggml.bos_token_id": "UINT32",
                "tokenizer.ggml.eos_token_id": "UINT32",
            }
        ),
    }
    onnx.helper.set_model_props(model, entries)
    assert S.apply_chat_template(model, TURNS) == "<|begin|>Be brief.<|end|>"
    onnx.save(model, tmp_path / "m.onnx")
    assert S.apply_chat_template(tmp_path / "m.onnx", TURNS) == "<|begin|>Be brief.<|end|>"


def test_missing_bos_is_empty_and_a_bad_id_is_refused():
    assert S.apply_chat_template({"tokenizer.chat_template": "[{{ bos_token }}]"}, TURNS) == "[]"
    with pytest.raises(S.ValidationError, match="not a token id") as caught:
        S.apply_chat_template({**META, "tokenizer.ggml.bos_token_id": 7}, TURNS, chat_template="x{{ bos_token }}")
    assert caught.value.path == "gguf.kv['tokenizer.ggml.bos_token_id']"


@pytest.mark.parametrize(
    ("messages", "path"),
    [
        ("hello", "apply_chat_template(messages)"),
        ([{"role": "user", "content": "a"}, "b"], "apply_chat_template(messages)[1]"),
        ([{"role": "user", "content": "a"}, {"content": "b"}], "apply_chat_template(messages)[1]['role']"),
        ([{"role": "user", "content": 3}], "apply_chat_template(messages)[0]['content']"),
    ],
)
def test_bad_messages_name_the_message(messages, path):
    with pytest.raises(S.ValidationError) as caught:
        render("chatml", messages)
    assert caught.value.path == path


def test_template_too_long():
    with pytest.raises(S.ValidationError) as caught:
        render("{{ 'x' }}" + " " * MAX_TEMPLATE_CHARS, TURNS)
    assert caught.value.code == "limit_exceeded"


def test_syntax_error_is_bad_template():
    with pytest.raises(S.ValidationError, match="does not compile") as caught:
        render("{% for %}", TURNS)
    assert caught.value.code == "bad_template"


def test_environment_globals():
    today = datetime.datetime.now().strftime("%Y-%m-%d")
    got = render(
        "{{ strftime_now('%Y-%m-%d') }}|{{ dict(a=1)|tojson }}|{% set ns = namespace(n=1) %}{{ ns.n }}"
        "|{% generation %}kept{% endgeneration %}|{{ '<&>'|tojson }}|{{ 'é'|tojson }}",
        TURNS,
    )
    assert got == f'{today}|{{"a": 1}}|1|kept|"<&>"|"é"'


def test_trailing_newline_and_blocks_trimmed():
    # trim_blocks and lstrip_blocks on; a template's one trailing newline dropped (keep_trailing_newline off)
    assert render("  {% if true %}\nA\n  {% endif %}\nB\n", TURNS) == "A\nB"


def test_objects_in_messages_become_placeholders():
    class Thing:
        secret = "no"

    got = render("{{ messages[0]['content'][0]['x'] }}", [{"role": "user", "content": [{"x": Thing()}]}])
    assert got == "<Thing>"


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ self._TemplateReference__context }}",
        "{{ ''|attr('__class__') }}",
        "{{ messages|map(attribute='__class__')|list }}",
        "{{ messages.append(1) }}",
        "{{ namespace(_hidden=1) }}",
        "{{ 'a' * 10**9 }}",
        "{{ 10 ** (10 ** 10) }}",
        "{{ '{:>999999999}'.format(1) }}",
        "{{ '%999999999d' % 1 }}",
        "{{ 'x'.center(999999999) }}",
        "{% set s = 'x' * 1000000 %}{{ s.replace('', s) }}",
        "{{ lipsum(10) }}",
    ],
)
def test_hostile_refused_at_once(template):
    with pytest.raises(S.ValidationError) as caught:
        render(template, TURNS)
    assert caught.value.code == "bad_template"


def test_loaded_model_and_refusals(tmp_path):
    model = onnx.ModelProto()
    onnx.helper.set_model_props(
        model,
        {
            "tokenizer.chat_template": "{{ 'from a LoadedModel' }}",
            VALUE_TYPES_KEY: '{"tokenizer.chat_template": "STRING"}',
        },
    )
    assert S.apply_chat_template(S.from_onnx(model), TURNS) == "from a LoadedModel"
    onnx.save(model, tmp_path / "m.onnx")
    assert S.apply_chat_template(S.load_model(tmp_path / "m.onnx"), TURNS) == "from a LoadedModel"
    (tmp_path / "junk.onnx").write_bytes(b"\xff\xff\xff\xff not a model")
    with pytest.raises(S.ValidationError, match="neither a GGUF file nor an ONNX model"):
        S.apply_chat_template(tmp_path / "junk.onnx", TURNS)
    with pytest.raises(S.ValidationError) as caught:
        S.apply_chat_template(42, TURNS)
    assert caught.value.code == "bad_argument"


def test_percent_formatting_digits_in_text_are_not_widths():
    assert render("{{ 'id %s of 123456789' % 'x' }}|{{ '%5d|%-3s|%.2f' % (7, 'a', 1.5) }}", TURNS) == (
        "id x of 123456789|    7|a  |1.50"
    )
