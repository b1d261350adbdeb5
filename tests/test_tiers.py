"""The test tiers (tests/support/tiers.py): the default run leaves ``slow`` out, CI runs both
tiers, and an unmarked test that starts a child process fails instead of slowing the default run."""

from __future__ import annotations

import multiprocessing
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.tiers import no_child_processes

ROOT = Path(__file__).resolve().parent.parent
PYTEST = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_the_default_run_deselects_the_registered_slow_marker():
    assert any(marker.startswith("slow:") for marker in PYTEST["markers"])
    options = shlex.split(PYTEST["addopts"])
    assert options[options.index("-m") + 1] == "not slow"


def test_ci_runs_the_readme_command_then_the_slow_tier_on_every_core():
    commands = [line.split() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("run_")]
    assert ["run_pytest"] in commands  # the README's command as it stands: the fast tier
    assert ["run_pytest", "-m", "slow", "-n", "auto"] in commands
    readme = (ROOT / "README.md").read_text()
    assert "python -m pytest -q -m slow -n auto" in readme


def _fork_and_wait() -> None:
    if os.fork() == 0:  # only reached if the guard let the fork through
        os._exit(0)


SPAWNS = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"]),
    "os.system": lambda: os.system("true"),
    "os.fork": _fork_and_wait,
    "multiprocessing spawn": lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
}


@pytest.mark.parametrize("spawn", SPAWNS.values(), ids=SPAWNS)
def test_an_unmarked_test_that_starts_a_child_fails_before_it_starts(spawn):
    # The guard refuses before the process exists: this test (unmarked) starts none either.
    with pytest.raises(pytest.fail.Exception, match="t1 started a child process .* but is not marked slow"):
        with no_child_processes("t1"):
            spawn()


def test_a_refusal_the_test_catches_still_fails_it():
    with pytest.raises(pytest.fail.Exception, match="t2 started a child process"):
        with no_child_processes("t2"):
            try:
                subprocess.run(["true"])
            except BaseException:  # what a test with a broad except around its CLI call would do
                pass


def test_the_guard_leaves_process_creation_as_it_found_it():
    before = subprocess.Popen._execute_child, os.fork, os.system
    with no_child_processes("t3"):
        assert os.fork is not before[1]
    assert (subprocess.Popen._execute_child, os.fork, os.system) == before


@pytest.mark.slow
def test_a_slow_test_may_start_a_child():
    result = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
    assert result.stdout == "42\n"
