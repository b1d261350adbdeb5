"""Golden checks of the independent bit-level oracle in support/view_oracle.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from support.view_oracle import oracle_arrays


# ---------------------------------------------------------------------- the oracle's own goldens
def test_oracle_components_golden():
    from onnx_struct import make_bit_packing

    # a:3 = 5 (0b101) in bits 0-2, b:5 = 17 (0b10001) in bits 3-7: 0b10001_101 = 0x8D
    got = oracle_arrays(make_bit_packing([("a", 3), ("b", 5)], 1), bytes([0x8D]))
    assert got["a"].tolist() == [5] and got["b"].tolist() == [17]


def test_oracle_int4_two_complement_golden():
    from onnx_struct import make_array

    got = oracle_arrays(make_array(T.INT4, 4), bytes([0xF7, 0x80]))
    assert got[""].astype(np.int8).tolist() == [7, -1, 0, -8]
