"""Every input the fuzzer found (tests/fuzz/findings/<target>/<finding>/) replays through its target
in a child process under CPU and memory limits and ends in success or a ValidationError."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

# Every test here starts a child process (tests/support/tiers.py).
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
FINDINGS = sorted(p.parent for p in (HERE / "findings").glob("*/*/case.json"))
CPU_SECONDS = 5  # a fixed target refuses any of these in well under a second
MEMORY_MIB = 1024


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS + 1))
    address_space = max(4 * MEMORY_MIB, 8192) << 20  # onnxruntime reserves far more than it touches
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


@pytest.mark.parametrize("finding", FINDINGS, ids=[f"{p.parent.name}/{p.name}" for p in FINDINGS])
def test_finding_gives_only_validation_errors(finding):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(HERE / "replay.py"), str(finding)],
        capture_output=True,
        text=True,
        preexec_fn=_limits,
        env=env,
        timeout=CPU_SECONDS * 3 + 30,
        stdin=subprocess.DEVNULL,
    )
    marker = done.stdout.rfind("@@replay@@")
    assert marker >= 0, f"the replay died (exit {done.returncode}): {done.stderr[-2000:]}"
    outcome = json.loads(done.stdout[marker + len("@@replay@@") :])
    assert outcome["accepted"], f"escaped: {outcome['error']}"
    assert outcome["max_rss_mib"] <= MEMORY_MIB + 300, f"peak RSS {outcome['max_rss_mib']:.0f} MiB"
