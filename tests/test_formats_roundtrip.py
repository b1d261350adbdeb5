"""Every registered format, one round trip each, through support.roundtrip.common: declared size
against the oracle's block bytes, the view, decode against the oracle's dequantizer and (where the
format has an encoder) encode against the oracle's quantizer, bit for bit."""

from __future__ import annotations

import pytest
from support.roundtrip import common, random_payload, sample_input

from onnx_struct import formats

pytest.importorskip("gguf")  # the GGUF family's oracle

# Encoders whose oracle is llama.cpp, not gguf-py (which has no K-quant quantizer): their bytes
# are checked against llama.cpp's golden blocks in test_formats_kquants_encode.py.
LLAMA_CPP_ENCODERS = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


@pytest.mark.parametrize("name", formats.names())
def test_round_trip_against_the_oracle(name):
    shape, x = sample_input(name, seed=1)
    if formats.get(name).encoder is not None and name not in LLAMA_CPP_ENCODERS:
        common(name, shape, x=x)  # encode(x) == oracle bytes; decode(those bytes) == oracle values
    else:
        common(name, shape, payload=random_payload(name, shape, seed=2))


def test_every_family_has_an_oracle():
    from support.roundtrip import oracle

    assert {formats.get(name).family for name in formats.names()} == {"gguf", "mx", "nf4", "linear"}
    for name in formats.names():
        assert oracle(name) is not None
