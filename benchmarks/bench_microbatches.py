"""Engine cost vs the number of micro-batches: the folded step (fold.simulate_step) against the whole one.

Run: python benchmarks/bench_microbatches.py [--full-limit-s S]   (pins itself to one core; prints, asserts nothing)

Scenarios: the issue-20 case (examples/llama3-8b-h100-8.yaml: PP1 ZeRO-3 DP8, where `--global-batch 4194304`
is 524 288 micro-batches), Mixtral 8x7B EP8 PP4 1F1B (examples/mixtral-8x7b-h100.yaml) and Llama-3-70B PP8 VPP5
interleaved (examples/llama3-70b-h100.yaml). For each micro-batch count: wall time and engine events of the
folded step, of the whole step where its expected time (extrapolated from the last count measured) is below
--full-limit-s, and the relative difference of the step times where both ran.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from bench_common import one_core, timed

from trainsim.specs.memo import memo_scope

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (10, 100, 1_000, 10_000, 100_000, 500_000)
EXAMPLES = ("llama3-8b-h100-8.yaml", "mixtral-8x7b-h100.yaml", "llama3-70b-h100.yaml")


def table_of(example: str):
    from trainsim.cli.common import scenario_from_args
    from trainsim.cli.main import build_parser
    from trainsim.simulator.builder import build_cost_table
    args = build_parser().parse_args(["predict", str(ROOT / "examples" / example)])
    return build_cost_table(scenario_from_args(args))


def bench(example: str, full_limit_s: float) -> None:
    from trainsim.simulator.engine import simulate
    from trainsim.simulator.fold import clear_cache, period, simulate_step
    base = table_of(example)
    q = period(base)
    print(f"\n{example}: pp {base.pp}, vpp {base.vpp}, {base.schedule}")
    print(f"  {'micro-batches':>13} {'folded':>10} {'events':>8} {'simulated':>18} {'whole':>10} {'events':>10}"
          f" {'step rel diff':>13}")
    per_mb = None   # seconds per micro-batch of the whole simulation, last measured
    for n in COUNTS:
        m = max(q, round(n / q) * q)
        table = replace(base, num_microbatches=m)
        clear_cache()   # time the engine, not the memo of samples shared with the previous count
        t_fold, fo = timed(lambda table=table: simulate_step(table))
        sim = ",".join(str(c) for c in fo.folded.simulated) if fo.folded else "whole"
        line = f"  {m:>13,} {t_fold:>9.3f}s {fo.events:>8,} {sim:>18}"
        if per_mb is None or per_mb * m <= full_limit_s:
            t_full, full = timed(lambda table=table: simulate(table))
            per_mb = t_full / m
            diff = abs(fo.step_time_s - full.step_time_s) / full.step_time_s
            line += f" {t_full:>9.3f}s {full.events:>10,} {diff:>13.1e}"
        else:
            line += f" {'~' + format(per_mb * m, '.0f') + 's':>10} {'(skipped)':>10}"
        print(line, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full-limit-s", type=float, default=120.0,
                    help="skip the whole simulation when it would take longer (default 120)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    one_core()
    for ex in EXAMPLES:
        bench(ex, args.full_limit_s)
    return 0


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        raise SystemExit(main())
