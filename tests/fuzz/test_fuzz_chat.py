"""Chat template rendering's structured fuzz target (tests/fuzz/targets_chat.py): a short fixed-seed
run in the default tier (random conversations through the built-ins and llama.cpp's real templates,
random and mutated template texts give only ValidationError, in bounded time, an accepted rendering
within MAX_TEMPLATE_OUTPUT_CHARS and the same twice), and a longer run in a child process under
CPU and memory limits (slow tier)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("jinja2")

from adversarial.bounded import run_bounded  # noqa: E402

import onnx_struct as S
from fuzz.targets_chat import campaign  # noqa: E402


def test_a_short_campaign_finds_no_escape():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # Python compiling Jinja's code for `1[0]`
        accepted, escapes, slow = campaign(60, seed=5)
    assert escapes == [] and slow == []
    assert 5 < accepted < 60  # the inputs reach both the refusals and accepted renderings


@pytest.mark.slow
def test_a_campaign_stays_within_memory_and_cpu_bounds():
    # 3,000 inputs, among them 4-million-character contents and templates multiplying strings
    # and lists up to MAX_TEMPLATE_VALUE_SIZE: the child's peak RSS stays under 300 + 512 MiB.
    code = """
import sys, warnings
sys.path.insert(0, ARG)
warnings.simplefilter("ignore", SyntaxWarning)
from fuzz.targets_chat import campaign
accepted, escapes, slow = campaign(3000, seed=11)
assert escapes == [] and slow == [], (escapes[:3], slow[:3])
"""
    from adversarial.bounded import REPO

    outcome = run_bounded(code, str(REPO / "tests"), cpu_seconds=120, memory_mib=512)
    assert outcome.error is None, f"{outcome.error}: {outcome.message}\n{outcome.traceback}"


FINDINGS = sorted((Path(__file__).resolve().parent / "findings" / "chat").glob("*.json"))


def _built(value, nest: dict):
    """The finding's value with "@nest" replaced by the value its "nest" entry describes."""
    if value == "@nest":
        if nest.get("cyclic") and nest.get("dict"):
            made = {}
            made["a"] = made
            return made
        if nest.get("cyclic"):
            made = []
            made.append(made)
            return made
        outer = current = []
        for _ in range(nest["depth"]):
            current.append([])
            current = current[0]
        return outer
    if isinstance(value, list):
        return [_built(item, nest) for item in value]
    if isinstance(value, dict):
        return {key: _built(item, nest) for key, item in value.items()}
    return value


@pytest.mark.parametrize("finding", FINDINGS, ids=[p.stem for p in FINDINGS])
def test_finding_gives_only_validation_error(finding):
    case = json.loads(finding.read_text())
    nest = case.get("nest", {})
    kwargs = {key: value for key, value in _built(case.get("extra", {}), nest).items()}
    with pytest.raises(S.ValidationError):
        S.apply_chat_template(
            {"tokenizer.ggml.tokens": ["<s>", "</s>"], "tokenizer.ggml.bos_token_id": 0},
            _built(case["messages"], nest),
            chat_template=case["chat_template"],
            tools=_built(case.get("tools"), nest),
            **kwargs,
        )
