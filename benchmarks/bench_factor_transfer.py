"""Which factor, fitted to a family's fewest-GPU run, carries to its larger runs: each candidate alone in turn.

    python benchmarks/bench_factor_transfer.py SUBSTRING [SUBSTRING ...] [--only DATASET ...]

For every family (bench_extrapolation.families) whose label contains one of the substrings: the calibration
run's residual ln(measured / predicted) at the presets, the preset errors of the larger runs, then for every
candidate factor of simulator.run_fit fitted alone (MAP, its prior) to the calibration run: its value, the
sensitivity d ln step / d theta at the presets, and the larger runs' errors (predicted / measured - 1) with
it. run_fit picks the factor with the largest sensitivity x prior sd; this prints what each would give,
to name the effect a single scale cannot identify. It measures; it chooses nothing.
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_extrapolation import families

from trainsim.cost_models.run_factors import apply_factors
from trainsim.simulator.predict import predict
from trainsim.simulator.run_fit import _map_fit, candidate_factors, engine_predict_log, sensitivity, values_of
from trainsim.validation.measured_runs import run_of_case
from trainsim.validation.residual_sources import datasets


def transfer(runs: list) -> None:
    f = engine_predict_log()
    least = min(r.scenario.num_gpus for r in runs)
    cal = [r for r in runs if r.scenario.num_gpus == least]
    held = sorted((r for r in runs if r.scenario.num_gpus > least), key=lambda r: r.scenario.num_gpus)
    names = candidate_factors(cal)
    base, jac = sensitivity(cal, names, f)
    measured = np.log([r.step_time_s for r in cal])
    print(f"  calibration at {least} GPUs, ln(measured / predicted) {np.round(measured - base, 3).tolist()}")
    print(f"  {'presets':24} " + " ".join(f"{r.scenario.num_gpus}:{predict(r.scenario).step_time_s / r.step_time_s - 1:+.3f}"
                                         for r in held))
    for j, n in enumerate(names):
        theta, _ = _map_fit(cal, measured, names, [j], f)
        vals = values_of(theta)
        errs = []
        for r in held:
            scn, over = apply_factors(r.scenario, vals)
            errs.append((predict(scn).step_time_s + over) / r.step_time_s - 1)
        print(f"  {n[:24]:24} value {vals[n]:8.3g}  d ln step/d theta {jac[0, j]:+.3f}  "
              f"MAPE {100 * float(np.mean(np.abs(errs))):5.1f}  " + " ".join(f"{e:+.3f}" for e in errs), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="+", help="substrings of family labels (as bench_extrapolation prints them)")
    ap.add_argument("--only", nargs="+", help="dataset names (default all)")
    args = ap.parse_args()
    for name, load in datasets().items():
        if args.only and name not in args.only:
            continue
        ds = load()
        for key, cases in sorted(families(name, ds).items(), key=lambda kv: str(kv[0])):
            label = " / ".join(str(k) for k in key)
            if any(s in label for s in args.families):
                print(label)
                transfer([run_of_case(c, ds, name) for c in cases])


if __name__ == "__main__":
    main()
