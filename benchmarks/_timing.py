"""Timing helpers shared by the benchmarks: minimum times, robust on a busy 2-core machine."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def best_of(function: Callable[[], object], repeat: int = 5, *, warmup: bool = True) -> float:
    """Minimum wall time of ``function`` over ``repeat`` runs (after one untimed warm-up run,
    which builds cached sessions and faults pages in)."""
    if warmup:
        function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def interleaved_minimum(functions: Sequence[Callable[[], object]], repeat: int = 25) -> list[float]:
    """Minimum time of each function over ``repeat`` interleaved rounds, so that a load spike
    hits ours and the peer's alike."""
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(repeat):
        for slot, function in zip(times, functions, strict=True):
            start = time.perf_counter()
            function()
            slot.append(time.perf_counter() - start)
    return [min(slot) for slot in times]
