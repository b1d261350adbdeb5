"""GGUF: the block formats of llama.cpp (blocks.py, iq.py, fp4.py) and how a converted model keeps
a GGUF file's metadata (metadata.py): ``decode_metadata(model)`` gives it back.

Converting a .gguf file is :func:`onnx_struct.convert.convert`; ``formats.gguf.convert`` is its
deprecated spelling.
"""

from onnx_struct import formats
from onnx_struct.formats.gguf.metadata import decode_metadata

__all__ = ["decode_metadata"]


def __getattr__(name: str):
    """``formats.gguf.convert``: deprecated (see :func:`onnx_struct.formats.moved`)."""
    return formats.moved(__name__, name)
