"""The Jinja2 environment chat templates render in: transformers' own, bounded in time and size.

The environment is the one transformers' ``apply_chat_template`` builds (``ImmutableSandboxedEnvironment``
with ``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension and a pass-through
``{% generation %}`` tag; ``tojson``, ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace``
as it defines them). Jinja's sandbox already keeps a template away from Python's internals
(attributes starting with ``_``, mutation of lists and dicts); it bounds neither loops nor output,
so every rendering here also runs against a :class:`Budget`:

- each loop iteration, call, attribute or item lookup, intercepted operator and piece of output
  is a step (``MAX_TEMPLATE_STEPS``), and the clock is read every 32 steps
  (``MAX_TEMPLATE_SECONDS``): a loop that prints nothing still ends;
- a value a call, filter or operator returns is measured (``MAX_TEMPLATE_VALUE_SIZE``, its elements
  charged as steps), and the operations that multiply sizes (``*``, ``%``, ``str.format`` widths,
  ``replace``, ``join``, ``indent``, ``expandtabs``, ``translate``, ``wordwrap``) are estimated and
  refused *before* they build anything; integers stay below ``MAX_TEMPLATE_INT_BITS`` bits;
- everything the template writes, buffered in macros and ``{% set %}`` blocks too, is counted
  (``MAX_TEMPLATE_EMITTED_CHARS``).

A bound exceeded raises :class:`TemplateBoundExceeded`; an attribute the sandbox forbids raises
``SecurityError`` at once (Jinja would render it as an empty string and only fail on its use).
"""

from __future__ import annotations

import contextvars
import json
import re
import time
from collections.abc import Mapping
from datetime import datetime
from functools import update_wrapper
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
import jinja2.visitor
import markupsafe
from jinja2.exceptions import SecurityError
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter

from onnx_struct.limits import (
    MAX_TEMPLATE_EMITTED_CHARS,
    MAX_TEMPLATE_INT_BITS,
    MAX_TEMPLATE_JSON_INDENT,
    MAX_TEMPLATE_SECONDS,
    MAX_TEMPLATE_STEPS,
    MAX_TEMPLATE_VALUE_SIZE,
)
from onnx_struct.llm.chat.printed import printable, unwrapped

_CLOCK_EVERY = 32  # steps between two readings of the clock (a step may scan a 4M-character string)
_MACRO_STEPS = 16  # steps charged for one macro call (its frame, arguments and buffer)
_CHARS_PER_STEP = 1024  # a value handled costs a step per this many characters or elements (C-speed work)
_NUMBER = re.compile(r"\d+")
# A printf-style conversion: mapping key, flags, then the width and precision it pads to.
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d+|\*)?(?:\.(\d+|\*))?")


class TemplateBoundExceeded(Exception):
    """A rendering went past one of the chat-template limits (onnx_struct/limits.py)."""


class Budget:
    """What one rendering may still spend: steps, written characters and time."""

    def __init__(self) -> None:
        self.steps = 0
        self.emitted = 0
        self.deadline = time.monotonic() + MAX_TEMPLATE_SECONDS

    def charge(self, steps: int = 1) -> None:
        before = self.steps
        self.steps += steps
        if self.steps > MAX_TEMPLATE_STEPS:
            raise TemplateBoundExceeded(f"rendering takes more than MAX_TEMPLATE_STEPS={MAX_TEMPLATE_STEPS} steps")
        if before // _CLOCK_EVERY != self.steps // _CLOCK_EVERY and time.monotonic() > self.deadline:
            raise TemplateBoundExceeded(f"rendering takes more than MAX_TEMPLATE_SECONDS={MAX_TEMPLATE_SECONDS} s")

    def emit(self, chars: int) -> None:
        self.emitted += chars
        if self.emitted > MAX_TEMPLATE_EMITTED_CHARS:
            raise TemplateBoundExceeded(
                f"the template writes more than MAX_TEMPLATE_EMITTED_CHARS={MAX_TEMPLATE_EMITTED_CHARS} characters"
            )
        self.charge()


# The budget of the rendering under way in this context (None while a template compiles: constant
# folding then runs filters on literals, which the estimates below still bound).
current_budget: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("chat_template_budget", default=None)


def _charge(steps: int = 1) -> None:
    budget = current_budget.get()
    if budget is not None:
        budget.charge(steps)


def _refuse_size(what: str, size: int) -> None:
    if size > MAX_TEMPLATE_VALUE_SIZE:
        raise TemplateBoundExceeded(
            f"{what} would hold {size} elements (MAX_TEMPLATE_VALUE_SIZE={MAX_TEMPLATE_VALUE_SIZE})"
        )


def size_of(value: Any) -> int:
    """Characters of a string, elements (recursively) of a container; every element visited is a step.
    Stops counting past MAX_TEMPLATE_VALUE_SIZE."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, range):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_TEMPLATE_INT_BITS:
        raise TemplateBoundExceeded(
            f"an integer of {value.bit_length()} bits (MAX_TEMPLATE_INT_BITS={MAX_TEMPLATE_INT_BITS})"
        )
    if not isinstance(value, (list, tuple, dict, set, frozenset)):
        return 1
    total, pending = 0, [value]
    while pending and total <= MAX_TEMPLATE_VALUE_SIZE:
        item = pending.pop()
        if isinstance(item, dict):
            _charge(len(item))
            total += len(item)
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            _charge(len(item))
            total += len(item)
            pending.extend(item)
        elif isinstance(item, (str, bytes, bytearray, range)):
            total += len(item)
        else:
            total += 1
    return total


def _checked(what: str, value: Any) -> Any:
    size = size_of(value)
    _refuse_size(what, size)
    _charge(size // _CHARS_PER_STEP)  # building it took time in proportion
    return value


def _charge_input(value: Any) -> None:
    """A call reading a long string or list takes time in proportion, whatever it returns."""
    if isinstance(value, (str, bytes, bytearray, list, tuple, dict)):
        _charge(len(value) // _CHARS_PER_STEP)


def _check_int_args(what: str, args: tuple, kwargs: Mapping) -> None:
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_TEMPLATE_VALUE_SIZE:
            raise TemplateBoundExceeded(f"{what} given {arg} (above MAX_TEMPLATE_VALUE_SIZE={MAX_TEMPLATE_VALUE_SIZE})")


def _check_format_spec(spec: str) -> None:
    for number in _NUMBER.findall(spec):
        if len(number) > 7 or int(number) > MAX_TEMPLATE_VALUE_SIZE:
            raise TemplateBoundExceeded(
                f"a format width of {number} (above MAX_TEMPLATE_VALUE_SIZE={MAX_TEMPLATE_VALUE_SIZE})"
            )


def _check_percent(template: Any, args: Any) -> None:
    if isinstance(template, (str, bytes)):
        text = template.decode("latin-1") if isinstance(template, bytes) else template
        for width, precision in _PERCENT_SPEC.findall(text):  # only the conversions' widths, not the text's digits
            _check_format_spec(f"{width} {precision}")
            if "*" in (width, precision):  # a width taken from the arguments
                _check_int_args("'%' formatting", args if isinstance(args, tuple) else (args,), {})


def _estimate_replace(s, old, new, count=-1) -> None:
    if isinstance(s, (str, bytes)) and isinstance(old, type(s)) and isinstance(new, type(s)):
        hits = len(s) + 1 if not old else s.count(old)
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _refuse_size("replace()", len(s) + hits * max(0, len(new) - len(old)))


def _joined_items(separator: Any, items: Any) -> list:
    items = list(items)
    _charge(len(items))
    sep = len(separator) if isinstance(separator, (str, bytes)) else 0
    _refuse_size("join()", sum(size_of(item) for item in items) + sep * max(0, len(items) - 1))
    return items


def _method_call(method: Any, args: tuple, kwargs: dict) -> tuple:
    """Refuse a str/bytes method call whose result would outgrow the bound; returns the arguments
    (join's iterable read once into a list)."""
    target = getattr(method, "__self__", None)
    if not isinstance(target, (str, bytes, bytearray)):
        return args
    name = getattr(method, "__name__", "")
    if name == "replace":
        _estimate_replace(target, *args, **kwargs)
    elif name == "join" and len(args) == 1:
        args = (_joined_items(target, args[0]),)
    elif name == "expandtabs":
        tab = (args or (kwargs.get("tabsize", 8),))[0]
        if isinstance(tab, int):
            _refuse_size("expandtabs()", len(target) + target.count("\t" if isinstance(target, str) else b"\t") * tab)
    elif name == "translate" and args and isinstance(args[0], Mapping):
        longest = max((size_of(v) for v in args[0].values()), default=1)
        _refuse_size("translate()", len(target) * max(1, longest))
    return args


# Filters whose result can outgrow their input many times over, with what they would produce.
def _pre_replace(args, kwargs):
    if len(args) >= 3:
        count = args[3] if len(args) > 3 else kwargs.get("count")
        _estimate_replace(args[0], args[1], args[2], count if isinstance(count, int) else -1)
    return args


def _pre_join(args, kwargs):
    value, *rest = args
    separator = rest[0] if rest else kwargs.get("d", "")
    return (_joined_items(separator, value), *rest)


def _pre_indent(args, kwargs):
    s, *rest = args
    width = rest[0] if rest else kwargs.get("width", 4)
    unit = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    if isinstance(s, str):
        _refuse_size("indent", len(s) + (s.count("\n") + 1) * unit)
    return args


def _pre_wordwrap(args, kwargs):
    s, *rest = args
    width = rest[0] if rest else kwargs.get("width", 79)
    wrap = rest[2] if len(rest) > 2 else kwargs.get("wrapstring") or "\n"
    if isinstance(s, str) and isinstance(width, int) and isinstance(wrap, str):
        _refuse_size("wordwrap", len(s) + len(wrap) * (len(s) // max(width, 1) + 1))
    return args


def _pre_format(args, kwargs):
    _check_percent(args[0], tuple(args[1:]) + tuple(kwargs.values()))
    return args


def _pre_slice(args, kwargs):
    value, *rest = args
    slices = rest[0] if rest else kwargs.get("slices", 1)
    if isinstance(slices, int) and slices > size_of(value) + 1:
        raise TemplateBoundExceeded(f"slice into {slices} parts of a value of {size_of(value)} elements")
    return args


# Filters taking a width or a count: an integer argument above MAX_TEMPLATE_VALUE_SIZE is refused.
_SIZED_FILTERS = frozenset({"center", "indent", "truncate", "wordwrap", "batch", "slice"})

_FILTER_ESTIMATES = {
    "replace": _pre_replace,
    "join": _pre_join,
    "indent": _pre_indent,
    "wordwrap": _pre_wordwrap,
    "format": _pre_format,
    "slice": _pre_slice,
}


def _bounded_filter(name: str, function: Any) -> Any:
    """A built-in filter that charges a step, refuses a result estimated too large before building
    it, and measures the result it returns."""
    pass_arg = jinja2.utils._PassArg.from_obj(function)
    leading = 0 if pass_arg is None else 1  # the context / environment Jinja passes first
    estimate = _FILTER_ESTIMATES.get(name)
    reads_attribute = name == "attr"  # of the value itself, tested by the sandbox: not of its stand-in

    def bounded(*args, **kwargs):
        _charge()
        head, tail = args[:leading], args[leading:]
        if tail and reads_attribute:
            tail = (unwrapped(tail[0]), *tail[1:])
        if tail:
            _charge_input(tail[0])
        if name in _SIZED_FILTERS:
            _check_int_args(f"filter {name!r}", tail[1:], kwargs)
        if estimate is not None and tail:
            tail = estimate(tail, kwargs)
        return printable(_checked(f"filter {name!r}", function(*head, *tail, **kwargs)))

    update_wrapper(bounded, function)
    if pass_arg is not None:
        bounded.jinja_pass_arg = pass_arg
    return bounded


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' ``tojson``: JSON without Jinja's HTML escaping, with json.dumps' options."""
    if isinstance(indent, (int, str)) and not isinstance(indent, bool):
        width = indent if isinstance(indent, int) else len(indent)
        if width > MAX_TEMPLATE_JSON_INDENT:
            raise TemplateBoundExceeded(f"tojson indent of {width} (at most {MAX_TEMPLATE_JSON_INDENT})")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    """The template refuses its input (transformers raises TemplateError)."""
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    """The local time formatted (transformers' ``strftime_now``)."""
    return datetime.now().strftime(format)


class TemplateDict:
    """transformers' ``dict``: builds a dict, and is not the ``dict`` type a template could poke at."""

    def __repr__(self) -> str:
        return "<class 'dict'>"  # as transformers' global (the type itself) prints

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """transformers' ``namespace``: no underscore-prefixed attributes stored on it."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
            )


class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers' assistant-mask marker) renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _bounded_iter(iterable):
    for item in iterable:
        _charge()
        yield item


@jinja2.pass_context
def _loop_iter(context, iterable):
    return _bounded_iter(iterable)


@jinja2.pass_context
def _emit(context, value):
    budget = current_budget.get()
    if budget is not None:
        budget.emit(len(value) if isinstance(value, str) else size_of(value))
    return value


@jinja2.pass_context
def _concatenated(context, value):
    return _checked("'~'", value)


# Keyword arguments Jinja's compiled code adds to every call inside loops and blocks (Context.call drops them).
_JINJA_KWARGS = frozenset({"_loop_vars", "_block_vars"})

# Filters the instrumented tree calls (a template naming them itself only charges its own budget).
_LOOP_FILTER, _EMIT_FILTER, _CONCAT_FILTER = "__onnx_struct_loop__", "__onnx_struct_emit__", "__onnx_struct_concat__"


def _wrapped(node, filter_name: str):
    return jinja2.nodes.Filter(node, filter_name, [], [], None, None, lineno=node.lineno)


class _Instrument(jinja2.visitor.NodeTransformer):
    """Every loop's iterable, printed piece and ``~`` result passes through a filter charging the budget."""

    def visit_For(self, node):
        node = self.generic_visit(node)
        node.iter = _wrapped(node.iter, _LOOP_FILTER)
        return node

    def visit_Output(self, node):
        node = self.generic_visit(node)
        node.nodes = [_wrapped(child, _EMIT_FILTER) for child in node.nodes]
        return node

    def visit_Concat(self, node):
        return _wrapped(self.generic_visit(node), _CONCAT_FILTER)


class _BoundedFormatter:
    def format_field(self, value, format_spec):
        _charge()
        _check_format_spec(format_spec)
        return _checked("str.format()", super().format_field(value, format_spec))


class _Formatter(_BoundedFormatter, SandboxedFormatter):
    pass


class _EscapeFormatter(_BoundedFormatter, SandboxedEscapeFormatter):
    pass


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with every rendering bounded (module docstring)."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
        self.filters["tojson"] = tojson
        self.filters = {name: _bounded_filter(name, function) for name, function in self.filters.items()}
        self.filters[_LOOP_FILTER] = _loop_iter
        self.filters[_EMIT_FILTER] = _emit
        self.filters[_CONCAT_FILTER] = _concatenated
        self.globals.pop("lipsum", None)  # n paragraphs of filler text: unbounded, and no template uses it
        self.globals["raise_exception"] = raise_exception
        self.globals["strftime_now"] = strftime_now
        self.globals["dict"] = TemplateDict()
        self.globals["namespace"] = TemplateNamespace
        self.globals = {name: printable(value) for name, value in self.globals.items()}

    def _parse(self, source, name, filename):
        return _Instrument().visit(super()._parse(source, name, filename))

    def call_binop(self, context, operator, left, right):
        _charge()
        _charge_input(left)
        _charge_input(right)
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes, list, tuple)) and isinstance(times, int):
                    _refuse_size("'*'", size_of(seq) * max(0, times))
            if isinstance(left, int) and isinstance(right, int):
                _check_bits(left.bit_length() + right.bit_length())
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            _check_bits(max(1, left.bit_length() - 1) * right if abs(left) > 1 else 1)
        elif operator == "%":
            _check_percent(left, right)
        return _checked(f"'{operator}'", super().call_binop(context, operator, left, right))

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's signature)
        _charge()
        __obj = unwrapped(__obj)
        if isinstance(__obj, Macro):  # a macro call costs as much as a dozen plain steps
            _charge(_MACRO_STEPS)
        if isinstance(__obj, LoopContext) and args:  # loop(children) in a recursive loop
            args = (_bounded_iter(args[0]), *args[1:])
        elif isinstance(getattr(__obj, "__self__", None), (str, bytes, bytearray, list, tuple, dict)):
            # a method of a built-in value: its integers are widths and counts (center, ljust, zfill, ...)
            _charge_input(__obj.__self__)
            given = {key: value for key, value in kwargs.items() if key not in _JINJA_KWARGS}
            _check_int_args(f"calling {getattr(__obj, '__name__', '?')}", args, given)
            args = _method_call(__obj, args, given)
        return printable(_checked("a call's result", super().call(__context, __obj, *args, **kwargs)))

    def getattr(self, obj, attribute):
        _charge()
        return printable(super().getattr(unwrapped(obj), attribute))

    def getitem(self, obj, argument):
        _charge()
        return printable(super().getitem(unwrapped(obj), argument))

    def unsafe_undefined(self, obj, attribute):
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def wrap_str_format(self, value):
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        target = value.__self__
        formatter = (
            _EscapeFormatter(self, escape=target.escape) if isinstance(target, markupsafe.Markup) else _Formatter(self)
        )
        is_format_map = value.__name__ == "format_map"

        def bounded(*args, **kwargs):
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                args, kwargs = (), args[0]
            return type(target)(formatter.vformat(target, args, kwargs))

        return update_wrapper(bounded, value)


def _check_bits(bits: int) -> None:
    if bits > MAX_TEMPLATE_INT_BITS:
        raise TemplateBoundExceeded(f"an integer of about {bits} bits (MAX_TEMPLATE_INT_BITS={MAX_TEMPLATE_INT_BITS})")
