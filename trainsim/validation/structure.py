"""Where a step's error lies: the per-layer, per-micro-batch and per-step parts of published and predicted steps.

Without a pipeline (pp = 1) a Megatron step is, for a fixed TP degree, micro-batch size and DP degree, exactly
bilinear in the number of blocks ``L`` and the micro-batches per step ``m`` (global batch / (dp x micro-batch)):

    step = a + b·L + c·m + e·m·L

* ``e`` -- one block's forward, recomputed forward and backward for one micro-batch (its kernels, its TP
  collectives, the host's time to issue them where that is longer);
* ``c`` -- one micro-batch's work outside the blocks (embedding, output layer, loss, schedule bookkeeping);
* ``b`` -- one block's work once per step (its gradient all-reduce, its optimizer update);
* ``a`` -- the rest of the step.

A table that varies ``L`` and ``m`` over a grid (the vTrain single-node runs: L 12..24, m 2..16) fixes the four
terms by least squares, for the published steps and for trainsim's predictions alike. Setting one beside the
other says which part of the step a model misses: a gap in ``e`` is per block and micro-batch (kernels, TP
collectives, host issue), a gap in ``c`` is the output layer and loss, a gap in ``b`` the per-step update. It is
a diagnostic of the error's structure, never an input to the model. The fit's rms residual says how exactly the
published steps follow the bilinear form: runs timed end to end scatter by run-to-run noise, steps composed from
per-layer measurements do not.

Two checks of the published terms say how many independent measurements a table holds and how far apart they
scatter (``render_checks``):

* the spread of ``c`` and ``e`` over the DP groups of one (TP, micro-batch) regime: a micro-batch's work does not
  depend on DP, but runs timed apart still differ by their noise; a spread of a few microseconds says the rows
  share one per-micro-batch measurement, so an error in it repeats over every L, m and DP of the regime;
* ``e`` against the micro-batch at one TP: doubling the micro-batch doubles a block's work, so ``e`` cannot fall;
  where the published ``e`` falls, the measurements scatter by at least that drop, a floor no model can beat.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

MIN_POINTS = 6  # four unknowns; two more rows leave a residual to judge the fit by


@dataclass(frozen=True)
class Terms:
    """The four parts of ``step = a + b·L + c·m + e·m·L`` in seconds, and the rms residual of the fit."""

    fixed_s: float
    per_layer_step_s: float
    per_microbatch_s: float
    per_layer_microbatch_s: float
    rms_s: float


@dataclass(frozen=True)
class GroupStructure:
    """Published and predicted terms of one (TP, micro-batch) regime of one model width, averaged over its DP
    groups."""

    tp: int
    micro_batch: int
    rows: int
    published: Terms
    predicted: Terms
    dp_groups: int = 1
    dp_spread_s: float = 0.0  # largest spread of the published c and e over the regime's DP groups
    hidden: int = 0           # the model width of the regime's rows (a table may hold several)

    def to_json(self) -> dict:
        return {"tp": self.tp, "micro_batch": self.micro_batch, "hidden": self.hidden, "rows": self.rows,
                "dp_groups": self.dp_groups,
                "dp_spread_s": self.dp_spread_s,
                "published": self.published.__dict__, "predicted": self.predicted.__dict__}


def fit_terms(points: Iterable[tuple[int, float, float]]) -> Terms | None:
    """Least-squares ``a, b, c, e`` of ``(L, m, step_s)`` points; None where the points cannot fix them (fewer than
    ``MIN_POINTS`` or fewer than two distinct ``L`` or ``m``)."""
    pts = list(points)
    if len(pts) < MIN_POINTS or len({p[0] for p in pts}) < 2 or len({p[1] for p in pts}) < 2:
        return None
    L = np.array([p[0] for p in pts], dtype=float)
    m = np.array([p[1] for p in pts], dtype=float)
    y = np.array([p[2] for p in pts], dtype=float)
    x = np.column_stack([np.ones_like(L), L, m, m * L])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rms = float(np.sqrt(np.mean((x @ coef - y) ** 2)))
    return Terms(*(float(v) for v in coef), rms_s=rms)


def _mean_terms(terms: list[Terms]) -> Terms:
    return Terms(*(float(np.mean([getattr(t, f) for t in terms])) for f in Terms.__dataclass_fields__))


def _dp_spread(terms: list[Terms]) -> float:
    """Largest max - min over DP groups of the per-micro-batch terms ``c`` and ``e`` (seconds)."""
    cs = [t.per_microbatch_s for t in terms]
    es = [t.per_layer_microbatch_s for t in terms]
    return float(max(max(cs) - min(cs), max(es) - min(es)))


def _groups(cases, rows) -> dict[tuple[int, int, int, int], list[tuple[int, float, float, float, str]]]:
    """(tp, micro-batch, dp, hidden) -> [(L, m, published, predicted, row id)] over the compared pp = 1 rows (a
    block's cost depends on its width, so rows of different widths are fitted apart)."""
    by_id = {c.row_id: c for c in cases}
    out: dict[tuple[int, int, int, int], list[tuple[int, float, float, float]]] = {}
    for r in rows:
        s = by_id[r.row_id].scenario
        if s is None or s.layout.pp != 1 or r.predicted is None:
            continue
        mb = s.training.micro_batch
        m = s.training.global_batch / (s.dp * mb)
        out.setdefault((s.layout.tp, mb, s.dp, s.model.hidden), []).append(
            (s.model.num_layers, m, r.published, r.predicted, r.row_id))
    return out


def fit_regimes(report) -> list[tuple[tuple[int, int, int, int], list, Terms, Terms]]:
    """((tp, micro-batch, dp, hidden), points, published terms, predicted terms) of every regime of ``report`` whose rows
    span an (L, m) grid: ``_groups`` fitted once for step_structure, term_leverage and leverage_by_tp."""
    out = []
    for key, pts in sorted(_groups(report.dataset.cases, report.compared).items()):
        pub = fit_terms((L, m, p) for L, m, p, _, _ in pts)
        pred = fit_terms((L, m, q) for L, m, _, q, _ in pts)
        if pub is not None and pred is not None:
            out.append((key, pts, pub, pred))
    return out


def step_structure(report, fitted=None) -> list[GroupStructure]:
    """The terms of every (TP, micro-batch) regime of a validation report whose rows span an (L, m) grid
    (``fitted``: ``fit_regimes(report)`` when the caller has it)."""
    acc: dict[tuple[int, int, int], tuple[int, list[Terms], list[Terms]]] = {}
    for (tp, mb, _dp, h), pts, pub, pred in (fit_regimes(report) if fitted is None else fitted):
        n, pubs, preds = acc.get((h, tp, mb), (0, [], []))
        acc[(h, tp, mb)] = (n + len(pts), pubs + [pub], preds + [pred])
    return [GroupStructure(tp, mb, n, _mean_terms(pubs), _mean_terms(preds), len(pubs), _dp_spread(pubs), h)
            for (h, tp, mb), (n, pubs, preds) in sorted(acc.items())]


TERMS = ("a", "b", "c", "e")


def term_leverage(report, tp: int | None = None, fitted=None) -> dict[str, float]:
    """MAPE (%) of the whole report were one term's gap closed: for each term, every fitted pp = 1 row's prediction
    moves by (published - predicted term) x its regressor (1, L, m or m·L), every other row as predicted; with
    ``tp``, only the regimes of that TP degree move. A large drop says the error lives in that term (at that TP); a
    small one that closing it, however justified, barely moves the dataset. A diagnostic of where the error is,
    never an input to the model. Empty without fitted regimes (``fitted``: ``fit_regimes(report)`` when the
    caller has it)."""
    moved: dict[str, dict[str, float]] = {k: {} for k in TERMS}
    for (g_tp, _mb, _dp, _h), pts, pub, pred in (fit_regimes(report) if fitted is None else fitted):
        if tp is not None and g_tp != tp:
            continue
        gaps = (pub.fixed_s - pred.fixed_s, pub.per_layer_step_s - pred.per_layer_step_s,
                pub.per_microbatch_s - pred.per_microbatch_s,
                pub.per_layer_microbatch_s - pred.per_layer_microbatch_s)
        for L, m, _, q, rid in pts:
            for k, gap, x in zip(TERMS, gaps, (1.0, L, m, m * L)):
                moved[k][rid] = q + gap * x
    if not moved["a"]:
        return {}
    rows = report.compared
    return {k: float(np.mean([abs(moved[k].get(r.row_id, r.predicted) - r.published) / r.published * 100
                              for r in rows])) for k in TERMS}


def leverage_by_tp(report, fitted=None) -> dict[int, dict[str, float]]:
    """``term_leverage`` with each TP degree's regimes closed alone: which TP a term's error lives at."""
    fitted = fit_regimes(report) if fitted is None else fitted
    tps = sorted({tp for (tp, _mb, _dp, _h), *_ in fitted})
    return {tp: lev for tp in tps if (lev := term_leverage(report, tp, fitted))}


def render_leverage(leverage: dict[str, float], mape_pct: float,
                    by_tp: dict[int, dict[str, float]] | None = None) -> list[str]:
    """Report lines of ``term_leverage``: the MAPE with each term's gap closed beside the MAPE as predicted, and
    (``by_tp``) the per-micro-batch terms c and e closed at one TP degree at a time."""
    if not leverage:
        return []
    parts = ", ".join(f"{k} {v:.2f}%" for k, v in leverage.items())
    lines = [(f"  MAPE with one term's gap closed on the fitted rows (the rest as predicted): {parts}; "
              f"as predicted {mape_pct:.2f}%")]
    if by_tp:
        per = "; ".join(f"{k}: " + ", ".join(f"TP {tp} {lev[k]:.2f}%" for tp, lev in by_tp.items()) for k in "ce")
        lines.append(f"  ... closed at one TP degree only: {per}")
    return lines


def falling_e(groups: list[GroupStructure]) -> list[tuple[int, int, int, float, float]]:
    """(TP, micro-batch, next micro-batch, published e, next published e) wherever the published per-block cost
    falls as the micro-batch grows at one TP and width: twice the work in less time, i.e. measurement scatter."""
    by_tp: dict[tuple[int, int], list[GroupStructure]] = {}
    for g in groups:
        by_tp.setdefault((g.hidden, g.tp), []).append(g)
    out = []
    for (_h, tp), gs in sorted(by_tp.items()):
        gs = sorted(gs, key=lambda g: g.micro_batch)
        for lo, hi in itertools.pairwise(gs):
            e_lo, e_hi = lo.published.per_layer_microbatch_s, hi.published.per_layer_microbatch_s
            if e_hi < e_lo:
                out.append((tp, lo.micro_batch, hi.micro_batch, e_lo, e_hi))
    return out


def render_checks(groups: list[GroupStructure]) -> list[str]:
    """Report lines of the two checks of the published terms (module docstring)."""
    multi = [g for g in groups if g.dp_groups > 1]
    lines = []
    if multi:
        worst = max(g.dp_spread_s for g in multi)
        lines.append(f"  published c and e over the DP groups of a regime: largest spread {worst * 1e6:.0f} us "
                     f"({len(multi)} regimes with several DP groups); a spread of microseconds says the rows of a "
                     "regime share one per-micro-batch measurement")
    widths = sorted({g.hidden for g in groups})
    for h in widths:
        at = f"hidden {h}, " if len(widths) > 1 else ""
        for tp, mb, mb2, e1, e2 in falling_e([g for g in groups if g.hidden == h]):
            lines.append(f"  published e falls as the micro-batch grows: {at}TP {tp}, micro-batch {mb} -> {mb2}: "
                         f"{e1 * 1e3:.2f} -> {e2 * 1e3:.2f} ms (scatter of at least {100 * (e1 - e2) / e1:.0f} %)")
    return lines


def render_structure(groups: list[GroupStructure]) -> list[str]:
    """Report lines: per regime, each term published | predicted in milliseconds."""
    if not groups:
        return []
    lines = ["structure (pp = 1 rows; least squares of step = a + b·L + c·m + e·m·L per TP, micro-batch and DP;",
             "  ms published | predicted): e per block and micro-batch, c per micro-batch outside the blocks,",
             "  b per block and step; the rms residual of each fit in microseconds"]
    widths = len({g.hidden for g in groups}) > 1
    for g in groups:
        p, q = g.published, g.predicted
        lines.append(f"  {f'hidden {g.hidden}, ' if widths else ''}TP {g.tp}, micro-batch {g.micro_batch} "
                     f"({g.rows} rows): "
                     f"e {p.per_layer_microbatch_s * 1e3:.2f} | {q.per_layer_microbatch_s * 1e3:.2f}, "
                     f"c {p.per_microbatch_s * 1e3:.2f} | {q.per_microbatch_s * 1e3:.2f}, "
                     f"b {p.per_layer_step_s * 1e3:.2f} | {q.per_layer_step_s * 1e3:.2f}; "
                     f"fit rms {p.rms_s * 1e6:.1f} | {q.rms_s * 1e6:.1f} us")
    return lines + render_checks(groups)
