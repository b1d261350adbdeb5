"""Hostile chat templates: each rendered in a child under CPU and memory limits, and refused with
ValidationError (code ``bad_template``, or ``limit_exceeded`` for a too-long text) in bounded time.

A template comes with the GGUF file, so its author controls it. Jinja's sandbox stops attribute
escapes; loops, recursion and output are bounded by onnx_struct.llm.chat.sandbox (MAX_TEMPLATE_*).
"""

from __future__ import annotations

import pytest

from adversarial.bounded import run_bounded
from onnx_struct.limits import MAX_TEMPLATE_CHARS

pytestmark = pytest.mark.slow

BIG = "{% set s = 'x' * 1000000 %}"
HOSTILE = {
    # loops and recursion
    "silent_nested_loops": "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
    "{% endfor %}{% endfor %}{% endfor %}",
    "printing_nested_loops": "{% for a in range(100000) %}{% for b in range(100000) %}{{ b }}{% endfor %}{% endfor %}",
    "huge_range": "{% for x in range(10**9) %}{% endfor %}",
    "recursive_macro": "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
    "exponential_macro": "{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(60) }}",
    "exponential_silent_macro": "{% macro m(n) %}{% if n %}{% set a = m(n - 1) %}{% set b = m(n - 1) %}{% endif %}"
    "{% endmacro %}{{ m(60) }}",
    "recursive_loop": "{% for x in [1, 2] recursive %}{{ loop([1, 2]) }}{% endfor %}",
    "block_recursion": "{% block a %}{{ self.a() }}{{ self.a() }}{% endblock %}",
    # `in` is no operator the sandbox sees: the wall-clock bound stops it. The needle defeats the
    # one-character memchr search ('y' scans 4 MB in 50 µs, so 100,000 scans took under 5 s):
    # each scan here takes milliseconds, the whole loop minutes.
    "scan_in_loop": BIG.replace("1000000", "3999999")
    + "{% for i in range(100000) %}{% if 'xxxxxxxxy' in s %}{% endif %}{% endfor %}",
    "copy_in_loop": BIG + "{% for i in range(100000) %}{% set t = s.upper() %}{% endfor %}",
    # sizes
    "string_multiplication": "{{ 'a' * 10**9 }}",
    "list_multiplication": "{{ ([1] * 10**9)|length }}",
    "integer_power": "{{ 10 ** (10 ** 10) }}",
    "integer_squaring": "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
    "concat_doubling": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "plus_doubling": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "list_doubling": "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "shared_references": BIG + "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = ns.l + [s] %}"
    "{% endfor %}{{ ns.l }}",
    "replace_empty": BIG + "{{ s.replace('', s) }}",
    "replace_filter": BIG + "{{ s|replace('x', s) }}",
    "join_method": BIG + "{{ s.join([s] * 3) }}",
    "join_filter": BIG + "{{ ([s] * 3)|join(s) }}",
    "translate": BIG + "{{ s.translate({120: s}) }}",
    "expandtabs": "{% set s = '\\t' * 1000000 %}{{ s.expandtabs(1000000) }}",
    "center": "{{ 'x'.center(10**9) }}",
    "zfill": "{{ 'x'.zfill(10**9) }}",
    "format_width": "{{ '{:>999999999}'.format(1) }}",
    "format_nested_width": "{{ '{:>{w}}'.format(1, w=999999999) }}",
    "percent_width": "{{ '%999999999d' % 1 }}",
    "percent_star": "{{ '%*d' % (999999999, 1) }}",
    "format_filter": "{{ '%999999999s'|format('x') }}",
    "indent": "{% set s = '\\n' * 1000000 %}{{ s|indent(1000) }}",
    "wordwrap": BIG.replace("'x'", "'x '") + "{{ s|wordwrap(1, wrapstring=s) }}",
    "tojson_indent": "{{ messages|tojson(indent=10**6) }}",
    "slice": "{{ range(10)|slice(3999999)|list }}",
    "macro_buffer": "{% macro m() %}{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}{% endmacro %}{{ m()|length }}",
    "set_block": "{% set x %}{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}{% endset %}{{ x|length }}",
    "filter_block": "{% filter upper %}{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}{% endfilter %}",
    "fromkeys": "{{ dict.fromkeys(range(100000), 'x' * 1000000)|length }}",
    "lipsum": "{{ lipsum(10**6) }}",
    # escapes to Python objects
    "mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "class_alone": "{{ ''.__class__ }}",
    "cycler_globals": "{{ cycler.__init__.__globals__ }}",
    "joiner_globals": "{{ joiner.__init__.__globals__['os'] }}",
    "namespace_globals": "{{ namespace.__init__.__globals__ }}",
    "template_reference": "{{ self._TemplateReference__context }}",
    "attr_filter": "{{ ''|attr('__class__') }}",
    "map_attribute": "{{ messages|map(attribute='__class__')|list }}",
    "selectattr": "{{ messages|selectattr('__class__')|list }}",
    "format_field": "{{ '{0.__class__.__mro__}'.format('') }}",
    "format_map_field": "{{ '{x.__class__}'.format_map({'x': 1}) }}",
    "dict_global": "{{ dict.__class__.__mro__ }}",
    "namespace_underscore": "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "mutation": "{{ messages.append(1) }}",
    "dict_mutation": "{{ messages[0].update({'role': 'x'}) }}",
    "include": "{% include '/etc/passwd' %}",
    "import": "{% import 'os' as os %}",
    "raise_exception": "{{ raise_exception('refused by the template') }}",
    # compile time
    "deep_parentheses": [("{{ ", 1), ("(", 100000), ("1", 1), (")", 100000), (" }}", 1)],
    "deep_blocks": [("{% if 1 %}", 5000), ("{% endif %}", 5000)],
    "long_chain": [("{{ 1", 1), (" + 1", 45000), (" }}", 1)],
}

# A template is given to the child as its text, or as (piece, repeat) pairs it joins (too long for argv).
CODE = """
template = ARG if isinstance(ARG, str) else "".join(piece * count for piece, count in ARG)
messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Hi"}]
metadata = {"tokenizer.ggml.tokens": ["<s>", "</s>"], "tokenizer.ggml.bos_token_id": 0, "tokenizer.chat_template": template}
try:
    S.apply_chat_template(metadata, messages)
except S.ValidationError as error:
    if error.code not in ("bad_template", "limit_exceeded"):
        raise RuntimeError(f"refused with code {error.code!r}: {error}") from None
    raise
"""


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_refused(name):
    outcome = run_bounded(CODE, HOSTILE[name], cpu_seconds=10, memory_mib=1024)
    outcome.assert_validation_error("gguf.kv['tokenizer.chat_template']")


def test_template_text_too_long():
    outcome = run_bounded(CODE, [("x", MAX_TEMPLATE_CHARS + 1)], cpu_seconds=10, memory_mib=512)
    outcome.assert_validation_error("gguf.kv['tokenizer.chat_template']", contains="MAX_TEMPLATE_CHARS")
