"""Affine forms of the OCP MX formats whose element values are small integers times a power of two.

FP4 E2M1, FP6 E2M3 and MXINT8 elements times ``2**k`` are int8, and the block scale becomes
``2**(e - 127 - k)``, exact in float32; values match the format's decoding bit for bit except
that a negative zero becomes +0.0. FP8 and FP6 E3M2 need more than 8 bits: no affine form.

Notes: docs/modules.md.
"""

from __future__ import annotations

import numpy as np

from onnx_struct.formats.affine.form import AffineSpec, rule

SIGNED_ZERO = "bit-exact except -0.0 elements give +0.0"

# name -> (k: element value * 2**k is an integer, exactness)
_SHIFTS = {
    "OCP_MXFP4": (1, SIGNED_ZERO),
    "OCP_MXFP6_E2M3": (3, SIGNED_ZERO),
    "OCP_MXINT8": (-6, "bit-exact"),  # the stored int8 is already the code: value = int8 * 2**-6
}


def _mx_rule(name: str, k: int, exactness: str) -> None:
    note = f"element * 2^{k} in int8, scale 2^(e-127-{k})" if k > 0 else "int8 element, scale 2^(e-133)"

    @rule(name, AffineSpec(8, True, 32, False, False, exactness, note))
    def _mx(leaves, n):
        elements = np.asarray(leaves["elements"])
        if k > 0:
            codes = (elements.astype(np.float32) * np.float32(2**k)).astype(np.int8)  # exact integers
            factor = np.float32(2.0**-k)
        else:
            codes, factor = elements.astype(np.int8), np.float32(2.0**k)
        scale = np.asarray(leaves["scale"]).astype(np.float32) * factor  # power of two: exact, NaN stays
        return codes, scale[:, None], None, None


for _name, (_k, _exactness) in _SHIFTS.items():
    _mx_rule(_name, _k, _exactness)
