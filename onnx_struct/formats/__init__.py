"""Ready-made declarations for real block formats: ``formats.get("Q4_0")``, ``formats.names()``.

Each family module registers its formats on import, as a table of :class:`FormatSpec` rows given
to :func:`register_formats`; the registry imports them lazily so that
``import onnx_struct`` stays fast.
"""

from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    """``formats.quantize``: the public spelling of :func:`onnx_struct.passes.quantize.quantize`.

    The pass sits above this layer (it encodes through the runtime), so the name is resolved on
    first use instead of imported here; the layering test allows exactly this one upward edge.
    """
    if name == "quantize":
        from onnx_struct.passes.quantize import quantize  # noqa: PLC0415 - the public alias, see above

        return quantize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BlockFormat",
    "FORMAT_DOMAIN",
    "FormatSpec",
    "format_of_decoder",
    "get",
    "names",
    "quantize",
    "register",
    "register_formats",
]
