"""Test inputs shared by several suites: random payload bytes and the bit-phase grid."""

from __future__ import annotations

import numpy as np

from onnx_struct import make_bit_packing, make_field, make_structure, make_tensor_type, make_type_reference
from support.view_oracle import ORACLE_WIDTHS

# One stream for the whole session (test_view and test_pack draw from it), seeded for replay.
RNG = np.random.default_rng(1234)


def random_bytes(n: int) -> bytes:
    return RNG.integers(0, 256, n, dtype=np.uint8).tobytes()


def phase_cases(elem_type: int):
    """(declarations, root, random payload) for ``elem_type`` at every bit phase 0-7, as a scalar,
    a vector and a matrix: the grid the view and pack suites both walk."""
    for phase in range(8):
        for shape in ([], [3], [2, 5]):
            types, root = padded(elem_type, shape, phase)
            size = (phase + ORACLE_WIDTHS[elem_type] * int(np.prod(shape, dtype=np.int64)) + 7) // 8
            yield shape, types, root, random_bytes(size)


def padded(elem_type: int, shape, phase: int):
    """(struct_types, root): ``phase`` pad bits, the tensor field ``x``, trailing pad to a byte."""
    width = ORACLE_WIDTHS[elem_type] * int(np.prod(shape, dtype=np.int64))
    tail = -(phase + width) % 8
    types, fields = [], []
    if phase:
        types.append(make_bit_packing([("bits", phase)], 1))
        fields.append(make_field("lead", make_type_reference(len(types) - 1)))
    fields.append(make_field("x", make_tensor_type(elem_type, shape)))
    if tail:
        types.append(make_bit_packing([("bits", tail)], 1))
        fields.append(make_field("trail", make_type_reference(len(types) - 1)))
    return types, make_structure(fields)
