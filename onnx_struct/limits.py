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

# Digits of an external_data offset/length: uint64 has at most 20 decimal digits. Longer text is
# refused before int() (Python's own limit of 4300 digits raises ValueError; below it int() of
# long text costs quadratic time).
MAX_EXTERNAL_DIGITS = 20
