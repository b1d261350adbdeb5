"""The short fuzz run CI does: every target for a fixed number of inputs from a fixed seed; any
escape, hang (10 s per input), memory blow-up (2 GiB RSS) or crash fails the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

pytest.importorskip("atheris")

HERE = Path(__file__).resolve().parent
RUNS = 300  # per target: about 25 s for all seven on one core


def test_short_fuzz_run_finds_nothing(tmp_path):
    summary = tmp_path / "reports" / "summary.json"  # a directory fuzz.py must make
    command = [sys.executable, str(HERE / "fuzz.py"), "--target", "all", "--runs", str(RUNS), "--seed", "1"]
    command += ["--findings", str(tmp_path / "findings"), "--json", str(summary), "--max-restarts", "0", "--quiet"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert summary.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(summary.read_text())
    assert [r["target"] for r in results] == [
        "check_model",
        "validate",
        "view",
        "decode",
        "lower",
        "infer_shapes",
        "from_gguf",
    ]
    for result in results:
        assert result["inputs"] >= RUNS or result["findings"], result
        assert result["cov"] > 0, result
    findings = {r["target"]: r["findings"] for r in results if r["findings"]}
    assert not findings, f"the fuzzer found {findings}\n{done.stdout[-3000:]}"
