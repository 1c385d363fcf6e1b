"""What a user of `calibrate --from-runs` gets: calibrate on the fewest-GPU runs of a family, predict the rest.

    python benchmarks/bench_extrapolation.py [--only DATASET ...] [--cal-scales N] [--no-extrapolation] [--loo-check]
                                             [--no-coverage] [--coverage C] [--rows JSON]

A family is a set of published runs on one stack at several scales (validation.residual_sources datasets):
SC21 Table 1 (weak scaling), SC21 Table 2 PTD-P per model, Korthikanti et al. per recipe, Llama 3, the
multi-scale families of docs/probe_runs.csv (same source table and model), MosaicML per GPU type / precision /
model / sequence length and Megatron-Bridge per system / precision / model (both from ../shared/validation).
For each family: the run(s) with the fewest GPUs are the calibration (simulator.run_fit), every run with more
GPUs is predicted with the fitted factors; printed: GPU-count ratio covered, MAPE and worst row, and the
same before calibration (presets), and how many predicted runs lie in the 80 % interval predict gives with that
calibration. ``--loo-check``: the leave-one-out band of a calibration on all but each family's largest scale,
against the largest. Then the coverage of the 80 % intervals (validation.intervals) on rows held
out by source: each source's rows against the interval predict gives them from the other sources' residuals.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from trainsim.cost_models.profile import CalibrationProfile
from trainsim.cost_models.run_factors import apply_factors
from trainsim.simulator.predict import predict
from trainsim.simulator.run_fit import fit_runs
from trainsim.specs.errors import SpecError
from trainsim.specs.safe_read import parse_json, read_text
from trainsim.validation.intervals import (
    MAX_COVERAGE,
    MIN_COVERAGE,
    build_table,
    interval_for,
    published_band,
)
from trainsim.validation.measured_runs import run_of_case
from trainsim.validation.novelty import scale_of
from trainsim.validation.residual_sources import datasets, residual_rows
from trainsim.validation.source_conformal import hierarchical_band


def family_key(name: str, case) -> tuple | None:
    s = case.scenario
    if name == "sc21":
        return (name, case.category) if case.category == "Table 1" else (name, case.category, s.model.name)
    if name in ("korthikanti", "llama3"):
        return (name, case.category)
    if name in ("probe", "nemo"):
        return (name, case.category, s.model.name)
    if name == "mosaic":
        return (name, case.category, s.model.name, s.training.seq_len)
    return None


def families(name: str, ds) -> dict[tuple, list]:
    groups: dict[tuple, list] = defaultdict(list)
    for c in ds.active:
        if math.isfinite(c.published) and c.published > 0:
            key = family_key(name, c)
            if key is not None:
                groups[key].append(c)
    return {k: v for k, v in groups.items() if len({c.scenario.num_gpus for c in v}) >= 2}


def evaluate_family(ds, cases: list, source: str, cal_scales: int = 1) -> dict:
    """Calibrate on the runs at the ``cal_scales`` smallest GPU counts, predict the runs at larger ones."""
    runs = [run_of_case(c, ds, source) for c in cases]
    least = sorted({r.scenario.num_gpus for r in runs})[cal_scales - 1]
    cal_runs = [r for r in runs if r.scenario.num_gpus <= least]
    held = [r for r in runs if r.scenario.num_gpus > least]
    cal = fit_runs(cal_runs, leave_one_out=len(cal_runs) >= 3)
    values = cal.values()
    errs, errs0, inside = [], [], []
    for r in held:
        scn, over = apply_factors(r.scenario, values)
        step = predict(scn).step_time_s + over
        errs.append(step / r.step_time_s - 1)
        errs0.append(predict(r.scenario).step_time_s / r.step_time_s - 1)
        inside.append(_in_band(step, r, cal))
    worst = max(range(len(errs)), key=lambda i: abs(errs[i]))
    return {"n_cal": len(cal_runs), "n_pred": len(held), "ratio": max(r.scenario.num_gpus for r in runs) / least,
            "scales": len({r.scenario.num_gpus for r in runs}),
            "mape": 100 * float(np.mean(np.abs(errs))), "worst": 100 * errs[worst], "worst_row": held[worst].name,
            "mape0": 100 * float(np.mean(np.abs(errs0))), "fitted": cal.fitted_names(),
            "in_band": 100 * float(np.mean(inside))}


def _in_band(step_s: float, run, cal) -> bool:
    """Whether the measured step lies in the 80 % interval predict gives with this run calibration."""
    iv = interval_for(step_s, 1.0, 1.0, run.scenario, CalibrationProfile(run_calibration=cal), 0.8)
    return iv.step_time_s[0] <= run.step_time_s <= iv.step_time_s[1]


def loo_check(only: list[str] | None, min_scales: int = 4) -> None:
    """The leave-one-out band of a run calibration (validation.intervals.run_band) where it applies: families
    with >= ``min_scales`` scales, calibrated on every run but those at the largest GPU count (leave-one-out
    residuals included), predicting the largest; printed: the band, measured / predicted and whether inside."""
    print(f"\n{'family (calibrated on all but the largest scale)':58} {'cal':>3} {'LOO sd':>6} "
          f"{'80 % band':>15} {'meas/pred':>9}  inside  basis")
    hits = []
    for name, load in datasets().items():
        if only and name not in only or name == "zero-bubble":
            continue
        ds = load()
        for key, cases in sorted(families(name, ds).items(), key=lambda kv: str(kv[0])):
            runs = [run_of_case(c, ds, name) for c in cases]
            top = max(r.scenario.num_gpus for r in runs)
            if len({r.scenario.num_gpus for r in runs}) < min_scales:
                continue
            cal_runs = [r for r in runs if r.scenario.num_gpus < top]
            cal = fit_runs(cal_runs, leave_one_out=True)
            values = cal.values()
            for r in (r for r in runs if r.scenario.num_gpus == top):
                scn, over = apply_factors(r.scenario, values)
                step = predict(scn).step_time_s + over
                iv = interval_for(step, 1.0, 1.0, r.scenario, CalibrationProfile(run_calibration=cal), 0.8)
                lo, hi = (x / step for x in iv.step_time_s)
                hits.append(lo <= r.step_time_s / step <= hi)
                label = " / ".join(str(k) for k in key)[:58]
                print(f"{label:58} {len(cal_runs):3d} {np.std(cal.loo_residuals(), ddof=1):6.3f} "
                      f"x{lo:.3f}..x{hi:.3f} {r.step_time_s / step:9.3f}  {'yes' if hits[-1] else 'no':6}  "
                      f"{iv.basis[:40]}", flush=True)
    if hits:
        print(f"largest-scale runs inside their 80 % run-calibration band: {sum(hits)} of {len(hits)}")


def extrapolation(only: list[str] | None, cal_scales: int = 1) -> None:
    print(f"{'family':58} {'cal':>3} {'pred':>4} {'scales':>6} {'GPUs x':>7} {'MAPE %':>7} {'worst %':>8} "
          f"{'preset MAPE %':>13} {'in 80 %':>7}  fitted")
    for name, load in datasets().items():
        if only and name not in only or name == "zero-bubble":
            continue  # zero-bubble rows are one scale each (schedules, not scales)
        ds = load()
        for key, cases in sorted(families(name, ds).items(), key=lambda kv: str(kv[0])):
            if len({c.scenario.num_gpus for c in cases}) <= cal_scales:
                continue
            t0 = time.perf_counter()
            r = evaluate_family(ds, cases, name, cal_scales)
            label = " / ".join(str(k) for k in key)[:58]
            print(f"{label:58} {r['n_cal']:3d} {r['n_pred']:4d} {r['scales']:6d} {r['ratio']:7.1f} {r['mape']:7.1f} "
                  f"{r['worst']:+8.1f} {r['mape0']:13.1f} {r['in_band']:6.0f}%  {', '.join(r['fitted']) or '-'} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)


def _band(table: dict, feats: dict, level: float, cache: dict) -> tuple[float, float, bool]:
    """predict's band for a row with these features against ``table`` (validation.intervals.published_band)."""
    key = json.dumps(feats, sort_keys=True)
    if key not in cache:
        lo, hi, _, why = published_band(table, feats, level)
        cache[key] = (lo, hi, bool(why))
    return cache[key]


def _novelty_scales(table: dict, level: float) -> str:
    """The measured scale of each novelty group of ``table`` at ``level`` (validation.novelty)."""
    block = table.get("novelty")
    if block is None:
        return "no novelty measurement (envelope)"
    return ", ".join(f"{g} x{scale_of(block, g, level):.2f} ({len(v['sources'])} src)"
                     for g, v in block["groups"].items())


def held_out_coverage(rows: list[tuple[str, float, dict, str]], level: float = 0.8) -> None:
    """Each source's rows against the interval predict gives them from the table built from the other sources'
    rows alone (their summaries and their own leave-one-source-out novelty measurement, so no source speaks
    for its own rows): the hierarchical conformal band, scaled where the row's GPU, framework, parallelism or
    family is in none of the other sources. Also the conformal band alone (the method without novelty)."""
    by: dict[str, list] = defaultdict(list)
    for src, r, feat, _ in rows:
        by[src].append((r, feat))
    print(f"\n{level:.0%} intervals on rows held out by source ({len(rows)} rows, {len(by)} sources):")
    print(f"  {'source':44} {'rows':>4} {'novel':>5}  {'conformal band':>16} {'covered':>7}  {'as predict':>10}  "
          f"measured novelty scales without it")
    hits = {"band": [], "predict": []}
    for name in sorted(by):
        table = build_table([(s, r, f) for s, r, f, _ in rows if s != name])
        lo, hi, _ = hierarchical_band(list(table["sources"].values()), level)
        cache: dict = {}
        got = [(lo <= r <= hi, _band(table, f, level, cache)) for r, f in by[name]]
        inside = [b for b, _ in got]
        as_predict = [bl <= r <= bh for (r, _), (_, (bl, bh, _)) in zip(by[name], got, strict=True)]
        novel = sum(n for _, (_, _, n) in got)
        hits["band"].append(inside)
        hits["predict"].append(as_predict)
        print(f"  {name[:44]:44} {len(inside):4d} {novel:5d}  x{math.exp(lo):.3f}..x{math.exp(hi):.3f} "
              f"{np.mean(inside):7.1%}  {np.mean(as_predict):10.1%}  {_novelty_scales(table, level)}", flush=True)
    for what, label in (("band", "conformal band"), ("predict", "as predict gives it")):
        flat = [x for h in hits[what] for x in h]
        target = " (target 75-85 %)" if level == 0.8 else ""
        print(f"coverage, {label}: {np.mean(flat):.1%} of rows, {np.mean([np.mean(h) for h in hits[what]]):.1%} "
              f"averaged over sources{target}")
    full = build_table([(s, r, f) for s, r, f, _ in rows])
    print(f"measured novelty scales of the full table at {level:.0%}: {_novelty_scales(full, level)}")


# What --rows writes: the rows under a kind and a version, so a file of another kind or version is refused, and
# the key of the model code that predicted them (model_code_key), so rows of other code are refused too.
ROWS_KIND, ROWS_VERSION = "trainsim-residual-rows", 1
# The packages a residual row depends on: everything but the command line, the reports and the torch kernels.
MODEL_CODE_SKIPS = ("cli", "reports", "kernels", "__pycache__")


def model_code_key() -> str:
    """trainsim's version and a SHA-256 over the source and bundled data of the packages that predict a row
    (MODEL_CODE_SKIPS left out), file by file in path order: any edit there changes the key."""
    import trainsim
    root = Path(trainsim.__file__).resolve().parent
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".pyc"):
        rel = f.relative_to(root)
        if rel.parts[0] in MODEL_CODE_SKIPS or "__pycache__" in rel.parts:
            continue
        digest.update(rel.as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return f"{trainsim.__version__}+{digest.hexdigest()[:16]}"
FEATURE_KEYS = ("gpu", "framework", "parallelism", "family")  # validation.intervals.scenario_features


def _check_row(i: int, row) -> tuple:
    """One cached row as residual_rows makes it: (source, finite residual, features, row id), else why not."""
    if not (isinstance(row, list) and len(row) == 4):
        raise SpecError("--rows", f"row {i} is not a [source, residual, features, row_id] list")
    src, r, feat, rid = row
    if not (isinstance(src, str) and isinstance(rid, str)):
        raise SpecError("--rows", f"row {i}: source and row id must be strings")
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
        raise SpecError("--rows", f"row {i}: residual {r!r} is not a finite number")
    if not (isinstance(feat, dict) and tuple(sorted(feat)) == tuple(sorted(FEATURE_KEYS))
            and all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in feat.values())):
        raise SpecError("--rows", f"row {i}: features must map {', '.join(FEATURE_KEYS)} to lists of names")
    return src, float(r), feat, rid


def read_rows(path: str) -> list[tuple]:
    """The rows of a cache ``--rows`` wrote, or a SpecError naming the file and what is wrong with it."""
    data = parse_json(read_text(path, "--rows", max_bytes=256 << 20), "--rows", path)
    if not isinstance(data, dict) or data.get("kind") != ROWS_KIND:
        raise SpecError("--rows", f"{path} is not a residual-rows cache of this script (kind {ROWS_KIND!r})")
    if data.get("schema_version") != ROWS_VERSION:
        raise SpecError("--rows", f"{path} has schema_version {data.get('schema_version')!r}, this script reads "
                                  f"{ROWS_VERSION}: delete it to recompute the rows")
    key = model_code_key()
    if data.get("model_code") != key:
        raise SpecError("--rows", f"{path} holds rows predicted by other model code (model_code "
                                  f"{data.get('model_code')!r}, this code is {key!r}): delete it to recompute the rows")
    if not isinstance(data.get("rows"), list):
        raise SpecError("--rows", f"{path} has no list of rows")
    return [_check_row(i, row) for i, row in enumerate(data["rows"])]


def rows_cached(only: list[str] | None, path: str | None, cached: list | None = None) -> list:
    """Every source's rows predicted again, or ``cached`` (read_rows of ``path``, checked before any other work)
    when ``path`` exists (written there otherwise)."""
    if path and Path(path).exists():
        rows = cached if cached is not None else read_rows(path)
        return [r for r in rows if not only or any(r[0] == n or r[0].startswith(f"{n}:") for n in only)]
    rows = []
    for name, load in datasets().items():
        if not only or name in only:
            rows += residual_rows(name, load(), lambda s: predict(s).step_time_s)
    if path:
        Path(path).write_text(json.dumps({"kind": ROWS_KIND, "schema_version": ROWS_VERSION,
                                          "model_code": model_code_key(), "rows": rows}), encoding="utf-8")
    return rows


def coverage(only: list[str] | None, rows_path: str | None = None, level: float = 0.8,
             cached: list | None = None) -> None:
    """Every source's rows predicted again (the stored table keeps quantiles, not rows and their features)."""
    held_out_coverage(rows_cached(only, rows_path, cached), level)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", help="dataset names (default all)")
    ap.add_argument("--no-coverage", action="store_true")
    ap.add_argument("--no-extrapolation", action="store_true")
    ap.add_argument("--cal-scales", type=int, default=1,
                    help="calibrate on the runs at this many smallest GPU counts (range 1..3, default 1)")
    ap.add_argument("--coverage", type=float, default=0.8,
                    help=f"coverage of the held-out intervals (range {MIN_COVERAGE}..{MAX_COVERAGE}, default 0.8)")
    ap.add_argument("--rows", metavar="JSON",
                    help="cache of the residual rows for the coverage part: read when it exists (refused unless "
                         "the same model code wrote it), else written")
    ap.add_argument("--loo-check", action="store_true",
                    help="also the leave-one-out run-calibration band on each family's largest scale (minutes)")
    args = ap.parse_args()
    if not 1 <= args.cal_scales <= 3:
        ap.error(f"--cal-scales: must be between 1 and 3, got {args.cal_scales}")
    if not MIN_COVERAGE <= args.coverage <= MAX_COVERAGE:
        ap.error(f"--coverage: must be between {MIN_COVERAGE} and {MAX_COVERAGE}, got {args.coverage}")
    # a --rows cache is checked before the minutes of extrapolation, so a stale or bad one fails at once
    use_rows = args.rows and not args.no_coverage and Path(args.rows).exists()
    cached = read_rows(args.rows) if use_rows else None
    if not args.no_extrapolation:
        extrapolation(args.only, args.cal_scales)
    if args.loo_check:
        loo_check(args.only)
    if not args.no_coverage:
        coverage(args.only, args.rows, args.coverage, cached)


if __name__ == "__main__":
    try:
        main()
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)  # one line naming the input, as the CLI prints it
        sys.exit(2)

