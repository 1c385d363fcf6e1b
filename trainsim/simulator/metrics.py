"""Turn a simulated (or closed-form) step into the numbers `trainsim predict` reports.

Definitions (docs/design.md): MFU = model FLOPs / (step time × GPUs × dense peak of the dtype); HFU likewise
with hardware FLOPs (recompute included). ``bubble_fraction`` is the pipeline idle time not explained by
communication, as a fraction of the pipeline span (start of the step to the end of the last compute op),
averaged over stages — for uniform stages and a free network it equals (p-1)/(m+p-1) (GPipe, 1F1B) and
(p-1)/(v·m+p-1) (interleaved). ``exposed_comm_s`` and ``breakdown_s`` describe the critical stage (the one
that finishes last): its compute, the communication it waited for per dimension, its bubble, optimizer.
Memory per stage = static (weights, grads, optimizer, other from cost_models.memory) + the activation and
transient bytes at the moment the engine saw that stage's peak.
"""

from __future__ import annotations

from trainsim.cost_models import flops as flops_model
from trainsim.cost_models.model_flops import hardware_flops_per_step, model_flops_per_step
from trainsim.cost_models.offload import node_host_bytes
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import Scenario

from .builder import data_parallel_settings
from .costtable import COMM_DIMS, CostTable
from .engine import EngineResult
from .result import Prediction, StageMemory


def stage_memory(table: CostTable, res: EngineResult) -> list[StageMemory]:
    """Per-stage peak bytes by component."""
    out = []
    for st, tl in zip(table.stages, res.stages):
        out.append(StageMemory(weights=st.weights_bytes, grads=st.grads_bytes, optimizer=st.optimizer_bytes,
                               activations=tl.act_peak_bytes, other=st.other_bytes + tl.transient_peak_bytes))
    return out


def _breakdown(table: CostTable, res: EngineResult, span: float) -> dict[str, float]:
    """Seconds of the critical stage (the one that finishes last) by cause: compute (less the slowest GPU's
    share, the host's idle and the slowdown from communication), host idle and issue, bubble, exposed
    communication per dimension and the optimizer; its index and the pipeline span."""
    crit = res.critical_stage
    tl = res.stages[crit]
    exposed = {d: float(tl.exposed_s.get(d, 0.0)) for d in COMM_DIMS}
    # Of the critical stage's compute time, the GPU's wait for its host to issue kernels (builder: ChunkCost.
    # host_idle_*, per micro-batch) -- "GPU idle waiting for the host".
    host_idle = min(tl.compute_s, table.num_microbatches * sum(c.host_idle_fwd_s + c.host_idle_bwd_s
                                                               for c in table.stages[crit].chunks))
    compute_s = tl.compute_s - tl.slowdown_s - host_idle
    # The critical stage's host time to issue its step: every pass's issue and the optimizer step's (builder:
    # ChunkCost.host_issue_*, StageCost.optimizer_host_issue_s); it overlaps the GPU's time, not a part of the step.
    host_issue = (table.num_microbatches * sum(c.host_issue_fwd_s + c.host_issue_bwd_s
                                               for c in table.stages[crit].chunks)
                  + table.stages[crit].optimizer_host_issue_s)
    # The critical stage's compute due to the slowest-GPU pace (cost_models/variation.py): its compute x
    # (1 - 1/k). Approximate: any exposed offload copy folded into the compute fields is counted as compute,
    # and the optimizer's and the bubble's growth are not attributed here.
    slowest = compute_s * (1.0 - 1.0 / table.slowest_gpu_factor)
    return {
        "compute": compute_s - slowest,
        "compute_slowest_gpu": slowest,
        "host_idle": host_idle,
        "host_issue": host_issue,
        "compute_slowdown_from_comm": tl.slowdown_s,
        "bubble": tl.bubble_s,
        **{f"exposed_{d}": exposed[d] for d in COMM_DIMS},
        "optimizer": tl.optimizer_s,
        "critical_stage": float(crit),
        "pipeline_span": span,
    }


_CORE_ATTENTION_OPS = frozenset({"attention", "attn_scores", "attn_values"})


def _above_peak_note(scenario, hfu: float) -> str:
    """Why HFU exceeds 1: the full s x s attention count, where halving the blocks' core-attention FLOPs (a causal
    kernel computes about half of them) brings it under 1; else the step runs faster than the GPU's peak allows
    (a calibration or efficiency above the hardware's)."""
    ops = [op for op in flops_model.layer_ops(scenario) if op.is_matmul]
    total = sum(op.fwd_flops + op.bwd_flops for op in ops)
    core = sum(op.fwd_flops + op.bwd_flops for op in ops if op.name in _CORE_ATTENTION_OPS)
    if total > 0 and hfu * (1 - 0.5 * core / total) <= 1:
        return (f"MFU/HFU above 100 %: model and hardware FLOPs count attention over the full s x s matrix (SC21 "
                f"eq. 3, as published MFU figures do) while the causal kernel computes about half of it, and at "
                f"seq_len={scenario.training.seq_len} attention is {core / total:.0%} of the blocks' FLOPs")
    return ("MFU/HFU above 100 %: the step runs faster than the GPU's peak allows for these FLOPs, beyond what "
            "attention's full s x s count explains: check the calibration profile or the GPU's efficiencies")


def to_prediction(scenario: Scenario, table: CostTable, res: EngineResult, *, mode: str, calibration: str,
                  host_bytes: float = 0.0, warnings: list[str] | None = None) -> Prediction:
    """A Prediction (the JSON of `trainsim predict`) from an engine or closed-form result."""
    lay, tr = scenario.layout, scenario.training
    step = res.step_time_s
    gpus = scenario.num_gpus
    peak = scenario.cluster.gpu.peak(tr.dtype)
    model_flops = model_flops_per_step(scenario)
    hw_flops = hardware_flops_per_step(scenario)
    span = res.pipeline_span_s or step
    p = len(res.stages)
    bubble = sum(tl.bubble_s for tl in res.stages) / p / span if span > 0 else 0.0
    breakdown = _breakdown(table, res, span)
    exposed = {d: breakdown[f"exposed_{d}"] for d in COMM_DIMS}
    mem = stage_memory(table, res)
    warnings = list(warnings or [])
    hfu = hw_flops / (step * gpus * peak) if step > 0 else 0.0
    if hfu > 1:
        # Not clamped: the convention is the published one, but a reader must not take >100 % at face value.
        warnings.append(_above_peak_note(scenario, hfu))
    return Prediction(
        step_time_s=step,
        tokens_per_s=scenario.tokens_per_step / step if step > 0 else 0.0,
        mfu=model_flops / (step * gpus * peak) if step > 0 else 0.0,
        hfu=hfu,
        model_tflops_per_gpu=model_flops / step / gpus / 1e12 if step > 0 else 0.0,
        hardware_tflops_per_gpu=hw_flops / step / gpus / 1e12 if step > 0 else 0.0,
        bubble_fraction=bubble,
        exposed_comm_s=exposed,
        per_stage_memory=mem,
        peak_bytes=max(s.total for s in mem),
        gpu_memory_bytes=scenario.cluster.gpu.memory_bytes,
        layout={"tp": lay.tp, "pp": lay.pp, "dp": scenario.dp, "cp": lay.cp, "ep": lay.ep, "etp": scenario.expert_tp,
                "vpp": lay.vpp, "dp_shard": scenario.dp_shard,
                "micro_batch": tr.micro_batch, "num_microbatches": scenario.num_microbatches},
        engine={"mode": mode, "events": res.events, "wall_s": res.wall_s,
                **({"folded": res.folded.to_json()} if res.folded else {})},
        calibration=calibration,
        breakdown_s=breakdown,
        host_bytes=host_bytes,
        host_node_bytes=node_host_bytes(scenario, host_bytes),
        host_capacity_bytes=scenario.cluster.host_memory_bytes,
        scenario=scenario.name,
        warnings=warnings,
        background_load=scenario.cluster.scale_out.background_load.model_dump(),
        moe_imbalance=layer_shape(scenario).moe_load,
        data_parallel=data_parallel_settings(scenario),
    )
