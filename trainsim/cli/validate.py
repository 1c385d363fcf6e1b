"""`trainsim validate`: predictions vs published runs (error table, MAPE, worst row; CI gate on MAPE)."""

from __future__ import annotations

import argparse
import json
import sys

from trainsim.cli.common import nonneg_float
from trainsim.specs import SpecError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="compare predictions with published runs",
        description="Predict every published run of a dataset and print published vs predicted, the error "
                    "of each row, the MAPE and the worst row. Exit 1 when MAPE exceeds --max-mape "
                    "(or the worst row exceeds --max-worst).")
    p.add_argument("--dataset", default="sc21",
                   help="bundled dataset (sc21, sc21-scripts, zero-bubble, nccl, korthikanti, llama3, memory, amsp; "
                        "mosaic, nemo and vtrain read their unbundled tables from the directory in $TRAINSIM_VALIDATION_DIR; "
                        "all) or a CSV path; "
                        "all = every primary dataset (sc21-scripts is a variant of sc21)")
    p.add_argument("--json", action="store_true", help="print one JSON object (a list under 'datasets' for all)")
    p.add_argument("--max-mape", type=nonneg_float, help="fail (exit 1) above this MAPE, percent")
    p.add_argument("--max-worst", type=nonneg_float, help="fail (exit 1) if any row errs more, percent")
    p.add_argument("--fast", action="store_true", help="use the engine's fast (analytic) path")
    p.add_argument("--calibration", help="calibration profile JSON (from `trainsim calibrate`)")
    p.add_argument("--hide-skipped", action="store_true", help="do not list skipped rows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.validation.datasets import SECONDARY_DATASETS, dataset_names, load_dataset, missing_external
    from trainsim.validation.validate import default_collective_fn, default_predict_fn, render_text, validate

    profile = None
    if args.calibration:
        from trainsim.cost_models.profile import load_profile
        profile = load_profile(args.calibration)
    names = [n for n in dataset_names() if n not in SECONDARY_DATASETS] if args.dataset == "all" else [args.dataset]
    if args.dataset == "all":  # an unbundled table that is absent is skipped with its reason, not an error
        for reason in filter(None, map(missing_external, names)):
            print(f"note: skipped {reason}", file=sys.stderr)
        names = [n for n in names if missing_external(n) is None]
    datasets = [load_dataset(n) for n in names]  # SpecError (exit 2) before any work
    _check_profile_device(datasets, profile)
    predict_fn = default_predict_fn(fast=args.fast, profile=profile)
    collective_fn = _collective_or_none(default_collective_fn, profile)
    reports = [validate(d, predict_fn=predict_fn, collective_fn=collective_fn) for d in datasets]
    failed = []
    for rep in reports:
        mape, worst = rep.mape_pct, rep.worst_pct
        if (args.max_mape is not None or args.max_worst is not None) and mape is None:
            failed.append(f"{rep.dataset.name}: no row could be compared (every row skipped), so the gate fails")
            continue
        if args.max_mape is not None and mape > args.max_mape:
            failed.append(f"{rep.dataset.name}: MAPE {_pct(mape)} exceeds --max-mape {args.max_mape:g}%")
        if args.max_worst is not None and (worst is None or worst > args.max_worst):
            failed.append(f"{rep.dataset.name}: worst row {_pct(worst)} ({rep.worst.row_id if rep.worst else '-'}) "
                          f"exceeds --max-worst {args.max_worst:g}%")
    if args.json:
        out = reports[0].to_json() if len(reports) == 1 else {"datasets": [r.to_json() for r in reports]}
        print(json.dumps(out, indent=2))
    else:
        for rep in reports:
            sys.stdout.write(render_text(rep, show_skipped=not args.hide_skipped))
    for line in failed:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failed else 0


def _check_profile_device(datasets: list, profile) -> None:
    """The CPU/GPU refusal of predict, once for the command: a profile measured across that divide from every
    device a dataset's rows run on (calibration_notes.device_class_refusal) is refused, not skipped row by row."""
    if profile is None:
        return
    from trainsim.simulator.calibration_notes import cluster_devices, device_class_refusal
    devices = {name: g for d in datasets for c in d.cases if c.scenario is not None
               for name, g in cluster_devices(c.scenario).items()}
    if devices and (why := device_class_refusal(devices, profile)) is not None:
        raise SpecError("calibration", why)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}%"


def _collective_or_none(factory, profile):
    try:
        return factory(profile)
    except ImportError:
        return None
