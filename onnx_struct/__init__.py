"""onnx_struct: structured views over byte buffers for ONNX (StructTypeProto and StructProto).

Declare a block format once, store its bytes verbatim in an ONNX model, check the exact size,
read it through bounds-checked views, and decode it with an ONNX function in onnxruntime.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
from typing import TYPE_CHECKING

from onnx_struct import (
    formats,
    originals,  # noqa: F401 - onnx's entry points, captured before anything can install()
)
from onnx_struct._version import __version__  # noqa: F401 - onnx_struct.__version__
from onnx_struct.errors import LeafNotFoundError, ValidationError

# Imported with the package for what they install on import, before any module can be used: the
# reader every model file is read with (external, into schema.model) and the admission of links
# a model records the identity of (file_identity, into external).
from onnx_struct.payload import external, file_identity  # noqa: F401

if TYPE_CHECKING:
    from onnx_struct.check.checker import check_model, validate
    from onnx_struct.check.hooks import install, uninstall
    from onnx_struct.check.inference import infer_shapes
    from onnx_struct.layout.table import size_in_bits
    from onnx_struct.llm.chat.template import apply_chat_template
    from onnx_struct.llm.generate import generate
    from onnx_struct.llm.tokenizer.tokenizer import load_tokenizer
    from onnx_struct.lowering.lower import lower
    from onnx_struct.passes.quantize import quantize
    from onnx_struct.payload.external_io import load_with_external_data, save_with_external_data
    from onnx_struct.payload.pack import make_struct_value_from_leaves, pack
    from onnx_struct.payload.view import StructView, view, view_buffer
    from onnx_struct.runtime.codec import decode, encode
    from onnx_struct.runtime.session import InferenceSession
    from onnx_struct.schema.builders import (
        make_array,
        make_bit_packing,
        make_component,
        make_constant_field,
        make_field,
        make_map_type_proto,
        make_optional_type_proto,
        make_sequence_type_proto,
        make_struct_type_proto,
        make_struct_value,
        make_struct_value_info,
        make_structure,
        make_tensor_type,
        make_type_reference,
        make_value_info,
    )
    from onnx_struct.schema.model import (  # the proposal's messages, generated from schemas/onnx_struct.proto
        LoadedModel,
        StructProto,
        StructTypeProto,
        add_struct_types,
        add_struct_values,
        add_value_infos,
        from_onnx,
        get_struct_types,
        get_struct_values,
        load_model,
        set_struct_types,
        set_struct_values,
        to_onnx,
    )


def _lazy_names() -> dict[str, str]:
    """Each public name the ``TYPE_CHECKING`` block above imports -> its module. The block is the
    one list (what type checkers and the docs read); at run time a name's module is imported on
    first use, so a process imports what it runs: a cached start of ``generate`` does not import
    the checker, the lowering or quantize (PEP 562)."""
    tree = ast.parse(pathlib.Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body for alias in node.names}


_LAZY: dict[str, str] | None = None


def __getattr__(name: str) -> object:
    global _LAZY  # noqa: PLW0603 - read once, on the first lazy name
    if _LAZY is None:
        _LAZY = _lazy_names()
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _gguf_convert():
    from onnx_struct.convert import convert  # noqa: PLC0415 - gguf-py's converter, loaded on use

    return convert


# The deprecated spellings in formats/ of objects that moved above it (formats.moved).
formats.MOVED["onnx_struct.formats.quantize"] = ("onnx_struct.quantize", lambda: __getattr__("quantize"))
formats.MOVED["onnx_struct.formats.gguf.convert"] = ("onnx_struct.convert.convert", _gguf_convert)


__all__ = [
    # messages
    "StructTypeProto",
    "StructProto",
    # errors
    "ValidationError",
    "LeafNotFoundError",
    # checking and sizes
    "check_model",
    "validate",
    "size_in_bits",
    "install",
    "uninstall",
    # execution (onnxruntime is imported on first use only)
    "decode",
    "encode",
    "lower",
    "infer_shapes",
    "InferenceSession",
    "generate",
    "load_tokenizer",
    "apply_chat_template",
    "quantize",
    # builders
    "make_array",
    "make_bit_packing",
    "make_component",
    "make_constant_field",
    "make_field",
    "make_map_type_proto",
    "make_optional_type_proto",
    "make_sequence_type_proto",
    "make_struct_type_proto",
    "make_struct_value",
    "make_struct_value_info",
    "make_structure",
    "make_tensor_type",
    "make_type_reference",
    "make_value_info",
    # views
    "view",
    "view_buffer",
    "StructView",
    "pack",
    "make_struct_value_from_leaves",
    "save_with_external_data",
    "load_with_external_data",
    # model access
    "add_struct_types",
    "add_struct_values",
    "add_value_infos",
    "get_struct_types",
    "get_struct_values",
    "set_struct_types",
    "set_struct_values",
    "LoadedModel",
    "load_model",
    "from_onnx",
    "to_onnx",
]
