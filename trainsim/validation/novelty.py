"""How much wider the interval is for a scenario unlike the validated ones, measured on held-out sources.

A scenario is novel in a dimension (GPU type, framework, a parallelism dimension, model family) when none of
the validated sources has its value there. Whether such a scenario is predicted worse than a familiar one is
a question the published runs answer by leaving one source out at a time: the held-out source's rows whose
value in that dimension none of the remaining sources has are exactly the rows a user with a novel scenario
is in. For every source s and coverage c, the band of s's rows is the hierarchical conformal band of the other
sources (source_conformal.hierarchical_band: lo_s, hi_s) about their mixture median m_s, and a held-out row's
score is how far out of that band it lies, as a multiple of the band's half on the row's side:

    score = (r - m_s) / (hi_s - m_s)  for r >= m_s,      (m_s - r) / (m_s - lo_s)  below,

so a score <= 1 is inside the band and a band scaled by w about m_s holds the rows with score <= w. The scale
of a dimension at coverage c is the quantile c of the scores of the held-out rows novel in it, every source
weighted equally (the sources' score distributions pooled as in validation.intervals: CDF pooling, Dunn,
Wasserman & Ramdas, arXiv:1809.07441): the band scaled by it covers a share c of those rows. The same
quantile of the rows novel in no dimension ("none") says how the band does on familiar held-out rows, and of
the rows novel in any ("any") stands in for a dimension no held-out source was new in. ``predict`` scales the
band of a novel scenario about its median by the largest scale of its novel dimensions, never below 1 (a
scenario nothing validated resembles never gets a narrower band than one that something does). With one
to four novel held-out sources per dimension the scale is an estimate, not a distribution-free bound: the
hierarchical level c(K + 1)/K exceeds 1 at c = 0.8 for K <= 3.

Scores come from the rows' residual quantiles (the score CDF at x is F(m + x(hi - m)) - F(m - x(m - lo)) on
the piecewise-linear CDF through the knots), so the measurement needs only what ``build_table`` stores; it is
made there on the grid COVERAGES and interpolated linearly in between.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainsim.validation.source_conformal import (
    PS,
    equal_weight_quantile,
    hierarchical_band,
    mixture_quantile,
    source_knots,
    source_summary,
)

DIMENSIONS = {"gpu": "GPU type", "framework": "framework", "parallelism": "parallelism", "family": "model family"}
COVERAGES = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.50 .. 0.95: validation.intervals' range
MIN_SOURCES = 3  # leaving one out must leave the two sources a band over sources needs


def covered(sources: dict[str, dict]) -> dict[str, set[str]]:
    """Dimension -> every value the sources' runs cover."""
    out: dict[str, set[str]] = {}
    for s in sources.values():
        for k, v in s["covers"].items():
            out.setdefault(k, set()).update(v)
    return out


def novel_features(cover: dict[str, set[str]], feats: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(dimension, value) of every feature of a run that ``cover`` lacks."""
    return [(k, v) for k, vals in feats.items() for v in vals if v not in cover.get(k, set())]


def held_out_groups(rows: list[tuple[str, float, dict]], sources: dict[str, dict]) -> dict[str, dict[str, list]]:
    """Group ("gpu", ..., "any", "none") -> source -> residuals of its rows novel in that group relative to
    the other sources."""
    groups: dict[str, dict[str, list]] = {}
    for name in sources:
        cover = covered({k: v for k, v in sources.items() if k != name})
        for src, r, feats in rows:
            if src != name:
                continue
            dims = sorted({d for d, _ in novel_features(cover, feats)})
            for g in [*dims, "any"] if dims else ["none"]:
                groups.setdefault(g, {}).setdefault(name, []).append(r)
    return groups


def _score_cdf(src: dict, m: float, lo: float, hi: float) -> tuple[Callable[[float], float], float]:
    """The CDF of a held-out source's scores against the band (lo, hi) about m, and its largest score."""
    k = source_knots(src)
    up, down = max(hi - m, 1e-12), max(m - lo, 1e-12)

    def cdf(x: float) -> float:
        return float(np.interp(m + x * up, k, PS)) - float(np.interp(m - x * down, k, PS))

    return cdf, max((k[-1] - m) / up, (m - k[0]) / down, 0.0)


def _group_scales(group: dict[str, list], bands: dict[str, list]) -> list[float]:
    """The equal-source-weight quantile c of a group's scores at every c of COVERAGES."""
    subs = {s: source_summary(r, []) for s, r in group.items()}
    out = []
    for i, c in enumerate(COVERAGES):
        got = [_score_cdf(sub, *bands[s][i]) for s, sub in subs.items()]
        out.append(equal_weight_quantile([f for f, _ in got], c, 0.0, max(x for _, x in got) + 1e-9))
    return out


def measure(rows: list[tuple[str, float, dict]], sources: dict[str, dict]) -> dict | None:
    """The stored measurement (module docstring); None when no held-out row is novel or too few sources."""
    groups = held_out_groups(rows, sources) if len(sources) >= MIN_SOURCES else {}
    if set(groups) <= {"none"}:
        return None
    bands: dict[str, list] = {}
    for name in sorted({s for g in groups.values() for s in g}):
        others = [v for k, v in sources.items() if k != name]
        m = mixture_quantile(others, 0.5)
        bands[name] = [(m, *hierarchical_band(others, c)[:2]) for c in COVERAGES]
    return {"method": "leave-one-source-out scores of held-out rows novel in each dimension (validation.novelty)",
            "coverages": list(COVERAGES),
            "groups": {g: {"sources": sorted(v), "rows": sum(len(r) for r in v.values()),
                           "scale": [float(x) for x in _group_scales(v, bands)]} for g, v in sorted(groups.items())}}


def scale_of(block: dict, group: str, coverage: float) -> float:
    """The band scale of ``group`` at ``coverage``, interpolated between the block's coverage levels."""
    return float(np.interp(coverage, block["coverages"], block["groups"][group]["scale"]))


def widening(block: dict, found: list[tuple[str, str]], n_sources: int, coverage: float) -> tuple[float, list[str]]:
    """(scale of the band, one line per novel feature saying what was measured) for a novel scenario."""
    scales, lines = [1.0], []
    for dim, value in found:
        group = dim if dim in block["groups"] else "any"
        g = block["groups"][group]
        s = scale_of(block, group, coverage)
        scales.append(s)
        what = (f"whose {DIMENSIONS.get(dim, dim)} the other sources lacked" if group == dim
                else "new to the other sources in any dimension (no held-out source was new in this one)")
        held = f"held-out rows {what} ({g['rows']} rows of {len(g['sources'])} source(s))"
        head = f"{dim} {value!r} is in none of the runs behind the interval ({n_sources} sources)"
        if s > 1.0:
            lines.append(f"{head}: band x{s:.2f} about its median, the scale that covers {coverage:.0%} of the {held}")
        else:
            lines.append(f"{head}: not widened, the {held} lie {coverage:.0%} within x{s:.2f} of the band")
    return max(scales), lines
