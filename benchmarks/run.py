"""Run every benchmark (benchmarks/bench_*.py) and print their markdown tables.

    python benchmarks/run.py            # all
    python benchmarks/run.py view check # those whose name contains a word

Each script runs in its own process (peak-memory figures stay honest) and reports ratios against
peers measured in the same run; nothing here asserts a time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(words: list[str]) -> int:
    scripts = sorted(p for p in HERE.glob("bench_*.py") if not words or any(w in p.stem for w in words))
    failed = []
    for script in scripts:
        print(f"\n## {script.stem}\n", flush=True)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(script)], cwd=HERE.parent)
        print(f"\n({script.name}: {time.perf_counter() - start:.1f} s)", flush=True)
        if result.returncode:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
