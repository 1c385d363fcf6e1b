"""How much a host-bound step's interval widens for the host's own variability: a measurement. Pure.

Where the host issues kernels more slowly than the GPU runs them, the step lasts as long as the host's issue
(cost_models.host_issue), so the step inherits the host's speed on that machine and in that process. That speed
is not a constant of the machine kind: the same one-GPU lines run by ``trainsim execute`` on two leases of one
H200 machine kind (each a 16-core Xeon host; benchmarks/device/README.md) took up to 34 % less or 36 % more on the
second lease where the step is host-bound, and by at most 5.1 % on the GPU-bound lines (benchmarks/data
``executed_h200.jsonl`` lease 1, ``executed_h200_host.jsonl`` lease 2, the same untraced sweep lines).

``LEASE_PAIRS`` holds ln(step on lease 2 / step on lease 1) of every line both leases ran that is host-bound on
lease 2 by its own measurement: the host's issue time of forward and of backward is at least 90 % of the device
time of that phase (``host_phases_median_s`` against ``phases_median_s``: the device's events span the host's
issue, the GPU waited for it). Each lease's host-bound step is one draw of a log-normal host speed around the
machine kind's typical one, so a pair's log ratio is the difference of two draws, of variance 2 sigma^2:

    sigma_host = sqrt(mean(r^2) / 2)                       (``HOST_LOG_SIGMA``: 0.20 from the five pairs)

Five pairs of one machine kind are a small sample: sigma_host is this measurement, not a law of hosts.

A step's sensitivity to its host's speed comes from its predicted host issue time ``H`` (every pass's issue, the
optimizer step's included) and its GPU-busy time ``G`` (the step less the predicted GPU idle waiting for the
host): the step scales as max(G, x H) / max(G, H) for a host x times slower. At coverage c the host's factor is
x = exp(+-z sigma_host), z the normal quantile of (1 + c) / 2, which gives the log-offsets ``host_offsets``: +-z
sigma_host where the step is host-bound, 0 where the GPU time exceeds even the slow host's issue. They widen the
interval's ends (validation.intervals) in quadrature about its middle, as independent sources of spread add.
"""

from __future__ import annotations

import math
from statistics import NormalDist

# ln(lease 2 step / lease 1 step) of the repeated untraced lines that are host-bound on lease 2 (module doc);
# steps: benchmarks/data/executed_h200.jsonl and executed_h200_host.jsonl, field measured.step_time_s.
LEASE_PAIRS = {
    "g1024_mb1": math.log(0.08520241850000332 / 0.12152173150000323),
    "g1024_mb2": math.log(0.08690504650000008 / 0.13133914200000163),
    "g2048_mb2_full": math.log(0.46247896950001177 / 0.43885197049999647),
    "l2048_mb1": math.log(0.21260012749999646 / 0.1562933239999893),
    "l2048_mb2_full": math.log(0.38816816749999816 / 0.41239521899998977),
}
HOST_LOG_SIGMA = math.sqrt(sum(r * r for r in LEASE_PAIRS.values()) / len(LEASE_PAIRS) / 2)


def step_host_issue_s(scenario, profile=None) -> float:
    """Host seconds to issue one step on a rank of the first stage: its blocks' forward and backward and the
    micro-batch's own work per micro-batch (cost_models.host_issue), the optimizer step (cost_models.step_host);
    0 where the host is not modelled apart (CPU ranks, MoE)."""
    from trainsim.cost_models.host_issue import scenario_block_issue
    from trainsim.cost_models.step_host import scenario_step_host

    issue = scenario_block_issue(scenario, profile)
    if issue is None:
        return 0.0
    layers = scenario.model.num_layers / max(1, scenario.layout.pp)
    per_mb = layers * (issue.fwd_s + issue.bwd_s) + issue.microbatch_fwd_s + issue.microbatch_bwd_s
    step = scenario_step_host(scenario, 0, profile)
    return scenario.num_microbatches * per_mb + (step.issue_s if step is not None else 0.0)


def host_offsets(step_s: float, host_idle_s: float, host_s: float, coverage: float,
                 sigma: float = HOST_LOG_SIGMA) -> tuple[float, float]:
    """(lower <= 0, upper >= 0) log-offsets of a step of ``step_s`` with ``host_idle_s`` predicted GPU idle waiting
    for the host and ``host_s`` host issue time, for the host's speed at ``coverage`` (module doc)."""
    if host_s <= 0 or step_s <= 0 or sigma <= 0:
        return 0.0, 0.0
    gpu = max(0.0, step_s - host_idle_s)
    x = math.exp(NormalDist().inv_cdf((1 + coverage) / 2) * sigma)
    base = max(gpu, host_s)
    return math.log(max(gpu, host_s / x) / base), math.log(max(gpu, host_s * x) / base)


def widen(lo: float, hi: float, offsets: tuple[float, float]) -> tuple[float, float]:
    """The log band (lo, hi) with the host's offsets added in quadrature to each half about its middle."""
    mid = (lo + hi) / 2
    return mid - math.hypot(mid - lo, offsets[0]), mid + math.hypot(hi - mid, offsets[1])
