"""Per-call cost of the cost-model functions the planner and engine call most (prints µs per call).

Run: python benchmarks/bench_cost_models.py
Cold = first call for a new shape (ops built, times computed); warm = the same scenario again (caches hit).
"""

from __future__ import annotations

import time

from bench_common import per_call_s

from trainsim.cost_models import activations, compute, memory, model_flops
from trainsim.specs import build_scenario
from trainsim.specs.memo import memo_scope


def main() -> None:
    scn = build_scenario({"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384,
                          "layout": {"tp": 8, "pp": 16, "vpp": 2},
                          "training": {"seq_len": 8192, "global_batch": 2048, "micro_batch": 1,
                                       "schedule": "interleaved", "sequence_parallel": True}})
    print("Llama-3-405B, 16,384 H100, TP8 PP16 VPP2 DP128, 2,048 x 8,192 tokens")
    # Cold: distinct shapes (micro-batch sizes) so nothing is cached.
    cold = []
    for mb in (1, 2, 4, 8):
        s = scn.model_copy(update={"training": scn.training.model_copy(update={"micro_batch": mb})})
        t0 = time.perf_counter()
        compute.layer_times(s)
        cold.append((time.perf_counter() - t0) * 1e6)
    print(f"  layer_times, cold (new shape):     {min(cold):9.1f} us")
    rows = [
        ("layer_times, warm", lambda: compute.layer_times(scn)),
        ("head_times, warm", lambda: compute.head_times(scn)),
        ("layer_activation_bytes, warm", lambda: activations.layer_activation_bytes(scn)),
        ("stage_memory (stage 0)", lambda: memory.stage_memory(scn, 0)),
        ("optimizer_step_time (stage 0)", lambda: compute.optimizer_step_time(scn, 0)),
        ("model_flops_per_step", lambda: model_flops.model_flops_per_step(scn)),
        ("inflight_microbatches", lambda: memory.inflight_microbatches("interleaved", 16, 16, 0, 2)),
    ]
    for name, fn in rows:
        print(f"  {name + ':':34s} {1e6 * per_call_s(fn, 2000, warm=True):9.1f} us")


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        main()
