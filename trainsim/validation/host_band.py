"""How much a host-bound step's interval widens for the host's own variability: a measurement. Pure.

Where the host issues kernels more slowly than the GPU runs them, the step lasts as long as the host's issue
(cost_models.host_issue), so the step inherits the host's speed on that machine and in that process. That speed
is not a constant of the machine kind: the same one-GPU lines run by ``trainsim execute`` on two leases of one
H200 machine kind (each a 16-core Xeon host; benchmarks/device/README.md) took up to 34 % less or 36 % more on the
second lease where the step is host-bound, and by at most 5.1 % on the GPU-bound lines (benchmarks/data
``executed_h200.jsonl`` lease 1, ``executed_h200_host.jsonl`` lease 2, the same untraced sweep lines).

The measurements are data: ``trainsim/data/host_lease_pairs.csv`` (written from the two record files by
``benchmarks/host_lease_pairs.py``) holds one row per untraced line both leases ran, with where each lease's record
lies, each lease's measured median step and lease 2's host issue and device time of forward and backward.
``lease_pairs`` takes ln(step on lease 2 / step on lease 1) of every line that is host-bound on lease 2 by its own
measurement: the host's issue time of forward and of backward is at least ``HOST_BOUND_RATIO`` (90 %) of the
device time of that phase (``host_phases_median_s`` against ``phases_median_s``: the device's events span the
host's issue, the GPU waited for it). Each lease's host-bound step is one draw of a log-normal host speed around
the machine kind's typical one, so a pair's log ratio is the difference of two draws, of variance 2 sigma^2:

    sigma_host = sqrt(mean(r^2) / 2)                       (``host_log_sigma``: 0.20 from the five pairs)

Five pairs of one machine kind are a small sample: sigma_host is this measurement, not a law of hosts.

A step's sensitivity to its host's speed comes from its predicted host issue time ``H`` (every pass's issue, the
optimizer step's included: the prediction's ``breakdown_s["host_issue"]``, the engine's own figure) and its
GPU-busy time ``G`` (the step less the predicted GPU idle waiting for the host, ``breakdown_s["host_idle"]``): the step scales as max(G, x H) / max(G, H) for a host x times slower. At coverage c the host's factor is
x = exp(+-z sigma_host), z the normal quantile of (1 + c) / 2, which gives the log-offsets ``host_offsets``: +-z
sigma_host where the step is host-bound, 0 where the GPU time exceeds even the slow host's issue. They widen the
interval's ends (validation.intervals) in quadrature about its middle, as independent sources of spread add.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from statistics import NormalDist

from trainsim.specs.memo import memoised
from trainsim.specs.safe_read import read_csv_rows

LEASE_PAIRS_NAME = "host_lease_pairs.csv"
LEASE_COLUMNS = ("sweep_name", "machine_kind", "lease1_record", "lease1_step_time_s", "lease2_record",
                 "lease2_step_time_s", "lease2_host_forward_s", "lease2_device_forward_s", "lease2_host_backward_s",
                 "lease2_device_backward_s")
# A phase is host-bound where its host issue time is at least this share of its device time (module doc).
HOST_BOUND_RATIO = 0.9


def lease_pairs_path() -> Path:
    """The bundled CSV of host-bound pairs from the two leases (trainsim/data/host_lease_pairs.csv)."""
    return Path(str(resources.files("trainsim.data").joinpath(LEASE_PAIRS_NAME)))


def host_bound(row: dict) -> bool:
    """Whether lease 2 measured a line host-bound: forward and backward each issued in at least
    ``HOST_BOUND_RATIO`` of the phase's device time."""
    return all(float(row[f"lease2_host_{k}_s"]) >= HOST_BOUND_RATIO * float(row[f"lease2_device_{k}_s"])
               for k in ("forward", "backward"))


@memoised(maxsize=1)
def _rows() -> tuple[dict[str, str], ...]:
    return tuple(read_csv_rows(lease_pairs_path(), "dataset"))


def lease_pairs() -> dict[str, float]:
    """ln(lease 2 step / lease 1 step) of every line both leases ran that lease 2 measured host-bound."""
    return {r["sweep_name"]: math.log(float(r["lease2_step_time_s"]) / float(r["lease1_step_time_s"]))
            for r in _rows() if host_bound(r)}


def log_sigma(pairs: dict[str, float]) -> float:
    """sigma_host of the module doc: sqrt(mean(r^2) / 2) over the pairs' log ratios."""
    return math.sqrt(sum(r * r for r in pairs.values()) / len(pairs) / 2)


def host_log_sigma() -> float:
    """sigma_host of the two leases' host-bound lines (module doc)."""
    return log_sigma(lease_pairs())


def host_offsets(step_s: float, host_idle_s: float, host_s: float, coverage: float,
                 sigma: float | None = None) -> tuple[float, float]:
    """(lower <= 0, upper >= 0) log-offsets of a step of ``step_s`` with ``host_idle_s`` predicted GPU idle waiting
    for the host and ``host_s`` host issue time, for the host's speed at ``coverage`` (module doc); ``sigma``
    defaults to the leases' ``host_log_sigma()``."""
    sigma = host_log_sigma() if sigma is None else sigma
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
