"""Exact folding of a step's identical micro-batches, so that the engine's cost does not grow with their number.

Every micro-batch of a step costs the same (the CostTable holds one ChunkCost per chunk, not per micro-batch),
so once a schedule's warm-up is over its steady state repeats: in 1F1B, ZB-H1, GPipe and DualPipeV with a
period of one micro-batch, in Megatron's interleaved schedule with a period of one group of ``pp``
micro-batches (the groups that go through chunk 0, then chunk 1, ...). Adding ``D`` micro-batches (a
multiple of that period) to a step past its warm-up inserts ``D`` more repetitions of the steady state:
every clock after the insertion moves by the same time and every per-stage sum (compute, exposed
communication per dimension, ops) grows by the same amount, while the warm-up, the cool-down and the
step-end work (gradient reduction tail, optimizer, ZeRO gathers) stay as they are. Every output of the
engine is then affine in the number of micro-batches along ``m0, m0 + D, m0 + 2D, ...``.

``simulate_step`` uses this: it runs the engine at three counts ``m0 < m0 + D < m0 + 2D`` with
``m0 ≡ m (mod D)`` and D a power of two times the period, checks that each output's two increments agree
(relative FOLD_RTOL, plus a floor of FOLD_NOISE times the step for the float rounding of event times), and
extrapolates every output affinely to ``m``; the bubbles are recomputed from the extrapolated sums as the
engine computes them, and ratio outputs (bubble fraction, MFU) by metrics.py. When an output's increments
disagree (a transient longer than the samples: a backlog that has not saturated) the samples move further
out; when no sample set is cheaper than the step itself, the whole step is simulated (or, beyond
``max_passes``, refused). A fold is never an approximation made silently: it is an extrapolation
verified on the samples, or it is not used. What the check cannot see is a change of regime that starts
after the last sample and was not announced inside the samples (no such case is known in this engine: its
queues either drain or saturate within the warm-up and the samples, as tests/test_fold.py checks against the
whole simulation for every schedule).

What cannot fold: per-op jitter (no two micro-batches are alike) and the recorded timeline (its size is the
step's own); predict bounds both (MAX_JITTER_PASSES, MAX_TRACE_PASSES) and refuses above the bound.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, replace

from trainsim.specs import SpecError
from trainsim.specs.memo import active_memo, memoised

from .costtable import CostTable
from .engine import EngineResult, StageTimeline, set_bubbles, simulate

# The first sample has at least this many micro-batches, and at least FOLD_BASE_PER_STAGE per pipeline stage:
# past every schedule's warm-up (at most 2p + (v-1)p virtual micro-batches in interleaved 1F1B) and its cool-down.
FOLD_BASE = 64
FOLD_BASE_PER_STAGE = 8
# Samples move out by this factor when the increments disagree.
FOLD_GROWTH = 4
# predict's bound on what it simulates when a step does not fold (pipeline passes; ~0.2 ms each on one core).
MAX_WHOLE_PASSES = 1_000_000
# Agreement of the two increments: relative, and an absolute floor of FOLD_NOISE x the step for times
# (event times are sums of many op durations, rounded at about 1e-16 of the clock each).
FOLD_RTOL = 1e-10
FOLD_NOISE = 1e-12


@dataclass(frozen=True)
class FoldInfo:
    """How a folded step was obtained: the micro-batch counts simulated and their spacing."""

    microbatches: int
    simulated: tuple[int, int, int]
    spacing: int

    def to_json(self) -> dict:
        return {"microbatches": self.microbatches, "simulated_microbatches": list(self.simulated),
                "spacing": self.spacing}


def period(table: CostTable) -> int:
    """Micro-batches after which the schedule's steady state repeats (a group of pp for interleaved)."""
    return table.pp if table.schedule == "interleaved" else 1


def sample_counts(m: int, q: int, base: int) -> tuple[int, int, int]:
    """(m0, m0 + D, m0 + 2D): D = q·2^j, the first at least base/2, m0 >= base and m0 ≡ m (mod D). A power of two
    of periods absorbs a steady state that alternates between two (or four, ...) patterns as well."""
    d = q * 2 ** max(0, math.ceil(math.log2(max(1.0, base / 2 / q))))
    m0 = base + (m - base) % d
    return m0, m0 + d, m0 + 2 * d


def _base(table: CostTable) -> int:
    q = period(table)
    return q * math.ceil(max(FOLD_BASE, FOLD_BASE_PER_STAGE * table.pp) / q)


def representative_count(table: CostTable) -> int:
    """A micro-batch count whose step shows ``table``'s warm-up, steady state and cool-down (the first fold
    sample, or the whole step where that is shorter): what a drawn timeline of a very long step shows."""
    return min(table.num_microbatches, sample_counts(table.num_microbatches, period(table), _base(table))[0])


def _stage_values(tl: StageTimeline) -> list[tuple[str, float]]:
    """Every number of a stage's timeline, named (the exposed-communication dict entry by entry)."""
    out = []
    for f in dataclasses.fields(tl):
        val = getattr(tl, f.name)
        if isinstance(val, dict):
            out.extend((f"{f.name}.{k}", float(v)) for k, v in val.items())
        else:
            out.append((f.name, float(val)))
    return out


def _affine(name: str, a: float, b: float, c: float, step: float) -> bool:
    """Whether the values at three equally spaced counts lie on a line (within rounding)."""
    d1, d2 = b - a, c - b
    floor = FOLD_NOISE * (step if name.endswith("_s") or name.startswith("exposed_s") else 0.0)
    floor += FOLD_NOISE * max(abs(a), abs(b), abs(c))
    return abs(d2 - d1) <= FOLD_RTOL * (abs(d1) + abs(d2)) + floor


def _extrapolate(res: tuple[EngineResult, EngineResult, EngineResult], counts: tuple[int, int, int],
                 m: int) -> list[StageTimeline] | None:
    """Every stage's timeline at ``m`` micro-batches, or None when some output is not affine in the samples."""
    step = res[2].step_time_s
    k = (m - counts[2]) / (counts[2] - counts[1])
    stages = []
    for s in range(len(res[0].stages)):
        a, b, c = (_stage_values(r.stages[s]) for r in res)
        vals = {}
        for (name, va), (_, vb), (_, vc) in zip(a, b, c):
            if not _affine(name, va, vb, vc, step):
                return None
            vals[name] = vc + k * (vc - va) / 2
        tl = StageTimeline()
        for f in dataclasses.fields(tl):
            if isinstance(getattr(tl, f.name), dict):
                setattr(tl, f.name, {key: vals[f"{f.name}.{key}"] for key in getattr(tl, f.name)})
            elif f.name == "ops":
                tl.ops = round(vals["ops"])
            else:
                setattr(tl, f.name, vals[f.name])
        stages.append(tl)
    return stages


# Distinct (table, stage_scale) runs remembered per memo scope (specs.memo: a CLI command, a plan, a predict): the
# engine is deterministic and its inputs are frozen, so the rows of a validation table that share a step (and the
# folds that sample the same micro-batch counts) run it once.
ENGINE_MEMO_SIZE = 512


@memoised(maxsize=ENGINE_MEMO_SIZE)
def _simulate_memo(table: CostTable, stage_scale: tuple[float, ...] | None) -> EngineResult:
    return simulate(table, stage_scale=list(stage_scale) if stage_scale is not None else None)


def clear_cache() -> None:
    """Forget the active memo scope's engine runs (benchmarks time the engine itself, not the lookup)."""
    memo = active_memo()
    if memo is not None:
        memo.forget(_simulate_memo.memo_name)


def simulate_once(table: CostTable, stage_scale: list[float] | None = None) -> EngineResult:
    """``simulate(table, stage_scale=...)``, run once per distinct input in a memo scope; a private copy of the
    result each call (callers adjust it), ``wall_s`` this call's own time."""
    t0 = time.perf_counter()
    res = copy.deepcopy(_simulate_memo(table, tuple(stage_scale) if stage_scale is not None else None))
    return replace(res, wall_s=time.perf_counter() - t0)


def _samples(table: CostTable, counts: tuple[int, int, int], stage_scale: list[float] | None
             ) -> tuple[EngineResult, EngineResult, EngineResult]:
    return tuple(simulate_once(replace(table, num_microbatches=n), stage_scale) for n in counts)


def _folded(table: CostTable, counts: tuple[int, int, int], res: tuple[EngineResult, ...], t0: float,
            events: int) -> EngineResult | None:
    stages = _extrapolate(res, counts, table.num_microbatches)
    if stages is None:
        return None
    span = max(tl.pipeline_end_s for tl in stages)
    set_bubbles(stages, span)        # as the engine does, from the extrapolated sums
    return EngineResult(
        step_time_s=max(tl.end_s for tl in stages), stages=stages, events=events + sum(r.events for r in res),
        wall_s=time.perf_counter() - t0, pipeline_span_s=span,
        folded=FoldInfo(table.num_microbatches, counts, counts[1] - counts[0]))


def fold_at(table: CostTable, counts: tuple[int, int, int], stage_scale: list[float] | None = None
            ) -> EngineResult | None:
    """``table``'s step extrapolated from simulations at ``counts`` (equally spaced, each ≡ m mod their
    spacing); None when some output is not affine in them (the caller then samples further out)."""
    t0 = time.perf_counter()
    return _folded(table, counts, _samples(table, counts, stage_scale), t0, 0)


def simulate_step(table: CostTable, *, stage_scale: list[float] | None = None,
                  max_passes: int | None = None) -> EngineResult:
    """One step of ``table`` through the engine, its steady state folded when that is cheaper (see the module
    doc); the same result as ``simulate(table, stage_scale=...)`` to FOLD_RTOL, with ``folded`` set when folded.
    The samples cost 3 (m0 + D) micro-batches, so a step of fewer is simulated whole. ``max_passes`` bounds
    what is simulated (pipeline passes, m x pp x vpp, of one sample and of a whole step): a step that does not
    fold within it is refused (SpecError on global_batch) rather than simulated for unbounded time."""
    m = table.num_microbatches
    q = period(table)
    base = _base(table)
    t0 = time.perf_counter()
    events = 0
    per_mb = table.pp * table.vpp
    tried = 0
    while (3 * (counts := sample_counts(m, q, base))[1] < m
           and (max_passes is None or 4 * counts[2] * per_mb <= max_passes)):   # all samples <= max_passes
        res = _samples(table, counts, stage_scale)
        out = _folded(table, counts, res, t0, events)
        if out is not None:
            return out
        events += sum(r.events for r in res)
        tried = counts[2]
        base *= FOLD_GROWTH
    if max_passes is not None and m * per_mb > max_passes:
        found = (f"no repeating steady state within the {tried:,} micro-batches sampled" if tried else
                 f"the samples that would find a repeating steady state already take {4 * counts[2] * per_mb:,} "
                 "pipeline passes")
        raise SpecError("global_batch", f"{m:,} micro-batches per step x pp {table.pp} x vpp {table.vpp}: {found}; "
                                        f"simulating all {m * per_mb:,} pipeline passes is beyond "
                                        f"{max_passes:,}; a smaller global batch is simulated whole")
    full = simulate_once(table, stage_scale)
    return replace(full, events=full.events + events, wall_s=time.perf_counter() - t0)
