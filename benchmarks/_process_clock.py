"""Seconds since this process started, the wait a user sees (the interpreter and every import
included), on Linux from ``/proc`` (10 ms resolution); None where there is no ``/proc``. Shared
by both sides of bench_llm.py: it imports nothing but the standard library."""

from __future__ import annotations

import os


def since_process_start() -> float | None:
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks
