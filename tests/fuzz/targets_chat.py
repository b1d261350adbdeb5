"""Structured fuzz target for chat template rendering (``onnx_struct.apply_chat_template``).

Two families of inputs, each drawn from its own ``random.Random(f"{seed}:{index}")`` so that any
input is replayed from (seed, index) alone and a campaign resumes at any index:

- messages: every built-in template and llama.cpp's real templates (models/templates/*.jinja, when
  llama.cpp's source is at hand) rendered with random conversations: roles valid and not, content
  as str / None / parts / dict / int / huge / Jinja-looking text, tool calls, missing keys, tools,
  add_generation_prompt both ways, extra variables;
- templates: template texts assembled from Jinja fragments (loops, recursive macros and loops,
  filters, attributes of strings and None, ``__class__``, ``range(10**9)``, string
  multiplication, deep nesting, raise_exception, namespace, set and loop controls) and real
  templates mutated token-wise (splice, delete, duplicate).

Properties: only ``onnx_struct.ValidationError`` comes out; a rendering ends within
MAX_TEMPLATE_SECONDS (a hard 6 s alarm per input; anything slower than the limit is reported); an
accepted rendering is a str of at most MAX_TEMPLATE_OUTPUT_CHARS, shows no memory address (`` at
0x...``: the inputs never write one) and renders the same twice.
Memory is bounded in a child process (tests/fuzz/test_fuzz_chat.py, slow tier).

    python tests/fuzz/targets_chat.py RUNS [SEED] [START]   # inputs START..START+RUNS-1 of SEED
"""

from __future__ import annotations

import json
import random
import re
import reprlib
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnx_struct import ValidationError, apply_chat_template  # noqa: E402
from onnx_struct.limits import MAX_TEMPLATE_OUTPUT_CHARS, MAX_TEMPLATE_SECONDS  # noqa: E402
from onnx_struct.llm.chat.builtin import builtin_templates  # noqa: E402

HARD_TIMEOUT = MAX_TEMPLATE_SECONDS + 1.0  # seconds before the alarm ends an input (an escape)
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # Python's default repr of an object
TOKENS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<unk>"]


def real_templates() -> dict[str, str]:
    """llama.cpp's real chat templates by file name ({} where its source is not at hand)."""
    from support.llama_cpp_source import llama_cpp_source

    source = llama_cpp_source()
    if source is None:
        return {}
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((source / "models" / "templates").glob("*.jinja"))}


# ---------------------------------------------------------------- family 1: messages

ROLES = ["system", "user", "assistant", "tool", "ipython", "developer", "function", "model", "", "USER", "x" * 300]
JINJA_TEXT = ["{{ 7 * 7 }}", "{% for x in range(10**9) %}", "{{ ''.__class__ }}", "{% endfor %}", "{#", "{%- raw %}",
              "<|im_end|>", "</s>", "<think>x</think>", "\x00", "\ud800", "é漢🙂", "\r\n\t", "[INST]"]  # fmt: skip


def _text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return rng.choice(["Hi", "hello world", "", " ", "2+2?", "a\nb"])
    if kind < 0.75:
        return "".join(rng.choice(JINJA_TEXT + ["word "]) for _ in range(rng.randint(1, 6)))
    if kind < 0.998:
        return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randint(0, 40)))
    return rng.choice(["x", "ab\n", "{{"]) * rng.choice([300_000, 1_500_000, 4_100_000])  # huge


def _deep(rng: random.Random):
    """A list or dict holding itself, or lists nested past the interpreter's recursion limit."""
    if rng.random() < 0.5:
        if rng.random() < 0.5:
            made = {}
            made["a"] = made
        else:
            made = []
            made.append(made)
        return made
    outer = current = []
    for _ in range(rng.choice([70, 900, 5000])):
        current.append([])
        current = current[0]
    return outer


def _value(rng: random.Random, depth: int = 0):
    if rng.random() < 0.003:
        return _deep(rng)
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.choice([0, -1, 1, 2**64, 10**100, True, False])
    if kind == 2:
        return rng.choice([0.5, float("nan"), float("inf"), -0.0])
    if kind == 3:
        return None
    if kind == 4:
        return b"bytes"
    if kind == 5:
        return rng.choice([object(), {1, 2}, range(3), 1j])  # not JSON: the template sees "<type>"
    if kind == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == 7:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randint(0, 2)))
    return {rng.choice(["type", "text", "name", "arguments", 1, None, "__class__"]): _value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}  # fmt: skip


def _part(rng: random.Random):
    kind = rng.random()
    if kind < 0.5:
        return {"type": "text", "text": _text(rng)}
    if kind < 0.65:
        return {"type": rng.choice(["image", "image_url", "audio", "video"]), "image_url": {"url": "x"}}
    if kind < 0.8:
        return {rng.choice(["type", "text"]): _value(rng)}
    return _value(rng)


def _content(rng: random.Random):
    kind = rng.random()
    if kind < 0.55:
        return _text(rng)
    if kind < 0.65:
        return None
    if kind < 0.85:
        return [_part(rng) for _ in range(rng.randint(0, 4))]
    return _value(rng)  # a dict, int, ... (refused as bad_argument) or another str / list


def _tool_call(rng: random.Random):
    if rng.random() < 0.15:
        return _value(rng)
    function = {"name": rng.choice(["get_weather", "", "x" * 50, None, 3]), "arguments": rng.choice(
        [{"city": "Paris"}, '{"city": "Paris"}', "", "{bad json", {}, None, [1, 2], {"nested": {"a": [1, {"b": None}]}}])}  # fmt: skip
    call = {
        "id": rng.choice(["call_1", "", None, 5]),
        "type": rng.choice(["function", "x", None]),
        "function": function,
    }
    for key in rng.sample(sorted(call), rng.randint(0, 2)):
        del call[key]
    return call


def _message(rng: random.Random):
    if rng.random() < 0.03:
        return _value(rng)  # not a dict
    message = {"role": rng.choice(ROLES) if rng.random() < 0.95 else _value(rng), "content": _content(rng)}
    if rng.random() < 0.2:
        message["tool_calls"] = (
            [_tool_call(rng) for _ in range(rng.randint(0, 3))] if rng.random() < 0.9 else _value(rng)
        )
    if rng.random() < 0.1:
        message[rng.choice(["reasoning_content", "thinking", "reasoning"])] = rng.choice([_text(rng), _value(rng)])
    for key in ("name", "tool_call_id", "tool_calls_id", "type", "__class__", "images", "documents"):
        if rng.random() < 0.04:
            message[key] = _value(rng)
    for key in rng.sample(["role", "content"], rng.choice([0] * 18 + [1, 2])):
        message.pop(key)
    return message


def _conversation(rng: random.Random):
    if rng.random() < 0.02:
        return rng.choice(["hi", b"hi", None, 5, {"role": "user"}, ({"role": "user", "content": "t"},)])
    shape = rng.random()
    if shape < 0.5:  # a plausible conversation: system?, alternating user / assistant, tool turns
        turns = [{"role": "system", "content": _text(rng)}] if rng.random() < 0.4 else []
        for i in range(rng.randint(1, 5)):
            turns.append({"role": "user" if i % 2 == 0 else "assistant", "content": _content(rng)})
            if rng.random() < 0.15:
                turns.append({"role": "assistant", "content": None, "tool_calls": [_tool_call(rng)]})
                turns.append({"role": "tool", "content": _text(rng), "tool_call_id": "call_1"})
        return turns
    return [_message(rng) for _ in range(rng.choice([0, 1, 2, 3, 4, 6, 30]))]


def _tools(rng: random.Random):
    kind = rng.random()
    if kind < 0.6:
        return None
    if kind < 0.9:
        return [{"type": "function", "function": {"name": rng.choice(["get_weather", "", "{{x}}"]),
                 "description": _text(rng), "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]}}} for _ in range(rng.randint(0, 3))]  # fmt: skip
    return rng.choice([[], [_value(rng)], [{"type": "function"}], [{"function": None}], "tools"])


def _extra(rng: random.Random) -> dict:
    extra = {}
    for key, values in (("enable_thinking", [True, False, None, "no"]), ("reasoning_effort", ["low", "high", 3]),
                        ("builtin_tools", [["code_interpreter"], [], None]), ("date_string", ["26 Jul 2024", 1]),
                        ("tools_in_user_message", [True, False]), ("custom_tools", [None, []]),
                        ("keep_past_thinking", [True, False]), ("bos_token", ["<B>", None, 3])):  # fmt: skip
        if rng.random() < 0.08:
            extra[key] = rng.choice(values)
    return extra


def _metadata(rng: random.Random, template: str | None) -> dict:
    metadata = {"tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
    if rng.random() < 0.05:
        metadata[rng.choice(["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"])] = rng.choice(
            [-1, 5, 2**70, "0", None, True, 1.0]
        )
    if rng.random() < 0.03:
        metadata["tokenizer.ggml.tokens"] = rng.choice([[], None, [1, 2], "ab"])
    if template is not None:
        metadata["tokenizer.chat_template"] = template
    return metadata


def messages_input(rng: random.Random, templates: list[tuple[str, str]], index: int = 0) -> dict:
    """The arguments of one apply_chat_template call: a known template (the same for 64 consecutive
    inputs, so that its compilation is cached), a random conversation."""
    name, text = templates[(index // 64) % len(templates)]
    where = rng.random()
    if name.endswith(".jinja"):  # a real template: in the file's metadata or given as text
        chat_template, metadata = (None, _metadata(rng, text)) if where < 0.5 else (text, _metadata(rng, None))
    else:  # a built-in: by its name
        chat_template, metadata = name, _metadata(rng, None)
    generation = rng.choice([True, False]) if rng.random() < 0.95 else rng.choice([None, 0, "yes", []])
    return {"metadata": metadata, "messages": _conversation(rng), "chat_template": chat_template,
            "add_generation_prompt": generation, "tools": _tools(rng), "extra": _extra(rng)}  # fmt: skip


# ---------------------------------------------------------------- family 2: templates

NAMES = ["messages", "message", "m", "x", "ns", "ns.x", "tools", "bos_token", "eos_token", "add_generation_prompt",
         "loop", "loop.index", "loop.index0", "loop.first", "loop.last", "loop.length", "loop.previtem",
         "undefined_name", "none", "None", "true", "range", "dict", "namespace", "cycler", "joiner", "self",
         "raise_exception", "strftime_now", "messages[0]", "messages[-1]", "messages[0]['content']",
         "messages[0].role", "caller", "varargs", "kwargs"]  # fmt: skip
LITERALS = ["0", "1", "-1", "2", "10**9", "10**100", "2**4096", "''", "'x'", "'ab\\ncd'", "\"{{ 1 }}\"", "[]", "[1, 2, 3]",
            "{}", "{'a': 1}", "(1,)", "none", "true", "false", "1.5", "'%s'", "'{0}'", "'{:>99}'", "'\\t'"]  # fmt: skip
ATTRIBUTES = ["__class__", "__mro__", "mro", "__subclasses__", "__globals__", "__init__", "__dict__", "__len__",
              "upper", "lower", "strip", "split", "join", "replace", "format", "format_map", "center", "zfill",
              "ljust", "expandtabs", "translate", "startswith", "endswith", "items", "keys", "values", "get",
              "append", "pop", "update", "content", "role", "tool_calls", "function", "arguments", "name", "x",
              "index", "count", "title", "encode", "splitlines", "_TemplateReference__context", "real", "gi_frame"]  # fmt: skip
FILTERS = ["length", "count", "tojson", "tojson(indent=2)", "tojson(indent=10**6)", "trim", "upper", "lower", "list",
           "join", "join(', ')", "replace('a', 'bb')", "replace('', 'xx')", "default('d')", "default(none, true)",
           "map(attribute='content')", "map('upper')", "map(attribute='__class__')", "select", "reject('none')",
           "selectattr('role', 'equalto', 'user')", "rejectattr('content')", "selectattr('__class__')",
           "attr('__class__')", "attr('upper')", "int", "float", "string", "first", "last", "reverse", "sort",
           "sort(attribute='role')", "unique", "batch(2)", "batch(10**9)", "slice(3)", "slice(10**7)", "indent(4)",
           "indent(10**6)", "wordwrap(5)", "center(80)", "center(10**9)", "truncate(3)", "format(1)", "sum", "max",
           "min", "dictsort", "items", "groupby('role')", "safe", "escape", "e", "xmlattr", "urlencode", "striptags",
           "title", "capitalize", "wordcount", "round", "abs", "pprint", "filesizeformat", "random", "string|length",
           "tojson|safe", "map('tojson')|join", "sum(start=[])", "map('string')|list", "unknown_filter"]  # fmt: skip
TESTS = ["defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "true",
         "false", "divisibleby(0)", "divisibleby(3)", "equalto(1)", "in([1])", "callable", "sameas(none)", "odd",
         "escaped", "lower", "unknown_test"]  # fmt: skip
SUBSCRIPTS = ["0", "-1", "'role'", "'content'", "1:", "::-1", "x", "10**20"]
BLOCK_FILTERS = ["upper", "trim", "indent(2)", "replace('a', 'aa')"]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "==", "!=", "<", ">=", "in", "not in"]
CALLS = ["range(10**9)", "range(3)", "range(-5)", "range(1, 10**6, 1)", "raise_exception('no')", "namespace(x=1)",
         "namespace(_x=1)", "dict(a=1)", "dict.fromkeys(range(3))", "dict.fromkeys(range(10**6), 'x')",
         "strftime_now('%Y')", "strftime_now('%' * 10)", "cycler(1, 2).next()", "joiner(',')()", "lipsum(10**6)",
         "self.body()", "loop.cycle('a', 'b')", "caller()", "m(3)", "m(60)", "f()", "range(10**9)|list|length",
         "'x' * 10**9", "'ab' * 10**6", "[1] * 10**8", "'{:>999999999}'.format(1)", "'%999999999d' % 1",
         "'x'.center(10**9)", "'x'.zfill(10**7)", "''.join(['x'] * 10)", "'a\\tb'.expandtabs(10**7)",
         "(''.__class__.__mro__[1].__subclasses__())", "messages.append(1)", "messages[0].update({'r': 1})",
         "x.pop()", "'%s %s' % ('a',)", "1 / 0", "1 // 0", "1 % 0", "none.x.y", "none()", "'x'()", "10 ** -1",
         "(2 ** 4000) * (2 ** 4000)", "2 ** 2 ** 20", "'abc'[::-1]", "'abc'[10**20]", "[1, 2][1:10**20]"]  # fmt: skip


def _expr(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randrange(9 if depth < 4 else 3)
    if kind == 0:
        return rng.choice(NAMES)
    if kind == 1:
        return rng.choice(LITERALS)
    if kind == 2:
        return rng.choice(CALLS)
    if kind == 3:
        return f"{_expr(rng, depth + 1)}.{rng.choice(ATTRIBUTES)}" + rng.choice(
            ["", "()", "('x')", "(10**9)", "(1, 2)"]
        )
    if kind == 4:
        return f"({_expr(rng, depth + 1)})|{rng.choice(FILTERS)}"
    if kind == 5:
        return f"({_expr(rng, depth + 1)} {rng.choice(BINOPS)} {_expr(rng, depth + 1)})"
    if kind == 6:
        return f"({_expr(rng, depth + 1)} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if kind == 7:
        return f"{_expr(rng, depth + 1)}[{rng.choice(SUBSCRIPTS)}]"
    return f"({_expr(rng, depth + 1)} if {_expr(rng, depth + 1)} else {_expr(rng, depth + 1)})"


def _block(rng: random.Random, depth: int = 0) -> str:
    return "".join(_statement(rng, depth) for _ in range(rng.randint(1, 3 if depth < 3 else 1)))


def _statement(rng: random.Random, depth: int = 0) -> str:
    dash = rng.choice(["", "", "-"])
    kind = rng.randrange(16 if depth < 5 else 3)
    if kind == 0:
        return rng.choice(
            ["text ", "<|im_start|>", "\n", "  ", "{{", "}}", "{%", "%}", "{#", "{% raw %}{{x}}{% endraw %}"]
        )
    if kind == 1:
        return "{{" + dash + " " + _expr(rng) + " " + dash + "}}"
    if kind == 2:
        return f"{{%{dash} set {rng.choice(['x', 'ns.x', 'm', 'x, y'])} = {_expr(rng)} %}}"
    if kind == 3:
        inner = _block(rng, depth + 1)
        return (
            f"{{% if {_expr(rng)} %}}{inner}{{% elif {_expr(rng)} %}}{_block(rng, depth + 1)}{{% else %}}{{% endif %}}"
        )
    if kind == 4:
        control = rng.choice(["", "{% break %}", "{% continue %}", "{% if loop.index > 2 %}{% break %}{% endif %}"])
        target = rng.choice(["x", "m", "k, v", "i"])
        head = rng.choice(["", " if x", " recursive"])
        return f"{{% for {target} in {_expr(rng)}{head} %}}{_block(rng, depth + 1)}{control}{{% else %}}e{{% endfor %}}"
    if kind == 5:
        body = rng.choice(["{{ m(n + 1) }}", "{% if n < 5 %}{{ m(n + 1) }}{% endif %}", "{{ m(n - 1) }}{{ m(n - 1) }}",
                           "{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}", "{{ n }}", "{{ caller() }}"])  # fmt: skip
        return f"{{% macro m(n=0) %}}{body}{_block(rng, depth + 1)}{{% endmacro %}}{{{{ m({rng.choice(['0', '3', '60'])}) }}}}"
    if kind == 6:
        return "{% set ns = namespace(x=" + _expr(rng) + ") %}" + _block(rng, depth + 1)
    if kind == 7:
        return f"{{% set x %}}{_block(rng, depth + 1)}{{% endset %}}{{{{ x|length }}}}"
    if kind == 8:
        return f"{{% filter {rng.choice(BLOCK_FILTERS)} %}}{_block(rng, depth + 1)}{{% endfilter %}}"
    if kind == 9:
        return f"{{% for x in [1, 2] recursive %}}{_block(rng, depth + 1)}{{{{ loop([x, x]) }}}}{{% endfor %}}"
    if kind == 10:
        return f"{{% generation %}}{_block(rng, depth + 1)}{{% endgeneration %}}"
    if kind == 11:
        return "{{ raise_exception(" + rng.choice(["'bad role'", "none", "1", "x"]) + ") }}"
    if kind == 12:
        return rng.choice(["{% include 'x' %}", "{% import 'os' as os %}", "{% extends 'base' %}", "{% do x %}",
                           "{% from 'a' import b %}", "{% block b %}{{ self.b() }}{% endblock %}",
                           "{% with y = 1 %}{{ y }}{% endwith %}", "{% call m(1) %}c{% endcall %}", "{% endfor %}",
                           "{% autoescape true %}<{{ '<' }}{% endautoescape %}", "{%", "{% if %}"])  # fmt: skip
    if kind == 13:
        return "{% for message in messages %}" + _block(rng, depth + 1) + "{% endfor %}"
    if kind == 14 and depth == 0 and rng.random() < 0.25:  # deep nesting, long chains (slow to compile)
        return rng.choice(["(" * 200, "{% if 1 %}" * 300 + "{% endif %}" * 300, "{{ " + "(" * 60 + "1" + ")" * 60 + " }}",
                           "{{ 1" + " + 1" * 3000 + " }}", "{{ x" + ".a" * 500 + " }}"])  # fmt: skip
    return "{%- if add_generation_prompt %}<|assistant|>{% endif -%}"


_TOKEN = re.compile(r"\{\{-?|-?\}\}|\{%-?|-?%\}|\{#|#\}|\w+|\s+|.", re.S)


def _mutated(rng: random.Random, text: str, other: str) -> str:
    tokens = _TOKEN.findall(text)
    for _ in range(rng.randint(1, 4)):
        if not tokens:
            break
        i = rng.randrange(len(tokens))
        j = min(len(tokens), i + rng.choice([1, 1, 2, 5, 20, 200]))
        kind = rng.randrange(5)
        if kind == 0:  # delete
            del tokens[i:j]
        elif kind == 1:  # duplicate
            tokens[i:i] = tokens[i:j] * rng.choice([1, 2, 10])
        elif kind == 2:  # splice from another template
            others = _TOKEN.findall(other)
            k = rng.randrange(len(others) or 1)
            tokens[i:j] = others[k : k + rng.choice([1, 5, 50, 500])]
        elif kind == 3:  # a fragment of the grammar
            tokens[i:i] = [_statement(rng, 3) if rng.random() < 0.5 else _expr(rng, 3)]
        else:  # swap two tokens
            k = rng.randrange(len(tokens))
            tokens[i], tokens[k] = tokens[k], tokens[i]
    return "".join(tokens)


def template_input(rng: random.Random, templates: list[tuple[str, str]]) -> dict:
    """The arguments of one apply_chat_template call: a random template text, a plain conversation."""
    if rng.random() < 0.6:
        text = "".join(_statement(rng) for _ in range(rng.randint(1, 5)))
    else:
        text = _mutated(rng, rng.choice(templates)[1], rng.choice(templates)[1])
    messages = _conversation(rng) if rng.random() < 0.3 else [
        {"role": "system", "content": "s"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]  # fmt: skip
    return {"metadata": _metadata(rng, text), "messages": messages, "chat_template": None,
            "add_generation_prompt": rng.choice([True, False]), "tools": _tools(rng), "extra": {}}  # fmt: skip


# ---------------------------------------------------------------- running one input


class Timeout(BaseException):
    """An input ran past HARD_TIMEOUT (a BaseException: the package's handlers must not catch it)."""


def _alarm(signum, frame):
    raise Timeout(f"more than {HARD_TIMEOUT} s")


def render(case: dict) -> str:
    return apply_chat_template(
        case["metadata"], case["messages"], add_generation_prompt=case["add_generation_prompt"],
        chat_template=case["chat_template"], tools=case["tools"], **case["extra"],
    )  # fmt: skip


def _nondeterministic(case: dict) -> bool:
    """Templates that may render differently twice by design: the clock, the random filter."""
    text = case["chat_template"] or case["metadata"].get("tokenizer.chat_template") or ""
    if case["chat_template"] in builtin_templates():
        text = builtin_templates()[case["chat_template"]]
    return "strftime_now" in text or "random" in text


def fuzz_one(case: dict) -> tuple[bool, float]:
    """(accepted, seconds). Raises anything but ValidationError (an escape), Timeout past HARD_TIMEOUT,
    AssertionError when an accepted rendering breaks a property."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HARD_TIMEOUT)
    start = time.perf_counter()
    try:
        try:
            out = render(case)
        except ValidationError:
            return False, time.perf_counter() - start
        seconds = time.perf_counter() - start
        assert isinstance(out, str), type(out)
        assert len(out) <= MAX_TEMPLATE_OUTPUT_CHARS, len(out)
        assert ADDRESS.search(out) is None, f"prints a memory address: {ADDRESS.search(out).group()!r}"
        if not _nondeterministic(case):
            assert render(case) == out, "renders differently twice"
        return True, seconds
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _templates() -> list[tuple[str, str]]:
    return sorted(builtin_templates().items()) + sorted(real_templates().items())


def make_case(seed: int, index: int, templates: list[tuple[str, str]]) -> dict:
    rng = random.Random(f"{seed}:{index}")
    return messages_input(rng, templates, index) if rng.random() < 0.5 else template_input(rng, templates)


def describe(case: dict) -> str:
    try:
        return json.dumps(case, default=repr)[:600]
    except (ValueError, RecursionError):  # a value holding itself, or nested deeper than json recurses
        return reprlib.repr(case)


def campaign(runs: int, seed: int = 0, start: int = 0, *, progress: bool = False) -> tuple[int, list[str], list[str]]:
    """(accepted count, escapes, slow inputs) over inputs ``start .. start + runs - 1`` of ``seed``;
    each escape or slow input names its (seed, index) for :func:`make_case`."""
    templates = _templates()
    accepted, escapes, slow = 0, [], []
    began = time.perf_counter()
    for index in range(start, start + runs):
        case = make_case(seed, index, templates)
        try:
            ok, seconds = fuzz_one(case)
            accepted += ok
            if seconds > MAX_TEMPLATE_SECONDS:
                slow.append(f"{seconds:.1f} s at seed {seed} index {index} <- {describe(case)}")
        except (Exception, Timeout) as error:  # noqa: BLE001 - an escape is what this looks for
            escapes.append(
                f"{type(error).__name__}: {str(error)[:300]} at seed {seed} index {index} <- {describe(case)}"
            )
        if progress and (index - start + 1) % 20000 == 0:
            rate = (index - start + 1) / (time.perf_counter() - began)
            print(f"  {index + 1 - start} inputs ({index + 1}), {len(escapes)} escapes, {rate:.0f}/s", flush=True)
    return accepted, escapes, slow


if __name__ == "__main__":
    began = time.perf_counter()
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    accepted, escapes, slow = campaign(runs, seed, start, progress=True)
    seconds = time.perf_counter() - began
    print(f"seed {seed} inputs {start}..{start + runs - 1}: {runs} inputs, {accepted} accepted, {len(escapes)} escapes, "
          f"{len(slow)} slower than {MAX_TEMPLATE_SECONDS} s, in {seconds:.0f} s ({runs / seconds:.0f} inputs/s)")  # fmt: skip
    for line in dict.fromkeys(e.split(" at seed ")[0] for e in escapes):
        print(" ", line)
    for line in escapes[:10] + slow[:5]:
        print(line)
