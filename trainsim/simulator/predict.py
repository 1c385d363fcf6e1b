"""predict(): the one entry point planner, reports, validate and execute call for a step prediction."""

from __future__ import annotations

import math
import time
from pathlib import Path

from trainsim.specs import Scenario, SpecError

from . import analytic, variability
from .builder import build_cost_table
from .engine import schedule_ops, simulate
from .metrics import to_prediction
from .result import Prediction
from .trace import write_trace

MAX_SAMPLES = 10_000


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
    if fast and (jitter_cv > 0 or stragglers is not None):
        raise SpecError("fast", "variability (--jitter/--straggler) needs the engine; drop --fast")


# Warn when issuing a MoE block's kernels takes the host at least this share of the block's GPU time: with one
# blocking host sync per MoE layer the host cannot queue work ahead, so the GPU starts to idle (cost_models.host).
HOST_BOUND_WARN_RATIO = 0.5


def host_bound_warning(scenario: Scenario, profile=None, table=None) -> str | None:
    """The launch-bound warning of a MoE scenario in eager Megatron-Core on GPUs (None when it does not apply).

    The GPU side is a block's busy time on the compute stream -- its compute and the communication exposed there
    (the host catches up while the GPU waits on a collective) -- per micro-batch, from the chunk of ``table`` whose
    blocks take the least (embedding and loss chunks included at their share)."""
    from trainsim.cost_models.host import moe_block_host_issue
    from trainsim.cost_models.shapes import layer_shape
    if not scenario.model.is_moe or scenario.training.framework != "megatron":
        return None
    if getattr(scenario.cluster.gpu, "num_sms", None) is None:  # CPU ranks: the eager profile times the host
        return None
    issue = moe_block_host_issue(layer_shape(scenario), scenario.cluster.host_cpu)
    table = table or build_cost_table(scenario, profile=profile)
    per_block = [(c.fwd_s + c.bwd_s + c.fwd_comm_s + c.bwd_comm_s) / c.layers
                 for st in table.stages for c in st.chunks if c.layers]
    gpu_s = min(per_block) if per_block else 0.0
    if gpu_s <= 0 or issue.seconds < HOST_BOUND_WARN_RATIO * gpu_s:
        return None
    return (f"host-bound risk: the host ({scenario.cluster.host_cpu}) needs about {issue.seconds * 1e3:.1f} ms to "
            f"issue one MoE block's kernels per micro-batch ({issue.python_ops} eager ops + {issue.loop_ops} "
            f"per-expert launches, estimated), the GPU {gpu_s * 1e3:.1f} ms to run them; with the dispatcher's host "
            f"sync in every MoE layer an eager run idles the GPU, which the predicted step does not include. CUDA "
            f"graphs, a larger micro-batch or fewer local experts help")


def predict(scenario: Scenario, *, fast: bool = False, ideal_network: bool = False, profile=None,
            trace_path: str | Path | None = None, jitter_cv: float = 0.0,
            stragglers: tuple[float, float] | None = None, seed: int = 0, samples: int = 20) -> Prediction:
    """Predict one optimizer step of ``scenario``.

    ``fast`` uses the closed form (analytic.estimate, microseconds) instead of the discrete-event engine;
    ``ideal_network`` makes all communication free; ``profile`` is a calibration profile
    (cost_models.profile.CalibrationProfile) or None for datasheet defaults; ``trace_path`` writes a
    Chrome trace of the simulated step; ``jitter_cv`` / ``stragglers=(fraction, slowdown)`` run ``samples``
    seeded Monte Carlo repetitions and add step_time_p50_s / step_time_p99_s (Prediction.variability).
    """
    _check_args(fast, trace_path, jitter_cv, stragglers, samples)
    t0 = time.perf_counter()
    table = build_cost_table(scenario, profile=profile, ideal_network=ideal_network)
    build_s = time.perf_counter() - t0
    calibration = profile.describe() if profile is not None else "defaults"
    host = table.host_bytes
    warnings: list[str] = []
    if scenario.layout.stage_layers is not None:
        if scenario.uneven_stages:
            warnings.append(f"uneven stages as given: layers per virtual stage {list(scenario.stage_layers)}")
    elif scenario.uneven_stages:
        warnings.append(f"uneven stages: layers per virtual stage {scenario.stage_layers[0]} (first), "
                        f"{scenario.stage_layers[-1]} (last), {max(scenario.stage_layers)} (others)")
    if ideal_network:
        warnings.append("ideal network: all communication is free")
    launch = host_bound_warning(scenario, profile, table)
    if launch:
        warnings.append(launch)
    node_host = host * min(scenario.cluster.gpus_per_node, scenario.cluster.num_gpus)
    if node_host > scenario.cluster.host_memory_bytes:
        warnings.append(f"offload needs {node_host / 1e9:.0f} GB of host memory per node, more than the "
                        f"cluster's host_memory_bytes ({scenario.cluster.host_memory_bytes / 1e9:.0f} GB)")
    if fast:
        res = analytic.estimate(table)
        pred = to_prediction(scenario, table, res, mode="closed-form", calibration=calibration,
                             host_bytes=host, warnings=warnings)
    else:
        res = simulate(table, record=trace_path is not None)
        pred = to_prediction(scenario, table, res, mode="discrete-event", calibration=calibration,
                             host_bytes=host, warnings=warnings)
        if trace_path is not None:
            write_trace(res, trace_path, static_bytes=[st.static_bytes for st in table.stages],
                        metadata={"scenario": scenario.name, "model": scenario.model.name,
                                  "layout": pred.layout, "schedule": scenario.training.schedule})
        var = variability.Variability(
            jitter_cv=float(jitter_cv),
            straggler_fraction=float(stragglers[0]) if stragglers else 0.0,
            straggler_slowdown=float(stragglers[1]) if stragglers else 1.0,
            samples=samples, seed=seed)
        if var.active:
            ops = [len(o) for o in schedule_ops(table)]
            lay = scenario.layout
            peers = lay.tp * lay.cp
            times, events, wall = [], 0, 0.0
            for i in range(samples):
                op_scale, stage_scale = variability.draw(var, i, ops, peers, peers * scenario.dp)
                r = simulate(table, op_scale=op_scale, stage_scale=stage_scale)
                times.append(r.step_time_s)
                events += r.events
                wall += r.wall_s
            pred.variability = {
                **variability.summarize(times), "samples": samples, "seed": seed, "jitter_cv": float(jitter_cv),
                "straggler_fraction": var.straggler_fraction, "straggler_slowdown": var.straggler_slowdown,
            }
            pred.engine["monte_carlo_events"] = events
            pred.engine["monte_carlo_wall_s"] = wall
    pred.engine["build_s"] = build_s
    pred.engine["wall_s"] = pred.engine["wall_s"] + build_s
    _describe_memory(pred, scenario)
    return pred


def _describe_memory(pred: Prediction, scenario: Scenario) -> None:
    """Fill the prediction's stated memory assumptions, the peak stage's named other terms and parameter counts."""
    from trainsim.cost_models import framework, memory
    pred.memory_assumptions = framework.memory_assumptions(scenario.training)
    pp = scenario.layout.pp
    # The peak is on stage 0, 1 or p-1 (planner.peak_memory_bytes says why).
    stages = {s: memory.stage_memory(scenario, s) for s in sorted({0, min(1, pp - 1), pp - 1})}
    peak = max(stages, key=lambda s: stages[s].total)
    pred.other_terms = {"stage": float(peak), **stages[peak].other_terms}
    m = scenario.model
    pred.model_params = {"total_params": float(m.total_params()), "active_params": float(m.active_params())}
