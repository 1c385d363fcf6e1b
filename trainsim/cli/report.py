"""`trainsim report`: a self-contained HTML what-if report (and a Markdown twin) for a scenario or a plan."""

from __future__ import annotations

import argparse
import math
import sys
import time

from trainsim.reports.console import styled, text_console
from trainsim.simulator import goodput as gp
from trainsim.specs import SpecError
from trainsim.specs.loaders import read_mapping
from trainsim.specs.safe_write import check_output_dir

from .common import (
    MAX_EVENT_S,
    OVERRIDE_FLAGS,
    add_scenario_args,
    event_seconds,
    float_range,
    int_range,
    nonneg_float,
    positive_int,
    scenario_from_args,
    warn_beyond_published,
)
from .plan import tokens_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write an HTML + Markdown what-if report with plots",
                       description="Predict a scenario (or the best layout of a plan) and write a self-contained "
                                   "HTML report and a Markdown twin: timeline, memory, MFU map, scaling, ranked "
                                   "layouts, time to train, cost, goodput, and predicted vs measured.")
    add_scenario_args(p)
    p.add_argument("--plan", metavar="PLAN.json", help="a `trainsim plan --json` result: report its best layout")
    p.add_argument("--rank", type=positive_int, default=1, help="which layout of --plan to report (1 = best)")
    p.add_argument("--out", required=True, help="output directory (index.html, report.md, figures/)")
    p.add_argument("--measured", metavar="FILE", help="a `trainsim execute --json` result to compare against")
    p.add_argument("--tokens", type=tokens_arg,
                   help="tokens to train on (e.g. 15T; range > 0, <= 1e16); default 20 per parameter")
    p.add_argument("--price-per-gpu-hour", type=nonneg_float, help="USD per GPU-hour for the cost figures")
    p.add_argument("--top", type=int_range(1, 10_000), default=10, help="layouts in the ranked table")
    p.add_argument("--no-plan", action="store_true", help="skip the layout search (faster)")
    # Goodput knobs: the flag, else (with --plan) the plan's own request, else the documented default.
    p.add_argument("--failure-rate-per-gpu-hour", type=float_range(0, 1),
                   help=f"default {gp.DEFAULT_FAILURE_RATE_PER_GPU_HOUR:.3g} (or the plan's)")
    p.add_argument("--checkpoint-write-s", type=event_seconds,
                   help="seconds one checkpoint write takes (goodput; default from the storage bandwidth)")
    p.add_argument("--storage-write-gbps", type=float_range(0, 1e9, lo_open=True),
                   help=f"aggregate checkpoint write GB/s; default {gp.DEFAULT_STORAGE_WRITE_BPS / 1e9:g} (or the plan's)")
    p.add_argument("--restart-s", type=event_seconds, help=f"default {gp.DEFAULT_RESTART_S:g} s (or the plan's)")
    p.set_defaults(func=run)


# Request keys of a plan that set the report's goodput knobs, and their defaults.
GOODPUT_KNOBS = {"failure_rate_per_gpu_hour": gp.DEFAULT_FAILURE_RATE_PER_GPU_HOUR, "checkpoint_write_s": None,
                 "storage_write_Bps": gp.DEFAULT_STORAGE_WRITE_BPS, "restart_s": gp.DEFAULT_RESTART_S}


def _goodput_knobs(args: argparse.Namespace, request: dict) -> dict:
    """Each goodput knob from its flag, else the plan's request, else the default."""
    flags = {"failure_rate_per_gpu_hour": args.failure_rate_per_gpu_hour, "checkpoint_write_s": args.checkpoint_write_s,
             "storage_write_Bps": args.storage_write_gbps * 1e9 if args.storage_write_gbps is not None else None,
             "restart_s": args.restart_s}
    out = {}
    for key, default in GOODPUT_KNOBS.items():
        if flags[key] is not None:
            value, field = flags[key], key
        else:
            value, field = request.get(key), f"plan.request.{key}"
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise SpecError(field, f"must be a non-negative number, got {value!r}")
        if key in ("checkpoint_write_s", "restart_s") and value is not None and value > MAX_EVENT_S:
            raise SpecError(field, f"must be at most {MAX_EVENT_S:g} s, got {value!r}")
        if key == "storage_write_Bps" and value is not None and value <= 0:
            raise SpecError(field if field != key else "storage_write_gbps", "must be positive")
        out[key] = default if value is None else float(value)
    return out


def _read_json(path: str, field: str) -> dict:
    if not path.endswith(".json"):
        raise SpecError(field, f"{path} must be a .json file")
    return read_mapping(path, field)


# A training step launches at least one kernel: a few microseconds (NVIDIA, "Getting Started with CUDA Graphs",
# 2019: 3.8 us per back-to-back launch); a shorter "step" is no measurement.
MIN_STEP_S = 1e-6


def check_measured(measured: dict) -> None:
    """Every number of an `execute --json` result that the report compares must be positive and finite
    (a negative or NaN step time would otherwise drop out of "predicted vs measured" without a word)."""
    meas = measured.get("measured")
    if not isinstance(meas, dict):
        raise SpecError("measured", "not a `trainsim execute --json` result (no 'measured' object)")
    pred = measured.get("predicted") if isinstance(measured.get("predicted"), dict) else {}
    for where, block, key in (("measured", meas, "step_time_s"), ("measured", meas, "step_time_min_s"),
                              ("predicted", pred, "step_time_s")):
        _positive(block.get(key), f"measured.{where}.{key}", allow_none=True)
        if block.get(key) is not None and block[key] < MIN_STEP_S:
            raise SpecError(f"measured.{where}.{key}", f"{block[key]!r} s is shorter than any training step "
                                                       f"(at least {MIN_STEP_S:g} s: one kernel launch)")
    low, mid = meas.get("step_time_min_s"), meas.get("step_time_s")
    if low is not None and mid is not None and low > mid:
        raise SpecError("measured.measured.step_time_min_s", f"{low!r} s exceeds the median step {mid!r} s")
    for side, block in (("measured", meas), ("predicted", pred)):
        stages = block.get("per_stage")
        if stages is None:
            continue
        if not isinstance(stages, list):
            raise SpecError(f"measured.{side}.per_stage", "must be a list")
        for i, st in enumerate(stages):
            if not isinstance(st, dict):
                raise SpecError(f"measured.{side}.per_stage[{i}]", "must be an object")
            for key, v in st.items():
                if isinstance(v, (int, float)):
                    _positive(v, f"measured.{side}.per_stage[{i}].{key}", allow_zero=True)


def check_measured_matches(measured: dict, scn) -> None:
    """The executed run is the report's scenario: its world size and layout (as `execute --json` writes them)
    equal the scenario's, so a run of another layout or model is never shown as this scenario's measurement."""
    lay = measured.get("layout") if isinstance(measured.get("layout"), dict) else {}
    for key, given in (("world_size", measured.get("world_size")), ("layout", lay or None)):
        if given is None:  # execute --json writes both: without them no run can be matched to the scenario
            raise SpecError(f"measured.{key}", "missing: an `execute --json` result records the run's world size "
                                               "and layout, which must be this report's scenario's")
    t, sl = scn.training, scn.layout
    mine = {"tp": sl.tp, "pp": sl.pp, "dp": scn.dp, "cp": sl.cp, "vpp": sl.vpp, "micro_batch": t.micro_batch,
            "num_microbatches": scn.num_microbatches, "schedule": t.schedule, "zero": t.effective_zero,
            "recompute": t.recompute, "sequence_parallel": t.sequence_parallel}
    theirs = {"world_size": measured.get("world_size"), **{k: lay.get(k) for k in mine}}
    for key, want in {"world_size": scn.num_gpus, **mine}.items():
        got = theirs[key]
        if got is not None and (got != want or isinstance(got, bool) != isinstance(want, bool)):
            where = "measured.world_size" if key == "world_size" else f"measured.layout.{key}"
            raise SpecError(where, f"the executed run had {key} {got!r}, this report's scenario {want!r}: report "
                                   "the scenario the run executed")
    _check_measured_model(measured, scn)


def _check_measured_model(measured: dict, scn) -> None:
    """The executed run's model, tokens per step and device are the scenario's, where the result records them
    (its own prediction's parameter count and throughput; ``device``): a run of another model or on the host CPU
    is not this GPU scenario's measurement."""
    pred = measured.get("predicted")
    own = pred.get("prediction") if isinstance(pred, dict) else None
    if own is None:
        own = {}
    if not isinstance(own, dict):
        raise SpecError("measured.predicted.prediction", f"must be an object, got {type(own).__name__}")
    params = own.get("model", {}).get("total_params") if isinstance(own.get("model"), dict) else None
    if params is not None:
        _positive(params, "measured.predicted.prediction.model.total_params")
    if params is not None and round(params) != scn.model.total_params():
        raise SpecError("measured.predicted.prediction.model.total_params",
                        f"the executed model has {params:,.0f} parameters, this report's {scn.model.total_params():,}: "
                        "report the scenario the run executed")
    tps, step = own.get("tokens_per_s"), own.get("step_time_s")
    for key, v in (("tokens_per_s", tps), ("step_time_s", step)):
        if v is not None:
            _positive(v, f"measured.predicted.prediction.{key}")
    if tps is not None and step is not None:
        tokens = tps * step
        if abs(tokens / scn.tokens_per_step - 1) > 1e-6:
            raise SpecError("measured.predicted.prediction", f"the executed run trained {tokens:,.0f} tokens per step, "
                                                             f"this report's scenario {scn.tokens_per_step:,}")
    cpu = scn.cluster.gpu.kind == "cpu"
    if measured.get("device") in ("cpu", "cuda") and (measured["device"] == "cpu") != cpu:
        raise SpecError("measured.device", f"the run executed on {measured['device']}, this report's cluster has "
                                           f"{scn.cluster.gpu.name}")


def _positive(v, field: str, allow_none: bool = False, allow_zero: bool = False) -> None:
    if v is None and allow_none:
        return
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (
        v >= 0 if allow_zero else v > 0)
    if not ok:
        raise SpecError(field, f"must be a {'non-negative' if allow_zero else 'positive'} finite number, got {v!r}")


def run(args: argparse.Namespace) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.reports.html import write_report
    from trainsim.reports.plan_file import request_tokens_price, scenario_from_plan
    from trainsim.reports.whatif import ReportOptions, build_report

    t0 = time.perf_counter()
    check_output_dir(args.out, "out")  # before the prediction and the plan, not after
    plan_json = _read_json(args.plan, "plan") if args.plan else None
    measured = _read_json(args.measured, "measured") if args.measured else None
    if measured is not None:
        check_measured(measured)
    request: dict = {}
    if plan_json is not None:
        if args.scenario:
            raise SpecError("plan", "give either a scenario or --plan, not both")
        given = [f"--{attr.replace('_', '-')}" for attr in OVERRIDE_FLAGS if getattr(args, attr, None) is not None]
        if given:
            raise SpecError("plan", f"{', '.join(given)} would change the planned scenario; report a scenario "
                                    "file instead")
        scn = scenario_from_plan(plan_json, args.rank)
        request = plan_json.get("request", {}) if isinstance(plan_json.get("request"), dict) else {}
        planned_tokens, planned_price = request_tokens_price(request)
        tokens = args.tokens or planned_tokens
        price = args.price_per_gpu_hour if args.price_per_gpu_hour is not None else planned_price
    else:
        scn = scenario_from_args(args)
        tokens, price = args.tokens, args.price_per_gpu_hour
    if measured is not None:
        check_measured_matches(measured, scn)
    opts = ReportOptions(
        tokens=tokens, price_per_gpu_hour=price, profile_path=args.calibration,
        plan_top_k=args.top, run_plan=not args.no_plan, plan_rank=args.rank, **_goodput_knobs(args, request),
    )
    # a status's text as a string is read as markup whatever the console's setting: given as Text
    with text_console(stderr=True).status(styled(f"building the report of {scn.name}: prediction, timeline, scaling, "
                                                 f"{'plan, ' if opts.run_plan and plan_json is None else ''}"
                                                 "figures ...")):
        report = build_report(scn, opts, plan_json=plan_json, measured=measured)
        paths = write_report(report, args.out)
    warn_beyond_published(scn.num_gpus, scn.training.global_batch, scn.training.seq_len)  # after any refusal
    print(f"wrote {paths['html']} (self-contained HTML) and {paths['markdown']} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    return 0
