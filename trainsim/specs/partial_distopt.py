"""Megatron-Core's partial distributed optimizer: ``training.distributed_optimizer_instances`` = N.

``--num-distributed-optimizer-instances N`` (DistributedDataParallelConfig ``num_distributed_optimizer_instances``,
"the factor by which the DP domain is sharded to have the partial DistOpt enabled"; first in
NVIDIA/Megatron-LM@bb84eb93fa "MCore Partial DistOpt Feature", 2024-11-30; read at d98e8a64dd) splits the
data-parallel x context-parallel group into N instances of dp·cp/N consecutive ranks:

* groups (megatron/core/parallel_state.py ``initialize_model_parallel``): the intra-partial group is a slice of
  dp·cp/N consecutive ranks of the dp-cp group (the innermost, fastest-linked ranks, as
  topologies.placement.hsdp_ranks lays out a shard group); the inter-partial group the N ranks holding the same
  shard, one per instance.
* gradients (param_and_grad_buffer.py ``start_grad_sync``): each bucket group is reduce-scattered over the
  intra-partial group, then its 1/(dp·cp/N) shard all-reduced over the inter-partial group. Both run on one
  communication stream per buffer kind (distributed_data_parallel.py gives every bucket group of the dense
  buffers one ``torch.cuda.Stream``) that waits for the compute stream, as synchronous calls: RS(b), AR(b),
  RS(b+1), ... one after another, overlapping the backward (the "Comm. Stream / NCCL Stream" diagram in the
  code). With overlap_grad_reduce off they run at the end of the backward, the same two calls per bucket.
* parameters (``start_param_sync``): the updated parameters are all-gathered over the intra-partial group.
* optimizer states and fp32 main parameters are sharded over the dp·cp/N ranks of the instance and replicated
  N times; the 16-bit weights and the gradient buffer stay whole on every rank, as with the distributed
  optimizer (N = 1).

Refused as Megatron refuses it, or where the cost model does not cost it faithfully (one line naming the field):
N > 1 without the distributed optimizer ("Partial DistOpt cannot be used without DistOpt",
distributed_data_parallel.py), N not dividing dp (parallel_state.py asserts dp·cp divisible by N; an instance
cutting through a context-parallel group is not costed), instances of one rank (nothing sharded: DDP's
all-reduce), frameworks other than Megatron-Core, ZeRO-2/3 (Megatron-FSDP reads the same flag as its HSDP,
mcore_fsdp_adapter.py ``enable_hsdp``), ``layout.dp_shard`` (HSDP / MiCS), the Muon layer-wise optimizer
(layer_wise_optimizer.py asserts "LayerWiseDistributedOptimizer does not support
num_distributed_optimizer_instances > 1") and MoE with expert parallelism or expert-TP folding (the
intra-partial expert-data-parallel groups, parallel_state.py, are not costed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .training import TrainingSpec

FIELD = "training.distributed_optimizer_instances"
ORIGIN = "Megatron-Core's partial distributed optimizer (--num-distributed-optimizer-instances, " \
         "NVIDIA/Megatron-LM@bb84eb93fa, 2024-11-30)"


def partial(training: TrainingSpec) -> bool:
    """Whether ``training`` runs more than one distributed-optimizer instance."""
    return training.distributed_optimizer_instances > 1


def training_refusal(t: TrainingSpec) -> str | None:
    """Why a TrainingSpec's instance count is not costed (None where it is or is 1): framework, ZeRO stage,
    distributed optimizer and optimizer (module doc)."""
    n = t.distributed_optimizer_instances
    if n == 1:
        return None
    if t.framework != "megatron":
        return f"{ORIGIN} is not in framework {t.framework}: use framework megatron, or 1 instance"
    if t.zero >= 2:
        return (f"{n} instances with zero {t.zero}: under Megatron-FSDP the flag selects its HSDP "
                "(mcore_fsdp_adapter.py), not costed; the partial distributed optimizer is zero <= 1")
    if not t.distributed_optimizer:
        return (f"{n} instances need the distributed optimizer (Megatron: 'Partial DistOpt cannot be used without "
                "DistOpt'): set distributed_optimizer true")
    if t.optimizer == "muon":
        return ("Megatron's LayerWiseDistributedOptimizer (muon) does not support num_distributed_optimizer_"
                "instances > 1 (layer_wise_optimizer.py asserts it)")
    return None


def layout_refusal(n: int, dp: int, dp_shard: int | None, ep: int, etp: int | None, tp: int,
                   moe: bool) -> str | None:
    """Why ``n`` instances over a layout of ``dp`` data-parallel ranks are not costed (None where they are)."""
    if n == 1:
        return None
    if dp % n:
        return f"{n} distributed-optimizer instances must divide dp={dp}"
    if dp // n == 1:
        return (f"{n} instances of one rank each shard nothing (every rank holds every state, DDP's all-reduce): "
                "use distributed_optimizer false or fewer instances")
    if dp_shard is not None:
        return "the partial distributed optimizer and layout.dp_shard (HSDP / MiCS, ZeRO-3) exclude each other"
    if moe and (ep > 1 or (etp or tp) != tp):
        return (f"{n} instances with expert parallelism (ep={ep}, etp={etp or tp}) are not costed: the experts' "
                "intra-partial expert-data-parallel groups are not modelled")
    return None
