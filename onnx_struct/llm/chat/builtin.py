"""Named chat templates for files that carry none: llama.cpp's built-in formatters as Jinja text.

Each template renders what ``llama_chat_apply_template`` (llama.cpp's src/llama-chat.cpp) writes
for the same name, messages and ``add_ass`` (``add_generation_prompt``): the same literal text,
the same trimming (llama.cpp's ``trim`` strips the C ``isspace`` characters, so ``TRIM`` below
strips exactly those), and, where llama.cpp ignores ``add_ass``, no generation prompt switch.
``mistral`` is what llama.cpp makes of that name: its detection sends a name starting with
``mistral`` without the v1/v3/v7 markers to the llama2 format.
"""

from __future__ import annotations


def _trim(expr: str) -> str:
    # llama.cpp's trim(): C isspace (space, \t, \n, \v, \f, \r) at both ends, nothing else.
    return f"{expr}.strip(' \\t\\n\\x0b\\x0c\\r')"


_C = "message['content']"
_R = "message['role']"
_GEN = "{%- if add_generation_prompt -%}{{- GEN -}}{%- endif -%}"


def _each(body: str, gen: str | None = None, before: str = "") -> str:
    """A loop over the messages writing ``body`` (Jinja statements), then ``gen`` when asked for."""
    text = before + "{%- for message in messages -%}" + body + "{%- endfor -%}"
    if gen is not None:
        text += _GEN.replace("GEN", repr(gen))
    return text


def _per_role(cases: dict[str, str], other: str | None = None) -> str:
    """An if/elif chain on the role; each value is a Jinja expression written for that role."""
    parts = []
    for index, (role, expr) in enumerate(cases.items()):
        parts.append(("{%- if " if index == 0 else "{%- elif ") + f"{_R} == {role!r} -%}}{{{{- {expr} -}}}}")
    if other is not None:
        parts.append(f"{{%- else -%}}{{{{- {other} -}}}}")
    return "".join(parts) + "{%- endif -%}"


def _llama2(system: bool, bos_inside: bool, strip: bool) -> str:
    content = _trim(_C) if strip else _C
    system_expr = "'<<SYS>>\\n' + content + '\\n<</SYS>>\\n\\n'" if system else "content + '\\n'"
    restart = "'<s>[INST] '" if bos_inside else "'[INST] '"
    return (
        "{%- set ns = namespace(inside=true) -%}{{- '[INST] ' -}}"
        "{%- for message in messages -%}"
        f"{{%- set content = {content} -%}}"
        f"{{%- if not ns.inside -%}}{{%- set ns.inside = true -%}}{{{{- {restart} -}}}}{{%- endif -%}}"
        f"{{%- if {_R} == 'system' -%}}{{{{- {system_expr} -}}}}"
        f"{{%- elif {_R} == 'user' -%}}{{{{- content + ' [/INST]' -}}}}"
        "{%- else -%}{{- content + '</s>' -}}{%- set ns.inside = false -%}{%- endif -%}"
        "{%- endfor -%}"
    )


def _mistral(leading: str, trailing: str, trim_assistant: bool) -> str:
    assistant = _trim(_C) if trim_assistant else _C
    return (
        "{%- set ns = namespace(inside=false) -%}"
        "{%- for message in messages -%}"
        f"{{%- if not ns.inside -%}}{{{{- {leading + '[INST]' + trailing!r} -}}}}{{%- set ns.inside = true -%}}{{%- endif -%}}"
        f"{{%- if {_R} == 'system' -%}}{{{{- {_C} + '\\n\\n' -}}}}"
        f"{{%- elif {_R} == 'user' -%}}{{{{- {_C} + {leading + '[/INST]'!r} -}}}}"
        f"{{%- else -%}}{{{{- {trailing!r} + {assistant} + '</s>' -}}}}{{%- set ns.inside = false -%}}{{%- endif -%}}"
        "{%- endfor -%}"
    )


def _mistral_v7(space: str) -> str:
    return _each(
        _per_role(
            {
                "system": f"'[SYSTEM_PROMPT]{space}' + {_C} + '[/SYSTEM_PROMPT]'",
                "user": f"'[INST]{space}' + {_C} + '[/INST]'",
            },
            f"'{space}' + {_C} + '</s>'",
        )
    )


def _simple(prefix: str, middle: str, suffix: str, gen: str | None, content: str = _C) -> str:
    return _each(f"{{{{- {prefix!r} + {_R} + {middle!r} + {content} + {suffix!r} -}}}}", gen)


_GEMMA = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    f"{{%- if {_R} == 'system' -%}}{{%- set ns.system = ns.system + {_trim(_C)} -%}}"
    "{%- else -%}"
    f"{{%- set role = 'model' if {_R} == 'assistant' else {_R} -%}}"
    "{{- '<start_of_turn>' + role + '\\n' -}}"
    "{%- if ns.system and role != 'model' -%}{{- ns.system + '\\n\\n' -}}{%- set ns.system = '' -%}{%- endif -%}"
    f"{{{{- {_trim(_C)} + '<end_of_turn>\\n' -}}}}"
    "{%- endif -%}{%- endfor -%}" + _GEN.replace("GEN", repr("<start_of_turn>model\n"))
)

_ORION = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    f"{{%- if {_R} == 'system' -%}}{{%- set ns.system = ns.system + {_C} -%}}"
    f"{{%- elif {_R} == 'user' -%}}{{{{- 'Human: ' -}}}}"
    "{%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- set ns.system = '' -%}{%- endif -%}"
    f"{{{{- {_C} + '\\n\\nAssistant: </s>' -}}}}"
    f"{{%- else -%}}{{{{- {_C} + '</s>' -}}}}{{%- endif -%}}"
    "{%- endfor -%}"
)

_RWKV_WORLD = _each(
    f"{{%- if {_R} == 'system' -%}}{{{{- 'System: ' + {_trim(_C)} + '\\n\\n' -}}}}"
    f"{{%- elif {_R} == 'user' -%}}{{{{- 'User: ' + {_trim(_C)} + '\\n\\n' -}}}}"
    "{%- if loop.last -%}{{- 'Assistant:' -}}{%- endif -%}"
    f"{{%- elif {_R} == 'assistant' -%}}{{{{- 'Assistant: ' + {_trim(_C)} + '\\n\\n' -}}}}{{%- endif -%}}"
)

_BUILTINS: dict[str, str] = {
    "chatml": _simple("<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n"),
    "llama2": _llama2(system=False, bos_inside=False, strip=False),
    "llama2-sys": _llama2(system=True, bos_inside=False, strip=False),
    "llama2-sys-bos": _llama2(system=True, bos_inside=True, strip=False),
    "llama2-sys-strip": _llama2(system=True, bos_inside=False, strip=True),
    "mistral": _llama2(system=False, bos_inside=False, strip=False),
    "mistral-v1": _mistral(" ", " ", trim_assistant=False),
    "mistral-v3": _mistral("", " ", trim_assistant=True),
    "mistral-v3-tekken": _mistral("", "", trim_assistant=False),
    "mistral-v7": _mistral_v7(" "),
    "mistral-v7-tekken": _mistral_v7(""),
    "phi3": _simple("<|", "|>\n", "<|end|>\n", "<|assistant|>\n"),
    "phi4": _simple("<|im_start|>", "<|im_sep|>", "<|im_end|>", "<|im_start|>assistant<|im_sep|>"),
    "falcon3": _simple("<|", "|>\n", "\n", "<|assistant|>\n"),
    "zephyr": _simple("<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n"),
    "monarch": _each(f"{{{{- ('' if loop.first else '<s>') + {_R} + '\\n' + {_C} + '</s>\\n' -}}}}", "<s>assistant\n"),
    "gemma": _GEMMA,
    "orion": _ORION,
    "openchat": _each(
        _per_role(
            {"system": f"{_C} + '<|end_of_turn|>'"},
            f"'GPT4 Correct ' + ({_R}[:1]|upper) + {_R}[1:] + ': ' + {_C} + '<|end_of_turn|>'",
        ),
        "GPT4 Correct Assistant:",
    ),
    "vicuna": _each(
        _per_role(
            {
                "system": f"{_C} + '\\n\\n'",
                "user": f"'USER: ' + {_C} + '\\n'",
                "assistant": f"'ASSISTANT: ' + {_C} + '</s>\\n'",
            }
        ),
        "ASSISTANT:",
    ),
    "vicuna-orca": _each(
        _per_role(
            {
                "system": f"'SYSTEM: ' + {_C} + '\\n'",
                "user": f"'USER: ' + {_C} + '\\n'",
                "assistant": f"'ASSISTANT: ' + {_C} + '</s>\\n'",
            }
        ),
        "ASSISTANT:",
    ),
    "deepseek": _each(
        _per_role(
            {
                "system": _C,
                "user": f"'### Instruction:\\n' + {_C} + '\\n'",
                "assistant": f"'### Response:\\n' + {_C} + '\\n<|EOT|>\\n'",
            }
        ),
        "### Response:\n",
    ),
    "deepseek2": _each(
        _per_role(
            {
                "system": f"{_C} + '\\n\\n'",
                "user": f"'User: ' + {_C} + '\\n\\n'",
                "assistant": f"'Assistant: ' + {_C} + '<｜end▁of▁sentence｜>'",
            }
        ),
        "Assistant:",
    ),
    "deepseek3": _each(
        _per_role(
            {
                "system": f"{_C} + '\\n\\n'",
                "user": f"'<｜User｜>' + {_C}",
                "assistant": f"'<｜Assistant｜>' + {_C} + '<｜end▁of▁sentence｜>'",
            }
        ),
        "<｜Assistant｜>",
    ),
    "command-r": _each(
        _per_role(
            {
                "system": f"'<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + {_trim(_C)} + '<|END_OF_TURN_TOKEN|>'",
                "user": f"'<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + {_trim(_C)} + '<|END_OF_TURN_TOKEN|>'",
                "assistant": f"'<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' + {_trim(_C)} + '<|END_OF_TURN_TOKEN|>'",
            }
        ),
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    ),
    "llama3": _simple(
        "<|start_header_id|>",
        "<|end_header_id|>\n\n",
        "<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        _trim(_C),
    ),
    "chatglm3": _each(f"{{{{- '<|' + {_R} + '|>\\n ' + {_C} -}}}}", "<|assistant|>", before="{{- '[gMASK]sop' -}}"),
    "chatglm4": _each(f"{{{{- '<|' + {_R} + '|>\\n' + {_C} -}}}}", "<|assistant|>\n", before="{{- '[gMASK]<sop>' -}}"),
    "glmedge": _each(f"{{{{- '<|' + {_R} + '|>\\n' + {_C} -}}}}", "<|assistant|>"),
    "minicpm": _each(_per_role({"user": f"'<用户>' + {_trim(_C)} + '<AI>'"}, _trim(_C))),
    "exaone3": _each(
        _per_role(
            {
                "system": f"'[|system|]' + {_trim(_C)} + '[|endofturn|]\\n'",
                "user": f"'[|user|]' + {_trim(_C)} + '\\n'",
                "assistant": f"'[|assistant|]' + {_trim(_C)} + '[|endofturn|]\\n'",
            }
        ),
        "[|assistant|]",
    ),
    "rwkv-world": _RWKV_WORLD,
    "granite": _each(
        f"{{{{- '<|start_of_role|>' + {_R} + '<|end_of_role|>' -}}}}"
        f"{{%- if {_R} == 'assistant_tool_call' -%}}{{{{- '<|tool_call|>' -}}}}{{%- endif -%}}"
        f"{{{{- {_C} + '<|end_of_text|>\\n' -}}}}",
        "<|start_of_role|>assistant<|end_of_role|>",
    ),
    "megrez": _simple("<|role_start|>", "<|role_end|>", "<|turn_end|>", "<|role_start|>assistant<|role_end|>"),
    "llama4": _simple(
        "<|header_start|>", "<|header_end|>\n\n", "<|eot|>", "<|header_start|>assistant<|header_end|>\n\n", _trim(_C)
    ),
    "smolvlm": _each(
        _per_role(
            {"system": f"{_C} + '\\n\\n'", "user": f"'User: ' + {_C} + '<end_of_utterance>\\n'"},
            f"'Assistant: ' + {_C} + '<end_of_utterance>\\n'",
        ),
        "Assistant:",
        before="{{- '<|im_start|>' -}}",
    ),
    "gpt-oss": _each(
        f"{{{{- '<|start|>' + {_R} + '<|message|>' + {_C} + ('<|return|>' if {_R} == 'assistant' else '<|end|>') -}}}}",
        "<|start|>assistant",
    ),
    "seed_oss": _each(
        f"{{{{- '<seed:bos>' + {_R} + '\\n' + ({_trim(_C)} if {_R} == 'assistant' else {_C}) + '<seed:eos>' -}}}}",
        "<seed:bos>assistant\n",
    ),
    "solar-open": _simple("<|begin|>", "<|content|>", "<|end|>", "<|begin|>assistant"),
}


def builtin_templates() -> dict[str, str]:
    """The named built-in chat templates, name -> Jinja text (a fresh copy).

    Returns:
        Every built-in name (``chatml``, ``llama2``, ``llama3``, ``gemma``, ``phi3``, ``mistral``, ...)
        with its template text.
    """
    return dict(_BUILTINS)
