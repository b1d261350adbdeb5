"""GGUF files in and out: ``convert(path)`` reads a .gguf file into an ONNX model (from_gguf.py;
with ``graph=True`` it adds the decoder graph of :mod:`onnx_struct.llm.graph`), after
:mod:`onnx_struct.formats.gguf.validate` has bounded every count in its header; ``to_gguf``
writes a model's GGUF-format struct values back to a .gguf file (to_gguf.py);
``decode_metadata(model)`` gives back the GGUF metadata a converted model keeps in its
``metadata_props``.
"""

from onnx_struct.convert.from_gguf import convert
from onnx_struct.formats.gguf.metadata import decode_metadata

__all__ = ["convert", "decode_metadata"]
