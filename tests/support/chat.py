"""Chat-template oracles: the conversations the comparisons render, and the renderings of
transformers (in this interpreter, when installed) and llama-cpp-python's ``Jinja2ChatFormatter``
(in the interpreter ``ONNX_STRUCT_LLAMA_CPP_PYTHON`` names, as a child process).

An outcome is ``{"text": ...}`` or ``{"error": ...}``; two renderings agree when both give the
same text or both fail (a template refusing a conversation, e.g. without strict alternation).
"""

from __future__ import annotations

import json
import os
import subprocess

BOS, EOS = "<s>", "</s>"
METADATA = {
    "tokenizer.ggml.tokens": [BOS, EOS, "a"],
    "tokenizer.ggml.bos_token_id": 0,
    "tokenizer.ggml.eos_token_id": 1,
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}

# name -> (messages, tools)
CONVERSATIONS = {
    "system_turns": (
        [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy?\nOne word, please."},
        ],
        None,
    ),
    "no_system": (
        [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "  Hello! How can I help?  "},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "Why did the chicken cross the road?"},
            {"role": "user", "content": "Why? 🐔 «ünïcödé»"},
        ],
        None,
    ),
    "tools": (
        [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What is the weather in Paris?"},
        ],
        [WEATHER_TOOL],
    ),
    "tool_call": (
        [
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call00001",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "22 degrees, sunny"},
        ],
        [WEATHER_TOOL],
    ),
    # transformers drops keys whose value is None; llama-cpp-python passes them on
    "tool_call_none": (
        [
            {"role": "user", "content": "Weather in Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call00002",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call00002", "name": "get_weather", "content": "18 degrees"},
            {"role": "user", "content": "Thanks."},
        ],
        [WEATHER_TOOL],
    ),
    # transformers copies a message's reasoning under reasoning_content and thinking
    "reasoning": (
        [
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "reasoning_content": "Two plus two is four.", "content": "4"},
            {"role": "user", "content": "And 3 + 3?"},
        ],
        None,
    ),
}


def cases():
    """(conversation name, add_generation_prompt) pairs every template is rendered on."""
    return [(name, generation) for name in CONVERSATIONS for generation in (True, False)]


def render_ours(text: str, name: str, generation: bool) -> dict:
    import onnx_struct as S

    messages, tools = CONVERSATIONS[name]
    try:
        return {
            "text": S.apply_chat_template(
                METADATA, messages, add_generation_prompt=generation, chat_template=text, tools=tools
            )
        }
    except S.ValidationError as error:
        return {"error": str(error)}


def transformers_renderer():
    """transformers' own rendering function, or None where transformers is not installed."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return None
    try:
        from transformers.utils.chat_template_utils import _normalize_chat_messages
    except ImportError:  # older transformers: messages as given
        _normalize_chat_messages = list

    def render(text: str, name: str, generation: bool, bos: str = BOS, eos: str = EOS) -> dict:
        messages, tools = CONVERSATIONS[name]
        try:
            rendered, _ = render_jinja_template(
                conversations=[_normalize_chat_messages(messages)],
                tools=tools,
                chat_template=text,
                add_generation_prompt=generation,
                bos_token=bos,
                eos_token=eos,
            )
            return {"text": rendered[0]}
        except Exception as error:  # the template's own refusal, as transformers reports it
            return {"error": f"{type(error).__name__}: {error}"}

    return render


_LLAMA_CPP_CHILD = r"""
import json, sys
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
jobs = json.load(sys.stdin)
out = []
for job in jobs:
    try:
        formatter = Jinja2ChatFormatter(job["template"], eos_token=job["eos"], bos_token=job["bos"],
                                        add_generation_prompt=job["generation"])
        out.append({"text": formatter(messages=job["messages"], tools=job["tools"]).prompt})
    except Exception as error:
        out.append({"error": f"{type(error).__name__}: {error}"})
json.dump(out, sys.stdout)
"""


def llama_cpp_python() -> str | None:
    """The interpreter that imports llama_cpp (ONNX_STRUCT_LLAMA_CPP_PYTHON), or None."""
    interpreter = os.environ.get("ONNX_STRUCT_LLAMA_CPP_PYTHON")
    return interpreter if interpreter and os.path.exists(interpreter) else None


def render_llama_cpp_python(interpreter: str, jobs: list[tuple[str, str, bool]]) -> list[dict]:
    """Jinja2ChatFormatter's outcome for each (template text, conversation name, add_generation_prompt)."""
    payload = [
        {
            "template": text,
            "messages": CONVERSATIONS[name][0],
            "tools": CONVERSATIONS[name][1],
            "generation": generation,
            "bos": BOS,
            "eos": EOS,
        }
        for text, name, generation in jobs
    ]
    done = subprocess.run(
        [interpreter, "-c", _LLAMA_CPP_CHILD],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def agree(a: dict, b: dict) -> bool:
    """Same text, or both refused."""
    return ("text" in a) == ("text" in b) and a.get("text") == b.get("text")


# Conversations for llama.cpp's built-in formatters (string contents, roles it knows): leading and
# trailing whitespace (its trim), several system messages, a conversation not ending with the user.
BUILTIN_CONVERSATIONS = {
    "system_turns": CONVERSATIONS["system_turns"][0],
    "no_system": CONVERSATIONS["no_system"][0],
    "spaces": [
        {"role": "system", "content": " \t sys one \n"},
        {"role": "system", "content": "sys two\x0b"},
        {"role": "user", "content": "\n  hello  \r\n"},
        {"role": "assistant", "content": "\f reply \t"},
    ],
    "single_user": [{"role": "user", "content": "just one"}],
    "other_roles": [
        {"role": "user", "content": "call it"},
        {"role": "assistant_tool_call", "content": '[{"name": "f"}]'},
        {"role": "tool", "content": "42"},
        {"role": "function", "content": "f()"},
        {"role": "assistant", "content": "It is 42."},
    ],
}

_BUILTIN_CHILD = r"""
import ctypes, json, sys
import llama_cpp
jobs = json.load(sys.stdin)
out = []
for job in jobs:
    messages = job["messages"]
    chat = (llama_cpp.llama_chat_message * len(messages))(
        *[llama_cpp.llama_chat_message(m["role"].encode(), m["content"].encode()) for m in messages])
    size = llama_cpp.llama_chat_apply_template(job["name"].encode(), chat, len(messages), job["add_ass"], None, 0)
    if size < 0:
        out.append({"error": f"llama_chat_apply_template returned {size}"})
        continue
    buf = ctypes.create_string_buffer(size + 1)
    llama_cpp.llama_chat_apply_template(job["name"].encode(), chat, len(messages), job["add_ass"], buf, size + 1)
    out.append({"text": buf.raw[:size].decode("utf-8")})
json.dump(out, sys.stdout)
"""


def render_llama_cpp_builtin(interpreter: str, jobs: list[tuple[str, str, bool]]) -> list[dict]:
    """llama.cpp's own formatter for each (built-in name, BUILTIN_CONVERSATIONS name, add_ass)."""
    payload = [{"name": name, "messages": BUILTIN_CONVERSATIONS[conv], "add_ass": add} for name, conv, add in jobs]
    done = subprocess.run(
        [interpreter, "-c", _BUILTIN_CHILD],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)
