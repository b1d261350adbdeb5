"""Every limit that protects onnx_struct from hostile or oversized input, in one place.

Each number bounds time or memory that a model's author could otherwise make us spend: nothing is
allocated, enumerated or run from a count a model states until the count is checked here (or
against bytes that really exist). ``docs/security.md`` gives the reason for each one; a limit
changed here is changed there.
"""

from __future__ import annotations

# The protobuf wire limit: a serialized message (so a model without external data) is < 2 GiB.
PROTOBUF_LIMIT = 2**31 - 1

# Leaves of one concrete root (tensor fields, components, constants; not elements). Only reachable
# beyond a few hundred through reference fan-out, which would otherwise be enumerated exponentially.
MAX_LEAVES = 100_000

# Widest bit-packing component (the widest fixed-width ONNX scalar is 64 bits).
MAX_COMPONENT_BITS = 64

# GGUF input (checked by onnx_struct.formats.gguf.validate before gguf-py's GGUFReader runs).
# Tensors per GGUF file: real models hold about 300 to 1,200 (DeepSeek-V3: ~1,100); gguf-py
# spends Python objects per tensor, and each becomes a struct value.
MAX_GGUF_TENSORS = 65_536
# Dimensions per GGUF tensor: ggml's GGML_MAX_DIMS.
MAX_GGUF_DIMS = 4
# Nesting of GGUF metadata arrays: llama.cpp reads no nested arrays at all, and gguf-py recurses
# once per level (5,000 levels exhaust Python's stack).
MAX_GGUF_ARRAY_DEPTH = 4
# Metadata values of one GGUF file (key-value pairs plus array elements at every depth): gguf-py
# builds one numpy array per element (about 1 KB and 10-25 us each). Real tokenizers hold up to
# about 800,000 (Gemma 3: 3 x 262,144; Llama 3: 537,000).
MAX_GGUF_METADATA_ITEMS = 2**21
