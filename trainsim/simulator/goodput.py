"""Goodput under failures: job MTBF from a per-GPU interruption rate, the optimal checkpoint interval
(Young 1974 first order, Daly 2006 higher order) and the expected wall-clock time to finish a run.

Model (Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3),
2006): failures of the whole job arrive as a Poisson process with mean time between failures M; the
run alternates compute segments of length tau and checkpoint writes of length delta; a failure loses
the segment in progress and costs a restart of length R (during which further failures may strike).
Then the expected wall time for T_s seconds of useful work is

    T_w = M * exp(R/M) * (exp((tau + delta)/M) - 1) * T_s / tau,

and goodput = T_s / T_w. Units: seconds throughout; rates per GPU-hour where named so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from trainsim.cost_models import muon
from trainsim.specs.lora import checkpoint_params

if TYPE_CHECKING:
    from trainsim.specs import Scenario

# Default interruption rate: "The Llama 3 Herd of Models" (Meta, arXiv:2407.21783), Sec. 3.3.4 and
# Table 5: a 54-day snapshot of Llama 3 405B pre-training on 16,384 H100 GPUs saw 466 job
# interruptions, 47 planned and 419 unexpected (58.7% of the unexpected ones GPU-related).
# Only unexpected interruptions are failures in the checkpoint/restart sense.
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_GPUS = 16_384
LLAMA3_SNAPSHOT_DAYS = 54
DEFAULT_FAILURE_RATE_PER_GPU_HOUR = LLAMA3_UNEXPECTED_INTERRUPTIONS / (LLAMA3_GPUS * LLAMA3_SNAPSHOT_DAYS * 24.0)
FAILURE_RATE_SOURCE = (
    "Llama 3 Herd of Models (arXiv:2407.21783) Sec. 3.3.4/Table 5: 419 unexpected interruptions "
    "in 54 days on 16,384 H100 GPUs"
)

# Aggregate checkpoint write bandwidth: the same paper describes Meta's Tectonic storage for that run as
# sustaining 2 TB/s (7 TB/s peak). Used only when the user gives no checkpoint write time.
DEFAULT_STORAGE_WRITE_BPS = 2e12
# Restart cost (detect, reschedule, reload the checkpoint, warm up). No large-LLM source gives one number;
# 10 minutes is the restart time of Daly's own worked examples (Figs. 3-5) and is flagged as an assumption.
DEFAULT_RESTART_S = 600.0
# Tokens to train on when none are given: Hoffmann et al., "Training Compute-Optimal Large Language Models"
# (arXiv:2203.15556, "Chinchilla"), compute-optimal training uses about 20 tokens per parameter.
CHINCHILLA_TOKENS_PER_PARAM = 20.0


def train_tokens(tokens: float | None, params: float) -> float:
    """Tokens a run trains on: ``tokens`` when given, else CHINCHILLA_TOKENS_PER_PARAM per parameter."""
    return float(tokens) if tokens else CHINCHILLA_TOKENS_PER_PARAM * params


def job_mtbf_s(num_gpus: int, failure_rate_per_gpu_hour: float = DEFAULT_FAILURE_RATE_PER_GPU_HOUR) -> float:
    """Mean time between job-killing failures when any one of ``num_gpus`` failing stops the job."""
    if num_gpus <= 0:
        raise ValueError("num_gpus must be positive")
    if failure_rate_per_gpu_hour <= 0:
        return math.inf
    return 3600.0 / (failure_rate_per_gpu_hour * num_gpus)


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimal compute time between checkpoints: sqrt(2 * delta * M)."""
    if math.isinf(mtbf_s):
        return math.inf
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: sqrt(2dM)[1 + sqrt(d/2M)/3 + (d/2M)/9] - d for d < 2M, else M."""
    if math.isinf(mtbf_s):
        return math.inf
    d, m = checkpoint_s, mtbf_s
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def expected_wall_s(work_s: float, interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's expected wall time to complete ``work_s`` of computation with checkpoints every ``interval_s``;
    ``math.inf`` where it exceeds the largest float (restarts or segments many times longer than the MTBF: the
    run is expected never to finish)."""
    if interval_s <= 0:
        raise ValueError("checkpoint interval must be positive")
    if math.isinf(mtbf_s):
        return work_s * (1.0 + checkpoint_s / interval_s) if math.isfinite(interval_s) else work_s
    m = mtbf_s
    try:  # expm1 keeps precision when (tau + delta) << M.
        return m * math.exp(restart_s / m) * math.expm1((interval_s + checkpoint_s) / m) * work_s / interval_s
    except OverflowError:
        return math.inf


def free_checkpoint_wall_s(work_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly's expected wall time as the checkpoint write time and with it the interval go to 0: each failure
    loses no work but costs a restart, T_w -> T_s * exp(R/M) (the limit of expected_wall_s, since
    (exp(tau/M) - 1) / tau -> 1/M); ``math.inf`` past the largest float."""
    if math.isinf(mtbf_s):
        return work_s
    try:
        return work_s * math.exp(restart_s / mtbf_s)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class Goodput:
    """Failure-aware time to train: MTBF, optimal checkpoint interval and the resulting goodput."""

    num_gpus: int
    failure_rate_per_gpu_hour: float
    mtbf_s: float
    checkpoint_s: float
    restart_s: float
    interval_s: float          # Daly's optimum compute time between checkpoints
    young_interval_s: float
    ideal_time_s: float        # no failures, no checkpoints
    time_to_train_s: float     # expected, with checkpoints, failures and restarts
    goodput: float             # ideal_time_s / time_to_train_s
    expected_failures: float

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in asdict(self).items()}


def plan_goodput(work_s: float, num_gpus: int, checkpoint_s: float, restart_s: float = DEFAULT_RESTART_S,
                 failure_rate_per_gpu_hour: float = DEFAULT_FAILURE_RATE_PER_GPU_HOUR) -> Goodput:
    """Goodput of a run of ``work_s`` failure-free seconds on ``num_gpus`` with Daly-optimal checkpointing."""
    mtbf = job_mtbf_s(num_gpus, failure_rate_per_gpu_hour)
    tau = daly_interval_s(checkpoint_s, mtbf)
    if math.isinf(tau):
        wall = work_s
    else:
        tau = min(tau, work_s) if work_s > 0 else tau
        if work_s <= 0:
            wall = 0.0
        elif tau <= 0:  # a checkpoint that costs nothing: Daly's optimum interval is 0
            wall = free_checkpoint_wall_s(work_s, restart_s, mtbf)
        else:
            wall = expected_wall_s(work_s, tau, checkpoint_s, restart_s, mtbf)
    return Goodput(
        num_gpus=num_gpus, failure_rate_per_gpu_hour=failure_rate_per_gpu_hour, mtbf_s=mtbf,
        checkpoint_s=checkpoint_s, restart_s=restart_s, interval_s=tau,
        young_interval_s=young_interval_s(checkpoint_s, mtbf), ideal_time_s=work_s, time_to_train_s=wall,
        goodput=(work_s / wall) if wall > 0 else 1.0,
        expected_failures=(wall / mtbf) if math.isfinite(mtbf) else 0.0,
    )


def checkpoint_bytes(total_params: float, param_bytes: int = 2, optimizer_bytes_per_param: float = 12) -> float:
    """Bytes of a full training checkpoint: weights in the training dtype plus fp32 master and Adam states."""
    return float(total_params) * (param_bytes + optimizer_bytes_per_param)


def scenario_checkpoint_bytes(scn: Scenario) -> float:
    """Bytes of a full checkpoint of ``scn``'s run: its parameters in their dtype (``param_bytes``) plus their
    optimizer states -- Muon's mix of momentum and Adam moments where it runs (cost_models/muon.py), else
    ``optimizer_bytes_per_param``; under LoRA the adapters only (specs/lora.checkpoint_params)."""
    t = scn.training
    opt = muon.model_state_bytes_per_param(scn) if t.optimizer == "muon" else t.optimizer_bytes_per_param
    params = checkpoint_params(scn.model, t.lora_rank, t.lora_target_modules)
    return checkpoint_bytes(params, t.param_bytes, opt)


def checkpoint_write_s(nbytes: float, storage_write_Bps: float = DEFAULT_STORAGE_WRITE_BPS) -> float:
    """Seconds to write a checkpoint of ``nbytes`` at the aggregate storage bandwidth (blocking write)."""
    if storage_write_Bps <= 0:
        raise ValueError("storage bandwidth must be positive")
    return nbytes / storage_write_Bps
