"""Seeded Monte Carlo variability: per-op jitter and straggling GPUs, as compute-time multipliers.

* Jitter (``cv``): each engine op (one chunk for one micro-batch) takes a lognormal multiple of its
  compute time with mean 1 and coefficient of variation ``cv``. The op's TP and CP peers synchronise at the
  op's collectives, so the multiplier is the largest of ``tp·cp`` independent draws (one per peer).
* Stragglers (``fraction``, ``slowdown``): each GPU is slow with probability ``fraction`` for the whole step
  and runs compute ``slowdown``× slower. A pipeline stage is slow if any of its ``tp·cp·dp`` GPUs is slow:
  DP replicas synchronise at the gradient reduction, so a slow GPU in any replica delays the step.
  Simulating one replica with every slow stage is slightly pessimistic when two slow GPUs sit in different
  replicas at different stages.

Jitter across DP replicas (the step waits for the slowest replica) is not modelled beyond that.

Both multiply compute that is already at the job's slowest-GPU pace (``GPUSpec.speed_spread_cv``,
cost_models/variation.py: the expected slowest of the job's GPUs, in every prediction): a straggler's
``slowdown`` is relative to that pace, and jitter is meant as transient per-op noise on top of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Variability:
    """The Monte Carlo settings of a prediction (module doc): per-op jitter, stragglers, samples and seed."""

    jitter_cv: float = 0.0
    straggler_fraction: float = 0.0
    straggler_slowdown: float = 1.0
    samples: int = 20
    seed: int = 0

    @property
    def active(self) -> bool:
        """Whether any variability is asked for (jitter, or stragglers that are slower)."""
        return self.jitter_cv > 0 or (self.straggler_fraction > 0 and self.straggler_slowdown != 1.0)


def draw(var: Variability, sample: int, ops_per_stage: list[int], peers: int, gpus_per_stage: int
         ) -> tuple[list[list[float]] | None, list[float] | None]:
    """(op_scale, stage_scale) for one Monte Carlo sample; deterministic in (seed, sample)."""
    rng = np.random.default_rng([var.seed, sample])
    op_scale = None
    if var.jitter_cv > 0:
        sigma = math.sqrt(math.log1p(var.jitter_cv ** 2))
        mu = -0.5 * sigma * sigma
        op_scale = []
        for n in ops_per_stage:
            x = rng.lognormal(mu, sigma, size=(n, max(1, peers)))
            op_scale.append(x.max(axis=1).tolist())
    stage_scale = None
    if var.straggler_fraction > 0 and var.straggler_slowdown != 1.0:
        p_slow = 1.0 - (1.0 - var.straggler_fraction) ** gpus_per_stage
        slow = rng.random(len(ops_per_stage)) < p_slow
        stage_scale = [var.straggler_slowdown if s else 1.0 for s in slow]
    return op_scale, stage_scale


def summarize(step_times: list[float]) -> dict[str, float]:
    """p50, p99, mean, min and max of the sampled step times (Prediction.variability)."""
    arr = np.asarray(step_times, dtype=float)
    return {
        "step_time_p50_s": float(np.percentile(arr, 50)),
        "step_time_p99_s": float(np.percentile(arr, 99)),
        "step_time_mean_s": float(arr.mean()),
        "step_time_min_s": float(arr.min()),
        "step_time_max_s": float(arr.max()),
    }
