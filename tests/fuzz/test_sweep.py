"""The string sweep (tests/fuzz/sweep.py) over the seeds finds nothing, and finds what it should."""

from __future__ import annotations

import pytest
from adversarial.test_strings import struct_model

from fuzz.cases import Case
from fuzz.generate import build_case
from fuzz.seeds import model_seeds
from fuzz.sweep import sweep, variants
from fuzz.targets import TARGETS
from onnx_struct.schema import utf8


@pytest.mark.slow  # in-process, 1-2.5 s of CPU per target: every string field of every seed
@pytest.mark.parametrize("target", [t for t in TARGETS if t != "from_gguf"])
def test_no_string_field_of_a_seed_escapes(target):
    cases = [build_case(seed) for seed in model_seeds()]
    assert sum(len(list(variants(case.model))) for case in cases) > 500  # the seeds hold strings
    assert sweep(target, cases) == []


def test_the_sweep_finds_what_the_rule_refuses(monkeypatch):
    """Without the UTF-8 rule, the output name of a model-local function at an older opset escaped
    from lower's opset conversion (found by a sweep of a campaign's corpus); the sweep finds it."""
    case = Case(model=struct_model(local_opset=19), value="W")
    assert sweep("lower", [case]) == []
    monkeypatch.setattr(utf8, "check_utf8", lambda *args, **kwargs: None)
    escapes = sweep("lower", [case])  # its name and its output name
    assert escapes and all("functions[0]" in e and "UnicodeDecodeError" in e for e in escapes), escapes
