"""Helpers the benchmark scripts share: pinning the process to one core, timing one call, and the per-call time
of a repeated call.

Imported by the scripts beside it (``python benchmarks/bench_*.py`` puts this folder on ``sys.path``).
"""

from __future__ import annotations

import os
import time


def one_core() -> None:
    """Pin this process to its lowest allowed core, so that figures measure one core (where the OS allows it)."""
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass


def timed(fn) -> tuple[float, object]:
    """(wall seconds of ``fn()``, its result)."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def per_call_s(fn, n: int = 1, rounds: int = 1, warm: bool = False) -> float:
    """Seconds per call of ``fn``: the fastest of ``rounds`` rounds of ``n`` calls (the round least disturbed by
    other load on a shared host), after one untimed call where ``warm`` (caches filled, nothing built on first use)."""
    if warm:
        fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / n
