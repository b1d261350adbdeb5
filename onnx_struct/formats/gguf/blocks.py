"""GGUF's plain, legacy and K-quant block formats: F32, F16, BF16, Q4_0 ... Q8_0, Q2_K ... Q6_K.

Each format is a table entry: ggml's block struct as a Structure (fields named, ordered and typed
as in ggml, so the declared fields are the bytes ggml writes), a decoder reproducing
``gguf.quants.dequantize`` bit for bit and, where gguf-py has a quantizer, an encoder reproducing
``gguf.quants.quantize`` byte for byte. A tensor of numpy ``shape`` is
``Array(block, prod(shape) / block_size)``. The formats are defined in :mod:`.legacy` and
:mod:`.kquants`; importing this module registers them.

Notes: docs/modules.md.
"""

from __future__ import annotations

from onnx_struct.formats.gguf import kquants, legacy

__all__ = ["kquants", "legacy"]
