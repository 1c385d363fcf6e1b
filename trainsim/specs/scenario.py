"""Scenario: model + cluster + layout + training, checked as a whole (every layout rule lives here)."""

from __future__ import annotations

from pydantic import BaseModel, PrivateAttr

from . import partial_distopt
from .data_parallel import check_data_parallel, zero_stage_refusal
from .errors import SpecError
from .framework_behaviour import BEHAVIOURS
from .framework_era import layout_refusal
from .hardware import ClusterSpec, dtype_refusal
from .layout import Layout
from .lora import check_lora_model
from .memo import IdentityMemo
from .mics import hierarchy_refusal as mics_hierarchy_refusal
from .model import ModelSpec
from .spec_config import SPEC_CONFIG
from .training import TrainingSpec


def virtual_stage(schedule: str, pp: int, stage: int, chunk: int) -> int:
    """Virtual stage of model chunk ``chunk`` on pipeline stage ``stage``: ``chunk·pp + stage`` (Megatron's
    interleaving), or the V of DualPipeV (chunk 1 of stage s is ``2·pp - 1 - s``)."""
    if schedule == "dualpipev" and chunk == 1:
        return 2 * pp - 1 - stage
    return chunk * pp + stage


class Scenario(BaseModel):
    """A fully resolved, valid scenario: ``layout.dp`` is always set."""

    model_config = SPEC_CONFIG

    name: str = "scenario"
    model: ModelSpec
    cluster: ClusterSpec
    layout: Layout
    training: TrainingSpec
    # False only on the what-if copy `without_collective_fixed_costs` makes; not a scenario key.
    _collective_fixed_costs: bool = PrivateAttr(default=True)

    @property
    def collective_fixed_costs(self) -> bool:
        """Whether collectives pay their fixed cost (NCCL launch, base and per-step latency): False on the what-if
        copy predict uses to measure how much of the step those fixed costs take (a latency-bound step)."""
        return self._collective_fixed_costs

    def without_collective_fixed_costs(self) -> Scenario:
        """This scenario with every collective and pipeline message costed by its bytes only (simulator exposures)."""
        copy = self.model_copy()
        copy._collective_fixed_costs = False
        return copy

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def dp(self) -> int:
        assert self.layout.dp is not None
        return self.layout.dp

    @property
    def dp_shard(self) -> int:
        """Data-parallel ranks the ZeRO-sharded model states are split over: the HSDP / MiCS shard group
        (Layout.dp_shard), the dp/N ranks of a partial distributed optimizer's instance
        (TrainingSpec.distributed_optimizer_instances, specs/partial_distopt.py), else dp. Dense states are split
        over these ranks' context-parallel peers too (dp_shard x cp ranks, cost_models.memory.shard_groups)."""
        return self.layout.dp_shard or self.dp // self.training.distributed_optimizer_instances

    @property
    def dp_replicas(self) -> int:
        """Replica groups of the sharded states (dp / dp_shard): HSDP / MiCS replicas or distributed-optimizer
        instances; 1 with full sharding."""
        return self.dp // self.dp_shard

    @property
    def expert_tp(self) -> int:
        """Ranks each expert's MLP is split over (Layout.etp, default tp)."""
        return self.layout.etp or self.layout.tp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per pipeline replica per optimizer step (gradient accumulation steps)."""
        return self.training.global_batch // (self.training.micro_batch * self.dp)

    @property
    def tokens_per_step(self) -> int:
        return self.training.global_batch * self.training.seq_len

    @property
    def layers_per_stage(self) -> int:
        """Layers of a pipeline stage; with uneven stages (see stage_layers) the largest (a middle stage)."""
        if self.layout.stage_layers is None and self.model.num_layers % self.layout.pp == 0:
            return self.model.num_layers // self.layout.pp
        return max(self.layers_on_stage(s) for s in range(self.layout.pp))

    @property
    def layers_per_chunk(self) -> int:
        """Layers of a model chunk; with uneven stages the largest."""
        return max(self.stage_layers)

    @property
    def uneven_stages(self) -> bool:
        return len(set(self.stage_layers)) > 1

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Transformer layers of each virtual pipeline stage (pp·vpp of them; see virtual_stage for which stage holds it).

        ``layout.stage_layers`` when given. An even split when pp·vpp divides num_layers. Otherwise Megatron's split that counts the embedding
        and the loss as one layer each (--account-for-embedding-in-pipeline-split and ...-loss-...): the
        first and the last virtual stage get one layer fewer (possibly none: embedding or loss only). Llama 3
        405B trained this way: 126 layers on
        16 stages, "one Transformer layer fewer on the first and the last stages" (Llama 3 paper, 3.3.2).
        """
        return _stage_layers(self)

    def virtual_stage(self, stage: int, chunk: int) -> int:
        """Virtual stage of model chunk ``chunk`` on pipeline stage ``stage`` (see ``virtual_stage``)."""
        return virtual_stage(self.training.schedule, self.layout.pp, stage, chunk)

    @property
    def loss_stage(self) -> int:
        """Pipeline stage holding the last virtual stage (final norm, logits, loss): pp-1, or 0 in a V."""
        return 0 if self.training.schedule == "dualpipev" else self.layout.pp - 1

    def layers_on_stage(self, stage: int) -> int:
        """Transformer layers held by pipeline stage ``stage`` (all of its chunks)."""
        layers = self.stage_layers
        return sum(layers[self.virtual_stage(stage, c)] for c in range(self.layout.vpp))

    def dense_layers_in(self, vstage: int) -> int:
        """Dense blocks of virtual stage ``vstage``: the part of the model's ``first_dense_layers`` (global layers
        0..k-1) it holds; every block of a dense model."""
        n = self.stage_layers[vstage]
        if not self.model.is_moe:
            return n
        if not self.model.first_dense_layers:
            return 0
        start = _vstage_starts(self)[vstage]
        return max(0, min(start + n, self.model.first_dense_layers) - start)

    def dense_layers_on_stage(self, stage: int) -> int:
        """Dense blocks held by pipeline stage ``stage`` (all of its chunks)."""
        return sum(self.dense_layers_in(self.virtual_stage(stage, c)) for c in range(self.layout.vpp))

    def dense_block(self) -> Scenario:
        """This scenario with the model's dense block (``ModelSpec.dense_block``) and no expert parallelism:
        per-block costs of a MoE model's first_dense_layers come from it. Not re-validated (the layout is the
        real scenario's)."""
        return self.model_copy(update={"model": self.model.dense_block(),
                                       "layout": self.layout.model_copy(update={"ep": 1, "etp": None})})


def _split(scenario: Scenario) -> tuple[int, ...]:
    if scenario.layout.stage_layers is not None:
        return scenario.layout.stage_layers
    n = scenario.layout.pp * scenario.layout.vpp
    L = scenario.model.num_layers
    if L % n == 0:
        return (L // n,) * n
    per = (L + 2) // n
    out = [per] * n
    out[0] -= 1
    out[-1] -= 1
    return tuple(out)


def _starts(scenario: Scenario) -> tuple[int, ...]:
    """Global index of each virtual stage's first layer."""
    out, acc = [], 0
    for n in scenario.stage_layers:
        out.append(acc)
        acc += n
    return tuple(out)


# Asked per stage and chunk by the memory model and the builder (millions of times in a planner sweep).
_stage_layers = IdentityMemo(_split)
_vstage_starts = IdentityMemo(_starts)


def balanced_stage_layers(num_layers: int, stages: int, last_extra: int = 1, first_extra: int = 1
                          ) -> tuple[int, ...] | None:
    """An uneven pipeline split for a layer count that neither the even nor the embedding/loss split divides:
    every middle stage gets ``q`` layers, the first and the last fewer (Megatron-Core's
    --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers), chosen so that with the embedding
    counted as ``first_extra`` layers and the loss as ``last_extra`` (one each, plus two per MTP module: its block
    and its output head) the heaviest stage is as light as it can be: q = ceil((L + extras) / stages), and the
    remainder L - (stages - 2)·q split between the two ends, the end with the larger extra taking fewer.
    Two stages: the two ends only. None when no such split exists (one stage, a middle stage without a layer, or
    ends that would need more layers than a middle stage)."""
    n, L = stages, num_layers
    if n == 2:  # no middle: the two ends as even as their extras allow
        first = min(L, max(0, (L + last_extra - first_extra + 1) // 2))
        return first, L - first
    if n < 3 or L < n - 2:
        return None
    q = -(-(L + first_extra + last_extra) // n)
    while q >= 1 and L - (n - 2) * q < 0:
        q -= 1
    if q < 1:
        return None
    rem = L - (n - 2) * q
    if rem > 2 * q:  # q was lowered to fit the middle: the ends would need more layers than a middle stage
        return None
    # The two ends share the remainder in proportion to their room below q (q minus their extra).
    room_first, room_last = max(0, q - first_extra), max(0, q - last_extra)
    room = room_first + room_last
    first = min(q, -(-rem * room_first // room) if room else -(-rem // 2))
    last = rem - first
    if last > q:
        first, last = first + last - q, q
    return (first, *([q] * (n - 2)), last)


def ep_overlap_refusal(m: ModelSpec, layout: Layout, t: TrainingSpec) -> str | None:
    """Why Megatron-Core refuses --overlap-moe-expert-parallel-comm for this setup (arguments.py, TransformerConfig),
    or None: it needs expert parallelism, model chunks when pipelined, a schedule that pairs a forward with another
    micro-batch's backward, no full or whole-MoE-layer recompute, and at most one MTP module."""
    if layout.ep == 1:
        return "needs expert parallelism (ep > 1)"
    if layout.pp > 1 and layout.vpp == 1:
        return "with pp > 1 needs model chunks (vpp > 1: interleaved or dualpipev), as Megatron-Core requires"
    if t.schedule in ("gpipe", "zb"):
        return f"pairs a forward with a backward micro-batch (1F1B); schedule {t.schedule} has no such pairs"
    if t.recompute == "full" or "moe" in t.selective_modules:
        return "cannot be combined with full recompute or recompute of the whole MoE layer (Megatron-Core refuses both)"
    if m.mtp_layers > 1:
        return "supports at most one MTP module (Megatron-Core)"
    return None


_MODULE_NEEDS = {
    "mla_up_proj": (lambda m: m.is_mla, "multi-head latent attention (kv_lora_rank)"),
    "moe": (lambda m: m.is_moe, "MoE blocks"),
    "moe_act": (lambda m: m.is_moe, "MoE blocks"),
    "shared_experts": (lambda m: bool(m.is_moe and m.shared_expert_ffn), "a shared expert (shared_expert_ffn)"),
    "mlp": (lambda m: m.num_dense_layers > 0, "dense MLP blocks"),
    # torchtitan's per-op policy is costed from the matmul order of a dense MHA/GQA block (activations.py)
    "op_sac": (lambda m: not m.is_moe and not m.is_mla, "dense MHA/GQA blocks without MoE or MLA"),
}


def _check_recompute_modules(m: ModelSpec, t: TrainingSpec) -> None:
    """A module the model lacks would recompute nothing (Megatron-Core refuses e.g. mla_up_proj without MLA)."""
    for mod in t.recompute_modules or ():
        need = _MODULE_NEEDS.get(mod)
        if need is not None and not need[0](m):
            raise SpecError("training.recompute_modules", f"{mod} needs {need[1]}, which {m.name} lacks")


def resolve(model: ModelSpec, cluster: ClusterSpec, layout: Layout, training: TrainingSpec,
            name: str = "scenario") -> Scenario:
    """Check every cross-field rule, derive dp, and return a Scenario; raises SpecError naming the field.

    The rules run in a fixed order (GPU count, tensor-parallel shards, pipeline stages and schedule, sequence
    sharding, experts, batch, runtime settings), so an input breaking several is told about the first."""
    m, t = model, training
    dp = _derive_dp(cluster, layout)
    etp = _check_tp_shards(m, layout)
    _check_stages(m, layout, t)
    _check_framework_code(m, layout, t)
    _check_hybrid(m, layout, t)
    _check_sequence(m, layout, t)
    _check_experts(m, layout, t, dp, etp)
    _check_batch(t, dp, layout.pp)
    check_data_parallel(layout, t, dp)
    if (why := partial_distopt.layout_refusal(t.distributed_optimizer_instances, dp, layout.dp_shard, layout.ep,
                                              layout.etp, layout.tp, m.is_moe)) is not None:
        raise SpecError(partial_distopt.FIELD, why)
    if (why := mics_hierarchy_refusal(t, layout, cluster.gpus_per_node)) is not None:
        raise SpecError("training.mics_hierarchical_gather", why)
    if t.float8_all_gather and layout.dp_shard == 1:
        raise SpecError("training.float8_all_gather", "FSDP's float8 all-gather gathers sharded parameters, and "
                        "layout.dp_shard 1 shards none (torchtitan enables it only with dp_shard_enabled)")
    _check_runtime(m, cluster, t, layout.pp)
    check_lora_model(m, layout, t)
    from .pools import check_pools  # cycle: specs/pools.py imports Scenario from here
    check_pools(cluster, layout, t, dp)
    return Scenario(name=name, model=m, cluster=cluster, layout=layout.model_copy(update={"dp": dp}), training=t)


def _check_framework_code(m: ModelSpec, layout: Layout, t: TrainingSpec) -> None:
    """Context and expert parallelism and MoE models where the framework preset's code has them
    (specs/framework_era.py: historic presets, Megatron-DeepSpeed's Ulysses-only context parallelism)."""
    why = layout_refusal(t.framework, cp=layout.cp, ep=layout.ep, moe=m.is_moe, cp_comm=t.cp_exchange)
    if why:
        raise SpecError(*why)


def _check_hybrid(m: ModelSpec, layout: Layout, t: TrainingSpec) -> None:
    """What a hybrid Mamba stack is costed under (cost_models/mamba.py): Megatron-Core's MambaMixer, whose heads
    and groups TP splits, one pipeline stage (the simulator's per-block costs of a stack are the mean layer, exact
    for a whole model on one stage only), no context parallelism (Mamba's CP all-to-alls are not modelled) and
    the schedules that keep each layer's backward whole."""
    if not m.is_hybrid:
        return
    if t.framework != "megatron":
        raise SpecError("training.framework", f"hybrid_pattern is costed as Megatron-Core runs it, not {t.framework}")
    for field, value in (("layout.pp", layout.pp), ("layout.cp", layout.cp)):
        if value > 1:
            raise SpecError(field, f"{value} with hybrid_pattern: only one stage without context parallelism is "
                                   "modelled for hybrid Mamba stacks")
    if t.schedule in ("zb", "dualpipev"):
        raise SpecError("training.schedule", f"{t.schedule} splits weight gradients, not modelled for hybrid stacks")
    if "op_sac" in t.selective_modules:
        raise SpecError("training.recompute_modules", "op_sac is torchtitan's per-op policy, not a Megatron one")
    if t.dtype == "nvfp4":
        raise SpecError("training.dtype", "nvfp4 with hybrid_pattern is not modelled: the Mamba layers' linears run "
                                          "in bf16 while their NVFP4 weight copies would be counted; use bf16 or fp8")
    if "M" in m.hybrid_pattern and (m.mamba_nheads % layout.tp or m.mamba_groups % layout.tp):
        raise SpecError("layout.tp", f"tp={layout.tp} must divide the {m.mamba_nheads} Mamba heads and "
                                     f"{m.mamba_groups} groups (Megatron's MambaMixer asserts both)")


def _derive_dp(cluster: ClusterSpec, layout: Layout) -> int:
    """Data-parallel size: the GPUs over tp·pp·cp, or the layout's own dp when it multiplies out to the GPUs."""
    gpus = cluster.num_gpus
    tp, pp, cp = layout.tp, layout.pp, layout.cp
    mp = tp * pp * cp
    if layout.dp is None:
        if gpus % mp:
            raise SpecError("gpus", f"{gpus} GPUs are not divisible by tp*pp*cp = {tp}*{pp}*{cp} = {mp}")
        return gpus // mp
    dp = layout.dp
    if mp * dp != gpus:
        raise SpecError("layout.dp", f"tp*pp*dp*cp = {tp}*{pp}*{dp}*{cp} = {mp * dp} but gpus = {gpus}")
    return dp


def _check_tp_shards(m: ModelSpec, layout: Layout) -> int:
    """TP (and expert TP) divide the heads and the MLPs they shard; returns the expert-TP size etp."""
    tp = layout.tp
    if m.num_heads % tp:
        raise SpecError("layout.tp", f"tp={tp} does not divide num_heads={m.num_heads}")
    if m.kv_heads % tp:
        raise SpecError("layout.tp", f"tp={tp} does not divide num_kv_heads={m.kv_heads}")
    etp = layout.etp or tp
    if layout.etp is not None and not m.is_moe:
        raise SpecError("layout.etp", f"etp={layout.etp} but {m.name} is a dense model (num_experts=1)")
    if tp % etp:
        raise SpecError("layout.etp", f"etp={etp} must divide tp={tp} (the expert-parallel group takes tp/etp of the "
                                      "TP ranks)")
    if m.ffn % tp:
        raise SpecError("layout.tp", f"tp={tp} does not divide ffn_hidden={m.ffn}")
    if m.is_moe and m.expert_ffn % etp:
        raise SpecError("layout.etp" if layout.etp else "layout.tp",
                        f"{'etp' if layout.etp else 'tp'}={etp} does not divide the experts' ffn ({m.expert_ffn})")
    if m.shared_expert_ffn and m.shared_expert_ffn % tp:
        raise SpecError("layout.tp", f"tp={tp} does not divide shared_expert_ffn={m.shared_expert_ffn}")
    return etp


def _check_stages(m: ModelSpec, layout: Layout, t: TrainingSpec) -> None:
    """The layers split over pp·vpp stages, and the schedule fits pp and vpp."""
    pp, vpp = layout.pp, layout.vpp
    if layout.stage_layers is not None:
        if sum(layout.stage_layers) != m.num_layers:
            raise SpecError("layout.stage_layers", f"sums to {sum(layout.stage_layers)} layers, the model has "
                                                   f"num_layers={m.num_layers}")
    elif m.num_layers % (pp * vpp) and (pp == 1 or (m.num_layers + 2) % (pp * vpp) or m.num_layers + 2 < pp * vpp):
        # Uneven stages only as Megatron's embedding/loss-as-a-layer split (see Scenario.stage_layers).
        raise SpecError(
            "layout.pp",
            f"pp*vpp = {pp}*{vpp} divides neither num_layers={m.num_layers} nor num_layers+2 "
            f"(the uneven split that counts embedding and loss as layers)",
        )
    if t.schedule == "dualpipev" and vpp != 2:
        raise SpecError("layout.vpp", f"dualpipev needs vpp=2 (two model chunks per rank, placed in a V), got {vpp}")
    if t.schedule == "dualpipev" and pp == 1:
        raise SpecError("training.schedule", "dualpipev needs pp > 1")
    if vpp > 1 and t.schedule not in ("interleaved", "dualpipev"):
        raise SpecError("layout.vpp", f"vpp={vpp} needs schedule=interleaved or dualpipev (got {t.schedule})")
    if t.schedule == "interleaved" and vpp == 1:
        raise SpecError("training.schedule", "interleaved needs vpp > 1 (model chunks per pipeline rank)")
    if t.schedule == "interleaved" and pp == 1:
        raise SpecError("training.schedule", "interleaved needs pp > 1")
    if t.schedule in ("gpipe", "zb") and pp == 1:
        # One stage has no pipeline to schedule: 1F1B there is plain gradient accumulation (forward then backward
        # per micro-batch), what Megatron's forward_backward_no_pipelining and torchtitan without pp run.
        raise SpecError("training.schedule", f"{t.schedule} needs pp > 1 (one stage has no pipeline to schedule; "
                                             "use 1f1b)")


def _check_sequence(m: ModelSpec, layout: Layout, t: TrainingSpec) -> None:
    """The sequence splits over context parallelism (and its a2a heads) and sequence parallelism."""
    tp, cp = layout.tp, layout.cp
    if t.seq_len % cp or (cp > 1 and t.seq_len % (2 * cp)):
        raise SpecError("training.seq_len", f"seq_len={t.seq_len} must be divisible by 2*cp = {2 * cp}")
    if cp > 1 and t.cp_exchange == "a2a" and ((m.num_heads // tp) % cp or (m.kv_heads // tp) % cp):
        raise SpecError("training.cp_comm", f"a2a (Ulysses) needs the query and key/value heads per TP rank "
                                            f"({m.num_heads // tp}, {m.kv_heads // tp}) divisible by cp={cp}")
    if t.sequence_parallel and t.seq_len % (tp * cp):
        raise SpecError("training.seq_len", f"seq_len={t.seq_len} must be divisible by tp*cp for sequence parallelism")
    if t.sequence_parallel and tp == 1:
        raise SpecError("training.sequence_parallel", "sequence parallelism needs tp > 1")
    if t.cross_entropy == "eager_fp32_kept" and tp > 1:
        raise SpecError("training.cross_entropy", "eager_fp32_kept (F.cross_entropy on whole fp32 logits) needs "
                                                  "tp = 1; vocabulary shards run torch's loss_parallel (eager_fp32)")


def _check_moe_balance(m: ModelSpec, layout: Layout, t: TrainingSpec) -> None:
    """Routing-imbalance settings belong to a MoE model; the most loaded of ep ranks holds at most all tokens, and a
    spread between EP ranks needs more than one."""
    for name in ("moe_imbalance", "moe_capacity_factor"):
        if getattr(t, name) is not None and not m.is_moe:
            raise SpecError(f"training.{name}", f"{m.name} is a dense model (num_experts=1): no expert routing")
    if t.moe_load_cv and not m.is_moe:
        raise SpecError("training.moe_load_cv", f"{m.name} is a dense model (num_experts=1): no expert routing")
    if t.moe_imbalance is not None and t.moe_imbalance > layout.ep:
        raise SpecError("training.moe_imbalance", f"{t.moe_imbalance} exceeds ep={layout.ep}: the most loaded of "
                                                  f"{layout.ep} EP ranks holds at most {layout.ep}x the mean")
    if t.moe_load_cv and layout.ep == 1:
        # cost_models/moe_balance.py: the spread is between EP ranks, 1 + cv * E[max of ep standard normals], and the
        # largest of one normal is its mean (E = 0): one rank holding every expert carries the mean load
        raise SpecError("training.moe_load_cv", f"{t.moe_load_cv} is a spread of the tokens between EP ranks, and "
                                                "ep=1 has one rank holding every expert (its load is the mean): "
                                                "set ep > 1 or drop it")


def _check_experts(m: ModelSpec, layout: Layout, t: TrainingSpec, dp: int, etp: int) -> None:
    """Expert parallelism: a MoE model, experts and ranks it divides, its overlap and recompute settings."""
    tp, cp, ep = layout.tp, layout.cp, layout.ep
    if ep > 1 and not m.is_moe:
        raise SpecError("layout.ep", f"ep={ep} but {m.name} is a dense model (num_experts=1)")
    if t.fused_grouped_mlp and not m.is_moe:
        raise SpecError("training.fused_grouped_mlp", f"it runs MoE experts through Transformer Engine's op fuser; "
                                                      f"{m.name} is a dense model (num_experts=1): drop it")
    if t.moe_token_dispatcher and not m.is_moe:
        raise SpecError("training.moe_token_dispatcher", f"it names how MoE tokens reach their experts; {m.name} is a "
                                                         f"dense model (num_experts=1): drop it")
    if t.ep_comm_overlap and (why := ep_overlap_refusal(m, layout, t)):
        raise SpecError("training.ep_comm_overlap", why)
    _check_moe_balance(m, layout, t)
    if tp > 1 and m.is_moe and not t.sequence_parallel:
        raise SpecError("training.sequence_parallel", "MoE with tp > 1 needs sequence parallelism (Megatron-Core's "
                                                      "MoELayer refuses to train without it)")
    _check_recompute_modules(m, t)
    if m.num_experts % ep:
        raise SpecError("layout.ep", f"ep={ep} does not divide num_experts={m.num_experts}")
    if (dp * cp * (tp // etp)) % ep:
        if etp == tp:
            raise SpecError("layout.ep", f"ep={ep} must divide dp*cp = {dp * cp} (or set etp < tp to let it span "
                                         "TP ranks)")
        raise SpecError("layout.ep", f"ep={ep} must divide dp*cp*tp/etp = {dp * cp * (tp // etp)}")


def _check_batch(t: TrainingSpec, dp: int, pp: int) -> None:
    """The global batch splits into whole micro-batches per replica, as many as the schedule needs."""
    per_step = t.micro_batch * dp
    if t.global_batch % per_step:
        raise SpecError(
            "training.global_batch",
            f"{t.global_batch} is not divisible by micro_batch*dp = {t.micro_batch}*{dp} = {per_step}",
        )
    n_micro = t.global_batch // per_step
    if t.schedule == "interleaved" and n_micro % pp:
        raise SpecError(
            "training.global_batch",
            f"interleaved schedule needs num_microbatches ({n_micro}) divisible by pp={pp}",
        )
    if t.schedule == "dualpipev" and n_micro < 2 * pp:
        raise SpecError(
            "training.global_batch",
            f"dualpipev needs num_microbatches ({n_micro}) >= 2*pp = {2 * pp} (torch's ScheduleDualPipeV)",
        )


def _check_runtime(m: ModelSpec, cluster: ClusterSpec, t: TrainingSpec, pp: int) -> None:
    """Positions, host issue mode, fp8 and activation offload are possible for this model and hardware."""
    if m.position_embedding == "learned" and t.seq_len > m.max_seq_len:
        raise SpecError("training.seq_len", f"seq_len={t.seq_len} exceeds {m.name}'s learned positions ({m.max_seq_len})")
    if t.host_issue != "eager" and (m.is_moe or cluster.gpu.num_sms is None):
        # cost_models/host_issue.py costs the host's issue of dense blocks on GPUs under every mode; a MoE block's
        # host work is costed eager only (cost_models/moe_issue.py): Transformer Engine's partial graphs of a MoE
        # layer (scopes attn, moe_router, moe_preprocess) keep the dispatcher's host sync and leave the dispatch,
        # experts and combine eager, and which of the counted MoE ops they capture is not counted. CPU ranks have
        # no kernels to capture -- a graph or compile setting there would be silently without effect.
        raise SpecError("training.host_issue", f"{t.host_issue} is costed for dense blocks on GPUs only "
                                               f"({'a MoE model' if m.is_moe else 'CPU ranks'}); use eager")
    if (why := dtype_refusal(cluster.gpu, t.dtype)) is not None:
        raise SpecError("training.dtype", why)
    if t.fp8_recipe == "mxfp8" and not cluster.gpu.fp4:
        # MXFP8 GEMMs (block-scaled, e8m0 per 32 elements) are Blackwell tensor-core instructions (sm_100+)
        raise SpecError("training.fp8_recipe", f"mxfp8 needs Blackwell tensor cores (b200, gb200, b300, gb300), which "
                                               f"{cluster.gpu.name} lacks; use tensorwise")
    if (why := zero_stage_refusal(t.framework, t.effective_zero, pp)) is not None:
        raise SpecError("training.zero", why)
    if BEHAVIOURS[t.framework].deepspeed_engine and t.effective_zero >= 3 and m.is_moe:
        # DeepSpeed's engine asserts "MoE not supported with Stage 3" (deepspeed/runtime/engine.py
        # _configure_zero_optimizer, find_string id 57130323): its ZeRO-3 has no expert-data-parallel partitioning
        raise SpecError("training.zero", f"ZeRO-3 with a MoE model does not run under {t.framework}: DeepSpeed's "
                                         f"engine refuses MoE at stage 3; use zero 1 or 2, or framework megatron "
                                         f"or torch")
    if t.block_code == "torchtitan" and not (m.plain_llama_block and t.dtype in ("bf16", "fp16") and not t.compile
                                             and not t.autocast and t.flash_attention):
        # torchtitan's eager Llama block (cost_models/activations.py impl titan) is costed for what that code runs
        raise SpecError("training.block_code", f"torchtitan is costed for torchtitan's eager dense Llama block "
                                               f"(RMSNorm, RoPE, SwiGLU, no biases) in bf16/fp16 with flash SDPA, "
                                               f"without compile or autocast; {m.name} with these settings is not: use fused")
    if t.offload_activation_layers:
        # Megatron-Core's TransformerConfig checks for --cpu-offloading (transformer_config.py __post_init__).
        field = "training.offload_activation_layers"
        if t.offload_activation_layers >= m.num_layers:
            raise SpecError(field, f"{t.offload_activation_layers} must be below num_layers={m.num_layers} "
                                   "(the last layer's activations are needed at once)")
        if pp > 1:
            raise SpecError(field, "activation CPU offload needs pp=1 (Megatron-Core: no pipeline parallelism "
                                   "with CPU offloading)")
        if t.recompute != "none":
            raise SpecError(field, "activation CPU offload needs recompute=none (Megatron-Core: CPU offloading "
                                   "does not work with activation recomputation)")
