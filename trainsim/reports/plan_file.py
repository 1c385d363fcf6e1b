"""A `trainsim plan --json` result read back: the scenario of one of its ranked layouts, each field checked as the
planner writes it, and its ranked figures checked before a report shows them as they are."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from trainsim.simulator.planner import MAX_TOKENS
from trainsim.simulator.search_space import (
    Candidate,
    SearchLimits,
    check_training_extra,
    to_scenario,
    training_extra,
)
from trainsim.specs import Scenario, SpecError, load_cluster, load_layout, load_model


def _check_row_types(cand: Candidate, rank: int) -> None:
    """SpecError naming the first field of a plan row of another type than the planner writes: the layout would
    otherwise be read leniently (tp true as 1, "2" as 2, 2.5 refused only later, under another name)."""
    for f in fields(Candidate):
        v = getattr(cand, f.name)
        want = {"int": int, "bool": bool, "str": str}.get(str(f.type).split(" |")[0].split("[")[0], None)
        if v is None and "None" in str(f.type):
            continue
        if f.name == "stage_layers":
            ok = all(isinstance(n, int) and not isinstance(n, bool) for n in v)
        elif want is int:
            ok = isinstance(v, int) and not isinstance(v, bool)
        else:
            ok = want is None or isinstance(v, want)
        if not ok:
            raise SpecError(f"plan.rows[{rank}].{f.name}", f"must be {str(f.type).split(' |')[0]}, got {v!r}")


# The metrics of a plan row the ranked table renders: each a finite number, the first group above zero.
_POSITIVE_METRICS = ("step_time_s", "tokens_per_s", "gpu_bytes")
_NONNEGATIVE_METRICS = ("mfu", "peak_bytes", "goodput", "time_to_train_s", "gpu_hours", "cost")


def _check_plan_metrics(rows: list) -> None:
    """SpecError naming the first rendered metric of a plan's rows that no plan writes (negative, zero where it
    must be positive, non-finite, not a number): the report shows the file's figures as they are."""
    for i, r in enumerate(rows, 1):
        for key in _POSITIVE_METRICS + _NONNEGATIVE_METRICS:
            v = r.get(key)
            if v is None and key not in _POSITIVE_METRICS:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise SpecError(f"plan.rows[{i}].{key}", f"must be a finite number, got {v!r}")
            if v < 0 or (v == 0 and key in _POSITIVE_METRICS):
                raise SpecError(f"plan.rows[{i}].{key}", f"must be {'> 0' if key in _POSITIVE_METRICS else '>= 0'}, "
                                                        f"got {v!r}")


def fitting_rows(plan_json: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ranked rows of a plan that fit in memory, in rank order; SpecError where ``rows`` is not a list of
    mappings."""
    rows = plan_json.get("rows", [])
    if not isinstance(rows, list):
        raise SpecError("plan.rows", f"must be a list, got {type(rows).__name__}")
    for i, r in enumerate(rows, 1):
        if not isinstance(r, Mapping):
            raise SpecError(f"plan.rows[{i}]", f"must be a mapping, got {type(r).__name__}")
    return [r for r in rows if r.get("fits", True)]


def request_tokens_price(req: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """A plan request's tokens to train on and price per GPU-hour, as the flags take them (tokens > 0 and at most
    MAX_TOKENS, a price >= 0, finite numbers, or absent); SpecError naming the key otherwise."""
    out = []
    for key, lo_ok, hi in (("tokens", False, MAX_TOKENS), ("price_per_gpu_hour", True, math.inf)):
        v = req.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v < 0 or (v == 0 and not lo_ok) or v > hi):
            rng = f"> 0 and <= {MAX_TOKENS:g}" if key == "tokens" else ">= 0"
            raise SpecError(f"plan.request.{key}", f"must be a finite number {rng}, got {v!r}")
        out.append(v)
    return out[0], out[1]


def scenario_from_plan(plan_json: Mapping[str, Any], rank: int = 1) -> Scenario:
    """The scenario of the ``rank``-th layout of a `trainsim plan --json` result."""
    if plan_json.get("kind") != "plan" or "request" not in plan_json:
        raise SpecError("plan", "not a `trainsim plan --json` result (missing kind/request)")
    req = plan_json["request"]
    if not isinstance(req, Mapping) or not all(k in req for k in ("model", "cluster")):
        raise SpecError("plan.request", "must be a mapping with the plan's model and cluster")
    rows = fitting_rows(plan_json)
    if not rows:
        raise SpecError("plan", "the plan has no layout that fits in memory")
    if not 1 <= rank <= len(rows):
        raise SpecError("rank", f"must be between 1 and {len(rows)}")
    _check_plan_metrics(rows)
    model = load_model(req["model"])
    cluster = load_cluster(req["cluster"])
    r = rows[rank - 1]
    try:
        kw = {k: r[k] for k in Candidate.__dataclass_fields__ if k not in ("stage_layers", "etp")}
        cand = Candidate(**kw, etp=r.get("etp"),
                         stage_layers=tuple(r["stage_layers"]) if r.get("stage_layers") else None)
    except (KeyError, TypeError) as e:
        raise SpecError("plan.rows", f"row {rank} is incomplete: {e}") from None
    _check_row_types(cand, rank)
    for key in ("global_batch", "seq_len"):
        if isinstance(req.get(key), bool) or not isinstance(req.get(key), int):
            raise SpecError(f"plan.request.{key}", f"must be a whole number, got {req.get(key)!r}")
    extra = req.get("training", {})
    if not isinstance(extra, Mapping):
        raise SpecError("plan.request.training", f"must be a mapping, got {type(extra).__name__}")
    searched = sorted(set(extra) - set(training_extra(extra)))
    if searched:
        raise SpecError(f"plan.request.training.{searched[0]}", "is decided by the plan's layout, not a fixed setting")
    placement = req.get("placement")
    try:
        if placement is not None:
            placement = load_layout({"placement": placement}).placement
        check_training_extra(extra, seq_len=1, global_batch=1)
    except SpecError as e:
        raise SpecError(f"plan.request.{e.field}", e.reason) from None
    etp = req.get("etp")
    if etp is not None:
        try:
            etp = load_layout({"etp": etp}).etp
        except SpecError as e:
            raise SpecError(f"plan.request.{e.field}", e.reason) from None
    lim = SearchLimits(dtype=req.get("dtype", "bf16"), training_extra=dict(extra), placement=placement, etp=etp)
    if "etp" not in r and etp is not None and model.is_moe:  # a plan written before rows carried their etp
        cand = replace(cand, etp=lim.expert_tp(cand.tp))
    return to_scenario(model, cluster, cand, int(req["global_batch"]), int(req["seq_len"]), lim,
                       name=f"{model.name} plan #{rank}: {cand.label()}")
