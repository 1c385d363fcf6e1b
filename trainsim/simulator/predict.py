"""predict(): the one entry point planner, reports, validate and execute call for a step prediction."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainsim.cost_models import memory, model_states
from trainsim.cost_models.offload import node_host_bytes
from trainsim.cost_models.run_factors import apply_factors
from trainsim.specs import Scenario, SpecError
from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import IdentityMemo, in_memo_scope
from trainsim.specs.safe_write import check_output_path

from . import analytic, fold, variability
from .builder import build_cost_table
from .calibration_notes import calibration_notes, cluster_devices, device_class_refusal
from .costtable import CostTable
from .engine import schedule_ops, simulate
from .fold import simulate_step
from .metrics import to_prediction
from .pools import describe_pools, dp_engine_pacing
from .result import Prediction
from .stated_settings import inert_data_parallel_notes, inert_pipeline_notes
from .trace import write_trace

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile

MAX_SAMPLES = 10_000
# What cannot fold (fold.py) is simulated op by op, so it is bounded in pipeline passes (one chunk of one
# micro-batch on one stage, forward and backward: m x pp x vpp per step); the engine takes about 0.2 ms per
# pass on one core (benchmarks/bench_microbatches.py). A Chrome trace holds about 4 events of ~150 bytes per
# pass: MAX_TRACE_PASSES gives files up to ~60 MB in ~20 s. Per-op jitter draws every op of every sample:
# MAX_JITTER_PASSES over all samples is about 3 minutes.
MAX_TRACE_PASSES = 100_000
MAX_JITTER_PASSES = 1_000_000


def _passes(table: CostTable) -> int:
    return table.num_microbatches * table.pp * table.vpp


def _check_unfoldable(table: CostTable, trace: bool, jitter_cv: float, samples: int) -> None:
    """Refuse a trace or a jittered Monte Carlo whose op-by-op simulation exceeds its bound."""
    n = _passes(table)
    what = f"{table.num_microbatches:,} micro-batches x pp {table.pp} x vpp {table.vpp} = {n:,} pipeline passes"
    if trace and n > MAX_TRACE_PASSES:
        raise SpecError("trace", f"the timeline of {what} is more than the {MAX_TRACE_PASSES:,} passes a trace "
                                 f"holds; the steady state repeats, so a trace of a smaller global batch shows it")
    if jitter_cv > 0 and n * samples > MAX_JITTER_PASSES:
        raise SpecError("jitter", f"per-op jitter simulates every op of every sample: {samples} samples of {what} "
                                  f"exceed {MAX_JITTER_PASSES:,}; use fewer --samples, a smaller global batch, or "
                                  f"--straggler alone (which folds)")


def _check_args(fast: bool, trace_path, jitter_cv: float, stragglers, samples: int) -> None:
    if not (isinstance(jitter_cv, (int, float)) and math.isfinite(jitter_cv) and 0 <= jitter_cv <= 10):
        raise SpecError("jitter", f"must be a coefficient of variation in [0, 10], got {jitter_cv!r}")
    if stragglers is not None:
        try:
            frac, slow = (float(x) for x in stragglers)
        except (TypeError, ValueError):
            raise SpecError("straggler", f"expected (fraction, slowdown), got {stragglers!r}") from None
        if not (math.isfinite(frac) and 0 <= frac <= 1):
            raise SpecError("straggler", f"fraction must be in [0, 1], got {frac}")
        if not (math.isfinite(slow) and 1 <= slow <= 1000):
            raise SpecError("straggler", f"slowdown must be a factor in [1, 1000], got {slow}")
    if not (isinstance(samples, int) and 1 <= samples <= MAX_SAMPLES):
        raise SpecError("samples", f"must be an integer in 1..{MAX_SAMPLES}, got {samples!r}")
    if fast and trace_path:
        raise SpecError("trace", "a trace needs the engine's timeline; drop --fast")
    if trace_path:
        check_output_path(trace_path, "trace")  # before the engine runs, not after
    if fast and (jitter_cv > 0 or stragglers is not None):
        raise SpecError("fast", "variability (--jitter/--straggler) needs the engine; drop --fast")


def cp_default_warning(scenario: Scenario) -> list[str]:
    """The stated resolution of an unset ``cp_comm`` under framework torch: torch's context_parallel rotates K/V
    by all-gather unless set_rotate_method says otherwise (specs.training.default_cp_comm), and that is what is
    costed (simulator/exposures.py _torch_allgather_cp_s)."""
    t = scenario.training
    if scenario.layout.cp == 1 or t.cp_comm is not None or behaviour(t.framework).default_cp_comm == "p2p":
        return []
    note = (f"cp_comm {t.cp_exchange} assumed: torch's context_parallel default "
            "(_ContextParallelOptions.rotate_method ALL_GATHER, torchtitan's context_parallel_rotate_method "
            "'allgather'), one K/V all-gather per attention call behind the local block and dK/dV passed in "
            "a ring; set training.cp_comm: p2p for set_rotate_method('alltoall')")
    return [note]


# A step is host-bound -- predict's warning and the what-if report (reports/whatif.py) say so -- where its GPU waits
# for its host (cost_models/host_issue.py) at least this share of the step: 1 %, the spread of a GPU-bound step's
# own timed repeats (about 1 % on trainsim execute's GPU-bound H200 lines, tests/test_executed_h200.py), below which
# the wait is within the step's noise.
HOST_BOUND_SHARE = 0.01


def host_idle_share(table: CostTable, step_time_s: float) -> float:
    """Share of the step the busiest stage's GPU waits for its host to issue kernels: per micro-batch the
    chunks' host idle (ChunkCost.host_idle_*) times the micro-batches, plus the optimizer step's
    (StageCost.optimizer_host_idle_s), over the step time."""
    if step_time_s <= 0:
        return 0.0
    per_stage = [sum(c.host_idle_fwd_s + c.host_idle_bwd_s for c in st.chunks) * table.num_microbatches
                 + st.optimizer_host_idle_s for st in table.stages]
    return min(1.0, max(per_stage, default=0.0) / step_time_s)


def host_idle_warning(scenario: Scenario, table: CostTable, step_time_s: float) -> str | None:
    """'GPU idle waiting for the host: 31 %' where the host's issue time bounds the passes, else None."""
    share = host_idle_share(table, step_time_s)
    if share < HOST_BOUND_SHARE:
        return None
    if scenario.model.is_moe:  # only Megatron-Core MoE models carry host idle (cost_models/moe_issue.py)
        return (f"host-bound: GPU idle waiting for the host: {100 * share:.0f} % of the step (eager kernel issue of "
                f"the MoE blocks, held back by the dispatcher's host sync in every MoE layer forward; "
                f"cost_models/moe_issue.py). A larger micro-batch or fewer local experts shorten it")
    return (f"host-bound: GPU idle waiting for the host: {100 * share:.0f} % of the step (eager kernel issue, "
            f"host_issue={scenario.training.host_issue}; cost_models/host_issue.py). CUDA graphs "
            f"(training.host_issue: cuda_graphs), torch.compile, a larger micro-batch or a smaller TP shorten it")


# Say so when the collectives' fixed costs take at least this share of the step; call the step latency-bound
# from LATENCY_BOUND_SHARE on (a fifth of the step).
FIXED_COST_REPORT_SHARE = 0.05
LATENCY_BOUND_SHARE = 0.2


def collective_fixed_cost_s(scenario: Scenario, step_time_s: float, *, fast: bool = False,
                            profile: CalibrationProfile | None = None) -> float:
    """Seconds of the step the collectives' fixed costs take: the step less the same step with every collective
    and pipeline message costed by its bytes only (NCCL's launch, base and per-step latency removed;
    Scenario.without_collective_fixed_costs). The difference is what those fixed costs add to the critical path,
    after overlap and after any host-bound wait that they hid."""
    what_if = predict(scenario.without_collective_fixed_costs(), fast=fast, profile=profile, allocator_replay=False)
    return max(0.0, step_time_s - what_if.step_time_s)


def fixed_cost_note(fixed_s: float, step_time_s: float) -> str | None:
    """'latency-bound: collectives' fixed costs take 27 % of the step' (or the share, where below the bar)."""
    share = fixed_s / step_time_s if step_time_s > 0 else 0.0
    if share < FIXED_COST_REPORT_SHARE:
        return None
    head = "latency-bound: " if share >= LATENCY_BOUND_SHARE else ""
    return (f"{head}collectives' fixed costs (each call's launch and base latency plus per-step latency: ring 2(n-1) steps, tree "
            f"2 log n) take {100 * share:.0f} % of the step ({fixed_s * 1e3:.3g} ms); fewer, larger messages "
            f"(bigger buckets, a larger micro-batch, a smaller TP or DP group) shorten it")


def _scaled_profile(profile, scale: float):
    return profile.model_copy(update={"compute_time_scale": scale})


_SCALED = IdentityMemo(_scaled_profile)  # one copy per (profile, scale): the cost-table cache keys on identity


def apply_run_values(scenario: Scenario, profile: CalibrationProfile | None, values: dict[str, float]):
    """Run-calibration factor values applied (cost_models.run_factors): the scaled scenario, the profile that
    still holds measurements (its GEMM/attention times scaled by the compute factor; None when it holds none)
    and the per-step overhead."""
    compute = values.get(f"compute:{scenario.cluster.gpu.name}", 1.0)
    scenario, overhead_s = apply_factors(scenario, values)
    if profile is not None and not profile.has_measurements():
        profile = None
    if profile is not None and compute != 1.0:
        profile = _SCALED(profile, 1.0 / compute)
    return scenario, profile, overhead_s


def _with_run_calibration(scenario: Scenario, profile):
    """A profile's run calibration applied (apply_run_values); unchanged without one."""
    rc = getattr(profile, "run_calibration", None)
    if rc is None:
        return scenario, profile, 0.0
    return apply_run_values(scenario, profile, rc.values())


def _plus(res, overhead_s: float):
    """The engine result with the run calibration's fixed per-step overhead added to its step time."""
    return dataclasses.replace(res, step_time_s=res.step_time_s + overhead_s) if overhead_s > 0 else res


def _table(scenario: Scenario, profile, ideal_network: bool, fast: bool):
    """The cost table to time and, on GPU pools under ``placement: dp``, the pool whose replica it is -- the one
    the engine finds slowest (the closed form's with ``fast``, builder.dp_pacing_pool) -- with the engine's
    result for that replica (dp_engine_pacing ran it; None where no engine ran yet)."""
    if scenario.cluster.pools is None or scenario.cluster.placement != "dp" or fast:
        return build_cost_table(scenario, profile=profile, ideal_network=ideal_network), None, None
    k, table, res = dp_engine_pacing(scenario, profile, ideal_network)
    return table, k, res


@in_memo_scope  # the caller's memo scope, else one for this prediction (specs.memo)
def predict(scenario: Scenario, *, fast: bool = False, ideal_network: bool = False,
            profile: CalibrationProfile | None = None, trace_path: str | Path | None = None,
            jitter_cv: float = 0.0, stragglers: tuple[float, float] | None = None, seed: int = 0,
            samples: int = 20, allocator_replay: bool = True, fixed_costs: bool = False) -> Prediction:
    """Predict one optimizer step of ``scenario``.

    ``fast`` uses the closed form (analytic.estimate, microseconds) instead of the discrete-event engine;
    ``ideal_network`` makes all communication free; ``profile`` is a calibration profile
    (cost_models.profile.CalibrationProfile) or None for datasheet defaults; ``trace_path`` writes a
    Chrome trace of the simulated step; ``jitter_cv`` / ``stragglers=(fraction, slowdown)`` run ``samples``
    seeded Monte Carlo repetitions and add step_time_p50_s / step_time_p99_s (Prediction.variability).
    A long step's steady state is folded (fold.simulate_step, ``engine["folded"]``); what cannot fold -- a
    trace, per-op jitter, a step that reaches no steady state -- is refused beyond its bound (SpecError).
    ``allocator_replay=False`` leaves the first optimizer step's fragmentation (first_step_fragmentation.py, a
    caching-allocator replay) out of the reserved and nvidia-smi figures, and says so in the memory
    assumptions: for callers that rank by allocated memory only (the planner's screen). ``fixed_costs`` also
    predicts the step without the collectives' fixed costs (a second prediction) and records the difference in
    ``extra["collective_fixed_cost_s"]``, with a 'latency-bound' note where it is a large share of the step.
    """
    _check_args(fast, trace_path, jitter_cv, stragglers, samples)
    if (why := device_class_refusal(cluster_devices(scenario), profile)) is not None:
        raise SpecError("calibration", why)
    t0 = time.perf_counter()
    calibration = profile.describe() if profile is not None else "defaults"
    given = (scenario, profile)  # as called: the fixed-cost what-if repeats this prediction
    scenario, profile, overhead_s = _with_run_calibration(scenario, profile)
    table, pacing, paced_run = _table(scenario, profile, ideal_network, fast)
    build_s = time.perf_counter() - t0
    host = table.host_bytes
    warnings = _scenario_warnings(scenario, profile, table, ideal_network) + calibration_notes(scenario, given[1])
    if fast:
        res = _plus(analytic.estimate(table), overhead_s)
        pred = to_prediction(scenario, table, res, mode="closed-form", calibration=calibration,
                             host_bytes=host, warnings=warnings)
    else:
        _check_unfoldable(table, trace_path is not None, jitter_cv, samples)
        if trace_path is not None:
            res = simulate(table, record=True)
        else:
            res = paced_run or simulate_step(table, max_passes=fold.MAX_WHOLE_PASSES)
        res = _plus(res, overhead_s)
        pred = to_prediction(scenario, table, res, mode="discrete-event", calibration=calibration,
                             host_bytes=host, warnings=warnings)
        if trace_path is not None:
            pred.engine["trace_events"] = write_trace(
                res, trace_path, static_bytes=[st.static_bytes for st in table.stages],
                metadata={"scenario": scenario.name, "model": scenario.model.name,
                          "layout": pred.layout, "schedule": scenario.training.schedule})
        _monte_carlo(pred, scenario, table, jitter_cv, stragglers, seed, samples, overhead_s)
    idle = host_idle_warning(scenario, table, pred.step_time_s)
    if idle:
        pred.warnings.append(idle)
    if fixed_costs and not ideal_network and scenario.collective_fixed_costs:
        fixed = collective_fixed_cost_s(given[0], pred.step_time_s, fast=fast, profile=given[1])
        pred.extra["collective_fixed_cost_s"] = fixed
        if note := fixed_cost_note(fixed, pred.step_time_s):
            pred.warnings.append(note)
    pred.engine["build_s"] = build_s
    pred.engine["wall_s"] = pred.engine["wall_s"] + build_s
    _describe_memory(pred, scenario, allocator_replay)
    describe_pools(pred, scenario, profile, ideal_network, pacing)
    return pred


def _scenario_warnings(scenario: Scenario, profile, table: CostTable, ideal_network: bool) -> list[str]:
    """The notes a prediction carries before it runs: uneven stages, an ideal network, defaults the scenario
    leaves to the framework or that have no effect, a host-bound launch, and offload beyond the nodes' host
    memory."""
    warnings: list[str] = []
    if scenario.layout.stage_layers is not None:
        if scenario.uneven_stages:
            warnings.append(f"uneven stages as given: layers per virtual stage {list(scenario.stage_layers)}")
    elif scenario.uneven_stages:
        warnings.append(f"uneven stages: layers per virtual stage {scenario.stage_layers[0]} (first), "
                        f"{scenario.stage_layers[-1]} (last), {max(scenario.stage_layers)} (others)")
    if ideal_network:
        warnings.append("ideal network: all communication is free")
    warnings += cp_default_warning(scenario) + inert_data_parallel_notes(scenario)
    warnings += inert_pipeline_notes(scenario)
    node_host = node_host_bytes(scenario, table.host_bytes)
    if node_host > scenario.cluster.host_memory_bytes:
        warnings.append(f"does not fit: offload needs {node_host / 1e9:.0f} GB of host memory per node, more than "
                        f"the cluster's host_memory_bytes ({scenario.cluster.host_memory_bytes / 1e9:.0f} GB)")
    return warnings


def _monte_carlo(pred: Prediction, scenario: Scenario, table: CostTable, jitter_cv: float, stragglers,
                 seed: int, samples: int, overhead_s: float = 0.0) -> None:
    """Seeded jitter / straggler repetitions of the step (variability.py) into ``pred.variability``; each
    sample's step carries the run calibration's fixed per-step ``overhead_s``."""
    var = variability.Variability(
        jitter_cv=float(jitter_cv),
        straggler_fraction=float(stragglers[0]) if stragglers else 0.0,
        straggler_slowdown=float(stragglers[1]) if stragglers else 1.0,
        samples=samples, seed=seed)
    if not var.active:
        return
    # Jitter draws one multiplier per op (in schedule order); without it only the stage count matters.
    ops = [len(o) for o in schedule_ops(table)] if var.jitter_cv > 0 else [0] * table.pp
    peers = scenario.layout.tp * scenario.layout.cp
    times, events, wall = [], 0, 0.0
    by_stages: dict[tuple[float, ...] | None, float] = {}   # stragglers alone: one step per slow-stage pattern
    for i in range(samples):
        op_scale, stage_scale = variability.draw(var, i, ops, peers, peers * scenario.dp)
        key = tuple(stage_scale) if stage_scale is not None else None
        if op_scale is None and key in by_stages:
            times.append(by_stages[key])
            continue
        # a straggler scales whole stages, so the steady state still repeats and folds
        r = (simulate(table, op_scale=op_scale, stage_scale=stage_scale) if op_scale is not None
             else simulate_step(table, stage_scale=stage_scale, max_passes=fold.MAX_WHOLE_PASSES))
        by_stages[key] = r.step_time_s + overhead_s
        times.append(r.step_time_s + overhead_s)
        events += r.events
        wall += r.wall_s
    pred.variability = {
        **variability.summarize(times), "samples": samples, "seed": seed, "jitter_cv": float(jitter_cv),
        "straggler_fraction": var.straggler_fraction, "straggler_slowdown": var.straggler_slowdown,
    }
    pred.engine["monte_carlo_events"] = events
    pred.engine["monte_carlo_wall_s"] = wall


def _describe_memory(pred: Prediction, scenario: Scenario, allocator_replay: bool = True) -> None:
    """Fill the prediction's stated memory assumptions, the peak stage's named other terms and parameter counts."""
    pred.memory_assumptions = model_states.memory_assumptions(scenario.training)
    pp = scenario.layout.pp
    # The peak is on stage 0, 1 or p-1 (planner.peak_memory_bytes says why).
    stages = {s: memory.stage_memory(scenario, s) for s in sorted({0, min(1, pp - 1), pp - 1})}
    peak = max(stages, key=lambda s: stages[s].total)
    pred.other_terms = {"stage": float(peak), **stages[peak].other_terms}
    if peak < len(pred.per_stage_memory):
        # The step's `other` adds what the timeline holds only during a backward (metrics.stage_memory: the
        # chunk's bwd_transient_bytes, one block's recompute working set): named so the terms sum to `other`.
        held = pred.per_stage_memory[peak].other - stages[peak].other
        if held > 0:
            pred.other_terms["recompute_working"] = held
    if stages[peak].grads_off_peak:  # allocator_reserve.grads_off_peak: the grads column shows the peak's share
        pred.memory_assumptions["grads_off_peak_bytes"] = stages[peak].grads_off_peak
    not_replayed = ("first-step fragmentation not replayed (allocator_replay=False): the reserved figure "
                    "leaves it out")
    cached = {s: (memory.reserved_cached(scenario, s, sm) if allocator_replay else
                  (sm.allocator_cached, 0.0, not_replayed)) for s, sm in stages.items()}
    top = max(stages, key=lambda s: stages[s].total + cached[s][0])
    reserved = stages[top].total + cached[top][0]
    pred.memory_assumptions["first_step_states"] = cached[top][2]
    pred.memory_assumptions["first_step_reserved_bytes"] = cached[top][1]
    if stages[top].stream_pools:  # FSDP's side-stream pools (cost_models/fsdp_stream_pools.py), in the cached bytes
        pred.memory_assumptions["fsdp_stream_pool_bytes"] = stages[top].stream_pools
    pred.allocator_cached_bytes = max(0.0, reserved - stages[peak].total)
    m = scenario.model
    pred.model_params = {"total_params": int(m.total_params()), "active_params": int(m.active_params())}
