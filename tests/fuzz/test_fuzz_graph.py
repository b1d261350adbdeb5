"""The decoder graph's structured fuzz target (tests/fuzz/targets_graph.py), a short fixed-seed
run in the default tier: mutated family metadata and tensor tables give only ValidationError or a
plan onnxruntime computes as llama.cpp does. Its findings are regression cases in
tests/adversarial/test_family_metadata.py."""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")

from fuzz.targets_graph import campaign  # noqa: E402


def test_a_short_campaign_finds_no_escape():
    accepted, escapes = campaign(3000, seed=1)
    assert escapes == []
    assert 100 < accepted < 3000  # the mutations reach both the refusals and accepted plans
