"""Engine speed and memory: Llama-3-405B on 16,384 H100 (TP8 PP16 DP128, interleaved), DP scaling, fast path.

Run: python benchmarks/bench_engine.py            (pins itself to one core; prints figures, asserts nothing)

Targets (issue 4): the 405B step simulates in <= 0.3 s and <= 300 MB on one core; the same layout at
DP=128 costs at most 1.5x its DP=1 simulation (same micro-batches per pipeline).
Each figure is the median of REPEATS runs; "engine" is simulate() alone, "predict" (its engine-run memo cleared
each time, fold.clear_cache) adds building the cost
table from the cost models (cached after the first call, as in a planner sweep), "cold" is a first call.
Memory is measured in a fresh subprocess: peak RSS (ru_maxrss) of the whole Python process, and the peak
of Python allocations during predict() (tracemalloc).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from bench_common import one_core, timed

REPEATS = 5


def scenario(dp: int, vpp: int):
    from trainsim.specs import build_scenario
    gpus = 8 * 16 * dp
    return build_scenario({
        "model": "llama3-405b", "cluster": "dgx-h100", "gpus": gpus,
        "layout": {"tp": 8, "pp": 16, "vpp": vpp},
        "training": {"seq_len": 8192, "global_batch": 16 * dp, "micro_batch": 1, "schedule": "interleaved",
                     "sequence_parallel": True, "distributed_optimizer": True},
    }, {})


def med_min(xs) -> str:
    xs = list(xs)
    return f"{statistics.median(xs) * 1e3:7.1f} ms (min {min(xs) * 1e3:.1f})"


def memory_probe(vpp: int) -> dict:
    """Fresh process: RSS and tracemalloc peak of one 405B predict()."""
    code = f"""
import json, resource, tracemalloc, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import bench_engine as b
b.one_core()
from trainsim.specs.memo import memo_scope
from trainsim.simulator.predict import predict
sc = b.scenario(128, {vpp})
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
p = predict(sc)
cur, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"rss_before_MB": rss0 / 1024, "rss_peak_MB": rss1 / 1024, "tracemalloc_peak_MB": peak / 2**20}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    one_core()
    from trainsim.simulator import analytic, fold
    from trainsim.simulator.builder import build_cost_table
    from trainsim.simulator.engine import simulate
    from trainsim.simulator.predict import predict

    print("Llama-3-405B, 16,384 x H100 (dgx-h100), TP8 PP16 DP128, interleaved, 2,048 x 8,192 tokens, mbs 1")
    print(f"(126 layers on 16 stages: first/last virtual stage one layer fewer; one core; median of {REPEATS})\n")
    for vpp in (2, 4, 8):
        sc = scenario(128, vpp)
        cold, pred = timed(lambda sc=sc: predict(sc))
        table = build_cost_table(sc)
        eng = [timed(lambda table=table: simulate(table))[0] for _ in range(REPEATS)]
        res = simulate(table)
        full = [(fold.clear_cache(), timed(lambda sc=sc: predict(sc))[0])[1] for _ in range(REPEATS)]
        fast = [timed(lambda table=table: analytic.estimate(table))[0] for _ in range(REPEATS)]
        mem = memory_probe(vpp)
        print(f"vpp={vpp}: step {pred.step_time_s:.3f} s, MFU {pred.mfu:.1%}, bubble {pred.bubble_fraction:.1%}, "
              f"m={sc.num_microbatches}")
        print(f"  engine   {med_min(eng)}   {res.events:,} events "
              f"({res.events / min(eng) / 1e6:.2f} M events/s at the min)")
        print(f"  predict  {med_min(full)}   (cold first call {cold * 1e3:.1f} ms)")
        print(f"  --fast   {statistics.median(fast) * 1e6:8.1f} us   closed form on the cost table")
        print(f"  memory   peak RSS {mem['rss_peak_MB']:.0f} MB (interpreter + imports {mem['rss_before_MB']:.0f} MB), "
              f"tracemalloc peak during predict {mem['tracemalloc_peak_MB']:.1f} MB")

    print("\nDP scaling (same micro-batches per pipeline, m=16, vpp=4): engine cost does not grow with DP")
    walls, evs = {}, {}
    for dp in (1, 8, 128):
        sc = scenario(dp, 4)
        table = build_cost_table(sc)
        ts = [timed(lambda table=table: simulate(table))[0] for _ in range(REPEATS)]
        walls[dp] = min(ts)
        evs[dp] = simulate(table).events
        print(f"  DP={dp:4d} ({sc.num_gpus:6,d} GPUs): engine {med_min(ts)}, {evs[dp]:,} events")
    print(f"  ratio DP=128 / DP=1: {walls[128] / walls[1]:.2f}x wall (min), {evs[128] / evs[1]:.2f}x events")

    print("\nClosed form for the planner (predict(fast=True), cost table cached vs rebuilt):")
    sc = scenario(128, 4)
    warm = statistics.median(timed(lambda sc=sc: predict(sc, fast=True))[0] for _ in range(REPEATS))
    from trainsim.simulator import builder
    rebuilt = statistics.median(
        (builder.clear_cache(), timed(lambda sc=sc: predict(sc, fast=True))[0])[1] for _ in range(REPEATS))
    print(f"  warm {warm * 1e3:.2f} ms per layout, rebuilding the cost table {rebuilt * 1e3:.2f} ms per layout")


if __name__ == "__main__":
    from trainsim.specs.memo import memo_scope

    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        main()
