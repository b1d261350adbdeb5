"""GGUF: the block formats of llama.cpp (blocks.py, iq.py) and GGUF file conversion (conversion.py).

``convert(path)`` reads a .gguf file into an ONNX model; ``decode_metadata(model)`` gives back the
GGUF metadata such a model keeps in its ``metadata_props``.
"""

from onnx_struct.formats.gguf.conversion import convert, decode_metadata

__all__ = ["convert", "decode_metadata"]
