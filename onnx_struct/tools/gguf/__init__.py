"""GGUF files: ``convert(path)`` reads a .gguf file into an ONNX model (conversion.py), after
validate.py has bounded every count in its header; ``decode_metadata(model)`` gives back the GGUF
metadata such a model keeps in its ``metadata_props``.
"""

from onnx_struct.formats.gguf.metadata import decode_metadata
from onnx_struct.tools.gguf.conversion import convert

__all__ = ["convert", "decode_metadata"]
