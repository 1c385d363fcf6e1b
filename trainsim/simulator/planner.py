"""The layout planner: enumerate every valid layout, drop what does not fit, screen the rest with the
closed form (``predict(fast=True)``), confirm the best with the discrete-event engine, and rank them by
time to train (including failures, see goodput.py) and cost.

Work is cut into chunks and run through any ``concurrent.futures.Executor`` (a process pool, or a
dask.distributed ``Client.get_executor()``); with no executor it runs inline. Results are sorted on a
deterministic key, so the answer does not depend on which worker finished first.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from trainsim import SCHEMA_VERSION
from trainsim.cost_models import memory
from trainsim.cost_models.offload import node_host_bytes
from trainsim.cost_models.profile import load_profile
from trainsim.specs import ClusterSpec, ModelSpec, Scenario, SpecError, build_scenario
from trainsim.specs.memo import in_memo_scope, memoised

from . import goodput as gp
from .calibration_notes import cluster_devices, device_class_refusal
from .pools import pooled_memory_over, pools_fit, tightest_pool
from .search_space import (
    RECOMPUTE_LADDER,
    Candidate,
    SearchLimits,
    dropped_settings,
    enumerate_candidates,
    to_scenario,
)

Progress = Callable[[str, int, int], None]   # (phase, done, total)


# Memory left free on every GPU by default: 10 % of its capacity. The analytical peak counts allocated bytes plus
# the runtime (CUDA context, cuBLAS, NCCL), not the caching allocator's reserved-but-unused blocks, which depend
# on allocation order: GMLake (Guo et al., ASPLOS 2024, arXiv:2401.08156) measures an average of 9.2 GB (up to
# 25 GB) of fragmentation on A100-80GB (11.5 %) over eight LLM training setups with recomputation, offload and
# ZeRO; PyTorch's CUDA memory-management docs point to the same gap (reserved vs allocated, expandable_segments).
DEFAULT_MEMORY_HEADROOM = "10%"


def parse_headroom(text: str | float) -> tuple[float, bool]:
    """``"6"`` / ``"6GiB"`` -> (6 GiB in bytes, False); ``"10%"`` -> (0.10, True). SpecError naming the field."""
    raw = str(text).strip()
    try:
        if raw.endswith("%"):
            frac = float(raw[:-1]) / 100.0
            if not (math.isfinite(frac) and 0 <= frac < 1):
                raise ValueError
            return frac, True
        gib = float(raw[:-3] if raw.lower().endswith("gib") else raw)
        if not (math.isfinite(gib) and gib >= 0):
            raise ValueError
        return gib * (1 << 30), False
    except ValueError:
        raise SpecError("memory_headroom", f"expected GiB (e.g. 6) or a percentage of GPU memory below 100 (e.g. "
                                           f"10%), got {text!r}") from None


def headroom_bytes(headroom: str | float, gpu_bytes: float) -> float:
    """Bytes to leave free on a GPU of ``gpu_bytes`` (parse_headroom)."""
    value, is_fraction = parse_headroom(headroom)
    return value * gpu_bytes if is_fraction else value


# The engine confirms at least this many of the screen's best rows, however few are shown (top_k): the closed
# form and the engine can order near-ties differently (a few tenths of a percent), so confirming only the rows
# shown would let the answer depend on how many are asked for.
CONFIRMED_AT_LEAST = 10
# The specs' refusals of a search's layouts: (field, reason) -> [layouts refused for it, the first of them].
Refusals = dict[tuple[str, str], list]
# Tokens to train on that a plan takes (--tokens, a plan file's request.tokens): 10^16 is 640x Llama 3's 15.6T
# (arXiv:2407.21783), past any data set that exists.
MAX_TOKENS = 1e16


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: a model on a cluster type at one or more GPU counts, for a batch and sequence length."""

    model: ModelSpec
    cluster: ClusterSpec
    gpu_counts: tuple[int, ...]
    global_batch: int
    seq_len: int
    tokens: float | None = None               # tokens to train on; None = 20 per parameter (Chinchilla)
    price_per_gpu_hour: float | None = None   # currency per GPU-hour; None = report GPU-hours only
    top_k: int = CONFIRMED_AT_LEAST
    limits: SearchLimits = field(default_factory=SearchLimits)
    objective: str = "time"                   # "time" (time to train) or "cost"
    prune_dominated: bool = True              # skip heavier recompute when a lighter one fits (same layout)
    failure_rate_per_gpu_hour: float = gp.DEFAULT_FAILURE_RATE_PER_GPU_HOUR
    checkpoint_write_s: float | None = None   # None = checkpoint bytes / storage_write_Bps
    storage_write_Bps: float = gp.DEFAULT_STORAGE_WRITE_BPS
    restart_s: float = gp.DEFAULT_RESTART_S
    profile_path: str | None = None           # calibration profile JSON
    chunk_size: int = 384
    memory_headroom: str = DEFAULT_MEMORY_HEADROOM  # GiB or "N%" of GPU memory left free (parse_headroom)

    @property
    def memory_limit_bytes(self) -> float:
        """Peak bytes a recommended layout may use: GPU memory less the headroom."""
        gpu = self.cluster.gpu.memory_bytes
        return gpu - headroom_bytes(self.memory_headroom, gpu)

    @property
    def train_tokens(self) -> float:
        """Tokens the run trains on (goodput.train_tokens: ``tokens``, else the Chinchilla rule)."""
        return gp.train_tokens(self.tokens, self.model.total_params())


@dataclass
class PlanRow:
    """One evaluated layout with its predicted speed, memory, time to train and cost."""

    candidate: Candidate
    source: str                      # "closed-form" or "engine"
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    bubble_fraction: float
    peak_bytes: float
    gpu_bytes: float
    fits: bool
    exposed_comm_s: dict[str, float] = field(default_factory=dict)
    screen_step_time_s: float | None = None
    ideal_time_s: float = 0.0        # steps x step time, no failures
    time_to_train_s: float = 0.0     # expected, with checkpoints and failures
    goodput: float = 1.0
    checkpoint_interval_s: float = 0.0
    gpu_hours: float = 0.0
    cost: float | None = None
    warnings: list[str] = field(default_factory=list)  # the prediction's (MFU > 100 %, offload, ...)
    host_idle_s: float = 0.0         # the prediction's GPU idle waiting for the host (breakdown_s["host_idle"])
    host_issue_s: float = 0.0        # ... and its host's issue time of the step (breakdown_s["host_issue"])

    @property
    def headroom_bytes(self) -> float:
        return self.gpu_bytes - self.peak_bytes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("candidate")
        c = self.candidate
        out = {**c.as_dict(), **d, "headroom_bytes": self.headroom_bytes, "label": c.label(),
               "dp_shard": c.dp_shard or c.dp}  # the ranks the states are sharded over (dp: full sharding)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


@dataclass
class PlanResult:
    """Ranked rows (engine-confirmed first), the Pareto front and how the space was pruned."""

    request: PlanRequest
    rows: list[PlanRow]
    pareto: list[PlanRow]
    counts: dict[str, int]
    wall_s: float
    screened_top: list[PlanRow] = field(default_factory=list)
    checkpoint_s: float = 0.0  # the checkpoint write time every row's time to train includes (checkpoint_seconds)
    # where no layout fits and some were refused: the most common refusal (field, reason, layouts, first)
    refused: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.request
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "plan",
            "request": {
                "model": r.model.model_dump(mode="json"), "cluster": r.cluster.model_dump(mode="json"),
                "gpu_counts": list(r.gpu_counts), "global_batch": r.global_batch, "seq_len": r.seq_len,
                "dtype": r.limits.dtype, "tokens": r.train_tokens, "price_per_gpu_hour": r.price_per_gpu_hour,
                "top_k": r.top_k, "objective": r.objective, "fixed": dict(r.limits.fixed),
                "training": dict(r.limits.training_extra),
                "placement": list(r.limits.placement) if r.limits.placement else None,
                "etp": r.limits.etp,
                "failure_rate_per_gpu_hour": r.failure_rate_per_gpu_hour, "restart_s": r.restart_s,
                "checkpoint_write_s": r.checkpoint_write_s, "storage_write_Bps": r.storage_write_Bps,
                "failure_rate_source": gp.FAILURE_RATE_SOURCE,
                "memory_headroom": r.memory_headroom, "memory_limit_bytes": r.memory_limit_bytes,
            },
            "counts": dict(self.counts),
            "wall_s": self.wall_s,
            "rows": [row.to_json() for row in self.rows],
            "pareto": [row.to_json() for row in self.pareto],
            "screened_top": [row.to_json() for row in self.screened_top],
            **({"refused": dict(self.refused)} if self.refused else {}),
        }


# --- evaluation (top-level functions: they run in worker processes) ----------------------------

@dataclass(frozen=True)
class _Context:
    model: ModelSpec
    cluster: ClusterSpec
    global_batch: int
    seq_len: int
    limits: SearchLimits
    profile: Any  # the calibration profile (CalibrationProfile) or None, read once per plan (plan_profile)
    prune_dominated: bool
    memory_limit: float = float("inf")  # PlanRequest.memory_limit_bytes
    memory_headroom: str = DEFAULT_MEMORY_HEADROOM  # per pool of a mixed cluster, against its own GPU (pools.py)


@memoised(maxsize=8)
def plan_profile(path: str | None):
    """The measured kernel profile at ``path`` (None without one), read once per memo scope (one plan, one CLI
    command): the plan's context carries it to every task, in this process or a worker."""
    if not path:
        return None
    return load_profile(path)


def _predict(scn: Scenario, fast: bool, profile, fixed_costs: bool = False):
    from .predict import predict  # the engine; imported lazily so search_space/goodput stay light
    # The planner ranks and fits by allocated memory (peak_bytes): the reserved counter's allocator replay is
    # left out (predict's allocator_replay). Confirmed rows also measure the collectives' fixed costs, so a
    # latency-bound layout says so beside a host-bound one (predict's fixed_costs).
    return predict(scn, fast=fast, profile=profile, allocator_replay=False, fixed_costs=fixed_costs)


def peak_memory_bytes(scn: Scenario) -> float:
    """Peak bytes per GPU from the memory cost model (no timing work): the cheap first filter.

    Only stages 0, 1 and p-1 are evaluated: every schedule keeps the most micro-batches in flight on the
    earliest stages (p - s for 1F1B/ZB, Megatron's warm-up count for interleaving, all m for GPipe), the
    middle stages hold identical layers (the uneven split trims only the end stages), and only the end
    stages hold the embedding or the output layer and logits; so the peak over stages is at one of them
    (tests/test_planner.py checks this against ``memory.peak_bytes``)."""
    return float(max(sm.total for sm in _checked_stages(scn)))


def _checked_stages(scn: Scenario, limit: float = float("inf")):
    """Memory of stages 0, 1 and p-1 (see peak_memory_bytes), in that order; stops after the first above ``limit``
    (the screen only needs to know that a candidate does not fit)."""
    pp = scn.layout.pp
    out = []
    for s in sorted({0, min(1, pp - 1), pp - 1}):
        out.append(memory.stage_memory(scn, s))
        if out[-1].total > limit:
            break
    return out


def _states_key(c: Candidate) -> tuple:
    """What model-state bytes (weights, grads, optimizer) depend on: not micro-batch, recompute or schedule."""
    return (c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.vpp, c.zero, c.etp, c.dp_shard)


def _row(c: Candidate, pred, source: str, stated: Sequence[str] = ()) -> PlanRow:
    # On GPU pools the row's memory is the pool with the least left (simulator/pools.py).
    tight = tightest_pool(pred) if pred.pools else {"peak_memory_bytes": pred.peak_bytes,
                                                    "capacity_bytes": pred.gpu_memory_bytes}
    peak, cap = tight["peak_memory_bytes"], tight["capacity_bytes"]
    return PlanRow(
        candidate=c, source=source, step_time_s=pred.step_time_s, tokens_per_s=pred.tokens_per_s, mfu=pred.mfu,
        hfu=pred.hfu, bubble_fraction=pred.bubble_fraction, peak_bytes=peak,
        gpu_bytes=cap, fits=pred.fits, exposed_comm_s=dict(pred.exposed_comm_s),
        warnings=[*stated, *(w for w in pred.warnings if not w.startswith("uneven stages"))],  # layout column: stages
        host_idle_s=pred.breakdown_s.get("host_idle", 0.0), host_issue_s=pred.breakdown_s.get("host_issue", 0.0),
    )


def _group_key(c: Candidate) -> tuple:
    return (c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.vpp, c.micro_batch, c.schedule, c.zero, c.etp, c.dp_shard)


@in_memo_scope  # one memo per plan (per task in a worker process): specs.memo
def screen_chunk(ctx: _Context, cands: Sequence[Candidate]) -> tuple[list[PlanRow], dict[str, int], Refusals]:
    """Resolve, memory-check and closed-form-screen a chunk of candidates; the specs' refusals tallied by reason."""
    counts = {"invalid": 0, "oom": 0, "host_oom": 0, "over_headroom": 0, "dominated": 0, "screened": 0}
    refusals: Refusals = {}
    rows: list[PlanRow] = []
    cluster = ctx.cluster
    fitted_groups: dict[tuple, int] = {}  # group -> rung of the lightest recompute that fitted
    states_oom: set[tuple] = set()        # model states alone exceed the GPU: every variant is out of memory
    for c in cands:
        if cluster.num_gpus != c.gpus:
            cluster = ctx.cluster.with_gpus(c.gpus)
        rung = RECOMPUTE_LADDER.index(c.recompute)
        g = _group_key(c)
        if ctx.prune_dominated and g in fitted_groups and fitted_groups[g] < rung:
            counts["dominated"] += 1
            continue
        if _states_key(c) in states_oom:
            counts["oom"] += 1
            continue
        try:
            scn = to_scenario(ctx.model, cluster, c, ctx.global_batch, ctx.seq_len, ctx.limits)
        except SpecError as e:
            counts["invalid"] += 1
            refusals.setdefault((e.field, e.reason), [0, c])[0] += 1
            continue
        if c.pools is not None:
            row = _screen_pooled(ctx, c, scn, counts)
            if row is not None:
                fitted_groups.setdefault(g, rung)
                rows.append(row)
            continue
        gpu_bytes = cluster.gpu.memory_bytes
        limit = min(gpu_bytes, ctx.memory_limit)
        # Every stage up to the first out of GPU memory: a stage over the headroom alone does not say whether
        # another is out of memory, which decides the count the layout goes to.
        stages = _checked_stages(scn, gpu_bytes)
        peak = max(sm.total for sm in stages)
        if node_host_bytes(scn, max(sm.host for sm in stages)) > cluster.host_memory_bytes:
            counts["oom"] += 1
            counts["host_oom"] += 1  # of them: offload beyond a node's host memory, however the GPUs fare
            continue
        zb = scn.training.schedule == "zb"
        if peak > gpu_bytes or (peak > limit and not zb):
            counts[_over(peak, gpu_bytes)] += 1
            if max(sm.weights + sm.grads + sm.optimizer for sm in stages) > gpu_bytes:
                states_oom.add(_states_key(c))  # out of memory whatever the activations: so is every variant
            continue
        pred = _predict(scn, True, ctx.profile)
        if zb and pred.peak_bytes > peak:
            # ZB's postponed weight-gradient passes keep their GEMM inputs (under recompute more than the
            # checkpoints): the static model has no schedule order to count them, the closed form does (also
            # for a layout over the headroom: whether it is out of memory decides its count).
            peak = pred.peak_bytes
        if peak > limit:
            counts[_over(peak, gpu_bytes)] += 1
            continue
        fitted_groups.setdefault(g, rung)
        row = _row(c, pred, "closed-form", dropped_settings(ctx.model, c, ctx.limits))
        # The memory cost model decides fit at screening time (the closed form's in-flight counts are an
        # approximation); the engine, which tracks allocations over the schedule, has the last word.
        row.peak_bytes, row.fits = peak, True
        counts["screened"] += 1
        rows.append(row)
    return rows, counts, refusals


def _screen_pooled(ctx: _Context, c: Candidate, scn: Scenario, counts: dict[str, int]) -> PlanRow | None:
    """The screen of a candidate on GPU pools: each stage's memory against its own pool's GPU, then the closed form."""
    over = pooled_memory_over(scn, ctx.memory_headroom)
    if over is not None:
        counts[over] += 1
        return None
    pred = _predict(scn, True, ctx.profile)
    if not pred.host_fits:
        counts["oom"] += 1
        counts["host_oom"] += 1
        return None
    row = _row(c, pred, "closed-form", dropped_settings(ctx.model, c, ctx.limits))
    row.fits = True  # the memory model decided, as for one pool; the engine has the last word
    counts["screened"] += 1
    return row


def _over(peak: float, gpu_bytes: float) -> str:
    """The count a layout over the limit goes to: out of memory, or within memory but over the headroom."""
    return "oom" if peak > gpu_bytes else "over_headroom"


@in_memo_scope  # one memo per plan (per task in a worker process): specs.memo
def confirm_one(ctx: _Context, c: Candidate) -> PlanRow:
    """Run the discrete-event engine on one candidate; it fits when its peak leaves the headroom free."""
    cluster = ctx.cluster.with_gpus(c.gpus) if ctx.cluster.num_gpus != c.gpus else ctx.cluster
    scn = to_scenario(ctx.model, cluster, c, ctx.global_batch, ctx.seq_len, ctx.limits)
    pred = _predict(scn, False, ctx.profile, fixed_costs=True)
    row = _row(c, pred, "engine", dropped_settings(ctx.model, c, ctx.limits))
    row.fits = pred.host_fits and (pools_fit(pred, ctx.memory_headroom) if pred.pools
                                   else row.peak_bytes <= min(row.gpu_bytes, ctx.memory_limit))
    return row


# --- ranking ------------------------------------------------------------------------------------

def checkpoint_seconds(req: PlanRequest, cands: Sequence[Candidate] | None = None) -> float:
    """Checkpoint write time: given, or a full checkpoint of the run (goodput.scenario_checkpoint_bytes, as the
    what-if report counts it) / aggregate storage bandwidth. The bytes are read off the first of ``cands`` (default:
    every candidate of ``req``) that resolves into a scenario: every candidate shares the model, dtypes and
    optimizer; only Muon's mix of states, averaged over pipeline stages, moves with the layout (by its replicated
    norms); 0 where none resolves (no row)."""
    if req.checkpoint_write_s is not None:
        return req.checkpoint_write_s
    for c in _candidates(req) if cands is None else cands:
        try:
            scn = to_scenario(req.model, req.cluster, c, req.global_batch, req.seq_len, req.limits)
        except SpecError:
            continue
        return gp.checkpoint_write_s(gp.scenario_checkpoint_bytes(scn), req.storage_write_Bps)
    return 0.0  # no candidate resolves: there is no row to charge a checkpoint to


def finish_row(row: PlanRow, req: PlanRequest, ckpt_s: float) -> PlanRow:
    """Fill time to train (with failures), GPU-hours and cost for ``req.train_tokens`` tokens."""
    c = row.candidate
    tokens_per_step = req.global_batch * req.seq_len
    steps = math.ceil(req.train_tokens / tokens_per_step)
    row.ideal_time_s = steps * row.step_time_s
    g = gp.plan_goodput(row.ideal_time_s, c.gpus, ckpt_s, req.restart_s, req.failure_rate_per_gpu_hour)
    row.time_to_train_s = g.time_to_train_s
    row.goodput = g.goodput
    row.checkpoint_interval_s = g.interval_s
    row.gpu_hours = c.gpus * g.time_to_train_s / 3600.0
    row.cost = row.gpu_hours * req.price_per_gpu_hour if req.price_per_gpu_hour is not None else None
    return row


def sort_key(req: PlanRequest) -> Callable[[PlanRow], tuple]:
    """The ranking of ``req``'s objective: time to train then GPU-hours, or the reverse for cost."""
    if req.objective == "cost":
        return lambda r: (r.gpu_hours, r.time_to_train_s, r.candidate.key())
    return lambda r: (r.time_to_train_s, r.gpu_hours, r.candidate.key())


def pareto_front(rows: Iterable[PlanRow]) -> list[PlanRow]:
    """Rows not dominated in (GPUs, time to train, GPU-hours): fewer GPUs, less time, less cost."""
    rows = [r for r in rows if r.fits]
    front = []
    for r in rows:
        a = (r.candidate.gpus, r.time_to_train_s, r.gpu_hours)
        dominated = False
        for o in rows:
            b = (o.candidate.gpus, o.time_to_train_s, o.gpu_hours)
            if o is not r and all(x <= y for x, y in zip(b, a)) and any(x < y for x, y in zip(b, a)):
                dominated = True
                break
        if not dominated:
            front.append(r)
    # One row per (gpus, time, cost) point; order by GPUs then time.
    seen, out = set(), []
    for r in sorted(front, key=lambda r: (r.candidate.gpus, r.time_to_train_s, r.candidate.key())):
        k = (r.candidate.gpus, round(r.time_to_train_s, 6), round(r.gpu_hours, 6))
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _run(executor: Executor | None, fn, ctx, items: list, progress: Progress | None, phase: str) -> list:
    """fn(ctx, item) for every item, inline or through the executor; results in input order."""
    total = len(items)
    if progress:
        progress(phase, 0, total)
    if executor is None:
        out = []
        for i, it in enumerate(items):
            out.append(fn(ctx, it))
            if progress:
                progress(phase, i + 1, total)
        return out
    futures = {executor.submit(fn, ctx, it): i for i, it in enumerate(items)}
    out = [None] * total
    for done, fut in enumerate(as_completed(futures), 1):
        out[futures[fut]] = fut.result()
        if progress:
            progress(phase, done, total)
    return out


def _candidates(req: PlanRequest) -> list[Candidate]:
    """Every candidate layout of every requested GPU count; a count that is not whole nodes is refused."""
    cands: list[Candidate] = []
    for n in sorted(set(req.gpu_counts)):
        try:
            req.cluster.with_gpus(n)
        except ValidationError:
            raise SpecError("gpus", f"{n} GPUs is not a whole number of {req.cluster.gpus_per_node}-GPU nodes") from None
        cands.extend(enumerate_candidates(req.model, req.cluster, n, req.global_batch, req.seq_len, req.limits))
    return cands


def _screened(req: PlanRequest, ctx: _Context, cands: list[Candidate], ckpt_s: float,
              executor: Executor | None, progress: Progress | None, counts: dict[str, int],
              refusals: Refusals) -> list[PlanRow]:
    """Closed-form rows of the candidates that survive screening (screen_chunk), with time to train and cost,
    best first; the screen's tallies are added to ``counts`` and its refusals to ``refusals`` (chunks in order, so
    each reason keeps its first layout)."""
    screened: list[PlanRow] = []
    for rows, cnt, refused in _run(executor, screen_chunk, ctx, _chunks(cands, req.chunk_size), progress, "screen"):
        screened.extend(rows)
        for k, v in cnt.items():
            counts[k] += v
        for why, (n, first) in refused.items():
            refusals.setdefault(why, [0, first])[0] += n
    for r in screened:
        finish_row(r, req, ckpt_s)
    screened.sort(key=sort_key(req))
    return screened


def _first_to_confirm(req: PlanRequest, screened: list[PlanRow]) -> list[PlanRow]:
    """The screened rows the engine confirms first, ranked: the top K (at least CONFIRMED_AT_LEAST) plus the
    best of every GPU count, so the Pareto front is engine-confirmed too."""
    chosen: dict[tuple, PlanRow] = {}
    for r in screened[: max(req.top_k, CONFIRMED_AT_LEAST)]:
        chosen[r.candidate.key()] = r
    best_per_n: dict[int, PlanRow] = {}
    for r in screened:
        best_per_n.setdefault(r.candidate.gpus, r)
    for r in best_per_n.values():
        chosen.setdefault(r.candidate.key(), r)
    return sorted(chosen.values(), key=sort_key(req))


def _oom_retries(screened: list[PlanRow], confirmed: list[PlanRow]) -> list[PlanRow]:
    """For every GPU count with no confirmed row that fits (the engine found its best screened layouts out of
    memory), its next two screened rows not yet confirmed, so the Pareto front is not missing that count."""
    covered = {r.candidate.gpus for r in confirmed if r.fits}
    tried = {r.candidate.key() for r in confirmed}
    retry: list[PlanRow] = []
    for n in sorted({r.candidate.gpus for r in screened}):
        if n in covered:
            continue
        retry += [r for r in screened if r.candidate.gpus == n and r.candidate.key() not in tried][:2]
    return retry


def _no_layout_reason(req) -> tuple[str, str]:
    """(field, reason) for a search that enumerated nothing: the pinned degrees as ``predict`` refuses them where
    it does (one GPU count at a time), else the constraints that leave no split of the GPUs."""
    fixed = req.limits.fixed
    pins = ", ".join(f"{k}={v}" for k, v in sorted(fixed.items()))
    layout = {k: v for k, v in fixed.items() if k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "dp_shard")}
    pinned = {k: v for k, v in fixed.items() if k in ("micro_batch", "recompute", "zero", "schedule",
                                                      "sequence_parallel")}
    training = {"seq_len": req.seq_len, "global_batch": req.global_batch, "dtype": req.limits.dtype,
                **req.limits.training_extra, **pinned}
    for gpus in req.gpu_counts:
        try:  # every pin as predict would read it; its refusal names the real cause
            build_scenario({"model": req.model, "cluster": req.cluster, "gpus": gpus, "layout": layout,
                            "training": training})
        except SpecError as e:
            return e.field, e.reason
    counts = ", ".join(str(g) for g in req.gpu_counts)
    return "layout", (f"no layout of {counts} GPU(s) splits global batch {req.global_batch} x seq {req.seq_len}"
                      + (f" with {pins}" if pins else "") + " (tp, cp, pp and dp must divide the GPUs, the model's "
                      "heads, layers and sequence, and dp the global batch)")


def most_common_refusal(refusals: Refusals) -> tuple[tuple[str, str], int, Candidate] | None:
    """((field, reason), layouts it refuses, the first of them) of the reason the specs gave most often, as
    ``predict`` gives it; None where they refused none (ties go to the reason met first)."""
    if not refusals:
        return None
    why, (n, first) = max(refusals.items(), key=lambda kv: kv[1][0])
    return why, n, first


def _every_layout_refused(refusals: Refusals, total: int) -> SpecError:
    """The refusal for a search whose every layout the specs reject: the most common reason, as ``predict`` gives
    it (a setting no layout can take, such as a flag the model's framework lacks, is refused, not answered with an
    empty table)."""
    (fld, reason), n, first = most_common_refusal(refusals)
    return SpecError(fld, f"{reason} (every one of the {total} layouts searched is refused; {n} of them, the "
                          f"first {first.label()}, for this reason)")


@in_memo_scope  # the whole search shares one memo scope (specs.memo)
def plan(req: PlanRequest, executor: Executor | None = None, progress: Progress | None = None) -> PlanResult:
    """Search the layout space of ``req`` and return the ranked, engine-confirmed plan: enumerate candidates,
    screen them in closed form, then confirm the best with the engine."""
    t0 = time.perf_counter()
    if not req.gpu_counts:
        raise SpecError("gpus", "no GPU count to plan for")
    if req.objective not in ("time", "cost"):
        raise SpecError("objective", f"must be time or cost, got {req.objective!r}")
    profile = plan_profile(req.profile_path)
    if (why := device_class_refusal(cluster_devices(req.cluster), profile)) is not None:
        raise SpecError("calibration", why)
    ctx = _Context(req.model, req.cluster, req.global_batch, req.seq_len, req.limits,
                   profile, req.prune_dominated, req.memory_limit_bytes, req.memory_headroom)
    cands = _candidates(req)
    if not cands:
        raise SpecError(*_no_layout_reason(req))
    counts = {"enumerated": len(cands), "invalid": 0, "oom": 0, "host_oom": 0, "over_headroom": 0, "dominated": 0,
              "screened": 0, "confirmed": 0, "engine_oom": 0}
    ckpt_s = checkpoint_seconds(req, cands)
    refusals: Refusals = {}
    screened = _screened(req, ctx, cands, ckpt_s, executor, progress, counts, refusals)
    if counts["invalid"] == len(cands):
        raise _every_layout_refused(refusals, len(cands))
    confirmed: list[PlanRow] = []

    def confirm(rows: list[PlanRow]) -> None:
        """Run the engine on screened rows and keep the results (with the screen's step time)."""
        for before, after in zip(rows, _run(executor, confirm_one, ctx, [r.candidate for r in rows], progress, "engine")):
            after.screen_step_time_s = before.step_time_s
            finish_row(after, req, ckpt_s)
            counts["confirmed"] += 1
            if not after.fits:
                counts["engine_oom"] += 1
            confirmed.append(after)

    confirm(_first_to_confirm(req, screened))
    for _round in range(3):  # a few at a time
        retry = _oom_retries(screened, confirmed)
        if not retry:
            break
        confirm(retry)
    key = sort_key(req)
    ranked = sorted([r for r in confirmed if r.fits], key=key)[: req.top_k]
    rest = [r for r in confirmed if not r.fits]
    refused = None
    if not ranked and counts["invalid"]:  # nothing fits: the refusals may be what hides the layouts asked for
        (fld, reason), n, first = most_common_refusal(refusals)
        refused = {"field": fld, "reason": reason, "layouts": n, "first": first.label()}
    return PlanResult(
        request=req, rows=ranked + rest, pareto=pareto_front(confirmed), counts=counts,
        wall_s=time.perf_counter() - t0, screened_top=_top_per_count(screened, max(20, req.top_k)),
        checkpoint_s=ckpt_s, refused=refused,
    )


def _top_per_count(rows: list[PlanRow], k: int) -> list[PlanRow]:
    """The first ``k`` rows (already ranked) of every GPU count."""
    seen: dict[int, int] = {}
    out = []
    for r in rows:
        n = r.candidate.gpus
        if seen.get(n, 0) < k:
            seen[n] = seen.get(n, 0) + 1
            out.append(r)
    return out
