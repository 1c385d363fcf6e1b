"""`trainsim calibrate --from-runs FILE [FILE ...] --out PROFILE.json`: fit run-calibration factors.

Reads the measured runs (validation.measured_runs), fits the named factors they identify
(simulator.run_fit), and writes a calibration profile whose ``run_calibration`` section holds the factors,
their standard errors, the runs and every run's residual. ``--merge-into`` adds the section to an existing
microbenchmark profile (the fit then predicts with that profile's measurements). Nothing is written when
any input is invalid.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from trainsim.specs import SpecError


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("measured runs (--from-runs)")
    g.add_argument("--from-runs", nargs="+", metavar="FILE",
                   help="common-run-schema CSVs, Megatron-LM logs, torchtitan logs (with --config)")
    g.add_argument("--config", action="append", metavar="TOML",
                   help="torchtitan job TOML, one per torchtitan log in order (repeatable)")
    g.add_argument("--cluster", action="append", metavar="NAME|PATH",
                   help="cluster preset or YAML the logged runs ran on (logs do not name the GPU): one for all logs, "
                        "or one per log in order (repeatable)")
    g.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits (faster; no run intervals)")


def run_from_runs(args: argparse.Namespace, out: Path) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.cost_models.profile import CalibrationProfile, Fingerprint, load_profile, save_profile
    from trainsim.simulator.run_fit import engine_predict_log, fit_runs
    from trainsim.validation.measured_runs import load_runs

    for flag in ("device", "emit_slurm", "import_nccl_tests"):
        if getattr(args, flag, None):
            raise SpecError("from_runs", f"cannot be combined with --{flag.replace('_', '-')}")
    base = load_profile(args.merge_into) if args.merge_into else None
    runs = load_runs(args.from_runs, args.config, args.cluster)
    measured = base if base is not None and base.has_measurements() else None
    cal = fit_runs(runs, engine_predict_log(measured), leave_one_out=not args.no_loo)
    _check_explained(cal)
    profile = (base or CalibrationProfile(fingerprint=Fingerprint(device="imported", device_name="measured runs",
                                                                   command="trainsim calibrate --from-runs")))
    profile = profile.model_copy(update={"run_calibration": cal, "schema_version": 4, "source_path": None})
    save_profile(profile, out)
    if args.json:
        print(json.dumps({"out": str(out), "run_calibration": cal.model_dump(mode="json")}))
    else:
        print(render(cal, out))
    return 0


# A fitted run this far from its prediction (either way) is no calibration: the uncalibrated model's largest miss on
# the bundled published runs is x4.67 (AMSP 13B ZeRO-3 on 1,024 A800, predicted 6.08 s against 28.4 s; nemo mb_254
# x2.83 the other way), so a factor of 5 left after fitting says the run's figures (units, layout, batch) are not
# what it ran.
MAX_FITTED_RATIO = 5.0


def _check_explained(cal) -> None:
    """SpecError naming the first run no factor within its prior explains (``MAX_FITTED_RATIO``): a profile fitted
    to it would carry a factor at its bound into every prediction."""
    for r in cal.runs:
        if abs(r.log_residual) > math.log(MAX_FITTED_RATIO):
            raise SpecError("from_runs", f"run {r.name}: measured {r.measured_step_s:.4g} s against {r.predicted_after_s:.4g} s "
                                         f"after fitting (x{math.exp(abs(r.log_residual)):.3g} apart, beyond the "
                                         f"x{MAX_FITTED_RATIO:g} any published run misses by): check its time unit, layout "
                                         "and batch")


def render(cal, out: Path) -> str:
    """Factors (fitted / kept, with sds) and runs (measured, predicted before/after, residuals) as text."""
    lines = [f"run calibration of {len(cal.runs)} run(s) -> {out}", "", "factor                         value    sd(log)  status"]
    for f in cal.factors:
        lines.append(f"{f.name[:30]:30} {f.value:7.4g}  {f.stderr:7.3f}  {f.reason}")
    lines += ["", "run                         GPUs  measured s  preset s   fitted s  resid %  held-out %  steps"]
    for r in cal.runs:
        loo = f"{(math.exp(r.loo_log_residual) - 1) * 100:+9.1f}" if r.loo_log_residual is not None else "        -"
        lines.append(f"{r.name[:26]:26} {r.num_gpus:5d} {r.measured_step_s:11.4g} {r.predicted_before_s:9.4g} "
                     f"{r.predicted_after_s:10.4g} {(math.exp(r.log_residual) - 1) * 100:+8.1f} {loo}  "
                     f"{r.steps_used if r.steps_used is not None else '-'}")
    lines += ["", "residual % = measured / prediction - 1; held-out: the factors refitted without that run"]
    return "\n".join(lines)
