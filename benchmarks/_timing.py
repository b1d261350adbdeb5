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


def interleaved_item_minimum(
    functions: Sequence[Callable[[object], object]], items: Sequence[object], repeat: int = 15
) -> list[float]:
    """For each function, the sum over ``items`` of its minimum time on the item, every call of
    every function on one item made back to back, ``repeat`` rounds over the items: on a machine
    whose speed changes by the second, each function's best time on each item is found in the
    same moments as its peers'. Each round starts with the next function, so that none is always
    the one that finds the item cold in the caches. A call that raises costs its time too (a
    refused model)."""
    best = [[float("inf")] * len(items) for _ in functions]
    order = list(zip(best, functions, strict=True))
    for round_ in range(repeat):
        turn = order[round_ % len(order) :] + order[: round_ % len(order)]
        for k, item in enumerate(items):
            for slot, function in turn:
                start = time.perf_counter()
                try:
                    function(item)
                except Exception:  # noqa: BLE001, S110 - timed like an accepted one
                    pass
                elapsed = time.perf_counter() - start
                if elapsed < slot[k]:
                    slot[k] = elapsed
    return [sum(slot) for slot in best]
