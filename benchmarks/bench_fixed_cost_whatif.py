"""What the collectives' fixed-cost what-if adds to one engine prediction (predict's ``fixed_costs``, which
``trainsim predict`` and plan's engine confirmation ask for): the same step predicted again with every collective
costed by its bytes only (Scenario.without_collective_fixed_costs). Prints, per scenario, the median of cold
predictions (fresh memo scope, builder caches cleared) without and with the what-if, and the what-if's own engine
share (its discrete-event run against its whole).

    python benchmarks/bench_fixed_cost_whatif.py [SCENARIO.yaml ...] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from trainsim.simulator import builder
from trainsim.simulator.predict import predict
from trainsim.specs.loaders import build_scenario, load_scenario_file
from trainsim.specs.memo import memo_scope

DEFAULT = ("examples/llama3-70b-h100.yaml", "examples/llama3-405b-h100-16k.yaml")


def cold_s(scenario, fixed_costs: bool) -> float:
    """Wall seconds of one prediction from cold caches."""
    builder.clear_cache()
    with memo_scope():
        t0 = time.perf_counter()
        predict(scenario, allocator_replay=False, fixed_costs=fixed_costs)
        return time.perf_counter() - t0


def engine_share(scenario) -> tuple[float, float]:
    """(engine seconds, whole seconds) of the what-if prediction run after the step's own, as predict runs it."""
    builder.clear_cache()
    with memo_scope():
        predict(scenario, allocator_replay=False)
        what_if = predict(scenario.without_collective_fixed_costs(), allocator_replay=False)
    return what_if.engine["wall_s"] - what_if.engine["build_s"], what_if.engine["wall_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", default=list(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for path in args.scenarios:
        sc = build_scenario(load_scenario_file(path))
        plain = statistics.median(cold_s(sc, False) for _ in range(args.repeat))
        both = statistics.median(cold_s(sc, True) for _ in range(args.repeat))
        eng, whole = engine_share(sc)
        print(f"{path}: predict {plain * 1e3:.0f} ms, with the fixed-cost what-if {both * 1e3:.0f} ms "
              f"(+{100 * (both / plain - 1):.0f} %); the what-if's engine run {eng * 1e3:.0f} of {whole * 1e3:.0f} ms",
              flush=True)


if __name__ == "__main__":
    main()
