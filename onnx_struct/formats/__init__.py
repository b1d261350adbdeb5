"""Ready-made declarations for real block formats: ``formats.get("Q4_0")``, ``formats.names()``.

Each family module registers its formats on import, as a table of :class:`FormatSpec` rows given
to :func:`register_formats`; the registry imports them lazily so that
``import onnx_struct`` stays fast.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable

from onnx_struct.formats import base
from onnx_struct.formats.base import _REGISTRY, FORMAT_DOMAIN, BlockFormat, FormatSpec, register, register_formats

FAMILY_MODULES = (
    "onnx_struct.formats.gguf.blocks",
    "onnx_struct.formats.gguf.iq",
    "onnx_struct.formats.gguf.fp4",
    "onnx_struct.formats.mx",
    "onnx_struct.formats.nf4",
    "onnx_struct.formats.linear",
)
_loaded = False


def _load_families() -> None:
    """Import every family module (each registers its formats). A failing import propagates: a
    silently missing family would only show up later as an "unknown format" error."""
    global _loaded
    if not _loaded:
        for module in FAMILY_MODULES:
            importlib.import_module(module)
        _loaded = True


def get(name: str) -> BlockFormat:
    """The format registered as ``name`` (e.g. "Q4_K", "OCP_MXFP6_E2M3", "NF4"); names match
    case-insensitively (``"q4_k"``), as no two registered names differ only in case.

    Args:
        name: the format's name.

    Returns:
        The BlockFormat.

    Raises:
        KeyError: no format of that name; the message lists the known ones.
    """
    _load_families()
    if name in _REGISTRY:
        return _REGISTRY[name]
    folded = {key.casefold(): fmt for key, fmt in _REGISTRY.items()}
    if isinstance(name, str) and name.casefold() in folded:
        return folded[name.casefold()]
    raise KeyError(f"unknown format {name!r}; known: {', '.join(sorted(_REGISTRY))}")


def format_of_decoder(domain: str, name: str) -> BlockFormat | None:
    """The registered format whose decoder FunctionProto is ``domain``/``name``, or None.

    Args:
        domain: the decoder FunctionProto's domain.
        name: its name.

    Returns:
        The format, or None when no registered format has that decoder.

    Raises:
        ValueError: two registered formats share one decoder identity.
    """
    _load_families()
    return base.format_of_decoder(domain, name)


def names() -> list[str]:
    """Every registered format name, sorted. Raises nothing.

    Returns:
        The names, as :func:`get` takes them.
    """
    _load_families()
    return sorted(_REGISTRY)


# Public spellings whose object moved above this layer, kept as deprecated aliases:
# "<module>.<name>" -> (the new spelling, a function returning the object). The facade
# (onnx_struct/__init__.py) fills it in: Python runs it before any module of this package, and
# formats/ may not import the layers the objects moved to.
MOVED: dict[str, tuple[str, Callable[[], object]]] = {}


def moved(module: str, name: str) -> object:
    """The object a deprecated spelling ``module.name`` stands for, with a DeprecationWarning.

    Args:
        module: the module the name is looked up in (``__name__`` of its ``__getattr__``).
        name: the attribute looked up.

    Returns:
        The object under its new spelling (``MOVED``).

    Raises:
        AttributeError: ``module`` has no attribute ``name``, moved or not.
    """
    key = f"{module}.{name}"
    if key not in MOVED:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    spelling, resolve = MOVED[key]
    warnings.warn(f"{key} is deprecated; use {spelling}", DeprecationWarning, stacklevel=3)
    return resolve()


def __getattr__(name: str):
    """``formats.quantize``: the deprecated spelling of :func:`onnx_struct.quantize`."""
    return moved(__name__, name)


__all__ = [
    "BlockFormat",
    "FORMAT_DOMAIN",
    "FormatSpec",
    "format_of_decoder",
    "get",
    "names",
    "register",
    "register_formats",
]
