"""Helpers the benchmark scripts share: pinning the process to one core, and timing one call.

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
