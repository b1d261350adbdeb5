"""GGUF's plain, legacy and K-quant block formats: F32, F16, BF16, Q4_0 ... Q8_0, Q2_K ... Q6_K.

Each format is a table entry: the ggml block struct as a Structure (fields named and ordered as in
ggml's ``block_q4_0`` etc., each a static tensor of its real ONNX type), plus an ONNX decoder that
reproduces ``gguf.quants.dequantize`` bit for bit, and, where gguf-py has a quantizer, an encoder
reproducing ``gguf.quants.quantize`` byte for byte. Nibble, bit and scale packings are undone in
the decoder, so the declared fields stay the bytes ggml writes (e.g. ``qs: UINT8[16]``: element
``j < 16`` is the low nibble of byte ``j``, element ``j + 16`` its high nibble, which is *not* the
LSB-first element order a ``UINT4[32]`` field would mean).

A tensor of numpy shape ``shape`` (GGUF lists dims innermost first; this is the reverse) is
``Array(block, prod(shape) / block_size)``; blocks run along the flattened tensor, as in gguf-py.
The formats are defined in :mod:`.legacy` and :mod:`.kquants`; importing this module registers them.
"""

from __future__ import annotations

from onnx_struct.formats.gguf import kquants, legacy

__all__ = ["kquants", "legacy"]
