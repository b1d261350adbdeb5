"""GGUF: the block formats of llama.cpp (blocks.py, iq.py) and GGUF file conversion (convert.py)."""

from onnx_struct.formats.gguf.convert import convert

__all__ = ["convert"]
