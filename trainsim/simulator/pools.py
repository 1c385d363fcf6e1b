"""What `predict` says about a job on mixed GPU pools (``cluster.pools``, specs/pools.py): memory per pool checked
against that pool's HBM, which pool paces the step, and throughput figures over the pools' own peaks.

Under ``placement: stages`` the engine already simulates each stage on its own pool's GPU (builder.py
``_pooled_stages``), so a slower pool's stages set the pipeline's pace; a pool's peak is the largest of its
stages'. Under ``placement: dp`` the step is the pacing pool's replica (the engine's longest, dp_engine_pacing; the
closed form's under ``--fast``, builder.dp_pacing_pool); another pool's
peak per stage is its own static memory (weights, gradients, optimizer state, buffers on its GPU) plus the
activation and transient bytes the engine found for the pacing replica (the same schedule keeps the same
micro-batches in flight on every replica).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.cost_models import memory
from trainsim.specs import Scenario
from trainsim.specs.pools import pool_gpus, pool_views, stage_pools

from .analytic import estimate
from .builder import build_cost_table, dp_pacing_pool
from .fold import MAX_WHOLE_PASSES, simulate_step
from .result import Prediction

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile

GiB = 2**30


def _entry(pool, gpus: int, peak: float) -> dict:
    cap = pool.gpu.memory_bytes
    return {"name": pool.name, "gpu": pool.gpu.name, "nodes": pool.nodes, "gpus": gpus,
            "peak_memory_bytes": peak, "capacity_bytes": cap, "peak_memory_gib": peak / GiB,
            "capacity_gib": cap / GiB, "fits": peak <= cap}


def _stage_entries(scenario: Scenario, pred: Prediction) -> list[dict]:
    where = stage_pools(scenario)
    out = []
    for k, (pool, g) in enumerate(zip(scenario.cluster.pools, pool_gpus(scenario.cluster))):
        stages = [s for s, w in enumerate(where) if w == k]
        peak = max(pred.per_stage_memory[s].total for s in stages)
        out.append({**_entry(pool, g, peak), "stages": stages})
    return out


def dp_engine_pacing(scenario: Scenario, profile: CalibrationProfile | None = None,
                     ideal_network: bool = False):
    """Under ``placement: dp`` the pool whose replica's step is the longest in the engine, with that replica's
    cost table and engine result (``(pool, table, result)``) so that ``predict`` times the step from this one
    engine run per pool rather than a second one (builder.dp_pacing_pool picks the pool by the closed form, for
    the planner's screen and other table readers)."""
    tables = [build_cost_table(v, profile=profile, ideal_network=ideal_network) for v in pool_views(scenario)]
    runs = [simulate_step(t, max_passes=MAX_WHOLE_PASSES) for t in tables]
    k = max(range(len(runs)), key=lambda k: (runs[k].step_time_s, -k))
    return k, tables[k], runs[k]


def _dp_entries(scenario: Scenario, pred: Prediction, profile, ideal_network: bool, pacing: int | None) -> list[dict]:
    views = pool_views(scenario)
    if pacing is None:
        pacing = dp_pacing_pool(scenario, profile, ideal_network)
    paced = build_cost_table(views[pacing], profile=profile, ideal_network=ideal_network)
    replica = scenario.layout.tp * scenario.layout.cp * scenario.layout.pp
    out = []
    for k, (pool, g) in enumerate(zip(scenario.cluster.pools, pool_gpus(scenario.cluster))):
        table = build_cost_table(views[k], profile=profile, ideal_network=ideal_network)
        peak = max(st.static_bytes + sm.activations + (sm.other - ps.other_bytes)
                   for st, ps, sm in zip(table.stages, paced.stages, pred.per_stage_memory))
        out.append({**_entry(pool, g, peak), "replicas": g // replica, "paces": k == pacing,
                    "replica_step_s_closed_form": estimate(table).step_time_s})
    return out


def describe_pools(pred: Prediction, scenario: Scenario, profile: CalibrationProfile | None = None,
                   ideal_network: bool = False, pacing: int | None = None) -> None:
    """Fill ``pred.pools`` and restate MFU/HFU and the capacity for a job on GPU pools (no-op without pools);
    ``pacing``: under ``dp`` the pool whose replica ``pred`` is (None: builder.dp_pacing_pool's)."""
    c = scenario.cluster
    if c.pools is None:
        return
    if c.placement == "stages":
        pred.pools = _stage_entries(scenario, pred)
    else:
        pred.pools = _dp_entries(scenario, pred, profile, ideal_network, pacing)
    used_gpu = c.gpu  # to_prediction's MFU used the scenario's (first pool's) GPU
    pred.gpu_memory_bytes = tightest_pool(pred)["capacity_bytes"]
    # MFU over the pools' own dense peaks: model FLOPs / (step x sum over pools of GPUs x peak).
    dtype = scenario.training.dtype
    peak_sum = sum(g * p.gpu.peak(dtype) for p, g in zip(c.pools, pool_gpus(c)))
    scale = scenario.num_gpus * used_gpu.peak(dtype) / peak_sum
    pred.mfu *= scale
    pred.hfu *= scale
    for e in pred.pools:
        if not e["fits"]:
            pred.warnings.append(f"pool {e['name']} does not fit: peak {e['peak_memory_gib']:.1f} GiB of "
                                 f"{e['capacity_gib']:.1f} GiB on its {e['gpu']}")


def stage_capacity_bytes(scenario: Scenario, pred: Prediction) -> list[float]:
    """The HBM each pipeline stage's peak is held against: under ``placement: stages`` its own pool's GPU, else
    the prediction's (the tightest pool's on GPU pools)."""
    caps = [pred.gpu_memory_bytes] * len(pred.per_stage_memory)
    if pred.pools and scenario.cluster.placement == "stages":
        for e in pred.pools:
            for s in e["stages"]:
                caps[s] = e["capacity_bytes"]
    return caps


def pooled_memory_over(scenario: Scenario, headroom: str) -> str | None:
    """The planner's memory screen on GPU pools, from the memory cost model on each pool's GPU: ``"oom"`` when a
    stage exceeds its pool's HBM, ``"over_headroom"`` when it leaves less than ``headroom`` (planner.parse_headroom)
    free there, else None. Every stage is checked on the pool that holds it (under ``dp`` on every pool)."""
    from .planner import headroom_bytes  # cycle: planner imports this module
    views, where = pool_views(scenario), stage_pools(scenario)
    stages_placed = scenario.cluster.placement == "stages"
    worst = None
    for s in range(scenario.layout.pp):
        for k in ([where[s]] if stages_placed else range(len(views))):
            cap = views[k].cluster.gpu.memory_bytes
            total = memory.stage_memory(views[k], s).total
            if total > cap:
                return "oom"
            if total > cap - headroom_bytes(headroom, cap):
                worst = "over_headroom"
    return worst


def pools_fit(pred: Prediction, headroom: str) -> bool:
    """Every pool's predicted peak leaves ``headroom`` of its own GPU's memory free."""
    from .planner import headroom_bytes  # cycle: planner imports this module
    return all(e["peak_memory_bytes"] <= e["capacity_bytes"] - headroom_bytes(headroom, e["capacity_bytes"])
               for e in pred.pools)


def tightest_pool(pred: Prediction) -> dict:
    """The pool with the least memory left at its peak."""
    return min(pred.pools, key=lambda e: e["capacity_bytes"] - e["peak_memory_bytes"])
