"""Fitting measured points into the small models a calibration profile stores (pure numpy, no torch).

All fits minimise *relative* squared error (each row divided by its measured time), so microsecond
latencies and second-long transfers weigh alike, and keep every coefficient >= 0 (a negative latency or
bandwidth is unphysical). With at most three unknowns the non-negative least-squares optimum is found
exactly by solving the unconstrained problem on every support set and keeping the best feasible one.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

from trainsim.cost_models.profile import (
    CollectiveFit,
    CollectivePoint,
    LinearFit,
    Stats,
    ThreeTermFit,
    busbw_factor,
    canonical_op,
)


def timing_stats(times_s: Sequence[float]) -> Stats:
    """min / median / p99 of repeated timings (p99 by linear interpolation, = max for < 100 reps)."""
    a = np.asarray(times_s, dtype=float)
    if a.size == 0:
        raise ValueError("no timings")
    return Stats(min_s=float(a.min()), median_s=float(np.median(a)), p99_s=float(np.percentile(a, 99)),
                 reps=int(a.size))


def nonneg_relative_lstsq(columns: np.ndarray, times_s: np.ndarray, required: Sequence[int] = ()) -> tuple[np.ndarray, float]:
    """min Σ((X·c − t)/t)² over c ≥ 0, with the columns in ``required`` forced into the support.

    Returns (coefficients, rms relative error). ``columns`` is (n_points, n_terms).
    """
    X = np.asarray(columns, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if X.ndim != 2 or X.shape[0] != t.size:
        raise ValueError("columns must be (n_points, n_terms) matching times")
    if t.size == 0 or np.any(t <= 0):
        raise ValueError("times must be positive")
    A = X / t[:, None]
    b = np.ones_like(t)
    n_terms = X.shape[1]
    best: tuple[float, np.ndarray] | None = None
    for size in range(1, n_terms + 1):
        for support in combinations(range(n_terms), size):
            if not set(required) <= set(support):
                continue
            sub = A[:, support]
            # Scale columns for conditioning (bytes ~1e9 next to 1).
            scale = np.linalg.norm(sub, axis=0)
            scale[scale == 0] = 1.0
            coef_s, *_ = np.linalg.lstsq(sub / scale, b, rcond=None)
            coef = coef_s / scale
            if np.any(coef < 0) or not np.all(np.isfinite(coef)):
                continue
            full = np.zeros(n_terms)
            full[list(support)] = coef
            resid = A @ full - b
            sse = float(resid @ resid)
            if best is None or sse < best[0] - 1e-15:
                best = (sse, full)
    if best is None:
        raise ValueError("no non-negative fit exists for these points")
    sse, coef = best
    return coef, float(np.sqrt(sse / t.size))


def fit_linear(nbytes: Sequence[float], times_s: Sequence[float]) -> LinearFit:
    """t = alpha + nbytes / bw (alpha >= 0, bw > 0) by relative least squares."""
    n = np.asarray(nbytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    coef, rms = nonneg_relative_lstsq(np.column_stack([np.ones_like(n), n]), t, required=(1,))
    alpha, inv_bw = coef
    return LinearFit(alpha_s=float(alpha), bw_Bps=float(1.0 / inv_bw), rms_rel_error=rms, n_points=int(t.size))


def fit_three_term(flops: Sequence[float], nbytes: Sequence[float], times_s: Sequence[float]) -> ThreeTermFit:
    """t = overhead + flops/P + bytes/W (all >= 0; the FLOP term always kept) by relative least squares.

    Efficiency = flops / (t · peak) then rises with arithmetic intensity (flops/bytes) and with size
    (the fixed overhead is amortised) towards e_max = P / peak: a roofline with a launch cost.
    """
    f = np.asarray(flops, dtype=float)
    b = np.asarray(nbytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    coef, rms = nonneg_relative_lstsq(np.column_stack([np.ones_like(f), f, b]), t, required=(1,))
    c0, inv_p, inv_w = coef
    return ThreeTermFit(overhead_s=float(c0), flops_per_s=float(1.0 / inv_p),
                        bytes_per_s=float(1.0 / inv_w) if inv_w > 0 else None,
                        rms_rel_error=rms, n_points=int(t.size))


def collective_point(op: str, group_size: int, nodes: int, size_bytes: float, stats: Stats, dtype: str = "float",
                     in_place: bool = False, source: str = "measured") -> CollectivePoint:
    """A CollectivePoint with algbw = size / median time and busbw = algbw · nccl-tests factor."""
    op = canonical_op(op)
    algbw = size_bytes / stats.median_s if stats.median_s > 0 else 0.0
    return CollectivePoint(op=op, group_size=group_size, nodes=nodes, size_bytes=float(size_bytes), dtype=dtype,
                           stats=stats, algbw_Bps=algbw, busbw_Bps=algbw * busbw_factor(op, group_size),
                           in_place=in_place, source=source)


def fit_collective(points: Sequence[CollectivePoint], min_size_bytes: float = 0.0, backend: str = "") -> CollectiveFit:
    """alpha/beta for one (op, group_size, nodes) from its points (median times; sizes >= min_size_bytes).

    Falls back to all points if fewer than two remain above ``min_size_bytes``.
    """
    if not points:
        raise ValueError("no collective points to fit")
    keys = {(p.op, p.group_size, p.nodes) for p in points}
    if len(keys) != 1:
        raise ValueError(f"points mix several (op, group_size, nodes): {sorted(keys)}")
    op, group_size, nodes = keys.pop()
    use = [p for p in points if p.size_bytes >= min_size_bytes]
    if len({p.size_bytes for p in use}) < 2:
        use = list(points)
    sizes = [p.size_bytes for p in use]
    times = [p.stats.median_s for p in use]
    if len(set(sizes)) < 2:
        # One size only: no latency can be separated; attribute everything to bandwidth.
        alpha, beta, rms = 0.0, float(np.median(np.asarray(times) / np.asarray(sizes))), 0.0
    else:
        lin = fit_linear(sizes, times)
        alpha, beta, rms = lin.alpha_s, 1.0 / lin.bw_Bps, lin.rms_rel_error
    return CollectiveFit(op=op, group_size=group_size, nodes=nodes, alpha_s=alpha, beta_s_per_byte=beta,
                         busbw_Bps=busbw_factor(op, group_size) / beta, rms_rel_error=rms, n_points=len(use),
                         source=use[0].source, backend=backend)


def fit_all_collectives(points: Sequence[CollectivePoint], min_size_bytes: float = 0.0,
                        backend: str = "") -> list[CollectiveFit]:
    """One fit per (op, group_size, nodes) present in ``points`` (out-of-place points preferred)."""
    groups: dict[tuple[str, int, int], list[CollectivePoint]] = {}
    for p in points:
        groups.setdefault((p.op, p.group_size, p.nodes), []).append(p)
    fits = []
    for key in sorted(groups):
        pts = groups[key]
        oop = [p for p in pts if not p.in_place]
        fits.append(fit_collective(oop or pts, min_size_bytes, backend))
    return fits
