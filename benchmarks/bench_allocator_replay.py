"""Print what the first-step caching-allocator replay (trainsim/cost_models/first_step_fragmentation.py) adds
to the reserved counter of each Megatron row of the memory dataset, and how long the replays take.

    TRAINSIM_VALIDATION_DIR=../shared/validation python benchmarks/bench_allocator_replay.py
"""

from __future__ import annotations

import time

from trainsim.cost_models import memory
from trainsim.cost_models.first_step_fragmentation import _extra_reserved
from trainsim.specs.memo import active_memo, memo_scope
from trainsim.validation.memory_runs import load_memory

GiB = 1 << 30


def main() -> None:
    cases = [c for c in load_memory().cases if c.scenario is not None]
    total = 0.0
    for c in cases:
        scn = c.scenario
        for s in sorted({0, scn.layout.pp - 1}):
            sm = memory.stage_memory(scn, s)
            t0 = time.perf_counter()
            _, extra, _ = memory.reserved_cached(scn, s, sm)
            dt = time.perf_counter() - t0
            total += dt
            if extra:
                print(f"{c.row_id:36s} stage {s:2d}: +{extra / GiB:6.2f} GiB reserved  ({dt * 1e3:7.1f} ms)")
    print(f"replays: {active_memo().size(_extra_reserved.memo_name)} distinct traces, {total:.2f} s in all")


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        main()
