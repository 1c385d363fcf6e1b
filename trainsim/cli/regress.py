"""`trainsim regress`: predictions of a scenario suite vs a stored baseline (exit 1 on any drift)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainsim.cli.common import float_range
from trainsim.specs import SpecError
from trainsim.specs.safe_write import check_output_path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "regress", help="compare predictions of a suite with a stored baseline (CI)",
        description="Predict every scenario of a suite (a directory of scenario files, or a YAML list of "
                    "paths; default examples/) and compare every metric with the baseline. Exit 1 with a "
                    "table of what moved when anything drifts or scenarios were added/removed; --update "
                    "rewrites the baseline instead.")
    p.add_argument("--suite", default="examples", help="directory of scenarios or YAML list (default: examples)")
    p.add_argument("--baseline", default="tests/baselines/examples.json", help="baseline JSON")
    p.add_argument("--rtol", type=float_range(0, 1), default=1e-6, help="relative tolerance (default 1e-6)")
    p.add_argument("--update", action="store_true", help="write the current predictions as the new baseline")
    p.add_argument("--fast", action="store_true", help="use the engine's fast (analytic) path")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.validation.regress import (
        compare,
        load_baseline,
        load_suite,
        render_comparison,
        save_baseline,
        snapshot,
        suite_paths,
    )
    from trainsim.validation.validate import default_predict_fn

    if args.update:  # before a minute of predictions, not after; the path itself first, then against the suite
        check_output_path(args.baseline, "baseline")
        check_output_path(args.baseline, "baseline", inputs=[args.suite, *(p for _, p in suite_paths(args.suite))])
        _check_outside_suite(args.baseline, args.suite)
    scenarios = load_suite(args.suite)
    baseline = None if args.update else load_baseline(args.baseline)
    options = {"fast": bool(args.fast)}
    if baseline is not None and baseline.get("options", {}) != options:
        print(f"note: baseline was made with options {baseline.get('options')}, running with {options}",
              file=sys.stderr)
    current = snapshot(scenarios, default_predict_fn(fast=args.fast), options)
    if args.update:
        save_baseline(current, args.baseline)
        print(f"wrote {args.baseline}: {len(current['scenarios'])} scenarios")
        return 0
    cmp = compare(baseline, current, rtol=args.rtol)
    sys.stdout.write(render_comparison(cmp, args.rtol))
    return 0 if cmp.ok else 1


def _check_outside_suite(baseline: str, suite: str) -> None:
    """A baseline written as a scenario file (.yaml/.yml/.json) inside a suite directory would be read as one of its
    scenarios by every later run: refused."""
    from trainsim.validation.regress import SCENARIO_SUFFIXES
    b, s = Path(baseline).resolve(), Path(suite).resolve()
    if s.is_dir() and b.suffix.lower() in SCENARIO_SUFFIXES and s in b.parents:
        raise SpecError("baseline", f"{baseline} lies inside the suite directory {suite}, whose every "
                                    f"{', '.join(sorted(SCENARIO_SUFFIXES))} file is a scenario: write it elsewhere")
