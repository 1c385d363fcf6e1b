"""The host's issue of Megatron-Core MoE blocks in the step: the GPU idle that the dispatcher's per-layer host sync
exposes. Pure.

Megatron-Core's alltoall token dispatcher copies the tokens-per-expert counts to the host on a side stream and
blocks the host on them once per MoE layer forward: dropless with EP or several local experts, ``preprocess`` sets
``cuda_sync_point = "before_ep_alltoall"`` ("before_finish" without EP), and ``_maybe_dtoh_and_synchronize`` calls
``self.d2h_event.synchronize()`` there, since the all-to-all's ``input_splits`` / ``output_splits`` must be host
lists (NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py @ d98e8a64ddf34856e74b24714e3bedb2f5a39553,
``MoEAlltoAllTokenDispatcher.preprocess`` and ``_maybe_dtoh_and_synchronize``). Token dropping without padding
(``training.moe_capacity_factor``) syncs too, earlier ("before_permutation_1", for ``num_out_tokens``); only
drop-and-pad routing (``moe_pad_expert_input_to_capacity``, not a scenario setting) has no sync. The flex
dispatcher syncs likewise: DeepEP's ``FusedDispatch.forward`` notes "the CPU will wait for GPU's signal to arrive"
(its per-expert receive counts come back as a host list), and HybridEP's dispatch is non-blocking only when given
the permuted-token count (``non_blocking = num_permuted_tokens is not None``; megatron/core/transformer/moe/
fused_a2a.py, same commit), which the dispatcher sets only under an EP-rank capacity factor or drop-and-pad
(``_HybridEPManager.setup_metadata``, token_dispatcher.py); all three are costed alike. The backward has no
such sync: the all-to-all's backward reuses the host split lists its forward saved (``_AllToAll.backward``,
megatron/core/tensor_parallel/mappings.py, same commit), and the GroupedLinear and fused-permute backward reuse the
forward's host-side sizes; a recomputed MoE forward (full recompute, or the 'moe' module) runs the dispatcher again
and syncs there.

Exposure rule. When the sync returns the GPU has (all but) drained its queue, so the host cannot be ahead of it; the
GPU then runs only what the host issues after the sync: the dispatch all-to-all, the per-expert GEMMs and quantize
kernels, the combine, and the next block's attention half, router and dispatch preprocess up to the next sync --
one block's forward of host work and of GPU work. That segment lasts ``max(host, GPU)``, so each MoE block forward
idles the GPU for ``max(0, host_f - gpu_f)`` (the GPU time: the block's compute and the TP, CP and EP communication
on its stream), plus the lead-in after the sync before the all-to-all is issued (``SYNC_LEAD_OPS``). Nothing outside
the block (embedding, loss) can hide that excess. A backward without a sync lets the host run ahead over the whole
chunk pass, so its idle is ``max(0, host_b - gpu_b)`` of the chunk; with a recomputed MoE forward it is per block as
in the forward. Where EP overlap pairs one micro-batch's forward with another's backward layer by layer
(``TrainingSpec.ep_comm_overlap``, Megatron-Core's combined 1F1B), the sync in the paired forward bounds both, so a
paired layer idles ``max(0, host_f + host_b - gpu_f - gpu_b)`` (charged to the forward).

Hybrid Mamba stacks, whose MoE layers stand apart from their attention and Mamba layers, are costed by
cost_models.hybrid_issue with the same sync over the span between two MoE layers.

Host seconds per block pass: cost_models.host's op counts and per-op seconds (``moe_block_host_passes``; TE issue
#2053, x86 vs Grace from ``ClusterSpec.host_cpu``). Dense blocks of a MoE model (first_dense_layers) are the
attention half and a dense MLP (``ATTN_OPS`` + ``MLP_OPS``) and have no sync of their own: each idles for its own
excess (nearly always none: a dense block's GPU time is the larger).

Not modelled: the spread of the EP ranks' hosts (the all-to-all waits for the slowest one; cost_models.host_jitter
has no measured spread for these blocks), the kernels queued between the D2H copy and the sync (the first
permutation, a few microseconds), frameworks other than Megatron-Core, and CUDA graphs (``training.host_issue``
other than eager is refused for MoE models: TE's partial graphs of attn / moe_router / moe_preprocess keep the
sync, and the share of ``MOE_OPS`` those scopes capture is not counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .host import ATTN_OPS, HOST_OP_S, MLP_OPS, moe_block_host_passes
from .host_issue import host_idle_s
from .shapes import layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario

# Python-dispatched calls the host issues after ``d2h_event.synchronize()`` before the GPU has work again: the
# dispatch all-to-all itself (token_dispatcher.py ``token_dispatch``: the sync, then ``all_to_all``).
SYNC_LEAD_OPS = 1


@dataclass(frozen=True)
class MoeIssue:
    """Host seconds of one block's passes per micro-batch for a Megatron-Core MoE model (module doc)."""

    fwd_s: float          # a MoE block's forward
    bwd_s: float          # ... its backward (a recomputed forward included)
    dense_fwd_s: float    # a dense block's (first_dense_layers) forward
    dense_bwd_s: float    # ... its backward
    lead_s: float         # GPU idle after each sync before the host has issued the all-to-all
    resync: bool          # the backward re-runs the MoE forward and syncs again
    ops: tuple[int, int, int, int]  # (fwd Python ops, fwd per-expert launches, bwd ops, bwd launches) of a MoE block


def eager_megatron_on_gpus(scenario: Scenario) -> bool:
    """Whether ``scenario`` runs Megatron-Core issued eagerly on GPUs, where the dispatcher's host sync is costed
    (module doc; a CPU profile has no ``num_sms``)."""
    t = scenario.training
    return (t.framework == "megatron" and t.host_issue_mode == "eager"
            and getattr(scenario.cluster.gpu, "num_sms", None) is not None)


def moe_block_issue(scenario: Scenario) -> MoeIssue | None:
    """Host issue of ``scenario``'s blocks where it is part of the step: a Megatron-Core MoE model (not a hybrid
    Mamba stack) on GPUs, issued eagerly; None elsewhere."""

    m, t, cluster = scenario.model, scenario.training, scenario.cluster
    if not m.is_moe or m.is_hybrid or not eager_megatron_on_gpus(scenario):
        return None
    host = cluster.host_cpu
    p = moe_block_host_passes(layer_shape(scenario), host)
    op = HOST_OP_S[host]
    full = t.recompute == "full"
    d_f = (ATTN_OPS[0] + MLP_OPS[0]) * op
    d_b = (ATTN_OPS[1] + MLP_OPS[1]) * op + (d_f if full else 0.0)
    return MoeIssue(p.fwd_s, p.bwd_s, d_f, d_b, SYNC_LEAD_OPS * op, p.resync, (*p.fwd_ops, *p.bwd_ops))


def synced_idle_s(host_s: float, gpu_s: float, lead_s: float) -> float:
    """GPU idle of one pass that starts at a host sync: the host's excess over the GPU's time, plus the lead-in."""
    return host_idle_s(gpu_s, host_s) + lead_s


def moe_chunk_idle_s(issue: MoeIssue, moe: tuple[tuple[int, float, float, float, float], ...],
                     dense: tuple[int, float, float], chunk_gpu_bwd_s: float, pair: float = 0.0
                     ) -> tuple[float, float]:
    """(forward, backward) GPU idle per micro-batch of a chunk (module doc, "Exposure rule").

    ``moe``: per kind of MoE block (e.g. sliding-window and full-attention ones): (blocks, one's forward GPU seconds,
    its backward GPU seconds, its forward and backward GPU seconds when paired with another micro-batch's pass under
    EP overlap); ``dense``: (dense blocks, forward and backward GPU seconds of one); ``chunk_gpu_bwd_s``: the chunk's
    whole backward on the GPU's stream; ``pair``: the share of the passes EP overlap pairs."""
    n_d, gd_f, gd_b = dense
    idle_f = n_d * host_idle_s(gd_f, issue.dense_fwd_s)
    idle_b = n_d * host_idle_s(gd_b, issue.dense_bwd_s)
    for n, g_f, g_b, g_pair_f, g_pair_b in moe:
        own_f = synced_idle_s(issue.fwd_s, g_f, issue.lead_s)
        paired = synced_idle_s(issue.fwd_s + issue.bwd_s, g_pair_f + g_pair_b, issue.lead_s)
        idle_f += n * ((1.0 - pair) * own_f + pair * paired)
        idle_b += n * synced_idle_s(issue.bwd_s, g_b, issue.lead_s)
    if not issue.resync:  # no sync in the backward: the host runs ahead over the chunk
        n = sum(kind[0] for kind in moe)
        idle_b = host_idle_s(chunk_gpu_bwd_s, moe_chunk_issue_s(issue, n, n_d)[1])
    return idle_f, (1.0 - pair) * idle_b


def moe_chunk_issue_s(issue: MoeIssue, n: int, n_d: int) -> tuple[float, float]:
    """(forward, backward) host seconds to issue a chunk of ``n`` MoE and ``n_d`` dense blocks for one micro-batch."""
    return n * issue.fwd_s + n_d * issue.dense_fwd_s, n * issue.bwd_s + n_d * issue.dense_bwd_s
