"""Run one hostile input in a child process with hard limits, and report how it ended.

Bounds on time and memory are asserted here, in a subprocess under ``setrlimit`` (CPU seconds and
address space), never with wall clocks in the test process: a hang or a runaway allocation kills
the child, not the suite, and the test fails naming the limit it hit.

The child runs ``code`` with the names ``S`` (onnx_struct), ``np``, ``onnx`` and ``ARG`` (the
``arg`` given, usually a path in tmp_path) bound, then prints one JSON line: the exception class
(or ``None``), the ValidationError's path and message, and the child's peak RSS.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Importing onnx, numpy and onnx_struct costs about 110 MiB of RSS here; bounds are on top of it.
BASELINE_MIB = 300

_CHILD = r"""
import json, resource, sys, traceback
import numpy as np, onnx
import onnx_struct as S
ARG = json.loads(sys.argv[1])
outcome = {"error": None, "path": None, "message": None, "traceback": None, "is_validation_error": False}
try:
    exec(compile(sys.argv[2], "<hostile>", "exec"), {"S": S, "np": np, "onnx": onnx, "ARG": ARG})
except BaseException as error:  # the test decides which ones are acceptable
    outcome["error"] = f"{type(error).__module__}.{type(error).__qualname__}"
    outcome["path"] = getattr(error, "path", None)
    outcome["is_validation_error"] = isinstance(error, S.ValidationError)
    outcome["message"] = str(error)[:2000]
    outcome["traceback"] = traceback.format_exc()[-4000:]
outcome["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("\n@@outcome@@" + json.dumps(outcome))
"""


@dataclasses.dataclass
class Outcome:
    error: str | None  # "onnx_struct.errors.ValidationError", ... or None when nothing was raised
    path: str | None
    message: str | None
    max_rss_mib: float
    returncode: int
    stderr: str
    traceback: str | None = None
    is_validation_error: bool = False  # an instance of onnx_struct.ValidationError (or a subclass)

    def assert_validation_error(self, path_prefix: str = "", *, contains: str = "") -> None:
        """The input was refused with onnx_struct's ValidationError at ``path_prefix``."""
        assert self.error is not None, "the hostile input was accepted"
        assert self.is_validation_error, f"escaped as {self.error}: {self.message}\n{self.traceback}"
        assert (self.path or "").startswith(path_prefix), f"path {self.path!r} does not start with {path_prefix!r}"
        assert contains in (self.message or ""), f"{contains!r} not in {self.message!r}"


def run_bounded(
    code: str, arg=None, *, cpu_seconds: float = 10, memory_mib: int = 1024, cwd: str | os.PathLike | None = None
) -> Outcome:
    """Run ``code`` in a child limited to ``cpu_seconds`` of CPU and ``memory_mib`` MiB of RSS on top
    of :data:`BASELINE_MIB`; fail the calling test if the child is killed or exceeds the memory."""
    limit_bytes = (BASELINE_MIB + memory_mib) << 20
    # Address space is a backstop (onnxruntime reserves virtual memory far beyond what it touches);
    # the assertion below is on the peak resident set the child itself reports.
    address_space = max(limit_bytes * 4, 8 << 30)

    def limits() -> None:
        cpu = int(cpu_seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(arg), textwrap.dedent(code)],
            capture_output=True,
            text=True,
            preexec_fn=limits,
            env=env,
            cwd=cwd,
            timeout=cpu_seconds * 4 + 30,  # a backstop for a child blocked without using CPU
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the child blocked for more than {cpu_seconds * 4 + 30} s") from None
    marker = done.stdout.rfind("@@outcome@@")
    if marker < 0:
        raise AssertionError(
            f"the child died (exit {done.returncode}, limits {cpu_seconds} CPU s / {memory_mib} MiB): "
            f"{done.stderr[-3000:]}"
        )
    data = json.loads(done.stdout[marker + len("@@outcome@@") :])
    outcome = Outcome(returncode=done.returncode, stderr=done.stderr, **data)
    assert outcome.max_rss_mib <= BASELINE_MIB + memory_mib, (
        f"peak RSS {outcome.max_rss_mib:.0f} MiB exceeds {BASELINE_MIB + memory_mib} MiB"
    )
    return outcome
