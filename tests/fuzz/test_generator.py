"""The structure-aware generator turns any bytes into a case: a generator exception makes
libFuzzer report the worker as crashed and stops the campaign (seen: a varint field taken for a
length-delimited one in the field-level mutation, IndexError)."""

from __future__ import annotations

import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.generate import build_case

# The input that stopped a campaign (libFuzzer's base64 of it).
FOUND = "CEBBQv4wMDAwMDAwMDAwMDAwMDAwMDAwMDAwMAAAmpqampqampqampqampqampqampqampqampqampqampqampqampqampqa"
FOUND += "JJoAAE1OT1BRUlNUVf//////WVpbXF2AgYL//////////w=="


def test_the_input_that_stopped_a_campaign_builds():
    case = build_case(base64.b64decode(FOUND))
    assert case.model  # a model (mutated), not an exception


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=600))
def test_any_bytes_build_a_case(data):
    case = build_case(data)
    assert isinstance(case.model, bytes)
