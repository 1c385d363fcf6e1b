"""The host's issue of a hybrid Mamba stack (ModelSpec.hybrid_pattern: Mamba-2 "M", attention "*", MLP "-" and MoE
"E" layers; Nemotron-H, Nemotron 3) in eager Megatron-Core: each layer kind's host seconds and the GPU idle the MoE
dispatcher's per-layer host sync exposes over the span between two syncs. Pure.

Op counts per layer and micro-batch (Python-dispatched calls, at cost_models.host's ``HOST_OP_S`` each; the routed
experts' per-expert launches at ``HOST_LOOP_OP_S``), read from Megatron-Core's hybrid stack spec
(megatron/core/models/hybrid/hybrid_layer_specs.py ``hybrid_stack_spec``, NVIDIA/Megatron-LM @
d98e8a64ddf34856e74b24714e3bedb2f5a39553) and mamba_ssm (state-spaces/mamba @ e9594ce1c732d97440f0332fdc43170a2294dbfa):

* Mamba layer ("M", ``mamba_layer_ops``): MambaLayer.forward (megatron/core/ssm/mamba_layer.py) runs the mixer and
  the fused bias-dropout-add; MambaMixer.forward's training path (megatron/core/ssm/mamba_mixer.py ``forward`` ->
  ``_ssm_training``, ``use_mamba_mem_eff_path``) runs in_proj (TELayerNormColumnParallelLinear: the layer's norm is
  fused in), ``A = -torch.exp(A_log.float())`` (3: Float16Module keeps A_log in the 16-bit dtype),
  ``dt_bias.float()`` (D is passed uncast without ``D_has_hdim``), mamba_ssm's ``mamba_split_conv1d_scan_combined``
  (mamba_ssm/ops/triton/ssd_combined.py ``MambaSplitConv1dScanCombinedFn.forward``: ``causal_conv1d_fwd`` and
  ``_mamba_chunk_scan_combined_fwd``'s five Triton kernels -- chunk cumsum, chunk state, state passing, bmm chunk,
  chunk scan), the gated RMSNorm (mamba_ssm RMSNormGated, one Triton kernel) and out_proj (TERowParallelLinear):
  1 + 3 + 1 + 1 + 5 + 1 + 1 + 1 (bias-dropout-add) = 14 forward. Backward: bias-dropout-add 1, out_proj dgrad +
  wgrad 2, the gated norm's kernel, ``_dw.sum(0)`` and its cast 3; ``MambaSplitConv1dScanCombinedFn.backward``: the
  recomputed ``causal_conv1d_fwd`` and ``causal_conv1d_bwd_function``'s two fp32 ``zeros_like``, its kernel and two
  ``type_as`` (Dao-AILab/causal-conv1d causal_conv1d/cpp_functions.py @ 0d2252d161f25f7907bbd05985c08ab98d255874) 6;
  ``_mamba_chunk_scan_combined_bwd`` 27: fifteen Triton kernels (the recomputed cumsum, bmm chunk, chunk state and
  state passing; bwd_dz, bwd_dstates, state-passing bwd, bwd_dx, bwd_db, bwd_dC, bwd_dcb, two bmm-chunk bwd,
  bwd_ddAcs_stable, chunk-cumsum bwd) and twelve torch ops (``dt.clone()``; dD's partial sums and cast in
  ``_chunk_scan_bwd_dz``; the dB, dC and dCB split sums; ``ddA_cumsum_prev[..., -1] +=``, flip / cumsum / flip;
  ``ddA += ddA_next + ddA_prev``); the parameter casts' gradients (A_log cast, exp, neg, dt_bias cast) 4; in_proj's
  dgrad, wgrad and norm backward 3: 1 + 2 + 3 + 6 + 27 + 4 + 3 = 46. With more than one sequence per micro-batch the
  ``rearrange(..., "l b d -> b l d").contiguous()`` of in_proj's output and the scan output's way back are copies,
  2 more each pass (at micro-batch 1 the permuted tensor is already contiguous). Counted: calls that launch a
  kernel (allocations and views not); the SSD op's stride checks copy nothing here, since causal_conv1d's
  channel-last output leaves x, B and C with unit last stride.
* Attention layer ("*"): a TransformerLayer with self-attention only (linear_qkv TELayerNormColumnParallelLinear,
  TEDotProductAttention, linear_proj, bias-dropout-add): cost_models.host's ``ATTN_OPS``, which also counts the
  q/k norms and RoPE that Nemotron-H's attention layers lack (~4 of its 15 forward ops, within its ~30 %).
* MLP layer ("-"): MLPLayer (fc1 with its norm fused, activation, fc2, bias-dropout-add): ``MLP_OPS``.
* MoE layer ("E", MoETransformerLayer): its own pre-MLP TENorm and bias-dropout-add (``MOE_LAYER_OWN_OPS``, which a
  transformer block's attention half carries for it) + ``MOE_OPS`` + the shared expert's ``MLP_OPS`` + under
  LatentMoE (``moe_latent_size``) the two latent projections, TE linears of 1 forward and 2 backward ops each
  (``LATENT_OPS``) + the routed experts' per-expert launches (cost_models.host).

A recomputed forward issues its ops again in the backward: every layer under full recompute, the MoE layer (with its
shared expert) under the 'moe' module, the shared expert under 'shared_experts'.

Exposure rule (span between syncs). Megatron-Core's dispatcher blocks the host once per MoE layer forward
(cost_models.moe_issue's module doc: ``d2h_event.synchronize()`` before the dispatch all-to-all); between two
syncs the host may run ahead over the Mamba, attention and MLP layers, but no further than the next MoE layer's
sync, where the GPU has drained. The span from one E layer's sync to the next one's holds that E layer's
post-sync half, the layers between and the next E layer's pre-sync half: one E layer and the layers after it in
the pattern. Each span lasts ``max(host, GPU)`` of its layers, so it idles the GPU ``max(0, host - GPU)`` plus the
lead-in after the sync (``moe_issue.SYNC_LEAD_OPS``). The layers before the first E and after the last one are one
span with the last E layer (the host runs ahead from the chunk's start and past its end into the backward). A
stack without E layers has no sync: the host runs ahead over the whole pass. The backward has no sync unless the
MoE forward is recomputed: its idle is the host's excess over the chunk's whole backward; with a recomputed MoE
forward each span runs from one E layer's recomputed sync back to the previous E layer's (an E layer and the layers
before it). Under EP overlap a paired span issues a forward and a backward against their joint GPU time, as in
cost_models.moe_issue.

Not modelled: the MTP depths' layers (their host work is left out), the spread of the EP ranks' hosts and CUDA graphs
(MoE models are costed eager only).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from .host import ATTN_OPS, HOST_LOOP_OP_S, HOST_OP_S, MLP_OPS, MOE_OPS, expert_launches, moe_reruns
from .host_issue import host_idle_s
from .moe_issue import SYNC_LEAD_OPS, eager_megatron_on_gpus, synced_idle_s
from .shapes import layer_shape

if TYPE_CHECKING:
    from trainsim.specs import Scenario

MAMBA_OPS = (14, 46)         # (forward, backward) Python-dispatched ops of a Mamba layer at micro-batch 1 (module doc)
MAMBA_LAYOUT_COPIES = (2, 2)  # ... more with several sequences per micro-batch: the batch-first layout copies
MOE_LAYER_OWN_OPS = (2, 2)   # ... a MoE-only layer's own pre-MLP norm and bias-dropout-add
LATENT_OPS = (2, 4)          # ... LatentMoE's two latent projections (TE linears)


@dataclass(frozen=True)
class HybridIssue:
    """Host seconds of each layer kind's passes per micro-batch in a hybrid stack (module doc)."""

    pattern: str                              # ModelSpec.hybrid_pattern
    fwd_s: dict[str, float]                   # layer kind -> host seconds of its forward
    bwd_s: dict[str, float]                   # ... of its backward (a recomputed forward included)
    ops: dict[str, tuple[int, int, int, int]]  # kind -> (fwd Python ops, fwd loop launches, bwd ops, bwd launches)
    lead_s: float                             # GPU idle after each sync before the host has issued the all-to-all
    resync: bool                              # the backward re-runs the MoE forward and syncs again


def _layer_ops(kind: str, shp, full: bool) -> tuple[int, int, int, int]:
    """(forward Python ops, forward per-expert launches, backward ops, backward launches) of one layer of ``kind``;
    ``shp``: the E layers' LayerShape (experts, shared expert, latent size, dtype, recompute, micro-batch)."""
    if kind == "E":
        return _moe_layer_ops(shp, full)
    fwd, bwd = {"M": mamba_layer_ops(shp.b), "*": ATTN_OPS, "-": MLP_OPS}[kind]
    return fwd, 0, bwd + (fwd if full else 0), 0


def mamba_layer_ops(micro_batch: int) -> tuple[int, int]:
    """(forward, backward) Python-dispatched ops of one Mamba layer (module doc): the layout copies only with more
    than one sequence per micro-batch."""
    extra = MAMBA_LAYOUT_COPIES if micro_batch > 1 else (0, 0)
    return MAMBA_OPS[0] + extra[0], MAMBA_OPS[1] + extra[1]


def _moe_layer_ops(shp, full: bool) -> tuple[int, int, int, int]:
    """The ops of a MoE-only layer ("E"): own norm and residual, MoE layer, shared expert, latent projections, and
    the routed experts' per-expert launches (cost_models.host's GEMM and quantize counts)."""
    own = MOE_LAYER_OWN_OPS
    lat = LATENT_OPS if shp.lat else (0, 0)
    shared = MLP_OPS if shp.fs else (0, 0)
    rerun_moe, rerun_shared = moe_reruns(shp)
    fwd = own[0] + MOE_OPS[0] + shared[0] + lat[0]
    bwd = (own[1] + MOE_OPS[1] + shared[1] + lat[1] + (own[0] if full else 0)
           + ((MOE_OPS[0] + lat[0]) if rerun_moe else 0) + (shared[0] if rerun_shared else 0))
    launch_f, launch_b = expert_launches(shp, rerun_moe)
    return fwd, launch_f, bwd, launch_b


def hybrid_issue(scenario: Scenario) -> HybridIssue | None:
    """Host issue of ``scenario``'s layers where it is part of the step: a hybrid stack with MoE layers in eager
    Megatron-Core on GPUs; None elsewhere (a stack without MoE layers is costed by cost_models.host_issue's
    dense-block path, which has no sync)."""

    m, t, cluster = scenario.model, scenario.training, scenario.cluster
    if not m.is_hybrid or "E" not in m.hybrid_pattern or not eager_megatron_on_gpus(scenario):
        return None
    shp = layer_shape(scenario.model_copy(update={"model": m.hybrid_kind("E")}))
    op, loop = HOST_OP_S[cluster.host_cpu], HOST_LOOP_OP_S[cluster.host_cpu]
    full = t.recompute == "full"
    ops = {k: _layer_ops(k, shp, full) for k in m.hybrid_counts()}
    return HybridIssue(
        pattern=m.hybrid_pattern, ops=ops,
        fwd_s={k: o[0] * op + o[1] * loop for k, o in ops.items()},
        bwd_s={k: o[2] * op + o[3] * loop for k, o in ops.items()},
        lead_s=SYNC_LEAD_OPS * op, resync=moe_reruns(shp)[0])


def sync_spans(pattern: str, forward: bool = True) -> list[str]:
    """The pattern's layers grouped by the MoE syncs that bound the host (module doc): forward, each E layer with
    the layers after it; backward (a recomputed MoE forward), each E layer with the layers before it. The layers
    outside the first and last E layers join the span that wraps around. No E layer: one span of every layer."""
    marks = [i for i, c in enumerate(pattern) if c == "E"]
    if not marks:
        return [pattern]
    starts = marks if forward else [i + 1 for i in marks]
    rolled = pattern[starts[0]:] + pattern[:starts[0]]
    cuts = [s - starts[0] for s in starts] + [len(pattern)]
    return [rolled[a:b] for a, b in pairwise(cuts)]


def _span_idle_s(spans: list[str], host: dict[str, float], gpu: dict[str, float], lead_s: float) -> float:
    """Idle of the sync-bounded spans: each its host's excess over its GPU time, plus the lead-in."""
    return sum(synced_idle_s(sum(host[c] for c in sp), sum(gpu[c] for c in sp), lead_s) for sp in spans)


def hybrid_chunk_idle_s(issue: HybridIssue, gpu_f: dict[str, float], gpu_b: dict[str, float],
                        chunk_gpu_bwd_s: float, pair: float = 0.0,
                        paired: dict[str, float] | None = None) -> tuple[float, float]:
    """(forward, backward) GPU idle per micro-batch of a hybrid chunk holding the whole pattern (module doc).

    ``gpu_f`` / ``gpu_b``: per layer kind, one layer's forward / backward GPU seconds on its stream (compute, TP and
    EP communication); ``chunk_gpu_bwd_s``: the chunk's whole backward on the stream; ``pair``: the share of the
    passes EP overlap pairs, and ``paired`` per kind a layer's forward + backward GPU seconds when paired."""
    spans = sync_spans(issue.pattern)
    own_f = _span_idle_s(spans, issue.fwd_s, gpu_f, issue.lead_s)
    idle_f = own_f
    if pair:
        if paired is None:
            raise ValueError("hybrid_chunk_idle_s: pair > 0 needs the paired layers' GPU seconds (paired)")
        joint = {k: issue.fwd_s[k] + issue.bwd_s[k] for k in issue.fwd_s}
        idle_f = (1.0 - pair) * own_f + pair * _span_idle_s(spans, joint, paired, issue.lead_s)
    if issue.resync:
        idle_b = _span_idle_s(sync_spans(issue.pattern, forward=False), issue.bwd_s, gpu_b, issue.lead_s)
    else:  # no sync in the backward: the host runs ahead over the chunk
        idle_b = host_idle_s(chunk_gpu_bwd_s, hybrid_chunk_issue_s(issue)[1])
    return idle_f, (1.0 - pair) * idle_b


def hybrid_chunk_issue_s(issue: HybridIssue) -> tuple[float, float]:
    """(forward, backward) host seconds to issue the whole pattern for one micro-batch."""
    return sum(issue.fwd_s[c] for c in issue.pattern), sum(issue.bwd_s[c] for c in issue.pattern)
