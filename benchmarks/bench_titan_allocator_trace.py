"""Replay torch's own allocation trace of torchtitan's eager Llama 2 7B step (pytorch/torchtitan PR #165: 8 H100,
local batch 8, sequence 2048, FSDP over 8) through the caching allocator, and print what it reserves beyond its
allocated peak on the compute stream, beside what trainsim's memory model and the PR's measurements give.

The trace (trainsim/kernels/alloc_trace.py) is recorded under FakeTensorMode on the CPU: every tensor the step's
ops create, freed when torch drops it -- the recompute working sets, the backward's activation gradients, the
unsharded weight gradients FSDP frees after reducing them, the loss -- for two steps, with Adam's states of the
rank's 1/8 shard created at the first step (torch.optim) or before the first forward. FSDP's side-stream pools
are not in it; the measured compute-stream figure is the PR's reserved minus active peak less the pools trainsim
models (fsdp_stream_pools.py and the sharded gradients' blocks, allocator_reserve.grads_off_peak).

    TRAINSIM_VALIDATION_DIR=../shared/validation python benchmarks/bench_titan_allocator_trace.py [layers]

Takes 8-10 s per configuration on one core at 32 layers (measured here).
"""

from __future__ import annotations

import sys
import time

from trainsim.cost_models import memory
from trainsim.cost_models.caching_allocator import replay
from trainsim.kernels.alloc_trace import titan_step_events
from trainsim.specs.memo import memo_scope
from trainsim.validation.memory_runs import load_memory

GiB = 1 << 30
LLAMA2_7B = {"b": 8, "s": 2048, "h": 4096, "a": 32, "kv": 32, "f": 11008, "vocab": 32000}
ROWS = {"full": ("tt165_fsdp2_ac_resv", "tt165_fsdp2_ac_active"),
        "op_sac": ("tt165_fsdp2_sac_resv", "tt165_fsdp2_sac_active")}


def model_and_measured(resv: str, active: str) -> tuple[float, float]:
    """trainsim's compute-stream cached bytes at the reserved peak (the loss stage's, allocator_reserve.py) and the
    PR's reserved minus active peak less the side-stream bytes trainsim models, GiB."""
    cases = {c.row_id: c for c in load_memory().cases}
    scn = cases[resv].scenario
    sm = memory.stage_memory(scn, 0)
    side = sm.grads_off_peak + sm.stream_pools
    return (sm.allocator_cached - side) / GiB, cases[resv].published - cases[active].published - side / GiB


def main(layers: int) -> None:
    print(f"torchtitan Llama 2 7B, {layers} layers, FSDP shard 8 (GiB; gap = reserved peak - allocated peak)")
    for recompute, rows in ROWS.items():
        got = {}
        for lazy in (True, False):
            t0 = time.perf_counter()
            events = titan_step_events(layers=layers, recompute=recompute, shard=8, lazy_states=lazy, **LLAMA2_7B)
            r = replay([e for e in events if e[0] != "mark"])
            got[lazy] = (r.peak_reserved - r.peak_allocated) / GiB
            print(f"  {recompute:6s} states {'lazy' if lazy else 'upfront':7s}: allocated {r.peak_allocated / GiB:6.2f}"
                  f"  reserved {r.peak_reserved / GiB:6.2f}  gap {got[lazy]:5.2f}"
                  f"  ({len(events)} events, {time.perf_counter() - t0:.0f} s)")
        modelled, measured = model_and_measured(*rows)
        print(f"  {recompute:6s} compute-stream gap: trace {got[True]:.2f}, trainsim {modelled:.2f}, "
              f"PR #165 FSDP2 {measured:.2f}")


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 32)
