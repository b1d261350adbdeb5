"""The test tiers' rule: a test that starts a child process is marked ``slow``.

``python -m pytest -q`` (the README's command) runs the fast tier: pyproject's ``addopts`` deselect
``slow``. What makes a test slow here is an interpreter started for it (a bounded hostile case, a
CLI run, a benchmark script, the fuzzer, the docs build): about a second each, where the in-process
tests take milliseconds. :func:`no_child_processes` holds the fast tier to that rule (the conftest
wraps every unmarked test's setup, call and teardown in it), so a new test that spawns and is not
marked fails at once instead of slowing the default run down.
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Iterator

import pytest

# Every way the standard library starts a process: subprocess (Popen, run, check_output, os.popen,
# asyncio) goes through Popen._execute_child; multiprocessing's spawn and forkserver through
# _posixsubprocess.fork_exec, its fork start method through os.fork; os.system, os.posix_spawn*
# and pty through os itself.
SPAWNERS = [
    (subprocess.Popen, "_execute_child"),
    (_posixsubprocess, "fork_exec"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
]


@contextlib.contextmanager
def no_child_processes(test_id: str) -> Iterator[None]:
    """Fail ``test_id`` as soon as it starts a child process (and again on leaving, in case the
    test caught the first failure): such a test belongs to the slow tier."""
    started: list[str] = []

    def refusing(name: str):
        def spawn(*args, **kwargs):
            started.append(name)
            pytest.fail(
                f"{test_id} started a child process ({name}) but is not marked slow: mark it "
                "@pytest.mark.slow (or the module with pytestmark = pytest.mark.slow); see tests/support/tiers.py",
                pytrace=False,
            )

        return spawn

    with pytest.MonkeyPatch.context() as patch:
        for owner, name in SPAWNERS:
            if hasattr(owner, name):
                patch.setattr(owner, name, refusing(f"{getattr(owner, '__name__', owner)}.{name}"))
        yield
    if started:
        pytest.fail(f"{test_id} started a child process ({started[0]}) but is not marked slow", pytrace=False)
