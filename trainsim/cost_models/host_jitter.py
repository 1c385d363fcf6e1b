"""Host jitter across the ranks of a tensor-parallel group: the group runs at its slowest host's pace. Pure.

A block's host issue time is not the same on every call: the Python interpreter, the allocator, the OS scheduler
and the garbage collector make it vary from pass to pass and from rank to rank. On one GPU the variation averages
out over a step. Under tensor parallelism every rank's block waits at each TP collective for its peers (the NCCL
kernel of the all-reduce completes only once every rank has launched its own), so where the host is the
bottleneck the group advances at the pace of the slowest of its ``n`` hosts: a host-bound pass lasts the expected
maximum of ``n`` issue times, not their mean. NCCL's maintainers name this "load imbalance, i.e., one GPU showed
up ... later than its peers" as what a collective's time in training holds beyond nccl-tests' (NVIDIA/nccl#701),
and Megatron-LM's ``--manual-gc`` exists to "align the timing of the collection across ranks which mitigates the
impact of CPU-associated jitters" (megatron/training/arguments.py, find_string id 15239139127).

Model: a pass's issue time on one rank is log-normal with median ``m`` and log-spread ``sigma``; ranks are
independent. The expected maximum of ``n`` draws over the expected one draw,

    pace(n, sigma) = E[max_n X] / E[X] = integral n * phi(t) * Phi(t)^(n-1) * exp(sigma*t) dt / exp(sigma^2/2),

is 1 at n = 1 and grows with n and sigma (evaluated by ``scipy.integrate.quad``). The counted issue seconds
(``host_issue``) stand for the mean. ``sigma`` comes from a measured pass: ln(p99 / median) / z of the repeated
timings ``trainsim calibrate --device cuda`` takes of the executor's block (``profile.host_issue``), where z is
the standard-normal value the p99 stands for at that sample size (``p99_z``): ``timing_stats`` interpolates the
p99 between the two largest order statistics (numpy's linear percentile), whose expected normal scores are
Blom's (G. Blom, "Statistical Estimates and Transformed Beta-Variables", 1958: E[Z_(i)] ~ Phi^-1((i - 3/8) /
(n + 1/4))); with 30 timings z = 1.92, not z_0.99 = 2.33, which would read the spread of a small sample short.
Without a profile the measured defaults below apply: the GPT block timed 30 times on an H200 host
(benchmarks/data/profile_h200.json, ``host_issue["layernorm-gelu-learned"]``): forward median 0.329 ms, p99
0.598 ms; backward median 1.722 ms, p99 2.280 ms, 30 timings each. With 30 timings the "p99" lies between the
two slowest, so sigma rests on the tail of a small sample. The backward timing holds the autograd engine's start per call, which
``host_issue`` does not use as a per-block time; its spread is used here because the start is paid on every rank
alike, so it shifts the timings rather than spreading them (an assumption, not a measurement).

The factor applies to the host's issue time of a pass, so it changes a step only where that pass is host-bound:
for n = 8 it is 1.50 (forward) and 1.22 (backward) with the defaults. Jitter within a rank over a step is not
modelled apart (it averages out in the step's sum of passes).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import TYPE_CHECKING

from trainsim.specs.memo import memoised

if TYPE_CHECKING:
    from .profile import CalibrationProfile

# Measured host issue timings of the executor's GPT block on a GPU host (module doc): (median s, p99 s).
MEASURED_FWD = (0.0003289760053157806, 0.0005984575879573823)
MEASURED_BWD = (0.001722416043281555, 0.002280057990550995)
MEASURED_REPS = 30
Z99 = NormalDist().inv_cdf(0.99)
P99 = 0.99


def p99_z(reps: int | None) -> float:
    """Standard-normal value that the p99 of ``reps`` timings (numpy's linear percentile) stands for: Blom's
    expected normal scores of the two order statistics it interpolates between (module doc); z_0.99 where the
    sample size is unknown."""
    if not reps or reps < 2:
        return Z99
    h = (reps - 1) * P99
    lo = math.floor(h)
    nd = NormalDist()

    def score(i: int) -> float:  # 0-based order statistic i of reps
        return nd.inv_cdf((i + 1 - 0.375) / (reps + 0.25))

    hi = min(lo + 1, reps - 1)
    return score(lo) + (h - lo) * (score(hi) - score(lo))


def log_sigma(median_s: float, p99_s: float, reps: int | None = None) -> float:
    """Log-normal spread of a timing from its median and the p99 of ``reps`` timings (0 where either is
    missing)."""
    if median_s <= 0 or p99_s <= median_s:
        return 0.0
    return math.log(p99_s / median_s) / p99_z(reps)


DEFAULT_SIGMA = (log_sigma(*MEASURED_FWD, MEASURED_REPS), log_sigma(*MEASURED_BWD, MEASURED_REPS))


@memoised(maxsize=256)
def pace(n: int, sigma: float) -> float:
    """Expected maximum of ``n`` independent log-normal draws of log-spread ``sigma`` over their mean (module
    doc): the factor a TP group of ``n`` ranks stretches a host-bound pass by."""
    if n <= 1 or sigma <= 0:
        return 1.0
    from scipy.integrate import quad  # slow import (0.4-4 s), loaded on use

    nd = NormalDist()

    def integrand(t: float) -> float:
        return n * math.exp(-t * t / 2) / math.sqrt(2 * math.pi) * nd.cdf(t) ** (n - 1) * math.exp(sigma * t)

    value, _ = quad(integrand, -12.0, 12.0 + sigma * 4, limit=200)
    return value / math.exp(sigma * sigma / 2)


def measured_sigma(profile: CalibrationProfile | None, style: str) -> tuple[float, float]:
    """(forward, backward) log-spread of the host issue time: the profile's own timings of ``style`` (or of the
    GPT block where it timed that one only), else the measured defaults (module doc)."""
    table = getattr(profile, "host_issue", None) or {}
    ov = table.get(style) or table.get("layernorm-gelu-learned")
    if ov is None:
        return DEFAULT_SIGMA
    return (log_sigma(ov.fwd.median_s, ov.fwd.p99_s, getattr(ov.fwd, "reps", None)),
            log_sigma(ov.bwd.median_s, ov.bwd.p99_s, getattr(ov.bwd, "reps", None)))
