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
"""

from __future__ import annotations

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
    """Published and predicted terms of one (TP, micro-batch) regime, averaged over its DP groups."""

    tp: int
    micro_batch: int
    rows: int
    published: Terms
    predicted: Terms

    def to_json(self) -> dict:
        return {"tp": self.tp, "micro_batch": self.micro_batch, "rows": self.rows,
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


def _groups(cases, rows) -> dict[tuple[int, int, int], list[tuple[int, float, float, float]]]:
    """(tp, micro-batch, dp) -> [(L, m, published, predicted)] over the compared pp = 1 rows."""
    by_id = {c.row_id: c for c in cases}
    out: dict[tuple[int, int, int], list[tuple[int, float, float, float]]] = {}
    for r in rows:
        s = by_id[r.row_id].scenario
        if s is None or s.layout.pp != 1 or r.predicted is None:
            continue
        mb = s.training.micro_batch
        m = s.training.global_batch / (s.dp * mb)
        out.setdefault((s.layout.tp, mb, s.dp), []).append((s.model.num_layers, m, r.published, r.predicted))
    return out


def step_structure(report) -> list[GroupStructure]:
    """The terms of every (TP, micro-batch) regime of a validation report whose rows span an (L, m) grid."""
    acc: dict[tuple[int, int], tuple[int, list[Terms], list[Terms]]] = {}
    for (tp, mb, _dp), pts in sorted(_groups(report.dataset.cases, report.compared).items()):
        pub = fit_terms((L, m, p) for L, m, p, _ in pts)
        pred = fit_terms((L, m, q) for L, m, _, q in pts)
        if pub is None or pred is None:
            continue
        n, pubs, preds = acc.get((tp, mb), (0, [], []))
        acc[(tp, mb)] = (n + len(pts), pubs + [pub], preds + [pred])
    return [GroupStructure(tp, mb, n, _mean_terms(pubs), _mean_terms(preds))
            for (tp, mb), (n, pubs, preds) in sorted(acc.items())]


def render_structure(groups: list[GroupStructure]) -> list[str]:
    """Report lines: per regime, each term published | predicted in milliseconds."""
    if not groups:
        return []
    lines = ["structure (pp = 1 rows; least squares of step = a + b·L + c·m + e·m·L per TP, micro-batch and DP;",
             "  ms published | predicted): e per block and micro-batch, c per micro-batch outside the blocks,",
             "  b per block and step; the rms residual of each fit in microseconds"]
    for g in groups:
        p, q = g.published, g.predicted
        lines.append(f"  TP {g.tp}, micro-batch {g.micro_batch} ({g.rows} rows): "
                     f"e {p.per_layer_microbatch_s * 1e3:.2f} | {q.per_layer_microbatch_s * 1e3:.2f}, "
                     f"c {p.per_microbatch_s * 1e3:.2f} | {q.per_microbatch_s * 1e3:.2f}, "
                     f"b {p.per_layer_step_s * 1e3:.2f} | {q.per_layer_step_s * 1e3:.2f}; "
                     f"fit rms {p.rms_s * 1e6:.1f} | {q.rms_s * 1e6:.1f} us")
    return lines
