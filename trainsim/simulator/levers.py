"""What-if levers: which single change to a scenario shortens its step most, and what it costs in memory.

``variants(scenario)`` is pure: each lever is a function of the Scenario that returns the changed, re-resolved
Scenario (or why the lever does not apply). ``explain(...)`` predicts each variant and ranks the levers by
step-time gain over the unchanged scenario, predicted the same way. The levers:

* ideal network -- every collective and pipeline message free (``predict(ideal_network=True)``): a ceiling.
* no pipeline bubble -- every stage's bubble removed from the predicted step (bubble_free_step_s): each stage
  runs its own work back to back (compute, the communication it waits for, its gradient-reduction tail and
  optimizer) and the busiest stage sets the step. A ceiling, not a schedule: what a schedule that fills every
  idle slot (the zero-bubble family) could win at most. It is read from the per-stage bubble breakdown of the
  same prediction (engine.set_bubbles: idle within the pipeline span not explained by communication) rather
  than the critical stage's bubble alone, because with uneven stages (embedding and loss on the ends) part of a
  light stage's idle time is waiting for the heaviest stage, which no schedule removes; for uniform stages it
  is (p-1)/(m+p-1) of the span for GPipe/1F1B and (p-1)/(v·m+p-1) interleaved (SC21, pipeline_bubble.csv).
  Memory is the scenario's own.
* one more interleaving depth -- the next model-chunk count the layers allow (vpp+1, else the next that
  divides; 1F1B becomes Megatron's interleaved schedule).
* TP / DP / EP communication overlap on -- Megatron-Core's ``--tp-comm-overlap`` (TrainingSpec.tp_comm_overlap),
  ``--overlap-moe-expert-parallel-comm`` (ep_comm_overlap, MoE models) and ``--overlap-grad-reduce``
  (TrainingSpec.overlap_grad_reduce) where the framework's default (cost_models/framework.py) leaves it off.
* recompute one level lighter (full -> selective -> none: faster, more memory) and one level heavier (none ->
  selective -> full: the memory lever).
* twice the micro-batch, where the global batch still splits into whole micro-batches.
* the next ZeRO stage (Megatron's distributed optimizer counts as stage 1).
* torch.compile on (TrainingSpec.compile: frameworks torch and pytorch-fsdp, torchtitan --training.compile).
* torchao's FSDP2 float8 all-gather on (TrainingSpec.float8_all_gather: torchao fp8 under ZeRO-3, with the
  per-step scale precompute torchtitan pairs it with).

Every variant is re-resolved through specs.resolve, so a lever the layout rules refuse is listed with the
resolver's reason instead of being costed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from trainsim.cost_models import framework
from trainsim.specs import Scenario, SpecError, resolve
from trainsim.specs.errors import from_validation_error
from trainsim.specs.fp8_library import resolved as resolved_fp8_library
from trainsim.specs.framework_behaviour import behaviour

from .analytic import estimate
from .builder import build_cost_table
from .fold import MAX_WHOLE_PASSES, simulate_step
from .predict import _with_run_calibration, predict
from .search_space import uneven_split

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile

Kind = Literal["ceiling", "setting"]


@dataclass(frozen=True)
class Variant:
    """One lever applied to a scenario: the changed scenario, or the reason it does not apply."""

    lever: str
    change: str
    kind: Kind = "setting"
    scenario: Scenario | None = None
    reason: str = ""
    ideal_network: bool = False
    no_bubble: bool = False


@dataclass(frozen=True)
class Lever:
    """A predicted lever: step time, gain over the scenario (seconds and share of its step), peak memory, fit."""

    lever: str
    change: str
    kind: Kind
    reason: str = ""
    step_time_s: float | None = None
    gain_s: float | None = None
    gain_fraction: float | None = None
    peak_bytes: float | None = None
    free_bytes: float | None = None
    fits: bool | None = None

    @property
    def applicable(self) -> bool:
        return not self.reason

    def to_json(self) -> dict[str, Any]:
        return {"lever": self.lever, "change": self.change, "kind": self.kind, "applicable": self.applicable,
                "reason": self.reason or None, "step_time_s": self.step_time_s, "gain_s": self.gain_s,
                "gain_fraction": self.gain_fraction, "peak_bytes": self.peak_bytes, "free_bytes": self.free_bytes,
                "fits": self.fits}


@dataclass(frozen=True)
class Explanation:
    """The levers ranked by gain (applicable ones first, best first), and the baseline they are measured from."""

    mode: str
    baseline_step_time_s: float
    baseline_peak_bytes: float
    gpu_memory_bytes: float
    levers: tuple[Lever, ...]
    wall_s: float

    def to_json(self) -> list[dict[str, Any]]:
        return [{**lv.to_json(), "rank": i + 1 if lv.applicable else None, "mode": self.mode,
                 "baseline_step_time_s": self.baseline_step_time_s} for i, lv in enumerate(self.levers)]


# --- the variants (pure functions of a Scenario) ------------------------------------------------------------

def changed(scn: Scenario, layout: Mapping[str, Any] | None = None,
            training: Mapping[str, Any] | None = None) -> Scenario:
    """``scn`` with some layout/training fields changed, re-validated and re-resolved (SpecError when invalid).
    A different pipeline depth takes the default split (or the planner's balanced one), not the old stage_layers."""
    old = scn.layout
    update = {**(layout or {}), "dp": None}
    if (update.get("pp", old.pp), update.get("vpp", old.vpp)) != (old.pp, old.vpp):
        update["stage_layers"] = uneven_split(scn.model, update.get("pp", old.pp) * update.get("vpp", old.vpp))
    try:
        lay = type(old).model_validate({**old.model_dump(), **update})
    except ValidationError as e:
        raise from_validation_error(e, "layout") from None
    try:
        tr = type(scn.training).model_validate({**scn.training.model_dump(), **dict(training or {})})
    except ValidationError as e:
        raise from_validation_error(e, "training") from None
    return resolve(scn.model, scn.cluster, lay, tr, name=scn.name)


def _try(lever: str, change: str, make: Callable[[], Scenario]) -> Variant:
    """The variant ``make`` builds, or the reason it refuses (its SpecError)."""
    try:
        return Variant(lever, change, scenario=make())
    except SpecError as e:
        return Variant(lever, change, reason=str(e))


def ideal_network(scn: Scenario) -> Variant:
    """Ceiling: the same step with all communication free."""
    return Variant("ideal network", "all communication free", kind="ceiling", scenario=scn, ideal_network=True)


def no_bubble(scn: Scenario) -> Variant:
    """Ceiling: the same step with every pipeline stage's bubble removed (bubble_free_step_s)."""
    if scn.layout.pp == 1:
        return Variant("no pipeline bubble", "-", kind="ceiling", reason="pp=1: no pipeline, no bubble")
    return Variant("no pipeline bubble", "every stage's bubble removed", kind="ceiling", scenario=scn,
                   no_bubble=True)


def deeper_interleaving(scn: Scenario) -> Variant:
    """The interleaved schedule at the next virtual-stage count that splits the layers evenly."""
    lever, lay, t = "one more interleaving depth", scn.layout, scn.training
    if lay.pp == 1:
        return Variant(lever, "-", reason="pp=1: interleaving needs a pipeline")
    if t.schedule not in ("1f1b", "interleaved"):
        return Variant(lever, "-", reason=f"schedule {t.schedule} has no deeper interleaving (Megatron's interleaved "
                                          "schedule extends 1F1B)")
    first_error = ""
    for v in range(lay.vpp + 1, scn.layers_per_stage + 1):
        try:
            out = changed(scn, layout={"vpp": v}, training={"schedule": "interleaved"})
        except SpecError as e:
            first_error = first_error or str(e)
            continue
        return Variant(lever, f"vpp {lay.vpp} -> {v}" + ("" if v == lay.vpp + 1 else f" ({lay.vpp + 1}.."
                                                         f"{v - 1}: the layers do not split)"), scenario=out)
    if not first_error:
        return Variant(lever, "-", reason=f"{scn.layers_per_stage} layers per stage: no deeper split")
    return Variant(lever, "-", reason=f"no vpp in {lay.vpp + 1}..{scn.layers_per_stage} splits the layers; "
                                      f"vpp {lay.vpp + 1}: {first_error}")


def tp_overlap(scn: Scenario) -> Variant:
    """Megatron-Core's tensor-parallel communication overlap (tp_comm_overlap), where it applies."""
    lever, t = "TP comm overlap", scn.training
    if scn.layout.tp == 1:
        return Variant(lever, "-", reason="tp=1: no tensor-parallel communication")
    if t.tp_comm_overlap:
        return Variant(lever, "-", reason="already on (tp_comm_overlap)")
    if t.framework != "megatron":
        return Variant(lever, "-", reason=f"--tp-comm-overlap is Megatron-Core's (Transformer Engine userbuffers); "
                                          f"framework {t.framework} has no such overlap")
    if not t.sequence_parallel:
        return Variant(lever, "-", reason="needs sequence_parallel (userbuffers overlap the sequence-parallel "
                                          "all-gathers and reduce-scatters)")
    return _try(lever, "tp_comm_overlap on", lambda: changed(scn, training={"tp_comm_overlap": True}))


def dp_overlap(scn: Scenario) -> Variant:
    """Gradient reduction overlapped with backward (overlap_grad_reduce), where the framework does not
    already."""
    lever, fw = "DP comm overlap", scn.training.framework
    if scn.dp * scn.layout.cp == 1 and scn.training.effective_zero == 0:
        return Variant(lever, "-", reason="dp=cp=1: no data-parallel communication")
    if scn.training.overlap_grad_reduce:
        return Variant(lever, "-", reason="already on (overlap_grad_reduce)")
    if framework.overlap_grad_reduce(scn.training):  # unset: the framework's default
        return Variant(lever, "-", reason=f"already on (framework {fw} overlaps gradient reduction with backward)")
    return _try(lever, "overlap_grad_reduce on", lambda: changed(scn, training={"overlap_grad_reduce": True}))


def ep_overlap(scn: Scenario) -> Variant:
    """One micro-batch's expert-parallel all-to-alls overlapped with another's compute (ep_comm_overlap)."""
    lever = "EP comm overlap"
    if scn.training.ep_comm_overlap:
        return Variant(lever, "-", reason="already on (ep_comm_overlap)")
    return _try(lever, "ep_comm_overlap on", lambda: changed(scn, training={"ep_comm_overlap": True}))


_LIGHTER = {"full": "selective", "selective": "none"}
_HEAVIER = {"none": "selective", "selective": "full"}


def _recompute(scn: Scenario, lever: str, step: Mapping[str, str]) -> Variant:
    """The recompute mode one ``step`` away (_LIGHTER or _HEAVIER), with its default modules."""
    t = scn.training
    if t.recompute not in step:
        return Variant(lever, "-", reason=f"recompute is already {t.recompute}")
    new = step[t.recompute]
    return _try(lever, f"recompute {t.recompute_label} -> {new}",
                lambda: changed(scn, training={"recompute": new, "recompute_modules": None}))


def recompute_lighter(scn: Scenario) -> Variant:
    """Recompute one level lighter: full -> selective -> none."""
    return _recompute(scn, "recompute one level lighter", _LIGHTER)


def recompute_heavier(scn: Scenario) -> Variant:
    """Recompute one level heavier: none -> selective -> full."""
    return _recompute(scn, "recompute one level heavier", _HEAVIER)


def double_micro_batch(scn: Scenario) -> Variant:
    """Twice the micro-batch (half the micro-batches per step)."""
    mb = scn.training.micro_batch
    return _try("twice the micro-batch", f"micro-batch {mb} -> {2 * mb}",
                lambda: changed(scn, training={"micro_batch": 2 * mb}))


def next_zero(scn: Scenario) -> Variant:
    """The next ZeRO stage, up to 3."""
    z = scn.training.effective_zero
    if z >= 3:
        return Variant("next ZeRO stage", "-", reason="already ZeRO-3 (the last stage)")
    return _try("next ZeRO stage", f"ZeRO {z} -> {z + 1}", lambda: changed(scn, training={"zero": z + 1}))


def compile_on(scn: Scenario) -> Variant:
    """torch.compile on, for the torch frameworks that compile their blocks."""
    lever, fw = "torch.compile", scn.training.framework
    if scn.training.compile:
        return Variant(lever, "-", reason="already on (compile)")
    if not behaviour(fw).torch_training_loop:
        return Variant(lever, "-", reason=f"framework {fw} does not compile its blocks with torch.compile")
    return _try(lever, "compile on", lambda: changed(scn, training={"compile": True}))


def float8_all_gather_on(scn: Scenario) -> Variant:
    """torchao's float8 all-gather of weights, with the scales precomputed."""
    lever, t = "float8 all-gather", scn.training
    if t.float8_all_gather:
        return Variant(lever, "-", reason="already on (float8_all_gather)")
    return _try(lever, "float8_all_gather on (scales precomputed)",
                lambda: changed(scn, training={"float8_all_gather": True, "float8_precompute_scale": True}))


def variants(scn: Scenario) -> list[Variant]:
    """Every lever of ``scn`` (EP overlap for MoE models only; float8 all-gather for torchao fp8 only)."""
    ao = resolved_fp8_library(scn.training) == "torchao"
    makers = [ideal_network, no_bubble, deeper_interleaving, tp_overlap, dp_overlap,
              *([ep_overlap] if scn.model.is_moe else []), recompute_lighter, recompute_heavier, double_micro_batch,
              next_zero, compile_on, *([float8_all_gather_on] if ao else [])]
    return [make(scn) for make in makers]


# --- prediction and ranking -----------------------------------------------------------------------------------

def bubble_free_step_s(scn: Scenario, *, fast: bool, ideal: bool,
                       profile: CalibrationProfile | None) -> float:
    """The step with every stage's pipeline bubble removed: each stage's work within the pipeline span (the span
    less its bubble, engine.set_bubbles) plus what follows it (gradient-reduction tail, optimizer, post-step);
    the busiest stage sets it. For uniform stages that is the step less (p-1)/(m+p-1) of the span (1F1B)."""
    scn, profile, overhead_s = _with_run_calibration(scn, profile)
    table = build_cost_table(scn, profile=profile, ideal_network=ideal)  # predict's own table (cached)
    res = estimate(table) if fast else simulate_step(table, max_passes=MAX_WHOLE_PASSES)
    span = res.pipeline_span_s or res.step_time_s
    return max(span - tl.bubble_s + (tl.end_s - tl.pipeline_end_s) for tl in res.stages) + overhead_s


def _predict_variant(v: Variant, base, *, fast: bool, ideal: bool, profile) -> Lever:
    if v.reason or v.scenario is None:
        return Lever(v.lever, v.change, v.kind, reason=v.reason)
    if v.no_bubble:
        step, peak, pred = bubble_free_step_s(v.scenario, fast=fast, ideal=ideal, profile=profile), base.peak_bytes, base
    else:
        pred = predict(v.scenario, fast=fast, ideal_network=ideal or v.ideal_network, profile=profile)
        step, peak = pred.step_time_s, pred.peak_bytes
    cap = base.gpu_memory_bytes
    # On GPU pools each pool's peak is against its own GPU (simulator/pools.py): the prediction's fits and free.
    # Offload beyond a node's host memory does not fit whatever the GPUs hold (Prediction.host_fits).
    free, fits = (pred.free_bytes, pred.fits) if pred.pools else (cap - peak, peak <= cap and pred.host_fits)
    gain = base.step_time_s - step
    return Lever(v.lever, v.change, v.kind, step_time_s=step, gain_s=gain,
                 gain_fraction=gain / base.step_time_s if base.step_time_s > 0 else 0.0,
                 peak_bytes=peak, free_bytes=free, fits=fits)


def explain(scn: Scenario, *, engine: bool = False, ideal_network: bool = False,
            profile: CalibrationProfile | None = None, baseline=None) -> Explanation:
    """Predict every lever of ``scn`` and rank them by step-time gain (largest first; levers that do not apply
    last, in their listed order). ``engine`` predicts each variant with the discrete-event engine, else with the
    closed form (analytic.py, the planner's screen: microseconds per variant); the baseline is predicted the
    same way (``baseline``: an existing prediction of ``scn`` made that way). ``ideal_network`` applies to the
    baseline and every variant."""
    t0 = time.perf_counter()
    fast = not engine
    base = baseline if baseline is not None else predict(scn, fast=fast, ideal_network=ideal_network,
                                                         profile=profile)
    levers = [_predict_variant(v, base, fast=fast, ideal=ideal_network, profile=profile) for v in variants(scn)]
    ranked = sorted((lv for lv in levers if lv.applicable), key=lambda lv: -(lv.gain_s or 0.0))
    ranked += [lv for lv in levers if not lv.applicable]
    return Explanation(mode="discrete-event" if engine else "closed-form", baseline_step_time_s=base.step_time_s,
                       baseline_peak_bytes=base.peak_bytes, gpu_memory_bytes=base.gpu_memory_bytes,
                       levers=tuple(ranked), wall_s=time.perf_counter() - t0)


EXPLAIN_COLUMNS = ("rank", "lever", "change", "step time", "gain", "peak memory", "fits")


def explain_rows(expl: Explanation) -> list[list[str]]:
    """The ranked table as text cells (EXPLAIN_COLUMNS); a lever that does not apply shows its reason."""
    rows = []
    for i, lv in enumerate(expl.levers):
        name = lv.lever + (" (ceiling)" if lv.kind == "ceiling" else "")
        if not lv.applicable:
            rows.append(["-", name, f"not applicable: {lv.reason}", "-", "-", "-", "-"])
            continue
        rows.append([str(i + 1), name, lv.change, f"{lv.step_time_s:.4g} s", f"{100 * (lv.gain_fraction or 0):+.1f}%",
                     f"{(lv.peak_bytes or 0) / 2**30:.1f} GiB", "yes" if lv.fits else "no"])
    return rows


def explain_title(expl: Explanation) -> str:
    """The explanation's title: its mode, the baseline step time and peak memory against the GPU's."""
    return (f"Levers ranked by step-time gain ({expl.mode}; baseline {expl.baseline_step_time_s:.4g} s, peak "
            f"{expl.baseline_peak_bytes / 2**30:.1f} of {expl.gpu_memory_bytes / 2**30:.1f} GiB)")
