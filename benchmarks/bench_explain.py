"""Time of `predict --explain` / the report's levers section (simulator.levers.explain) on one core.

Run: python benchmarks/bench_explain.py [--repeats N] [--engine]   (pins itself to one core; prints, asserts nothing)

For each example: the wall time of explain() with the cost-table cache cleared first (every variant's table built,
the baseline's included: the cold case), and after the scenario's own engine prediction as `trainsim report`
runs it (the baseline's table cached), median and max over the repeats; the closed form screens every lever
(the default), ``--engine`` adds the engine for every lever (`predict --explain-engine`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from bench_common import one_core, timed

from trainsim.specs.memo import memo_scope

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("llama3-70b-h100.yaml", "llama3-8b-h100-8.yaml", "mixtral-8x7b-h100.yaml", "deepseek-v3-h100.yaml")


def scenario_of(example: str):
    from trainsim.cli.common import scenario_from_args
    from trainsim.cli.main import build_parser
    return scenario_from_args(build_parser().parse_args(["predict", str(ROOT / "examples" / example)]))


def bench(example: str, repeats: int, engine: bool) -> None:
    from trainsim.simulator import fold
    from trainsim.simulator.builder import clear_cache
    from trainsim.simulator.levers import explain
    from trainsim.simulator.predict import predict
    if not (ROOT / "examples" / example).exists():
        return
    scn = scenario_of(example)
    cold, warm = [], []
    expl = None
    for _ in range(repeats):
        clear_cache()
        fold.clear_cache()   # the engine runs remembered per process
        t, expl = timed(lambda: explain(scn, engine=engine))
        cold.append(t)
        clear_cache()
        fold.clear_cache()
        predict(scn)  # what `trainsim report` has run before its levers section
        t, _ = timed(lambda: explain(scn, engine=engine))
        warm.append(t)
    mode = "engine" if engine else "closed form"
    levers = sum(lv.applicable for lv in expl.levers)
    print(f"{example:28} {mode:11} {levers} levers predicted   cold median {statistics.median(cold) * 1e3:7.0f} ms "
          f"(max {max(cold) * 1e3:6.0f})   after predict median {statistics.median(warm) * 1e3:7.0f} ms "
          f"(max {max(warm) * 1e3:6.0f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engine", action="store_true", help="also time the engine for every lever")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    one_core()
    print(f"one core (affinity {sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}), "
          f"{args.repeats} repeats")
    for ex in EXAMPLES:
        bench(ex, args.repeats, engine=False)
        if args.engine:
            bench(ex, max(1, args.repeats // 2), engine=True)
    return 0


if __name__ == "__main__":
    with memo_scope():  # one memo for the run, as a CLI command has (specs.memo)
        raise SystemExit(main())
