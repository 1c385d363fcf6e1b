"""Hierarchical split-conformal bands over sources of residuals (the arithmetic behind validation.intervals).

A source (a paper, a vendor table, a project's docs) is summarised by its rows' residual quantiles on LEVELS
plus min and max (``source_summary``); its residual distribution is the piecewise-linear CDF through those
knots. ``hierarchical_band`` is the band of one row of a new source exchangeable with the given ones (Lee,
Barber & Willett, arXiv:2306.06342, Sec. 3), a Student-t random-effects band where K sources cannot bound the
tail distribution-free (validation.intervals explains both).
"""

from __future__ import annotations

import math

import numpy as np

LEVELS = tuple(round(x, 3) for x in np.linspace(0.025, 0.975, 39))  # the stored quantile grid


def source_summary(residuals: list[float], features: list[dict[str, list[str]]]) -> dict:
    """One source's row count, residual quantiles on LEVELS and the union of its rows' features."""
    r = np.asarray(residuals, dtype=float)
    cover: dict[str, set[str]] = {}
    for f in features:
        for k, v in f.items():
            cover.setdefault(k, set()).update(v)
    return {"n": int(r.size), "quantiles": [float(q) for q in np.quantile(r, LEVELS)],
            "min": float(r.min()), "max": float(r.max()), "mean": float(r.mean()), "sd": float(r.std()),
            "covers": {k: sorted(v) for k, v in cover.items()}}


PS = np.array([0.0, *LEVELS, 1.0])


def source_knots(src: dict) -> np.ndarray:
    """A source's residual quantiles with its min and max: the knots at levels PS."""
    return np.array([src["min"], *src["quantiles"], src["max"]])


def equal_weight_quantile(cdfs: list, p: float, lo: float, hi: float) -> float:
    """Quantile p of the equal-weight mixture of the distributions whose CDFs are ``cdfs`` (each a function of
    x, non-decreasing), searched in [lo, hi] by bisection (60 halvings: far below any residual's precision)."""
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if sum(f(mid) for f in cdfs) / len(cdfs) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def mixture_quantile(sources: list[dict], p: float) -> float:
    """Quantile p of the equal-weight mixture of the sources' residual distributions (bisection, as
    ``equal_weight_quantile`` but on the knots directly: this one runs for every prediction)."""
    ks = [source_knots(s) for s in sources]
    lo = min(k[0] for k in ks) - 1e-9
    hi = max(k[-1] for k in ks) + 1e-9
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if sum(float(np.interp(mid, k, PS)) for k in ks) / len(ks) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def source_quantile(src: dict, p: float) -> float:
    """A source's residual quantile at level ``p``, interpolated between its knots."""
    return float(np.interp(p, PS, source_knots(src)))


def hcp_level(k: int, tail: float) -> float | None:
    """Level of the K-source mixture quantile that bounds a tail of mass ``tail`` for a row of a new source:
    (1 - tail)(K + 1)/K (module docstring); None when it exceeds 1 (K sources cannot bound that tail)."""
    p = (1.0 - tail) * (k + 1) / k
    return None if p > 1.0 + 1e-12 else min(p, 1.0)


def random_effects_band(sources: list[dict], coverage: float) -> tuple[float, float]:
    """Student-t band of one row of a new source: mixture mean +- t(K - 1) x mixture sd x sqrt(1 + 1/K), the
    mixture variance being the sources' mean within-source variance plus the variance of their means."""
    from scipy.stats import t  # slow import (0.4-4 s), loaded on use

    k = len(sources)
    means = np.array([s["mean"] for s in sources])
    within = float(np.mean([s["sd"] ** 2 for s in sources]))
    sd = math.sqrt(within + float(means.var()))
    half = float(t.ppf(0.5 + coverage / 2, k - 1)) * sd * math.sqrt(1 + 1 / k)
    return float(means.mean()) - half, float(means.mean()) + half


def hierarchical_band(sources: list[dict], coverage: float) -> tuple[float, float, str]:
    """(ln lower, ln upper, basis) for a row of a new source exchangeable with ``sources`` (module docstring)."""
    k = len(sources)
    if k < 2:
        raise ValueError(f"an interval over sources needs at least 2 of them, got {k}")
    n = sum(s["n"] for s in sources)
    p = hcp_level(k, (1.0 - coverage) / 2)
    if p is not None:
        basis = (f"hierarchical split-conformal over {n} published runs of {k} sources weighted equally "
                 f"(mixture quantiles {1 - p:.3f} .. {p:.3f})")
        return mixture_quantile(sources, 1.0 - p), mixture_quantile(sources, p), basis
    lo, hi = random_effects_band(sources, coverage)
    return lo, hi, (f"Student-t random-effects band over {n} published runs of {k} sources ({k} sources bound "
                    f"at most {1 - 2 / (k + 1):.1%} coverage distribution-free)")


