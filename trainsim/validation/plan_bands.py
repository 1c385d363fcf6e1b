"""`plan --rank-by p50|p90`: each fitting layout's prediction interval (validation.intervals), and the ranking by
the chosen quantile of step time. p50 is the engine's prediction; p90 is the upper end of the 80 % interval
(its hierarchical conformal upper bound, validation.intervals), so a layout whose kind of scenario was
predicted less reliably (or that nothing validated resembles) ranks lower under p90."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.simulator.search_space import to_scenario
from trainsim.validation.intervals import Interval, interval_for

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile


def bands(result, profile: CalibrationProfile | None) -> dict[tuple, Interval]:
    """Candidate key -> 80 % interval of every fitting row."""
    req = result.request
    out = {}
    for r in result.rows:
        if not r.fits:
            continue
        c = r.candidate
        cluster = req.cluster.with_gpus(c.gpus) if req.cluster.num_gpus != c.gpus else req.cluster
        scn = to_scenario(req.model, cluster, c, req.global_batch, req.seq_len, req.limits)
        out[c.key()] = interval_for(r.step_time_s, r.tokens_per_s, r.mfu, scn, profile, 0.8,
                                    breakdown={"host_idle": r.host_idle_s, "host_issue": r.host_issue_s})
    return out


def rank(result, rank_by: str, profile: CalibrationProfile | None) -> dict[tuple, Interval]:
    """Intervals of the rows; with p90, ``result.rows`` re-sorted by time to train (or cost) at the p90 step."""
    ivs = bands(result, profile)
    if rank_by == "p90":
        def scale(r) -> float:
            iv = ivs.get(r.candidate.key())
            return iv.step_time_s[1] / r.step_time_s if iv and r.step_time_s > 0 else 1.0
        cost = result.request.objective == "cost"
        result.rows.sort(key=lambda r: (not r.fits, (r.gpu_hours if cost else r.time_to_train_s) * scale(r),
                                        r.candidate.key()))
    return ivs


def row_json(d: dict, iv: Interval | None) -> dict:
    """A plan row's JSON with its interval (p90 step, interval, basis, reasons); unchanged without one."""
    if iv is None:
        return d
    return {**d, "step_time_p90_s": iv.step_time_s[1], "step_time_interval_s": list(iv.step_time_s),
            "interval_basis": iv.basis, "interval_reasons": list(iv.reasons)}
