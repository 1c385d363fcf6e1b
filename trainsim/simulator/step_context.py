"""What every chunk and stage of one optimizer step shares (builder.py's _Step): the paced end-of-model times, the
blocks, the parallel groups, the data-parallel settings and the stages' memory, worked out once per cost table."""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.cost_models import activations as act
from trainsim.cost_models import compute, framework, host_issue, hybrid_issue, loss_issue, memory, moe_issue
from trainsim.cost_models.shapes import block_kinds, dense_block_scenario, layer_shape
from trainsim.specs import Scenario, framework_behaviour
from trainsim.topologies.placement import place

from . import zero3_reduce
from .block import _Block, _block, _local_global_blocks, _mean_block, _mtp_block
from .exposures import _coll, _pace, _paced
from .grad_sync import _bucket_settings
from .vocab_tp import VocabTp, vocab_parallel_tp


@dataclass(frozen=True)
class _Step:
    """What every chunk and stage of one optimizer step shares, worked out once per cost table: the paced
    end-of-model times, the blocks, the parallel groups, the DP settings and the stages' memory."""

    scenario: Scenario
    profile: object
    slowest: float                    # compute-time multiplier of the job's slowest GPU
    emb: compute.LayerTimes
    head: compute.LayerTimes
    mtp: compute.LayerTimes
    pl: object                        # topologies Placement
    groups: dict
    main: _Block
    dense: _Block                     # a MoE model's first_dense_layers (else ``main``)
    mtp_block: _Block                 # one MTP depth's block (``main``; a hybrid stack's mtp_pattern layers)
    local_global: tuple | None        # (local, global) blocks of a model with local and global attention
    act_msg: float                    # one [b, s/cp, h] activation, bytes
    fw: framework_behaviour.FrameworkBehaviour
    sg_gather: float                  # Megatron's scatter/gather re-gather of a received activation
    vocab_tp: VocabTp                 # the vocabulary-parallel embedding's, logits' and loss's TP collectives
    head_issue: tuple                 # (forward, backward) host seconds of the head and loss (cost_models.loss_issue)
    emb_act: float
    head_act: float
    z: int                            # effective ZeRO stage
    dp_group: object                  # the data-parallel x context-parallel group (None with one such rank)
    shard_group: object               # ZeRO's sharding group: HSDP's shard group, else dp_group
    rep_group: object                 # HSDP's replicate group (None without HSDP)
    expert_apart: bool                # expert gradients reduce over the expert-data-parallel group, not dp_group
    expert_dp_group: object           # that group (None with one rank: no expert gradient reduction)
    bucket_params: float              # ZeRO-0/1 DDP bucket (parameters)
    reduce_bucket_params: float | None  # ZeRO-2/3 reduce bucket (parameters; None: one call per block)
    overlap: bool                     # gradient reduction overlapped with backward
    reduce_op: str
    hw: object
    prep_per_param: float             # FSDP's gradient-preparation bytes per parameter
    emb_params: float
    head_params: float
    stage_mem: tuple
    working: float                    # one block's recompute working set (the largest block kind)
    stage_rank: tuple                 # rank 0's column of the pipeline
    issue: object                     # host time to issue one block (None: not modelled)
    last_vs: int
    moe_issue: object = None          # host time of a Megatron-Core MoE model's blocks (cost_models.moe_issue)
    hybrid_issue: object = None       # host time of a hybrid stack's layers (cost_models.hybrid_issue)
    hybrid_kinds: tuple = ()          # (layer kind, _Block) of each kind of a hybrid stack's layers


def _step_context(scenario: Scenario, profile) -> _Step:
    """The shared per-step inputs of ``scenario`` (see _Step)."""
    m, lay, tr = scenario.model, scenario.layout, scenario.training
    p = lay.pp
    shp = layer_shape(scenario)
    # The job runs at its slowest GPU's pace: GPU compute (never communication, host or PCIe time) is
    # stretched by the expected slowest of the job's GPUs (cost_models/variation.py).
    slowest = _pace(scenario, profile)
    pl = place(scenario)
    groups = {d: (pl.group(d) if getattr(lay, d) > 1 else None) for d in ("tp", "cp", "ep", "dp")}
    # A MoE model's first_dense_layers cost what its dense_block() costs; every other block is `main`.
    main, hybrid_kinds = _main_block(scenario, groups, profile)
    dense = _block(dense_block_scenario(scenario), groups, profile) if m.first_dense_layers and m.is_moe else main
    act_msg = shp.e * shp.tokens * shp.h
    fw = framework_behaviour.behaviour(tr.framework)
    sg_gather = _scatter_gather_s(scenario, groups, profile, act_msg, fw)
    z = tr.effective_zero
    # Gradients reduce, and ZeRO shards, over the data-parallel x context-parallel ranks (placement.dp_cp_ranks):
    # the cp ranks hold the same weights and each computes a gradient from its part of the sequence.
    dp_group = pl.dp_cp_group() if scenario.dp * lay.cp > 1 else None
    shard_group, rep_group = _hsdp_groups(scenario, pl, dp_group)
    expert_apart, expert_dp_group = _expert_dp(scenario, pl, dp_group, rep_group)
    prep_per_param = _fsdp_prep_per_param(scenario, fw, dp_group)
    emb_params, head_params = _end_params(scenario)
    stage_mem = tuple(memory.stage_memory(scenario, s) for s in range(p))
    head = _paced(compute.head_times(scenario, profile), slowest)
    vocab_tp = vocab_parallel_tp(scenario, groups["tp"], profile, act_msg, shp.tokens, head.bwd_weight_s, fw)
    return _Step(
        scenario=scenario, profile=profile, slowest=slowest,
        emb=_paced(compute.embedding_times(scenario, profile), slowest),
        head=head,
        mtp=_paced(compute.mtp_times(scenario, profile), slowest),
        pl=pl, groups=groups, main=main, dense=dense, mtp_block=_mtp_block(scenario, groups, profile, main),
        local_global=_local_global_blocks(scenario, groups, profile),
        act_msg=act_msg, fw=fw, sg_gather=sg_gather, vocab_tp=vocab_tp,
        head_issue=loss_issue.head_loss_issue_s(scenario, profile),
        emb_act=act.embedding_activation_bytes(scenario), head_act=act.head_activation_bytes(scenario),
        z=z, dp_group=dp_group, shard_group=shard_group, rep_group=rep_group,
        expert_apart=expert_apart, expert_dp_group=expert_dp_group,
        **_bucket_settings(scenario, fw), reduce_op=framework.grad_reduce_op(tr),
        hw=compute.hw_of(scenario.cluster.gpu, tr.dtype), prep_per_param=prep_per_param,
        emb_params=emb_params, head_params=head_params, stage_mem=stage_mem,
        working=stage_mem[0].details["recompute_working"],
        stage_rank=tuple(pl.pp_peer(0, k) for k in range(p)),
        issue=zero3_reduce.with_rank_loops(scenario, host_issue.scenario_block_issue(scenario, profile), profile),
        last_vs=p * lay.vpp - 1, moe_issue=moe_issue.moe_block_issue(scenario),
        hybrid_issue=hybrid_issue.hybrid_issue(scenario), hybrid_kinds=hybrid_kinds,
    )


def _scatter_gather_s(scenario: Scenario, groups: dict, profile, act_msg: float,
                      fw: framework_behaviour.FrameworkBehaviour) -> float:
    """Seconds of Megatron's scatter/gather re-gather of a received activation (SC21 Sec. 4.1): each TP rank
    sends 1/tp of the activation and the receiver all-gathers it over the TP group (gather_split_1d_tensor) on
    the compute stream before use; 0 where it does not apply."""
    lay, tr = scenario.layout, scenario.training
    if lay.pp > 1 and lay.tp > 1 and not tr.sequence_parallel and fw.pp_scatter_gather:
        return sum(_coll("all_gather", act_msg, groups["tp"], scenario, profile))
    return 0.0


def _fsdp_prep_per_param(scenario: Scenario, fw: framework_behaviour.FrameworkBehaviour, dp_group) -> float:
    """Bytes per parameter of FSDP's own passes over each unit's gradient around its reduce-scatter
    (framework.py fsdp_grad_prep); 0 without them. Only the concatenation runs in autograd on the compute
    stream; FSDP runs the cast, divides and += on its post-backward stream, concurrently with the next unit's
    backward, where they take the same HBM bandwidth: counted as compute-stream time, a simplification that
    ignores any slack in the GEMMs' HBM use."""
    tr = scenario.training
    if not (fw.fsdp_grad_prep and tr.effective_zero >= 2 and dp_group is not None):
        return 0.0
    return framework.fsdp_grad_prep_bytes_per_param(layer_shape(scenario).e, tr.grad_bytes,
                                                    scenario.dp_shard * scenario.layout.cp,
                                                    scenario.num_microbatches > 1)


def _end_params(scenario: Scenario) -> tuple[float, float]:
    """(first stage's embedding, loss stage's head) parameters with gradients, one rank: the embedding (+
    positions) on the first stage; the final norm + output layer (a duplicate of a tied embedding when pp > 1)
    on the loss stage (memory.stage_extra_params's split). LoRA freezes both: (0, 0)."""
    m, lay = scenario.model, scenario.layout
    p = lay.pp
    emb_params = memory.stage_extra_params(m, lay.tp, max(p, 2), 0)
    loss_stage = scenario.loss_stage  # p-1, or 0 in DualPipeV's V (which holds the embedding already)
    head_params = (memory.stage_extra_params(m, lay.tp, p, loss_stage, loss_stage)
                   - (emb_params if loss_stage == 0 else 0.0))
    if scenario.training.lora_rank:  # no gradient to accumulate or reduce
        return 0.0, 0.0
    return emb_params, head_params


def _main_block(scenario: Scenario, groups: dict, profile) -> tuple[_Block, tuple]:
    """The model's (mean) block and, for a hybrid stack of several layer kinds, each kind's block by its pattern
    letter (their layer-count-weighted mean is the main block, as _block computes it)."""
    m = scenario.model
    if not m.is_hybrid or layer_shape(scenario).kind != "mix":
        main = _block(scenario, groups, profile)
        return main, tuple((k, main) for k in m.hybrid_counts())
    kinds = [(k, _block(scn, groups, profile), n) for k, (scn, n) in zip(m.hybrid_counts(), block_kinds(scenario))]
    return _mean_block([(b, n) for _, b, n in kinds]), tuple((k, b) for k, b, _ in kinds)


def _hsdp_groups(scenario: Scenario, pl, dp_group) -> tuple[object, object]:
    """(sharding group, replicate group): HSDP's shard group of Layout.dp_shard ranks (innermost in the DP group,
    so on the fastest links) and its replicate group; without HSDP the whole DP group and None."""
    if dp_group is None or scenario.dp_shard == scenario.dp:
        return dp_group, None
    shard_g, rep_g = pl.hsdp_groups(scenario.dp_shard)
    return (shard_g if shard_g.size > 1 else None), rep_g


def _expert_dp(scenario: Scenario, pl, dp_group, rep_group) -> tuple[bool, object]:
    """(whether a MoE model's expert gradients reduce apart from the dense ones, over which group): Megatron-Core
    DDP reduces expert parameters in buffers of their own over the expert-data-parallel group
    (distributed_data_parallel.py: expert_parallel_params over intra_expt_dp_group), DeepSpeed-MoE over its
    expert-data-parallel groups (utils/groups.py _get_expert_data_parallel_group) and torchtitan FSDP-shards the
    experts over the ``dp_shard_mod_ep`` mesh: tp*cp*dp/(ep*etp) ranks (placement.expert_dp_ranks), the group
    memory.shard_groups shards expert states over. Under HSDP that group is the expert-data-parallel ranks inside
    the rank's shard group (placement.expert_hsdp_group: tp*cp*dp_shard/(ep*etp) ranks, memory.shard_groups'
    expert count), and each expert shard is all-reduced over the replicate group as a dense one is. Without EP or
    expert-TP folding that group is the dense one and the experts stay on the dense path (Megatron's expert
    buffer is apart either way: ddp_buckets.py); a one-rank group reduces nothing."""
    lay = scenario.layout
    folded = lay.ep > 1 or scenario.expert_tp != lay.tp
    if not scenario.model.is_moe or not folded or dp_group is None:
        return False, None
    group = pl.expert_dp_group() if rep_group is None else pl.expert_hsdp_group(scenario.dp_shard)
    return True, (group if group.size > 1 else None)
