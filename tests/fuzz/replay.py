"""Replay one stored finding through its target; print the outcome as one JSON line.

    python tests/fuzz/replay.py tests/fuzz/findings/<target>/<finding>

Run in a child process (with CPU and memory limits) by test_fuzz_regressions.py, since a finding
may hang or exhaust memory.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [str(HERE.parent), str(HERE.parent.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from fuzz.cases import load_case  # noqa: E402
from fuzz.targets import TARGETS, is_accepted  # noqa: E402


def replay(finding: Path) -> dict:
    with tempfile.TemporaryDirectory() as scratch:  # replay a copy: targets may write next to the model
        root = Path(scratch) / "case"
        shutil.copytree(finding, root)
        target, case, path = load_case(root)
        try:
            TARGETS[target](case, path)
        except Exception as error:  # noqa: BLE001 - the acceptance rule decides
            return {"accepted": is_accepted(error), "error": f"{type(error).__qualname__}: {str(error)[:500]}"}
        return {"accepted": True, "error": None}


if __name__ == "__main__":
    import resource

    outcome = replay(Path(sys.argv[1]))
    outcome["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("@@replay@@" + json.dumps(outcome))
