"""The layout search space: every (tp, pp, dp, cp, ep, vpp, micro-batch, recompute, ZeRO, schedule) the
planner considers for one model, cluster size, global batch and sequence length.

Validity is decided by ``trainsim.specs.resolve`` (a SpecError means invalid); the loops below only
walk divisors so that the product space is never materialised. A few choices are search-space policy,
not validity, and are documented where they are made (``SearchLimits``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from itertools import groupby
from typing import Any

from pydantic import ValidationError

from trainsim.specs import (
    ClusterSpec,
    Layout,
    ModelSpec,
    Scenario,
    SpecError,
    TrainingSpec,
    load_training,
    resolve,
)
from trainsim.specs.data_parallel import hsdp_refusal, zero_stage_refusal
from trainsim.specs.errors import from_validation_error
from trainsim.specs.framework_behaviour import BEHAVIOURS, behaviour
from trainsim.specs.framework_era import feature_refusal, layout_refusal, schedule_refusal
from trainsim.specs.mics import mics_framework
from trainsim.specs.pools import arranged, placement_options
from trainsim.specs.scenario import balanced_stage_layers, ep_overlap_refusal
from trainsim.specs.training import default_cp_comm

RECOMPUTE_LADDER = ("none", "selective", "full")   # less memory, more compute, left to right
ZERO_LADDER = (0, 1, 2, 3)                         # less memory, more communication, left to right
SCHEDULES = ("1f1b", "interleaved", "zb", "gpipe")
KEY_FIELDS = ("gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero", "schedule",
              "sequence_parallel", "etp")


@dataclass(frozen=True)
class SearchLimits:
    """Search-space policy. ``fixed`` pins any KEY_FIELDS value (e.g. from --tp 8)."""

    # Tensor parallelism stays inside a node by default: its per-layer collectives are on the critical path
    # and the scale-up fabric is 9-18x faster than a NIC (Megatron-LM's guidance, SC21 Sec. 3.4).
    max_tp: int | None = None
    # Context parallelism only when each CP rank keeps at least this many tokens of the sequence; below it
    # the ring-attention exchange of a chunk cannot hide behind that chunk's attention compute.
    min_tokens_per_cp_rank: int = 1024
    max_micro_batch: int = 16
    max_vpp: int | None = None
    recompute: tuple[str, ...] = RECOMPUTE_LADDER
    zero: tuple[int, ...] = ZERO_LADDER
    schedules: tuple[str, ...] = SCHEDULES
    dtype: str = "bf16"
    fixed: dict[str, Any] = field(default_factory=dict)
    # Sequence parallelism is on whenever tp > 1: it shards the activations kept between TP regions by tp
    # at the same communication volume (Korthikanti et al. 2022), so turning it off never helps.
    sequence_parallel: bool = True
    training_extra: dict[str, Any] = field(default_factory=dict)
    # Rank placement of the parallel dimensions (Layout.placement, innermost first); None = the default.
    placement: tuple[str, ...] | None = None
    # Expert tensor parallelism of MoE candidates (Layout.etp, a scenario file's): applied where it divides the tp.
    # None: MoE candidates with tp > 1 try both Megatron's default (etp = tp) and MoE parallel folding (etp = 1,
    # whole experts, the EP group spanning the TP ranks -- what the Megatron-Bridge MoE recipes run).
    etp: int | None = None
    # Mixed GPU pools: the one placement kind searched ("stages": every pool order; "dp"); None: both.
    pool_placement: str | None = None

    def expert_tp(self, tp: int) -> int:
        """The etp a candidate of this tp uses: the limit's where it divides tp, else tp (Megatron's default)."""
        return self.etp if self.etp and tp % self.etp == 0 else tp

    def etp_options(self, model: ModelSpec, tp: int) -> list[int | None]:
        """Expert tensor parallelism values searched for a candidate of this tp: explicit for a MoE model with tp > 1
        (so rows say which they use), None where it means nothing (dense, or tp = 1)."""
        if not model.is_moe or tp == 1:
            return [None]
        opts = [self.expert_tp(tp)] if self.etp else [tp, 1]
        return [e for e in opts if self.allowed("etp", e)]

    def allowed(self, key: str, value: Any) -> bool:
        return key not in self.fixed or self.fixed[key] == value


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


@dataclass(frozen=True)
class Candidate:
    """One point of the search space (a layout plus the training knobs the planner varies)."""

    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vpp: int
    micro_batch: int
    recompute: str
    zero: int
    schedule: str
    sequence_parallel: bool
    # Layers of each virtual stage when neither the even nor Megatron's embedding/loss split divides the layers
    # (uneven_split); None = the resolver's default split. A function of (model, pp, vpp): not part of the key.
    stage_layers: tuple[int, ...] | None = None
    etp: int | None = None  # expert tensor parallelism of a MoE candidate with tp > 1 (Layout.etp); else None
    dp_shard: int | None = None  # HSDP shard-group size (Layout.dp_shard) when below dp; None = full sharding
    # Placement on a mixed cluster's pools (specs/pools.py placement_options: "stages 1,0" or "dp"); None: one pool.
    pools: str | None = None

    def key(self) -> tuple:
        base = (*(getattr(self, f) for f in KEY_FIELDS), self.dp_shard or self.dp)
        return base if self.pools is None else (*base, self.pools)  # a placement on GPU pools tells rows apart

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def label(self) -> str:
        parts = [f"tp{self.tp}", *(["sp"] if self.sequence_parallel else []), f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.dp_shard:
            parts.append(f"shard{self.dp_shard}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.vpp > 1:
            parts.append(f"v{self.vpp}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        if self.stage_layers:
            parts.append(f"layers {stage_layers_label(self.stage_layers)}")
        if self.pools:
            parts.append(f"pools {self.pools}")
        return " ".join(parts) + f" mb{self.micro_batch} {self.recompute} z{self.zero} {self.schedule}"


def stage_layers_label(layers) -> str:
    """Compact form of a stage split: runs of equal counts as NxK, e.g. ``3,4x14,2``."""
    out = []
    for n, group in groupby(layers):
        run = len(list(group))
        out.append(f"{n}x{run}" if run > 2 else ",".join([str(n)] * run))
    return ",".join(out)


def _tp_options(model: ModelSpec, cluster: ClusterSpec, gpus: int, lim: SearchLimits) -> list[int]:
    cap = lim.max_tp or cluster.gpus_per_node
    out = []
    for tp in divisors(gpus):
        if "tp" in lim.fixed:
            if tp != lim.fixed["tp"]:
                continue
        elif tp > cap:
            continue
        if model.num_heads % tp or model.kv_heads % tp or model.ffn % tp:
            continue
        out.append(tp)
    return out


def _code_has(lim: SearchLimits, *, cp: int = 1, ep: int = 1) -> bool:
    """Whether the framework preset's code runs this context / expert parallelism (specs.framework_era): a degree
    it cannot run is not searched."""
    extra = lim.training_extra
    fw = extra.get("framework", "megatron")
    return layout_refusal(fw, cp=cp, ep=ep, moe=False, cp_comm=extra.get("cp_comm") or default_cp_comm(fw)) is None


def _cp_options(seq_len: int, rest: int, lim: SearchLimits) -> list[int]:
    out = []
    for cp in divisors(rest):
        if not lim.allowed("cp", cp) or not _code_has(lim, cp=cp):
            continue
        if cp > 1 and ("cp" not in lim.fixed) and seq_len // cp < lim.min_tokens_per_cp_rank:
            continue
        if cp > 1 and seq_len % (2 * cp):
            continue
        out.append(cp)
    return out


def splits(num_layers: int, stages: int) -> bool:
    """Whether ``num_layers`` can be cut into ``stages`` virtual stages: evenly, or as Megatron's split that
    counts the embedding and the loss as one layer each (first and last stage one layer fewer, possibly none)."""
    if num_layers % stages == 0:
        return True
    return stages > 1 and (num_layers + 2) % stages == 0 and num_layers + 2 >= stages  # = specs.scenario.resolve


# Uneven splits (uneven_split) offer at most this many model chunks per pipeline rank: beyond it a chunk of an
# awkward layer count holds one or two layers, and every extra depth multiplies the candidates.
UNEVEN_MAX_VPP = 2


def uneven_split(model: ModelSpec, stages: int) -> tuple[int, ...] | None:
    """The layers of ``stages`` virtual stages when neither the even nor Megatron's embedding/loss split divides the
    model's layers: an even middle with lighter ends, balanced with the embedding and the loss counted as one layer
    each and an MTP module as two (specs.scenario.balanced_stage_layers). Without interleaving it is Megatron-Core's
    --decoder-first/last-pipeline-num-layers split; with model chunks it needs --pipeline-model-parallel-layout
    (those flags spread an end rank's layers evenly over its chunks). None when a default split exists (the
    resolver takes it) or no balanced split does."""
    if stages <= 1 or splits(model.num_layers, stages):
        return None
    return balanced_stage_layers(model.num_layers, stages, last_extra=1 + 2 * model.mtp_layers)


def pipeline_splits(model: ModelSpec, stages: int) -> bool:
    """Whether ``stages`` virtual stages can hold the model: a default split or an uneven one."""
    return splits(model.num_layers, stages) or uneven_split(model, stages) is not None


def _vpp_options(model: ModelSpec, pp: int) -> list[int]:
    """Chunks per pipeline rank (> 1) for which pp * vpp virtual stages split the layers: the default splits, and
    uneven ones up to UNEVEN_MAX_VPP chunks."""
    num_layers = model.num_layers
    opts = {d // pp for n in (num_layers, num_layers + 2) for d in divisors(n) if d % pp == 0 and d > pp}
    opts = {v for v in opts if splits(num_layers, pp * v)}
    opts |= {v for v in range(2, UNEVEN_MAX_VPP + 1) if uneven_split(model, pp * v) is not None}
    return sorted(opts)


def _schedules(pp: int, model: ModelSpec, lim: SearchLimits) -> Iterator[tuple[str, int]]:
    """(schedule, vpp) pairs: with one stage the schedule is moot (1f1b stands for it, plain gradient
    accumulation), so a pinned pipeline schedule other than 1f1b implies pp > 1 -- predict refuses it on one stage
    (specs.scenario) and every row of a plan holds its pin. DualPipeV (vpp 2) is searched only when asked for
    (``--schedule dualpipev`` or in ``lim.schedules``), so the default space and its results stay as they were."""
    if pp == 1:
        if lim.allowed("vpp", 1) and lim.allowed("schedule", "1f1b"):
            yield "1f1b", 1
        return
    pinned = lim.fixed.get("schedule")
    framework = lim.training_extra.get("framework", "megatron")
    for sched in lim.schedules + ((pinned,) if pinned is not None and pinned not in lim.schedules else ()):
        if not lim.allowed("schedule", sched) or feature_refusal(framework, "schedule", sched):
            continue  # a schedule the historic preset's code did not have (specs.framework_era) is not searched
        if sched == "interleaved":
            for v in _vpp_options(model, pp):
                if not lim.allowed("vpp", v):
                    continue
                if lim.max_vpp is not None and "vpp" not in lim.fixed and v > lim.max_vpp:
                    continue
                yield sched, v
        elif sched == "dualpipev":  # the V's default splits only
            if lim.allowed("vpp", 2) and splits(model.num_layers, 2 * pp):
                yield sched, 2
        elif lim.allowed("vpp", 1):
            yield sched, 1


def _zero_options(pp: int, lim: SearchLimits) -> list[int]:
    """ZeRO stages searched for a candidate of ``pp`` stages: those the framework's code runs with that pipeline
    (specs.data_parallel.zero_stage_refusal, the rule predict refuses by). A pinned stage is enumerated as asked, so
    that the specs refuse it with that rule's reason where no layout runs it.
    Megatron's distributed optimizer is ZeRO-1 (TrainingSpec.effective_zero): with it set, zero 0 and zero 1 are
    the same run, so only zero >= 1 is searched (one row per run, not two with identical numbers).
    A partial distributed optimizer (distributed_optimizer_instances > 1) is the distributed optimizer's ZeRO-1 only
    (specs/partial_distopt.py refuses ZeRO-2/3 beside it): its plans search zero 1 alone."""
    floor = 1 if lim.training_extra.get("distributed_optimizer") else 0
    top = 1 if lim.training_extra.get("distributed_optimizer_instances", 1) > 1 else 3
    framework = lim.training_extra.get("framework", "megatron")
    return [z for z in lim.zero if floor <= z <= top and lim.allowed("zero", z)
            and ("zero" in lim.fixed or zero_stage_refusal(framework, z, pp) is None)]


# Frameworks whose ZeRO-1 is only the optimizer states sharded over the group (Megatron's distributed optimizer):
# over a one-rank group it holds and runs what their unsharded optimizer does. Not DeepSpeed's, whose stages 1 and 2
# run DeepSpeedZeroOptimizer (its bucket copies and accumulation, cost_models.framework.
# grad_accumulation_bytes_per_param) where stage 0 runs its plain or BF16 optimizer; not the torch frameworks,
# whose sharded stages run FSDP (fp32 shards beside the 16-bit unsharded copy) where stage 0 runs DDP.
ZERO1_IS_THE_PLAIN_OPTIMIZER = frozenset(name for name, fw in BEHAVIOURS.items()
                                         if fw.megatron_arguments)


def _same_run_as_lower_zero(model: ModelSpec, split: tuple, zero: int, zeros: list[int], lim: SearchLimits) -> bool:
    """Whether ``zero`` describes the same run as a lower stage also searched, so the plan shows it once: ZeRO
    shards the model states over dp_shard x cp ranks (experts over their expert-data-parallel group,
    cost_models.memory.shard_groups), and over a one-rank group there is nothing to shard. ZeRO-2 then is ZeRO-1
    (gradients reduce-scattered to one rank are the whole gradient; not FSDP1's, whose stage 2 the cost model
    prices with its flat-gradient preparation), and ZeRO-1 is stage 0 where the framework's
    ZeRO-1 is only the sharded optimizer (ZERO1_IS_THE_PLAIN_OPTIMIZER) and no CPU optimizer offload needs it.
    DeepSpeed's stage 2 copies every micro-batch's gradients into its bucket where stage 1 does so once per step
    (stage_1_and_2.py), so its stages stay apart.
    ZeRO-3 stays: its gathered-unit buffers make another run. A pinned ``--zero`` is searched as asked."""
    tp, cp, dp, ep, etp, shard = split
    if "zero" in lim.fixed or zero not in (1, 2):
        return False
    group = (shard or dp) * cp
    if group > 1 or (model.is_moe and group * tp / (ep * (etp or tp)) > 1):
        return False
    extra = lim.training_extra
    framework = extra.get("framework", "megatron")
    if zero == 2:  # FSDP1's stage 2 prepares each unit's flat gradient (fsdp_grad_prep): priced as another run
        fw = behaviour(framework)
        return 1 in zeros and not fw.fsdp_grad_prep and not fw.deepspeed_optimizer
    return 0 in zeros and framework in ZERO1_IS_THE_PLAIN_OPTIMIZER and not extra.get("offload_optimizer")


def _shard_options(dp: int, zero: int, ep: int, lim: SearchLimits) -> list[int | None]:
    """HSDP shard-group sizes searched for a candidate: full sharding (None) and, for ZeRO-3 with an FSDP framework
    and no expert parallelism (specs.data_parallel.hsdp_refusal), the powers of two from 2 below dp that divide it -- a
    one-rank shard group is DDP's replicated states, which zero 0 covers. ``--dp-shard S`` pins one size (DeepSpeed-
    MiCS's only way into the search: its candidates with tp, pp or cp are refused by the specs)."""
    framework = lim.training_extra.get("framework", "megatron")
    pinned = lim.fixed.get("dp_shard")
    if pinned is not None:
        if hsdp_refusal(pinned, zero, framework, dp=dp, ep=ep) is not None:
            return []
        return [None] if pinned == dp else [pinned]
    out: list[int | None] = [None]
    if mics_framework(framework):  # DeepSpeed-MiCS is searched where pinned only (specs/mics.py: no tp/pp/cp)
        return out
    s = 2
    while s < dp:
        if hsdp_refusal(s, zero, framework, dp=dp, ep=ep) is None:
            out.append(s)
        s *= 2
    return out


def structural(model: ModelSpec, cluster: ClusterSpec, gpus: int, global_batch: int, seq_len: int,
               lim: SearchLimits) -> Iterator[tuple[int, int, int, int, int, int | None]]:
    """(tp, cp, pp, dp, ep, etp) splits of ``gpus`` that can possibly be valid (divisibility walked, not guessed)."""
    for tp in _tp_options(model, cluster, gpus, lim):
        for cp in _cp_options(seq_len, gpus // tp, lim):
            for pp in divisors(gpus // (tp * cp)):
                if not lim.allowed("pp", pp) or not pipeline_splits(model, pp):
                    continue
                dp = gpus // (tp * cp * pp)
                if not lim.allowed("dp", dp) or global_batch % dp:
                    continue
                for etp in lim.etp_options(model, tp):
                    fold = tp // (etp or tp)  # MoE parallel folding: ep may span tp/etp TP ranks
                    eps = ([e for e in divisors(model.num_experts) if (dp * cp * fold) % e == 0] if model.is_moe
                           else [1])
                    for ep in eps:
                        if lim.allowed("ep", ep) and _code_has(lim, ep=ep):
                            yield tp, cp, pp, dp, ep, etp


def enumerate_candidates(model: ModelSpec, cluster: ClusterSpec, gpus: int, global_batch: int, seq_len: int,
                         lim: SearchLimits | None = None) -> Iterator[Candidate]:
    """Every candidate of the space for one GPU count, before the validity check of ``resolve``."""
    lim = lim or SearchLimits()
    placements = placement_options(cluster, lim.pool_placement)
    # sequence parallelism where TP has it, unless pinned -- not under a preset whose code predates it
    framework = lim.training_extra.get("framework", "megatron")
    sp_default = lim.sequence_parallel and not feature_refusal(framework, "sequence_parallel", True)
    recomputes = [rc for rc in lim.recompute if lim.allowed("recompute", rc)
                  and not feature_refusal(framework, "recompute", rc)]  # nor a recompute the preset predates
    for tp, cp, pp, dp, ep, etp in structural(model, cluster, gpus, global_batch, seq_len, lim):
        per_replica = global_batch // dp
        sp = bool(lim.fixed.get("sequence_parallel", sp_default and tp > 1))
        for mb in divisors(per_replica):
            if not lim.allowed("micro_batch", mb):
                continue
            if "micro_batch" not in lim.fixed and mb > lim.max_micro_batch:
                break
            n_micro = per_replica // mb
            for sched, vpp in _schedules(pp, model, lim):
                if sched == "interleaved" and n_micro % pp or schedule_refusal(framework, sched, sp):
                    continue
                if sched == "dualpipev" and n_micro < 2 * pp:
                    continue
                layers = uneven_split(model, pp * vpp)
                zeros = _zero_options(pp, lim)
                for zero in zeros:
                    for shard in _shard_options(dp, zero, ep, lim):
                        if _same_run_as_lower_zero(model, (tp, cp, dp, ep, etp, shard), zero, zeros, lim):
                            continue
                        for rc in recomputes:
                            for where in placements:
                                yield Candidate(gpus, tp, pp, dp, cp, ep, vpp, mb, rc, zero, sched, sp,
                                                etp=etp, stage_layers=layers, dp_shard=shard, pools=where)


# TrainingSpec fields the search decides; every other one is the user's and applies to each candidate as given.
SEARCHED_TRAINING = frozenset({"seq_len", "global_batch", "micro_batch", "dtype", "recompute", "sequence_parallel",
                               "zero", "schedule"})


def training_extra(training: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a scenario's ``training`` the search keeps as given (framework, flash attention, offload...)."""
    return {k: v for k, v in training.items() if k not in SEARCHED_TRAINING}


def check_training_extra(extra: Mapping[str, Any], **searched: Any) -> None:
    """Validate a plan's fixed training settings as a TrainingSpec would take them (SpecError naming the field);
    ``searched`` fills the fields the search decides. A module list is selective recompute's; TP comm overlap is
    checked as the sequence-parallel candidates it applies to take it (to_scenario drops it from the others)."""
    rc = {"recompute": "selective"} if extra.get("recompute_modules") else {}
    sp = {"sequence_parallel": True} if extra.get("tp_comm_overlap") else {}
    load_training({**searched, **rc, **sp, **extra})


def to_scenario(model: ModelSpec, cluster: ClusterSpec, c: Candidate, global_batch: int, seq_len: int,
                lim: SearchLimits | None = None, name: str | None = None) -> Scenario:
    """Resolve a candidate into a Scenario; raises SpecError when the specs reject it."""
    lim = lim or SearchLimits()
    if cluster.num_gpus != c.gpus:
        cluster = cluster.with_gpus(c.gpus)
    cluster = arranged(cluster, c.pools)
    layout = Layout(tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp, ep=c.ep, vpp=c.vpp, etp=c.etp, stage_layers=c.stage_layers,
                    dp_shard=c.dp_shard, **({"placement": lim.placement} if lim.placement else {}))
    extra = dict(lim.training_extra)
    if not c.sequence_parallel:
        extra.pop("tp_comm_overlap", None)  # TE's userbuffers overlap needs SP: candidates without it run plain
    if c.recompute != "selective":
        extra.pop("recompute_modules", None)  # the file's module list applies to its selective candidates
    if c.ep <= 1:
        extra.pop("moe_load_cv", None)  # a spread between EP ranks: one rank holding every expert has none
    extra.update(seq_len=seq_len, global_batch=global_batch, micro_batch=c.micro_batch, dtype=lim.dtype,
                 recompute=c.recompute, sequence_parallel=c.sequence_parallel, zero=c.zero, schedule=c.schedule)
    try:  # the constructor, not specs.load_training: this runs per candidate, and its inputs are typed already
        training = TrainingSpec(**extra)
    except ValidationError as e:
        raise from_validation_error(e, "training") from None
    if training.ep_comm_overlap and ep_overlap_refusal(model, layout, training):
        training = training.model_copy(update={"ep_comm_overlap": False})  # candidates that cannot run it go without
    return resolve(model, cluster, layout, training, name=name or f"{model.name} {c.label()}")


def dropped_settings(model: ModelSpec, c: Candidate, lim: SearchLimits) -> list[str]:
    """The scenario file's settings a candidate runs without (to_scenario drops them), each as a stated line."""
    extra = lim.training_extra
    out = []
    if extra.get("tp_comm_overlap") and not c.sequence_parallel:
        out.append("tp_comm_overlap not applied: it needs sequence parallelism (tp > 1)")
    if extra.get("ep_comm_overlap"):
        layout = Layout(tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp, ep=c.ep, vpp=c.vpp, etp=c.etp)
        rc = {} if c.recompute == "selective" else {"recompute_modules": None}
        training = TrainingSpec.model_construct(**{**extra, **rc, "schedule": c.schedule, "zero": c.zero,
                                                   "recompute": c.recompute})
        why = ep_overlap_refusal(model, layout, training)
        if why:
            out.append(f"ep_comm_overlap not applied: {why}")
    return out


def valid_scenarios(model: ModelSpec, cluster: ClusterSpec, gpus: int, global_batch: int, seq_len: int,
                    lim: SearchLimits | None = None) -> Iterator[tuple[Candidate, Scenario]]:
    """Candidates that ``resolve`` accepts, with their scenarios."""
    for c in enumerate_candidates(model, cluster, gpus, global_batch, seq_len, lim):
        try:
            yield c, to_scenario(model, cluster, c, global_batch, seq_len, lim)
        except SpecError:
            continue
