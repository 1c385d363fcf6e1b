"""Prediction intervals from measured residuals (hierarchical split-conformal, grouped by source).

The residual of a published run is r = ln(measured step / predicted step). The stored table
(``trainsim/data/residual_quantiles.json``, written by ``benchmarks/residual_table.py``) holds, per source
(a paper, a vendor table, a project's docs), the quantiles, mean and sd of its rows' residuals and what its
runs cover (GPU types, frameworks, parallelism, model families). Rows of one source share its stack and its
measurement habits, so they are not exchangeable with each other; sources are. A new scenario is one row of
one more source, and its interval at coverage c = 1 - a is hierarchical conformal prediction (Lee, Barber &
Willett, "Distribution-free inference with hierarchical data", arXiv:2306.06342, Sec. 3): each of the K
sources spreads weight 1/(K + 1) over its rows, the new source's weight 1/(K + 1) sits at +inf (upper end)
or -inf (lower end), and each end is that distribution's quantile for a tail of a/2. On the equal-weight
mixture of the sources' residual distributions this is the quantile at level p = (1 - a/2)(K + 1)/K for the
upper end and 1 - p for the lower one, which covers a row of a new source with probability >= 1 - a whatever
the residual distribution, provided the sources are exchangeable. The mixture quantile at 1 - a/2 itself
(CDF pooling, Dunn, Wasserman & Ramdas, JASA 2023, arXiv:1809.07441) is valid only as K grows: with about a
dozen sources whose offsets dominate, it covers about (1 - a)K/(K + 1) of a new source's rows.

K sources bound a tail of a/2 only while p <= 1, i.e. c <= 1 - 2/(K + 1); above that the interval is a
normal random-effects (Student-t, K - 1 degrees of freedom) band of one more source's row, and says so. That
band is parametric: it need not contain the distribution-free band of a lower coverage, which near
1 - 2/(K + 1) reaches the most extreme rows of the most extreme source.

A scenario unlike every validated one (its GPU type, framework, a parallelism dimension or its model
family absent from all sources) is not exchangeable with them. How much worse such scenarios are predicted is
measured by leaving one source out at a time (validation.novelty): the rows of the held-out source whose
value in a dimension the remaining sources lack are scored against the remaining sources' band, and the
band of a novel scenario is scaled about its median by the scale that covers the stated share of those
rows, with one line per missing feature saying what was measured. A table without that measurement (fewer
than three sources, or none of them new to the rest) gives the envelope of the per-source intervals instead.

With a run calibration (``calibrate --from-runs``) the residuals are its runs' leave-one-out residuals:
split-conformal order statistics when there are enough runs for the coverage (n >= 2/a - 1), else a Student-t
interval from their mean and sd (3 or more runs), else the published-run table with a line saying why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainsim.specs import SpecError
from trainsim.validation import host_band, novelty
from trainsim.validation.source_conformal import (
    LEVELS,
    hierarchical_band,
    mixture_quantile,
    source_quantile,
    source_summary,
)

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile
    from trainsim.specs import Scenario

TABLE_NAME = "residual_quantiles.json"
MIN_COVERAGE, MAX_COVERAGE = 0.5, 0.95  # beyond 95 % the stored 2.5 % / 97.5 % quantiles are extrapolation


def table_path() -> Path:
    """The bundled residual-quantile table (trainsim/data/residual_quantiles.json)."""
    return Path(str(resources.files("trainsim.data").joinpath(TABLE_NAME)))


def scenario_features(scenario: Scenario) -> dict[str, list[str]]:
    """What a run exercises: GPU type, framework, parallel dimensions in use, model family."""
    lay, tr, m = scenario.layout, scenario.training, scenario.model
    dims = [d for d in ("tp", "pp", "cp", "ep") if getattr(lay, d) > 1]
    if lay.vpp > 1:
        dims.append("vpp")
    if tr.zero >= 3:
        dims.append("zero3")
    family = "moe" if m.is_moe else ("llama-style" if m.activation == "swiglu" else "gpt-style")
    return {"gpu": [scenario.cluster.gpu.name], "framework": [tr.framework], "parallelism": dims, "family": [family]}


def build_table(rows: list[tuple[str, float, dict[str, list[str]]]]) -> dict:
    """The stored table from (source, residual, features) rows: per-source summaries and the held-out
    measurement of novelty (validation.novelty; absent when there is nothing to measure)."""
    by: dict[str, list] = {}
    for src, r, feat in rows:
        by.setdefault(src, []).append((r, feat))
    sources = {s: source_summary([r for r, _ in v], [f for _, f in v]) for s, v in sorted(by.items())}
    table = {"kind": "trainsim-residual-quantiles", "schema_version": 3, "levels": list(LEVELS),
             "residual": "ln(measured step / predicted step)", "sources": sources}
    block = novelty.measure(rows, sources)
    if block is not None:
        table["novelty"] = block
    return table


def load_table(path: Path | None = None) -> dict:
    """The residual-quantile table at ``path`` (default: table_path())."""
    return json.loads((path or table_path()).read_text(encoding="utf-8"))


def _envelope(srcs: list[dict], coverage: float, lo: float, hi: float) -> tuple[float, float]:
    """From the lowest source's lower quantile to the highest source's upper one, at least (lo, hi)."""
    a = 1.0 - coverage
    return (min(lo, min(source_quantile(s, a / 2) for s in srcs)),
            max(hi, max(source_quantile(s, 1 - a / 2) for s in srcs)))


def published_band(table: dict, feats: dict[str, list[str]], coverage: float) -> tuple[float, float, str, list[str]]:
    """(ln lower, ln upper, basis, reasons) from the published-run table (module docstring)."""
    srcs = list(table["sources"].values())
    found = novelty.novel_features(novelty.covered(table["sources"]), feats)
    lo, hi, basis = hierarchical_band(srcs, coverage)
    if not found:
        return lo, hi, basis, []
    k = len(srcs)
    block = table.get("novelty")
    if block is None:
        lo, hi = _envelope(srcs, coverage, lo, hi)
        why = [f"{d} {v!r} is in none of the runs behind the interval ({k} sources); no held-out source was new to the "
               f"rest, so the band is the envelope of the per-source intervals" for d, v in found]
        n = sum(s["n"] for s in srcs)
        return lo, hi, f"envelope of the per-source intervals of {n} published runs ({k} sources)", why
    w, why = novelty.widening(block, found, k, coverage)
    if w > 1.0:
        m = mixture_quantile(srcs, 0.5)
        lo, hi = m - w * (m - lo), m + w * (hi - m)
        basis += f", scaled x{w:.2f} for what none of them has (measured on held-out sources)"
    return lo, hi, basis, why


def conformal_band(residuals: list[float], coverage: float) -> tuple[float, float] | None:
    """Split-conformal order statistics of held-out residuals; None when too few for this coverage."""
    r = sorted(residuals)
    n = len(r)
    a = 1.0 - coverage
    k_hi = math.ceil((n + 1) * (1 - a / 2) - 1e-9)  # 1e-9: 0.8's binary error must not move a rank
    k_lo = math.floor((n + 1) * (a / 2) + 1e-9)
    if k_hi > n or k_lo < 1:
        return None
    return r[k_lo - 1], r[k_hi - 1]


def t_band(residuals: list[float], coverage: float) -> tuple[float, float]:
    """Student-t prediction interval of one more residual from n >= 2 held-out ones."""
    from scipy.stats import t  # slow import (0.4-4 s), loaded on use

    r = np.asarray(residuals, dtype=float)
    n = r.size
    half = float(t.ppf(0.5 + coverage / 2, n - 1)) * float(r.std(ddof=1)) * math.sqrt(1 + 1 / n)
    return float(r.mean()) - half, float(r.mean()) + half


def run_band(rc, scenario: Scenario, coverage: float) -> tuple[float, float, str] | str:
    """(ln lower, ln upper, basis) from a run calibration's leave-one-out residuals, or why it cannot give
    one."""
    loo = rc.loo_residuals()
    gpus = {r.gpu for r in rc.runs}
    if scenario.cluster.gpu.name not in gpus:
        return f"the run calibration has no run on {scenario.cluster.gpu.name}"
    if len(loo) < 3:
        return f"the run calibration has {len(loo)} leave-one-out residual(s); 3 are needed"
    band = conformal_band(loo, coverage)
    if band is not None:
        return band[0], band[1], f"split-conformal over the {len(loo)} leave-one-out residuals of the run calibration"
    lo, hi = t_band(loo, coverage)
    return lo, hi, (f"Student-t over the {len(loo)} leave-one-out residuals of the run calibration "
                    f"(conformal needs >= {math.ceil(2 / (1 - coverage)) - 1} at this coverage)")


@dataclass
class Interval:
    """A prediction's interval at ``coverage``: step time, tokens/s and MFU, with how it was derived."""

    coverage: float
    step_time_s: tuple[float, float]
    tokens_per_s: tuple[float, float]
    mfu: tuple[float, float]
    basis: str
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"interval_coverage": self.coverage, "step_time_interval_s": list(self.step_time_s),
                "tokens_per_s_interval": list(self.tokens_per_s), "mfu_interval": list(self.mfu),
                "interval_basis": self.basis, "interval_reasons": list(self.reasons)}


def check_coverage(coverage: float) -> float:
    """``coverage`` when it is finite and within [MIN_COVERAGE, MAX_COVERAGE]; a SpecError otherwise."""
    if not (math.isfinite(coverage) and MIN_COVERAGE <= coverage <= MAX_COVERAGE):
        raise SpecError("coverage", f"must be between {MIN_COVERAGE} and {MAX_COVERAGE}, got {coverage}")
    return coverage


def host_widening(lo: float, hi: float, step_s: float, host_idle_s: float, host_s: float,
                  coverage: float) -> tuple[float, float, list[str]]:
    """(lo, hi) widened for the host's issue-time spread between machines of one kind where the step depends on its
    host (validation.host_band), with the line that says so; unchanged where it does not. ``host_idle_s`` and
    ``host_s`` are the prediction's GPU idle waiting for the host and host issue time per step."""
    off = host_band.host_offsets(step_s, host_idle_s, host_s, coverage)
    if max(-off[0], off[1]) < 0.01:
        return lo, hi, []
    lo, hi = host_band.widen(lo, hi, off)
    gpu = max(0.0, step_s - host_idle_s)
    why = (f"the step depends on its host's issue time ({host_s:.4g} s per step against {gpu:.4g} s of GPU work): "
           f"widened by {off[0]:+.2f} / {off[1]:+.2f} in ln(step) for the host's speed, whose spread between two "
           f"leases of one H200 machine kind is ln sigma {host_band.host_log_sigma():.2f} (validation/host_band.py)")
    return lo, hi, [why]


def interval_for(step_s: float, tokens_per_s: float, mfu: float, scenario: Scenario,
                 profile: CalibrationProfile | None = None, coverage: float = 0.8,
                 table: dict | None = None, breakdown: dict[str, float] | None = None) -> Interval:
    """The interval of one prediction (module docstring). ``profile`` may hold a run calibration; ``breakdown`` is
    the prediction's (``Prediction.breakdown_s``), whose GPU idle waiting for the host (``host_idle``) and host issue
    time of the step (``host_issue``) widen a host-bound step's band for the host's measured variability
    (``host_widening``)."""
    check_coverage(coverage)
    rc = getattr(profile, "run_calibration", None)
    reasons: list[str] = []
    band = run_band(rc, scenario, coverage) if rc is not None else None
    if isinstance(band, tuple):
        lo, hi, basis = band
    else:
        if isinstance(band, str):
            reasons.append(f"{band}: interval from the published runs")
        lo, hi, basis, why = published_band(table or load_table(), scenario_features(scenario), coverage)
        reasons += why
    lo, hi = min(lo, hi), max(lo, hi)
    bd = breakdown or {}
    lo, hi, why = host_widening(lo, hi, step_s, bd.get("host_idle", 0.0), bd.get("host_issue", 0.0), coverage)
    reasons += why
    step = (step_s * math.exp(lo), step_s * math.exp(hi))
    return Interval(coverage, step, (tokens_per_s * step_s / step[1], tokens_per_s * step_s / step[0]),
                    (mfu * step_s / step[1], mfu * step_s / step[0]), basis, reasons)


def text(iv: Interval) -> list[str]:
    """Lines for the readable output."""
    pct = f"{iv.coverage:.0%}"
    out = [(f"{pct} interval: step {iv.step_time_s[0]:.4g} .. {iv.step_time_s[1]:.4g} s, tokens/s "
           f"{iv.tokens_per_s[0]:,.0f} .. {iv.tokens_per_s[1]:,.0f}, MFU {iv.mfu[0]:.1%} .. {iv.mfu[1]:.1%}"),
           f"  from {iv.basis}"]
    out += [f"  note: {r}" for r in iv.reasons]
    return out
