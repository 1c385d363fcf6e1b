"""Error against GPU count for the multi-scale families of docs/probe_runs.csv (same source table and model).

    python benchmarks/bench_many_ranks.py [--family SUBSTRING]

Per family: each run's GPU count, published step, predicted step, signed error (predicted/published - 1) and
the exposed data-parallel / sharding communication of the predicted step, so the trend of the error with
rank count at fixed work per GPU can be read off (issue 22 item 3).
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

from trainsim.simulator.predict import predict
from trainsim.validation.measured_runs import step_time_of
from trainsim.validation.residual_sources import datasets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="", help="only families whose source table contains this text")
    args = ap.parse_args()
    ds = datasets()["probe"]()
    fams: dict[tuple, list] = defaultdict(list)
    for c in ds.active:
        if math.isfinite(c.published) and c.published > 0 and args.family.lower() in c.category.lower():
            fams[(c.category, c.scenario.model.name)].append(c)
    for (table, model), cases in sorted(fams.items()):
        if len({c.scenario.num_gpus for c in cases}) < 2:
            continue
        print(f"\n{table} / {model}")
        print(f"{'GPUs':>7} {'published s':>12} {'predicted s':>12} {'error':>8} {'exposed DP s':>12}")
        for c in sorted(cases, key=lambda c: c.scenario.num_gpus):
            pub = step_time_of(c, ds.metric)
            r = predict(c.scenario)
            dp = r.exposed_comm_s.get("dp", 0.0)
            print(f"{c.scenario.num_gpus:>7} {pub:>12.3f} {r.step_time_s:>12.3f} {r.step_time_s / pub - 1:>+8.1%} {dp:>12.3f}")


if __name__ == "__main__":
    main()
