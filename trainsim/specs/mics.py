"""DeepSpeed-MiCS: ZeRO-3 sharded within a group of ``Layout.dp_shard`` data-parallel ranks, replicated across groups.

MiCS (Zhang et al., "MiCS: Near-linear Scaling for Training Gigantic Model on Public Cloud", arXiv:2205.00119,
VLDB 2023) shards every model state -- 16-bit parameters, gradients, fp32 master weights and Adam moments -- over a
partition group of S ranks instead of all dp ranks, and keeps dp/S replicas of each shard. DeepSpeed runs it as
ZeRO-3 with ``zero_optimization.mics_shard_size: S`` (deepspeed/runtime/zero/mics.py, mics_utils.py; first in
v0.9.2, microsoft/DeepSpeed@2e99f6ed "[DRAFT] Tentative implementation of MiCS (#2964)", 2023-04-25; read at
v0.12.3, 6ea44d02c, and at 38327e07):

* groups (mics_utils.py ``_generate_mics_config``): the shard groups are consecutive *global* ranks,
  ``np.arange(world_size).reshape(-1, shard_size)``, and the replicate groups the ranks at the same position in
  every shard group -- the data-parallel split only when every rank is a data-parallel rank (tp = pp = cp = 1),
  which is what is costed here; the shard group is the S innermost (fastest-linked) ranks, as
  topologies.placement.hsdp_ranks lays out HSDP's.
* parameters (mics.py ``MiCS_Init``): each parameter is partitioned over the shard group
  (``get_partition_dp_group`` -> ``param_shard_group``) and all-gathered over it with one coalesced call per
  fetched module (``_flat_all_gather_with_coalescing_manager``: ``all_gather_into_tensor`` straight into each
  parameter's own buffer, so ``MiCS_AllGatherCoalescedHandle.wait`` copies nothing out); the hierarchical
  inter-node then intra-node all-gather exists only with ``mics_hierarchical_params_gather: true``, off by
  default (and asserted off for a group inside one node): the flat gather over the shard group is costed unless
  ``training.mics_hierarchical_gather`` is set (simulator/mics_sync.py).
* gradients (mics.py ``MiCS_Optimizer``): stage 3's reduce-scatter of each reduce bucket runs over the shard group
  (``dp_process_group = param_shard_group``) every micro-batch; ``partition_grads`` then calls
  ``allreduce_mics_shard_grads``, which only at the gradient-accumulation boundary all-reduces the bucket's
  gradient partitions across the replicate group (``scale_tensors`` divides them by dp/S in place, then
  ``all_reduce_coalesced``), on the reduce stream -- MiCS's 2-hop gradient synchronization, once per step.
  The partitions are in the gradient-accumulation dtype, the training dtype under ZeRO (engine.py
  ``get_data_types``).
* the optimizer step and the gradient norm run on the rank's 1/S shard (the norm is all-reduced over
  ``dp_process_group``, the shard group); the replicas hold equal gradients after the boundary all-reduce, so
  they step alike and no parameter broadcast follows.

Not costed, so refused (one line naming the field): MiCS with tensor, pipeline or context parallelism (the
world-rank groups are not the data-parallel ones), with expert parallelism, with ZeRO-Offload (the boundary
all-reduce raises "Local sharding has no support for CPU offloading" for gradients off the GPU), under
Megatron-DeepSpeed (its ZeRO-3 is costed per block as its own fork runs it) and under ``deepspeed-2021`` (whose
code predates MiCS). ``mics_shard_size`` is a stage-3 setting (engine.py ``_configure_zero_optimizer`` builds
``MiCS_Optimizer`` only in its ZeRO-3 branch), so ZeRO-1/2 within a subgroup (AMSP's s_os = 8 layouts, its own
engine) is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .framework_behaviour import BEHAVIOURS

if TYPE_CHECKING:
    from .layout import Layout
    from .scenario import Scenario
    from .training import TrainingSpec

# deepspeed-2021 (microsoft/DeepSpeed@70adb32, 2021-07-12) predates MiCS (2e99f6ed, 2023-04-25).
MICS_ORIGIN = "DeepSpeed-MiCS came in v0.9.2 (microsoft/DeepSpeed #2964, 2023-04-25)"


def mics_framework(framework: str) -> bool:
    """Whether ``framework`` runs a ZeRO-3 shard group as DeepSpeed-MiCS (framework deepspeed, deepspeed-2023: the
    DeepSpeed presets with prefetched per-submodule gathers and serialized reductions, framework_behaviour
    ``zero3_reduce_serialized``)."""
    fw = BEHAVIOURS.get(framework)
    return fw is not None and fw.deepspeed_engine and fw.zero3_reduce_serialized


def mics_zero3(t: TrainingSpec) -> bool:
    """Whether TrainingSpec ``t`` is ZeRO-3 under a MiCS framework, where a given shard group is MiCS's."""
    return mics_framework(t.framework) and t.effective_zero >= 3


def is_mics(scenario: Scenario) -> bool:
    """Whether ``scenario`` is DeepSpeed-MiCS with more than one replica (ZeRO-3 over dp_shard < dp ranks)."""
    return mics_zero3(scenario.training) and scenario.dp_shard < scenario.dp


def gathers_in_place(scenario: Scenario) -> bool:
    """Whether ``scenario``'s ZeRO-3 gathers are MiCS's (``mics_shard_size`` given: Layout.dp_shard set under a MiCS
    framework, the whole dp included): ``all_gather_into_tensor`` into each parameter's own buffer, so no
    unpacking copy of the gathered pieces and no host loop over the ranks around it (module docstring)."""
    return mics_zero3(scenario.training) and scenario.layout.dp_shard is not None


def framework_refusal(framework: str) -> str | None:
    """Why a DeepSpeed-engine framework's ZeRO-3 shard group is not costed as MiCS (None where it is)."""
    if mics_framework(framework):
        return None
    if framework == "deepspeed-2021":
        return f"{MICS_ORIGIN}, after the deepspeed-2021 code (2021-07-12): use framework deepspeed-2023 or deepspeed"
    return (f"a ZeRO-3 shard group under framework {framework} is not costed: DeepSpeed-MiCS (mics_shard_size) is "
            "costed for frameworks deepspeed and deepspeed-2023")


def hierarchy_refusal(t: TrainingSpec, layout: Layout, gpus_per_node: int) -> str | None:
    """Why ``training.mics_hierarchical_gather`` is not a costed setting (None when it is): it needs MiCS (the shard
    group given under a MiCS framework with ZeRO-3), and DeepSpeed builds its groups only for a shard group spanning
    two or more nodes (mics_utils.py asserts ``n_span_nodes > 1``, "sharding spans on single node, no need for
    hierarchy allgather"); one that fills each node it spans is costed (a part-node chunk is not)."""
    if not t.mics_hierarchical_gather:
        return None
    shard = layout.dp_shard
    if not mics_zero3(t) or shard is None:
        return ("DeepSpeed-MiCS's hierarchical all-gather needs MiCS: framework deepspeed or deepspeed-2023, zero 3 "
                "and layout.dp_shard")
    if shard % gpus_per_node or shard < 2 * gpus_per_node:
        return (f"a shard group of {shard} ranks on nodes of {gpus_per_node} GPUs: DeepSpeed's hierarchical all-gather "
                "needs a group spanning two or more nodes (mics_utils.py: 'sharding spans on single node, no need "
                "for hierarchy allgather'); costed for groups of whole nodes")
    return None


def single_rank_refusal(shard: int, dp: int) -> str | None:
    """Why a MiCS shard group of one rank is not costed (None for larger groups): every rank would hold every
    state and all-reduce the gradients across all dp replicas, which is ZeRO-0 / DDP, not a sharded layout."""
    if shard == 1 and dp > 1:
        return ("a MiCS shard group of 1 rank shards nothing (each rank holds every state): not costed; use "
                "zero 0-2 without layout.dp_shard, or a shard group of 2 or more ranks")
    return None


def layout_refusal(tp: int, pp: int, cp: int, offload: bool) -> str | None:
    """Why a MiCS layout is not costed (module docstring): model parallelism or ZeRO-Offload; None when it is."""
    if tp * pp * cp > 1:
        return (f"DeepSpeed-MiCS with tp={tp}, pp={pp}, cp={cp} is not costed: its shard groups are consecutive "
                "global ranks (mics_utils._generate_mics_config), the data-parallel groups only with tp = pp = cp = 1")
    if offload:
        return ("DeepSpeed-MiCS with ZeRO-Offload is not costed: its replica all-reduce refuses gradients off the GPU "
                "(mics.py: 'Local sharding has no support for CPU offloading')")
    return None
