"""The tokenizers' structured fuzz target (tests/fuzz/targets_tokenizer.py), a short fixed-seed run
in the default tier over the test vocabularies (llama.cpp's vocab files only in the campaign):
random texts and id lists give only ValidationError, in-range ids, deterministic encodes and exact
round trips where the vocabulary represents any text; and the committed corpus of inputs the
campaign flagged (tests/fuzz/findings/tokenizer/*.json) replays within its bound."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fuzz.targets_tokenizer import BUDGET_SECONDS, campaign, cases, fuzz_one

FINDINGS = sorted((Path(__file__).parent / "findings" / "tokenizer").glob("*.json"))


@pytest.fixture(scope="module")
def tiny_cases():
    return {c.name: c for c in cases(real=False)}


def test_a_short_campaign_finds_no_escape(tiny_cases):
    accepted, escapes, per_case = campaign(300, seed=1, corpus=list(tiny_cases.values()))
    assert escapes == []
    assert 600 < accepted < 1200  # both encodes and both decodes: refusals (bad ids) and accepted calls
    assert sum(1 for n in per_case.values() if n) > 40  # the mix reaches most vocabularies


@pytest.mark.parametrize("finding", FINDINGS, ids=[p.stem for p in FINDINGS])
def test_a_committed_finding_replays_cleanly(finding, tiny_cases):
    case = json.loads(finding.read_text(encoding="utf-8"))
    unit, count = case.get("text_repeat", ("", 0))
    text = case.get("text_prefix", "") + unit * count + case.get("text", "")
    start = time.perf_counter()
    fuzz_one(tiny_cases[case["vocabulary"]], text, case["ids_seed"])
    assert time.perf_counter() - start < 4 * BUDGET_SECONDS  # the whole input with its checks
