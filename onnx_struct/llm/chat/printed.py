"""Values a chat template sees with their memory address left out of their text.

Python prints a function, a method, a generator and any object without a ``__repr__`` of its own
with its address (``<generator object sync_do_map at 0x7f...>``). Printed by a template (``{{
messages|select }}``, ``{{ 'x'.upper }}``, ``|string``, ``~``, ``%``, ``format``, ``pprint``,
inside a list), that address makes the prompt differ from one rendering to the next and discloses a
heap address. So every such value a template can reach (what a filter, a call, an attribute or item
lookup returns, and the environment's globals) reaches it as a :class:`Printed` stand-in: its text is
the value's own with `` at 0x...`` removed; it iterates, calls and compares like the value. The
environment hands the value itself, never the stand-in, to the sandbox's checks: attribute and item
lookups and calls unwrap it first (sandbox.BoundedEnvironment), so every bound still applies.
"""

from __future__ import annotations

import re
import types
from typing import Any

from jinja2.exceptions import SecurityError

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# Values whose text never holds an address of their own (their elements are stand-ins already).
_PLAIN = (str, int, float, complex, bool, type(None), list, tuple, dict, set, frozenset, bytes, range, type)
# Python's own reprs that print the object's address.
_ADDRESSED = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
)


class Printed:
    """A value printed without its address; ``==`` and ``hash`` are the value's."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def __str__(self) -> str:
        return _ADDRESS.sub("", str(self._value))

    def __repr__(self) -> str:
        return _ADDRESS.sub("", repr(self._value))

    def __eq__(self, other: Any) -> bool:
        return self._value == unwrapped(other)

    def __hash__(self) -> int:
        return hash(self._value)


class PrintedIterable(Printed):
    """An iterable object: iterating the stand-in iterates the value."""

    __slots__ = ()

    def __iter__(self):
        return iter(self._value)


class PrintedIterator(PrintedIterable):
    """A lazy filter's result (a generator, ``map``, ``reversed``, ...)."""

    __slots__ = ()

    def __next__(self):
        return next(self._value)


class PrintedCallable(Printed):
    """A function or method. Templates call it through the environment (which unwraps it); a call
    from anywhere else applies the sandbox's own test of a callable first."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self._value
        if getattr(value, "unsafe_callable", False) or getattr(value, "alters_data", False):
            raise SecurityError(f"{self!r} is not safely callable")
        return value(*args, **kwargs)


_KEPT = (*_PLAIN, Printed)  # returned as they are


def printable(value: Any) -> Any:
    """``value``, or its stand-in when Python would print it with its address."""
    if isinstance(value, _KEPT):
        return value
    if not isinstance(value, _ADDRESSED) and type(value).__repr__ is not object.__repr__:
        return value
    if callable(value):
        return PrintedCallable(value)
    if hasattr(type(value), "__next__"):
        return PrintedIterator(value)
    if hasattr(type(value), "__iter__"):
        return PrintedIterable(value)
    return Printed(value)


def unwrapped(value: Any) -> Any:
    """The value a stand-in stands for (anything else as it is)."""
    return value._value if isinstance(value, Printed) else value
