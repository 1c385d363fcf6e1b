"""Gather what the what-if report shows for one scenario: the engine's step (timeline, memory), an MFU map
over (TP, PP), weak and strong scaling, the ranked layouts of a plan, time to train, cost and goodput,
and predicted vs measured when an `execute` result is given. Rendering is html.py's job."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from trainsim.cost_models.profile import load_profile
from trainsim.simulator import goodput as gp
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.engine import simulate
from trainsim.simulator.fold import representative_count
from trainsim.simulator.levers import EXPLAIN_COLUMNS, explain, explain_rows, explain_title
from trainsim.simulator.planner import PlanRequest, peak_memory_bytes, plan
from trainsim.simulator.pools import pooled_memory_over, stage_capacity_bytes
from trainsim.simulator.predict import HOST_BOUND_SHARE, LATENCY_BOUND_SHARE, MAX_TRACE_PASSES, predict
from trainsim.simulator.search_space import (
    SearchLimits,
    divisors,
    pipeline_splits,
    training_extra,
    uneven_split,
)
from trainsim.specs import Scenario, SpecError, resolve
from trainsim.specs.errors import from_validation_error
from trainsim.specs.pools import gpus_label
from trainsim.validation.intervals import interval_for, load_table

from . import plots
from .html import FigureBlob, Report, Section, Table
from .plan_file import fitting_rows
from .tables import LAYOUT_COLUMNS, fmt_count, fmt_gib, fmt_money, fmt_pct, fmt_si, fmt_time, layout_table
from .timeline import events_from_engine

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile


@dataclass
class ReportOptions:
    """Knobs of the report that are not part of the scenario."""

    tokens: float | None = None                # None = gp.CHINCHILLA_TOKENS_PER_PARAM per parameter
    price_per_gpu_hour: float | None = None
    failure_rate_per_gpu_hour: float = gp.DEFAULT_FAILURE_RATE_PER_GPU_HOUR
    checkpoint_write_s: float | None = None
    storage_write_Bps: float = gp.DEFAULT_STORAGE_WRITE_BPS
    restart_s: float = gp.DEFAULT_RESTART_S
    profile_path: str | None = None
    plan_top_k: int = 10
    run_plan: bool = True
    scaling_points: int = 6
    plan_rank: int = 1                         # with a plan: the rank of the layout reported
    notes: list[str] = field(default_factory=list)


def _fig(name: str, title: str, caption: str, fig) -> FigureBlob:
    return FigureBlob(name=name, title=title, caption=caption, png=plots.figure_png(fig))


def train_tokens(scn: Scenario, opts: ReportOptions) -> float:
    """Tokens the report's run trains on (goodput.train_tokens)."""
    return gp.train_tokens(opts.tokens, scn.model.total_params())


def checkpoint_seconds(scn: Scenario, opts: ReportOptions) -> float:
    """Checkpoint write time: given, or the run's training state (under LoRA the adapters') / storage
    bandwidth."""
    if opts.checkpoint_write_s is not None:
        return opts.checkpoint_write_s
    return gp.checkpoint_write_s(gp.scenario_checkpoint_bytes(scn), opts.storage_write_Bps)


def time_to_train(scn: Scenario, step_time_s: float, opts: ReportOptions) -> gp.Goodput:
    """Wall-clock time, with failures and checkpoints, of the report's run at ``step_time_s`` per step."""
    steps = math.ceil(train_tokens(scn, opts) / scn.tokens_per_step)
    return gp.plan_goodput(steps * step_time_s, scn.num_gpus, checkpoint_seconds(scn, opts), opts.restart_s,
                           opts.failure_rate_per_gpu_hour)


# --- pieces ---------------------------------------------------------------------------------------

def step_timeline(scn: Scenario,
                  profile: CalibrationProfile | None) -> tuple[list[plots.TimelineEvent], float, int]:
    """Re-run the engine with recording on and turn its trace into timeline events; a step too long to draw
    (more pipeline passes than a trace holds) is drawn with fold.representative_count micro-batches instead,
    whose count is the third item."""
    table = build_cost_table(scn, profile=profile)
    if table.num_microbatches * table.pp * table.vpp > MAX_TRACE_PASSES:
        table = replace(table, num_microbatches=representative_count(table))
    res = simulate(table, record=True)
    return events_from_engine(res.trace or [], table), res.step_time_s, table.num_microbatches


def variant(scn: Scenario, *, gpus: int | None = None, layout: Mapping[str, Any] | None = None,
            training: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario with some fields changed, re-resolved (SpecError when invalid); dp is re-derived. An HSDP
    shard group larger than the new dp is capped at it (full sharding over the new dp): the group cannot hold
    more ranks than the data-parallel dimension has."""
    cluster = scn.cluster.with_gpus(gpus) if gpus and gpus != scn.num_gpus else scn.cluster
    update = {**(layout or {}), "dp": None}
    old = scn.layout
    if old.dp_shard is not None and "dp_shard" not in update:
        mp = math.prod(update.get(k, getattr(old, k)) for k in ("tp", "pp", "cp"))
        if cluster.num_gpus % mp == 0 and cluster.num_gpus // mp < old.dp_shard:
            update["dp_shard"] = None
    depth = (update.get("pp", old.pp), update.get("vpp", old.vpp))
    if "stage_layers" not in update and depth != (old.pp, old.vpp):
        # A pipeline layout is for its own pp x vpp only: another depth takes the default split, or the planner's
        # balanced uneven one where no default split exists (search_space.uneven_split).
        update["stage_layers"] = uneven_split(scn.model, depth[0] * depth[1])
    lay = old.model_copy(update=update)
    tr = scn.training.model_copy(update=dict(training or {}))
    try:
        lay = type(lay).model_validate(lay.model_dump())
    except ValidationError as e:
        raise from_validation_error(e, "layout") from None
    try:
        tr = type(tr).model_validate(tr.model_dump())
    except ValidationError as e:
        raise from_validation_error(e, "training") from None
    return resolve(scn.model, cluster, lay, tr, name=scn.name)


def _fits_then_fast(scn: Scenario, profile):
    """(closed-form prediction or None, 'OOM'); fit is decided by the memory cost model, as in the planner."""
    if scn.cluster.pools is not None:  # each stage against its own pool's GPU
        if pooled_memory_over(scn, "0%") == "oom":
            return None, "OOM"
    elif peak_memory_bytes(scn) > scn.cluster.gpu.memory_bytes:
        return None, "OOM"
    return predict(scn, fast=True, profile=profile), ""


def mfu_grid(scn: Scenario,
             profile: CalibrationProfile | None) -> tuple[dict[tuple[int, int], Any], list[int], list[int]]:
    """Closed-form MFU over TP (within a node) × PP at the scenario's GPU count; other settings kept
    (1F1B where the scenario's interleaving does not fit the stage count)."""
    m, n, cp = scn.model, scn.num_gpus, scn.layout.cp
    tps = [t for t in divisors(n // cp) if t <= scn.cluster.gpus_per_node and not (m.num_heads % t or m.kv_heads % t or m.ffn % t)]
    pps = sorted({p for t in tps for p in divisors(n // (t * cp)) if pipeline_splits(m, p) and p <= 64})
    cells: dict[tuple[int, int], Any] = {}
    for tp in tps:
        for pp in pps:
            if (n // cp) % (tp * pp):
                cells[(tp, pp)] = "—"
                continue
            tries = [({"tp": tp, "pp": pp}, {"sequence_parallel": tp > 1 and scn.training.sequence_parallel})]
            # 1F1B fallback without model chunks, where the EP overlap cannot run (it needs chunks when pp > 1)
            plain = {"schedule": "1f1b", **tries[0][1], **({"ep_comm_overlap": False} if pp > 1 else {})}
            if pp == 1:
                tries = [({"tp": tp, "pp": 1, "vpp": 1}, {"schedule": "1f1b", "sequence_parallel": tries[0][1]["sequence_parallel"]})]
            else:
                tries.append(({"tp": tp, "pp": pp, "vpp": 1}, plain))
            value: Any = "invalid"
            for lay, tr in tries:
                try:
                    v = variant(scn, layout=lay, training=tr)
                except SpecError:
                    continue
                pred, why = _fits_then_fast(v, profile)
                value = pred.mfu if pred else why
                break
            cells[(tp, pp)] = value
    return cells, tps, pps


def scaling(scn: Scenario, profile: CalibrationProfile | None,
            points: int = 6) -> tuple[list[dict], list[dict]]:
    """Strong (global batch fixed) and weak (global batch ∝ GPUs) scaling with the scenario's tp/pp/cp/ep,
    GPU counts ×2^k around it; closed-form predictions (the engine's step for the scenario itself)."""
    n0 = scn.num_gpus
    mp = scn.layout.tp * scn.layout.pp * scn.layout.cp
    counts = sorted({n0 * 2**k for k in range(-points, points + 1) if n0 * 2**k >= mp and (n0 * 2**k) % mp == 0
                     and float(n0 * 2**k).is_integer()})
    counts = [int(c) for c in counts]
    below = [c for c in counts if c < n0][-(points // 2 + 1):]
    above = [c for c in counts if c > n0][: points - len(below)]
    counts = below + [n0] + above
    strong, weak = [], []
    table = load_table()
    for n in counts:
        if n > scn.cluster.gpus_per_node and n % scn.cluster.gpus_per_node:
            continue
        for kind, gb in (("strong", scn.training.global_batch), ("weak", scn.training.global_batch * n // n0)):
            if gb < 1 or scn.training.global_batch * n % n0:
                continue
            try:
                v = variant(scn, gpus=n, training={"global_batch": gb})
            except SpecError:
                continue
            pred, _why = _fits_then_fast(v, profile)
            pt = {"gpus": n, "global_batch": gb, "dp": v.dp, "fits": pred is not None,
                  "tokens_per_s": pred.tokens_per_s if pred else None, "mfu": pred.mfu if pred else None,
                  "step_time_s": pred.step_time_s if pred else None}
            if pred is not None:  # the 80 % band the figure shades (validation.intervals)
                iv = interval_for(pred.step_time_s, pred.tokens_per_s, pred.mfu, v, profile, 0.8, table,
                                  breakdown=pred.breakdown_s)
                pt["tokens_per_s_band"] = list(iv.tokens_per_s)
            (strong if kind == "strong" else weak).append(pt)
    return strong, weak


def goodput_curve(g: gp.Goodput) -> list[tuple[float, float]]:
    """Expected wall time over checkpoint intervals from Daly/30 to 30x Daly (log-spaced)."""
    if not math.isfinite(g.interval_s) or g.ideal_time_s <= 0:
        return []
    lo, hi = g.interval_s / 30, min(g.interval_s * 30, max(g.ideal_time_s, g.interval_s * 1.01))
    out = []
    for i in range(60):
        tau = lo * (hi / lo) ** (i / 59)
        out.append((tau, gp.expected_wall_s(g.ideal_time_s, tau, g.checkpoint_s, g.restart_s, g.mtbf_s)))
    return out


MEASURED_MEMORY_KEYS = (("params", "weights"), ("grads", "grads"), ("optimizer", "optimizer"),
                        ("activations_peak", "activations (peak)"))


def measured_pairs(measured: Mapping[str, Any], pred) -> tuple[list[tuple[str, float, float]], list[tuple[str, float, float]]]:
    """(step-time pairs in seconds, memory pairs in MiB) from a `trainsim execute --json` result:
    ``measured.step_time_s`` (median) / ``step_time_min_s`` against ``predicted.step_time_s`` (or this report's
    prediction), and per stage the model-state and saved-activation bytes of ``measured.per_stage`` against
    ``predicted.per_stage``."""
    if not isinstance(measured.get("measured"), Mapping):
        raise SpecError("measured", "not a `trainsim execute --json` result (no 'measured' object)")
    meas = measured["measured"]
    predicted = measured.get("predicted") or {}
    t_pairs: list[tuple[str, float, float]] = []
    m_pairs: list[tuple[str, float, float]] = []
    step_p = predicted.get("step_time_s", getattr(pred, "step_time_s", None))
    for key, label in (("step_time_s", "step time (median)"), ("step_time_min_s", "step time (min)")):
        v = meas.get(key)
        if isinstance(v, (int, float)) and v > 0 and step_p:
            t_pairs.append((label, float(step_p), float(v)))
    ps, ms = predicted.get("per_stage") or [], meas.get("per_stage") or []
    for i, (p_st, m_st) in enumerate(zip(ps, ms)):
        for key, label in MEASURED_MEMORY_KEYS:
            if isinstance(p_st.get(key), (int, float)) and isinstance(m_st.get(key), (int, float)):
                m_pairs.append((f"stage {i} {label}", float(p_st[key]) / 2**20, float(m_st[key]) / 2**20))
    return t_pairs, m_pairs


# --- the report -----------------------------------------------------------------------------------

def _cluster_text(scn: Scenario) -> str:
    """The cluster's GPUs with their memory: one node type, or each pool's (with the placement) on GPU pools."""
    c = scn.cluster
    gpus = gpus_label(c, c.num_gpus, memory=fmt_gib)
    if not c.pools:
        return f"{c.name}: {gpus}, {c.num_nodes} nodes of {c.gpus_per_node}"
    return f"{gpus}, {c.num_nodes} nodes of {c.gpus_per_node}; placement {c.placement}"


def scenario_table(scn: Scenario) -> Table:
    m, c, lay, t = scn.model, scn.cluster, scn.layout, scn.training
    rows = [
        ["model", (f"{m.name}: {m.num_layers} layers, hidden {m.hidden}, {m.num_heads} heads ({m.kv_heads} KV), "
                   f"FFN {m.ffn}, vocab {m.vocab_size}") + (f", {m.num_experts} experts top-{m.top_k}" if m.is_moe else "")
                  + (f", {m.mtp_layers} MTP" if m.mtp_layers else "")],
        ["parameters", f"{fmt_count(m.total_params())} total, {fmt_count(m.active_params())} active per token"],
        ["cluster", _cluster_text(scn)],
        ["layout", f"TP {lay.tp} × PP {lay.pp} × DP {scn.dp} × CP {lay.cp}, EP {lay.ep}"
                   + (f" (ETP {scn.expert_tp})" if m.is_moe and scn.expert_tp != lay.tp else "") + f", VPP {lay.vpp}"
                   + (f"; layers per virtual stage {list(lay.stage_layers)}" if lay.stage_layers else "")],
        ["batch", (f"global {t.global_batch} sequences × {t.seq_len} tokens = {fmt_count(scn.tokens_per_step)} tokens/step; "
                   f"micro-batch {t.micro_batch}, {scn.num_microbatches} micro-batches per step")],
        ["training", (f"{t.dtype}, schedule {t.schedule}, recompute {t.recompute_label}, ZeRO {t.effective_zero}, "
                      f"sequence parallel {'on' if t.sequence_parallel else 'off'}"
                      + (", EP all-to-all overlap" if t.ep_comm_overlap else "")
                      + (f", LoRA rank {t.lora_rank} on {'+'.join(t.lora_target_modules)} (base frozen)"
                         if t.lora_rank else ""))],
    ]
    shared = c.scale_out.background_load.sentence()
    if shared:
        rows.append(["shared fabric", shared.removeprefix("shared fabric: ")])
    return Table("Settings", ["setting", "value"], rows)


def _plan_for(scn: Scenario, opts: ReportOptions):
    req = PlanRequest(
        model=scn.model, cluster=scn.cluster, gpu_counts=(scn.num_gpus,), global_batch=scn.training.global_batch,
        seq_len=scn.training.seq_len, tokens=opts.tokens, price_per_gpu_hour=opts.price_per_gpu_hour,
        top_k=opts.plan_top_k,
        limits=SearchLimits(dtype=scn.training.dtype, training_extra=training_extra(scn.training.model_dump()),
                            placement=scn.layout.placement, etp=scn.layout.etp),
        failure_rate_per_gpu_hour=opts.failure_rate_per_gpu_hour, checkpoint_write_s=opts.checkpoint_write_s,
        storage_write_Bps=opts.storage_write_Bps, restart_s=opts.restart_s, profile_path=opts.profile_path,
    )
    return plan(req).to_json()


def _band_sentence(pred, scn: Scenario, profile) -> str:
    """The 80 % interval of the headline numbers (validation.intervals), with why it is wider when it is."""
    iv = interval_for(pred.step_time_s, pred.tokens_per_s, pred.mfu, scn, profile, 0.8,
                      breakdown=pred.breakdown_s)
    notes = "".join(f" Wider: {r}." for r in iv.reasons)
    return (f"80 % interval: {fmt_time(iv.step_time_s[0])} to {fmt_time(iv.step_time_s[1])} per step, "
            f"{fmt_si(iv.tokens_per_s[0])} to {fmt_si(iv.tokens_per_s[1])} tokens/s, MFU {fmt_pct(iv.mfu[0])} to "
            f"{fmt_pct(iv.mfu[1])} ({iv.basis}).{notes}")


def build_report(scn: Scenario, opts: ReportOptions, plan_json: Mapping[str, Any] | None = None,
                 measured: Mapping[str, Any] | None = None, title: str | None = None) -> Report:
    """Every section of the what-if report for ``scn`` (the best layout of ``plan_json`` when given); names in a
    script the plots' font lacks are drawn as boxes without a warning line (plots.quiet_missing_glyphs)."""
    with plots.quiet_missing_glyphs():
        return _report(scn, opts, plan_json, measured, title)


def _report(scn: Scenario, opts: ReportOptions, plan_json: Mapping[str, Any] | None,
            measured: Mapping[str, Any] | None, title: str | None) -> Report:
    profile = load_profile(opts.profile_path) if opts.profile_path else None
    pred = predict(scn, fast=False, profile=profile, fixed_costs=True)
    drift = _plan_drift_note(plan_json, opts, pred)  # the user's plan, before one is searched here
    sections: list[Section] = [
        Section("scenario", "Scenario", tables=[scenario_table(scn)]),
        _step_section(scn, pred, profile),
        _memory_section(scn, pred),
        levers_section(scn, profile),
        _mfu_section(scn, profile),
        _scaling_section(scn, profile, opts),
    ]
    if plan_json is None and opts.run_plan:
        plan_json = _plan_for(scn, opts)
    if plan_json is not None:
        sections.append(_layouts_section(plan_json))
    g = time_to_train(scn, pred.step_time_s, opts)
    gpu_hours = scn.num_gpus * g.time_to_train_s / 3600
    cost = gpu_hours * opts.price_per_gpu_hour if opts.price_per_gpu_hour is not None else None
    sections.append(_time_cost_section(scn, opts, g, gpu_hours, cost))
    if measured is not None:
        sections.append(_measured_section(measured, pred))
    metrics = [("step time", fmt_time(pred.step_time_s)), ("tokens/s", fmt_si(pred.tokens_per_s)),
               ("MFU", fmt_pct(pred.mfu)), ("bubble", fmt_pct(pred.bubble_fraction)),
               ("peak memory", f"{fmt_gib(pred.peak_bytes)} ({'fits' if pred.fits else 'OOM'})"),
               ("goodput", fmt_pct(g.goodput)), ("time to train", fmt_time(g.time_to_train_s)),
               ("GPU-hours", fmt_si(gpu_hours))]
    if cost is not None:
        metrics.append(("cost", fmt_money(cost)))
    return Report(
        title=title or f"trainsim what-if report: {scn.model.name} on {_gpus_text(scn)}",
        subtitle=f"{scn.name} — TP{scn.layout.tp} PP{scn.layout.pp} DP{scn.dp} CP{scn.layout.cp} EP{scn.layout.ep} "
                 f"VPP{scn.layout.vpp}, {scn.training.schedule}, {scn.training.global_batch}×{scn.training.seq_len} tokens per step",
        metrics=metrics, sections=sections, notes=_report_notes(opts, pred) + drift)


# A reported layout's step time beside what its plan recorded for it: the same engine on the same request agrees
# to rounding; beyond this the plan file was edited or came from another trainsim or calibration.
PLAN_DRIFT_RTOL = 1e-3


def _plan_drift_note(plan_json: Mapping[str, Any] | None, opts: ReportOptions, pred) -> list[str]:
    """A note where the reported layout's prediction differs from the step time its plan file records."""
    if plan_json is None:
        return []
    rows = fitting_rows(plan_json)
    if not 1 <= opts.plan_rank <= len(rows) or rows[opts.plan_rank - 1].get("source") != "engine":
        return []
    recorded = rows[opts.plan_rank - 1]["step_time_s"]
    if abs(pred.step_time_s / recorded - 1) <= PLAN_DRIFT_RTOL:
        return []
    return [(f"The plan file records {fmt_time(recorded)} per step for this layout (rank {opts.plan_rank}); this "
             f"prediction is {fmt_time(pred.step_time_s)}: the file was edited, or made by another trainsim version "
             f"or calibration. The ranked table shows the file's figures.")]


def _step_section(scn: Scenario, pred, profile) -> Section:
    """One training step: the headline numbers with their interval, the pipeline timeline and the breakdown."""
    events, sim_step_s, shown = step_timeline(scn, profile)
    exp = pred.exposed_comm_s
    step_par = (f"The discrete-event engine predicts {fmt_time(pred.step_time_s)} per step "
                f"({fmt_si(pred.tokens_per_s)} tokens/s, MFU {fmt_pct(pred.mfu)}, HFU {fmt_pct(pred.hfu)}). "
                f"Pipeline bubbles take {fmt_pct(pred.bubble_fraction)} of the step; exposed communication: "
                + ", ".join(f"{k.upper()} {fmt_time(exp.get(k, 0.0))}" for k in ("tp", "cp", "ep", "pp", "dp")) + ".")
    step_par += " " + _bound_sentence(pred) + _band_sentence(pred, scn, profile)
    tl = plots.timeline_figure(events, scn.layout.pp, step_time_s=sim_step_s,
                               title=f"One step of {scn.model.name}: {scn.layout.pp} stages × {scn.num_microbatches} micro-batches ({scn.training.schedule})"
                               + ("" if shown == scn.num_microbatches else
                                  f"; drawn with {shown}, the steady state repeats"))
    step_tables = []
    if pred.breakdown_s:
        parts = [[k.replace("_", " "), fmt_time(v)] for k, v in pred.breakdown_s.items() if k != "critical_stage"]
        if "collective_fixed_cost_s" in pred.extra:
            parts.append(["of which collectives' fixed costs", fmt_time(pred.extra["collective_fixed_cost_s"])])
        crit = pred.breakdown_s.get("critical_stage")
        bd_title = "Step time breakdown" + (f" (critical stage {int(crit)})" if crit is not None else "")
        step_tables.append(Table(bd_title, ["part", "time"], parts))
    return Section("step", "One training step", [step_par], [_fig(
        "timeline", "Pipeline timeline of one step",
        "Each stage has a compute row (forward, backward, recompute, and the TP/CP/EP communication the "
        "compute stream waits for) and a communication row (pipeline sends/receives and data-parallel "
        "gradient reduction; messages much shorter than the step are drawn at a minimum width). Hatched red is "
        "idle compute time: the pipeline bubble. One representative rank per stage (DP replicas and TP peers do "
        "identical work).", tl)], step_tables)


def _bound_sentence(pred) -> str:
    """What bounds the step besides the GPU's work: its wait for the host to issue kernels (host-bound) and the
    collectives' fixed costs (latency-bound), each as a share of the step, at predict's bars (HOST_BOUND_SHARE,
    LATENCY_BOUND_SHARE)."""
    step = pred.step_time_s
    if step <= 0:
        return ""
    idle = pred.breakdown_s.get("host_idle", 0.0) / step
    fixed = pred.extra.get("collective_fixed_cost_s", 0.0) / step
    host_bound = " (host-bound)" if idle >= HOST_BOUND_SHARE else ""
    out = f"GPU idle waiting for the host: {fmt_pct(idle)} of the step{host_bound}. "
    if "collective_fixed_cost_s" in pred.extra:
        out += (f"Collectives' fixed costs (each call's launch and latency) take {fmt_pct(fixed)} of the step"
                f"{' (latency-bound)' if fixed >= LATENCY_BOUND_SHARE else ''}. ")
    return out


def _gpus_text(scn: Scenario) -> str:
    """'1024 × H100 SXM5 80GB' or, on GPU pools, '512 × A100 80GB SXM4 + 512 × H100 SXM5 80GB'."""
    return gpus_label(scn.cluster, scn.num_gpus)


def _memory_section(scn: Scenario, pred) -> Section:
    """Memory per GPU: whether it fits, the assumptions, the per-stage figure and table."""
    per_stage = [{"weights": s.weights, "grads": s.grads, "optimizer": s.optimizer, "activations": s.activations,
                  "other": s.other} for s in pred.per_stage_memory]
    mem_fig = plots.memory_figure(per_stage, stage_capacity_bytes(scn, pred),
                                  title=f"Peak memory per GPU by stage ({_gpus_text(scn)})")
    show = list(range(len(per_stage))) if len(per_stage) <= 8 else [0, 1, len(per_stage) - 2, len(per_stage) - 1]
    mem_rows = [[str(i)] + [fmt_gib(per_stage[i][k]) for k in ("weights", "grads", "optimizer", "activations", "other")]
                + [fmt_gib(sum(per_stage[i].values()))] for i in show]
    fits_txt = ("fits" if pred.fits else "does NOT fit") + f": peak {fmt_gib(pred.peak_bytes)} of {fmt_gib(pred.gpu_memory_bytes)}"
    tables = [Table("Per-stage memory", ["stage", "weights", "grads", "optimizer", "activations", "other", "total"], mem_rows,
                    "" if len(per_stage) <= 8 else "First, second, second-to-last and last stages shown.")]
    if pred.pools:  # mixed GPU pools: each pool against its own GPU (simulator/pools.py)
        fits_txt = ("fits" if pred.fits else "does NOT fit") + " on every GPU pool"
        tables.append(Table("Memory per GPU pool", ["pool", "GPU", "nodes", "stages / replicas", "peak", "capacity",
                                                    "fits"],
                            [[e["name"], e["gpu"], str(e["nodes"]),
                              ",".join(map(str, e["stages"])) if "stages" in e else str(e["replicas"]),
                              fmt_gib(e["peak_memory_bytes"]), fmt_gib(e["capacity_bytes"]),
                              "yes" if e["fits"] else "no"] for e in pred.pools], ""))
    return Section("memory", "Memory per GPU", [f"The layout {fits_txt} (headroom {fmt_gib(pred.free_bytes)}).",
                                               memory_assumptions_text(pred)],
                   [_fig("memory", "Memory per pipeline stage",
                         "Peak device memory of one GPU of each stage, stacked by component, against the GPU's "
                         "capacity (dashed). Activations follow the schedule's in-flight micro-batches.", mem_fig)],
                   tables)


def _mfu_section(scn: Scenario, profile) -> Section:
    """MFU over (TP, PP) at this GPU count, closed form."""
    cells, tps, pps = mfu_grid(scn, profile)
    hm = plots.mfu_heatmap(cells, tps, pps, marked=(scn.layout.tp, scn.layout.pp),
                           title=f"MFU over (TP, PP) on {scn.num_gpus} GPUs (closed form)")
    return Section("mfu", "MFU over tensor and pipeline parallelism", [(
        "Closed-form screen of every (TP, PP) at this GPU count with the other settings of the scenario "
        "(DP derived; 1F1B where the scenario's interleaving does not divide the stages). OOM: does not fit; "
        "invalid: the batch or the model cannot be split that way; —: TP×PP does not divide the GPUs.")],
        [_fig("mfu_heatmap", "MFU heatmap over (TP, PP)", "Model FLOPs utilisation in percent; the red box is this scenario.", hm)])


def _scaling_section(scn: Scenario, profile, opts: ReportOptions) -> Section:
    """Weak and strong scaling from this scenario, closed form."""
    strong, weak = scaling(scn, profile, opts.scaling_points)
    sc = plots.scaling_figure([p for p in strong if p["fits"]], [p for p in weak if p["fits"]],
                              title=f"{scn.model.name} TP{scn.layout.tp} PP{scn.layout.pp}")
    sc_rows = [[kind, str(p["gpus"]), str(p["dp"]), str(p["global_batch"]), fmt_time(p["step_time_s"]),
                fmt_si(p["tokens_per_s"]), fmt_pct(p["mfu"]), "yes" if p["fits"] else "no (OOM)"]
               for kind, pts in (("strong", strong), ("weak", weak)) for p in pts]
    return Section("scaling", "Weak and strong scaling", [(
        "Strong scaling keeps the global batch and adds data-parallel replicas (fewer micro-batches each); "
        "weak scaling grows the global batch with the GPU count. TP, PP, CP and EP as in the scenario; "
        "closed-form predictions." + (" On GPU pools the GPU count is the pools' (another count would need "
                                      "other pools), so the scenario's is the only point." if scn.cluster.pools
                                     else ""))],
        [_fig("scaling", "Weak and strong scaling", "Throughput against GPUs (dotted: ideal linear scaling from the "
              "smallest point; shaded: the 80 % prediction interval, validation.intervals) and MFU.", sc)],
        [Table("Scaling points", ["kind", "GPUs", "DP", "global batch", "step", "tokens/s", "MFU", "fits"], sc_rows)])


def _layouts_section(plan_json: Mapping[str, Any]) -> Section:
    """Ranked layouts of a plan: its counts, the best layouts and, over several GPU counts, the Pareto front."""
    rows = fitting_rows(plan_json)
    c = plan_json.get("counts", {})
    req = plan_json.get("request", {})
    headroom = (f"{c.get('over_headroom', 0)} within memory but over the {req['memory_headroom']} headroom, "
                if "memory_headroom" in req else "")
    host = (f" ({c['host_oom']} of them offload beyond a node's host memory)" if c.get("host_oom") else "")
    par = (f"{c.get('enumerated', '?')} layouts enumerated, {c.get('invalid', 0)} invalid, {c.get('oom', 0)} out of "
           f"memory{host}, "
           f"{headroom}"
           f"{c.get('dominated', 0)} dominated (heavier recompute than needed), {c.get('screened', '?')} screened in closed form, "
           f"top {c.get('confirmed', '?')} confirmed by the engine ({plan_json.get('wall_s', 0.0):.1f} s).")
    figs = []
    gpu_counts = plan_json.get("request", {}).get("gpu_counts", [])
    if len(gpu_counts) > 1:
        priced = plan_json.get("request", {}).get("price_per_gpu_hour") is not None
        pf = plots.pareto_figure(plan_json.get("screened_top", []) + rows, plan_json.get("pareto", []),
                                 cost_label="cost ($)" if priced else "cost (GPU-hours)",
                                 cost_key="cost" if priced else "gpu_hours")
        figs.append(_fig("pareto", "Pareto front", "Time to train (with failures) against cost; colour = GPU count, "
                         "filled = confirmed by the engine, hollow = closed-form screen; the black line joins "
                         "layouts no other beats on GPUs, time and cost at once.", pf))
    section = Section("layouts", "Ranked layouts", [par], figs,
                      [Table("Best layouts", list(LAYOUT_COLUMNS), layout_table(rows),
                             "Ranked by expected time to train including failures. 'engine' rows were confirmed "
                             "by the discrete-event engine; 'sp': with sequence parallelism; 'free': memory left.")])
    if plan_json.get("pareto") and len(gpu_counts) > 1:
        pr = [[str(r["gpus"]), r["label"], fmt_si(r["tokens_per_s"]), fmt_pct(r["mfu"]), fmt_time(r["time_to_train_s"]),
               fmt_si(r["gpu_hours"]), fmt_money(r.get("cost"))] for r in plan_json["pareto"]]
        section.tables.append(Table("Pareto front: GPUs vs time to train vs cost",
                                    ["GPUs", "layout", "tokens/s", "MFU", "time to train", "GPU-hours", "cost"], pr))
    return section


def _time_cost_section(scn: Scenario, opts: ReportOptions, g, gpu_hours: float, cost: float | None) -> Section:
    """Time to train, cost and goodput of the run ``g`` (gp.Goodput) with its checkpoint-interval curve."""
    tokens = train_tokens(scn, opts)
    rule = "" if opts.tokens else f" ({gp.CHINCHILLA_TOKENS_PER_PARAM:g} per parameter)"
    ttt_rows = [["tokens to train", fmt_count(tokens) + rule],
                ["optimizer steps", f"{math.ceil(tokens / scn.tokens_per_step):,}"],
                ["failure-free time", fmt_time(g.ideal_time_s)],
                ["job MTBF", fmt_time(g.mtbf_s)],
                ["checkpoint write", fmt_time(g.checkpoint_s)],
                ["restart after a failure", fmt_time(g.restart_s)],
                ["optimal checkpoint interval (Daly)", fmt_time(g.interval_s)],
                ["first-order interval (Young)", fmt_time(g.young_interval_s)],
                ["expected failures", f"{g.expected_failures:.1f}"],
                ["goodput", fmt_pct(g.goodput)],
                ["expected time to train", fmt_time(g.time_to_train_s)],
                ["GPU-hours", fmt_si(gpu_hours)],
                ["cost", fmt_money(cost) if cost is not None else "— (give --price-per-gpu-hour)"]]
    curve = goodput_curve(g)
    gfigs = []
    if curve:
        gfigs.append(_fig("goodput", "Time to train vs checkpoint interval",
                          "Daly's expected wall time for this run as a function of the checkpoint interval; the "
                          "optimum balances checkpoint overhead against work lost to failures.",
                          plots.goodput_figure(curve, g.interval_s, g.young_interval_s, g.ideal_time_s)))
    return Section("time-cost", "Time to train, cost and goodput", [(
        f"Failures arrive at {opts.failure_rate_per_gpu_hour:.3g} per GPU-hour ({gp.FAILURE_RATE_SOURCE}), "
        f"so a {scn.num_gpus}-GPU job fails every {fmt_time(g.mtbf_s)} on average. With checkpoints every "
        f"{fmt_time(g.interval_s)} (Daly's optimum) the run keeps {fmt_pct(g.goodput)} of its time productive.")],
        gfigs, [Table("Time to train and cost", ["quantity", "value"], ttt_rows)])


def _measured_section(measured: Mapping[str, Any], pred) -> Section:
    """Predicted vs measured step time and memory of an executed run (`trainsim execute --json`)."""
    t_pairs, m_pairs = measured_pairs(measured, pred)
    figs = []
    if t_pairs:
        figs.append(_fig("measured_time", "Predicted vs measured step time", "From `trainsim execute --json`.",
                         plots.predicted_vs_measured_figure(t_pairs, "seconds", "Step time: predicted vs measured")))
    if m_pairs:
        figs.append(_fig("measured_memory", "Predicted vs measured memory", "Bytes per rank by stage and component "
                         "(model states, and saved activations at the schedule's peak).",
                         plots.predicted_vs_measured_figure(m_pairs, "MiB", "Memory per rank: predicted vs measured")))
    rows = [[n, f"{p:.4g} s", f"{m:.4g} s", f"{100 * (p - m) / m:+.1f}%" if m else "—"] for n, p, m in t_pairs]
    rows += [[n, f"{p:.4g} MiB", f"{m:.4g} MiB", f"{100 * (p - m) / m:+.1f}%" if m else "—"] for n, p, m in m_pairs]
    own = (measured.get("predicted") or {}).get("prediction") or {}
    source = ("the execute result's own prediction of the run as executed (torch's framework behaviours, "
              f"the executor's optimizer; calibration: {own.get('calibration', 'defaults')})"
              if (measured.get("predicted") or {}).get("step_time_s") is not None else "this report's prediction")
    intro = ("The same scenario executed for real with torch.distributed (`trainsim execute`). "
             f"Predicted step time: {source}.")
    return Section("measured", "Predicted vs measured", [intro], figs,
                   [Table("Predicted vs measured", ["metric", "predicted", "measured", "error"], rows)])


def _report_notes(opts: ReportOptions, pred) -> list[str]:
    """The report's notes: the sources of its defaults, the options' own notes and the prediction's warnings."""
    return [
        f"Failure rate default: {gp.FAILURE_RATE_SOURCE}.",
        ("Checkpoint interval: Young (CACM 1974) first order sqrt(2·δ·M); Daly (FGCS 2006) higher order, "
         "expected wall time M·e^(R/M)·(e^((τ+δ)/M) − 1)·T/τ."),
        (f"Checkpoint write time: full training state (weights + fp32 master and Adam states; under LoRA the "
         f"adapters' only, as Megatron-Bridge's PEFT checkpoints) at "
         f"{opts.storage_write_Bps / 1e12:.1f} TB/s aggregate (Llama 3's Tectonic storage sustained 2 TB/s) unless given."),
        f"Restart time {fmt_time(opts.restart_s)} (assumption, as in Daly's examples) unless given.",
        "Tokens to train default: 20 per parameter (Hoffmann et al. 2022, compute-optimal).",
        "MFU = model FLOPs (forward + backward, no recompute) / (step time × GPUs × dense peak); see docs/design.md in the trainsim repository.",
        f"Predictions use calibration: {pred.calibration}.",
    ] + list(opts.notes) + list(pred.warnings)


def levers_section(scn: Scenario, profile: CalibrationProfile | None) -> Section:
    """What to change: the what-if levers of simulator.levers ranked by step-time gain, with peak memory and fit,
    screened by the closed form (`trainsim predict --explain` prints the same table)."""
    expl = explain(scn, profile=profile)
    best = next((lv for lv in expl.levers if lv.applicable and lv.kind == "setting" and lv.fits
                 and (lv.gain_s or 0) > 0), None)
    lead = (f"The largest gain from one setting that still fits: {best.lever} ({best.change}), "
            f"{fmt_pct(best.gain_fraction)} of the step." if best else
            "No single setting that still fits shortens the step.")
    par = ("Each lever changes one thing and is predicted in closed form (the planner's screen) against the "
           "scenario predicted the same way; gains are shares of that step. Ceilings (ideal network, no pipeline "
           "bubble) are bounds, not settings; negative gains are memory levers (they trade time for memory). "
           + lead)
    return Section("levers", "What to change: levers ranked by gain", [par],
                   tables=[Table(explain_title(expl), list(EXPLAIN_COLUMNS), explain_rows(expl))])


def memory_assumptions_text(pred) -> str:
    """One sentence: the model-state dtypes the prediction assumed and the named terms of 'other'."""
    a = pred.memory_assumptions
    if not a:
        return ""
    terms = {k: v for k, v in pred.other_terms.items() if k != "stage" and v}
    other = "; 'other' holds " + ", ".join(f"{k.replace('_', ' ')} {fmt_gib(v)}" for k, v in terms.items()) if terms else ""
    return (f"Model states as {a['framework']} keeps them: {a['note']} ({a['weights_bytes_per_param']:g} + "
            f"{a['grads_bytes_per_param']:g} + {a['optimizer_bytes_per_param']:g} bytes per parameter before "
            f"sharding){other}.")
