"""Bytes per GPU of one pipeline stage: weights, gradients, optimizer states, activations and the rest.

Model states (mixed-precision Adam, ZeRO paper Sec. 3.1, formulas.csv ``zero_*``): per parameter
``param_bytes`` (2: bf16/fp16 weights) + ``grad_bytes`` (2, or 4 with fp32 gradient accumulation) +
``optimizer_bytes_per_param`` K (12: fp32 master weight, Adam m and v). ZeRO shards them over the
data-parallel group: stage 1 (and Megatron's distributed optimizer) the optimizer states, stage 2 also the
gradients, stage 3 (FSDP) also the weights. The group is DP×CP for dense parameters (Megatron shards over
the DP×CP group) and DP×CP/EP for expert parameters (the expert-data-parallel group); with HSDP
(``Layout.dp_shard`` = S < dp) only the S×CP ranks of a shard group split them, as ZeRO-3 over S.

Sharding by model parallelism: TP splits the attention and MLP matrices, their column-parallel biases and
the vocabulary (norm weights and row-parallel biases are replicated); PP gives each stage ``L/pp`` blocks,
the embedding (+ learned positions) to the first stage, final norm and output layer to the last; tied
embeddings keep a duplicate of the word embedding on the last stage when ``pp > 1`` (Megatron), with its
own gradient and optimizer state. EP gives each rank ``E/ep`` experts.

Model-state bytes per parameter come from the framework's own code (model_states.state_bytes): Megatron keeps
16-bit weights, an fp32 main-grad buffer and fp32 main weights + Adam m, v (18 bytes; 6 + 12/DP with the
distributed optimizer, as megatron/training/theoretical_memory_usage.py); FSDP keeps fp32 sharded weights
and gradients and Adam m, v (16); DeepSpeed 2 + 2 + 12; pure low-precision training 2 + 2 + 4.

``other`` is the sum of named terms (``StageMemory.other_terms``): the runtime (``cuda_context``,
``cublas_workspace``, ``nccl_buffers``: runtime_memory.py), ZeRO-3 all-gather/prefetch and reduce-scatter
buffers, the logits/loss workspace on the loss stage, pipeline send/receive buffers, Megatron's persistent
"mpu" buffer (sequence-parallel all-gather or unfused attention's score input), the part of DeepSpeed's bf16
gradient all-reduce copy beyond the freed activations (``reduce_cast_bytes``), Megatron-Core DDP's start-up
peak with the distributed optimizer beyond the step's (``ddp_param_remap_bytes``), offload staging buffers, and
under torch.autocast on fp32 weights (TrainingSpec.autocast) its weight-cast cache and, where it outgrows the
activation peak, the end of a later micro-batch's backward with its deferred gradient casts (autocast.py).
Data-parallel gradient buckets of ZeRO 0-2 are views of the gradient storage (Megatron's contiguous grad
buffer; torch DDP with ``gradient_as_bucket_view``), so they add nothing. The caching allocator's cached-but-free blocks are not in
``total`` (the allocator frees them before failing an allocation); ``StageMemory.allocator_cached`` carries the
part allocator_reserve.py derives (op_sac_trace.py's op-by-op replay where it covers the step), for the reserved
and nvidia-smi counters. FSDP's sharded gradients, freed by ``zero_grad`` before a one-micro-batch step's forward
and re-created after its activation peak, leave ``total``
for ``allocator_cached`` (``StageMemory.grads_off_peak``, allocator_reserve.grads_off_peak). Optimizer states
created at the first step split the segments the freed activations left cached, so the next step's activations
take new ones: ``reserved_cached`` adds that to ``allocator_cached`` where the trace is replayed
(first_step_fragmentation.py). FSDP's side streams keep their own pools -- FSDP1's reduce-dtype gradient copies,
FSDP2's all-gather outputs and, before torch 2.5, its reduce-scatter inputs -- whose bytes beyond what is counted
join ``allocator_cached`` (``StageMemory.stream_pools``, fsdp_stream_pools.py).

Offload (``offload``): each framework keeps different states on the device -- Megatron its 16-bit weights
and fp32 grad buffer, DeepSpeed its weights and reduce buckets, FSDP only the gathered units -- and the host
memory and PCIe bytes per step follow from that. ``offload_activation_layers`` (Megatron-Core/Transformer
Engine activation CPU offloading, pp = 1) keeps the saved activations of the first N layers in host memory
(``offloaded_layers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from trainsim.specs.errors import SpecError
from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import IdentityMemo

from . import activations as act
from . import autocast, fp8_weights, nvfp4, op_sac_trace
from .allocator_reserve import grads_off_peak, loss_stage_cached_bytes
from .first_step_fragmentation import first_step_extra_reserved, lazy_state_bytes
from .framework import DEEPSPEED_MAX_LIVE_PARAMS, bf16_optimizer
from .fsdp2_peak import Fsdp2Peak, activation_peak, block_gather_bytes, fsdp2_moment
from .fsdp2_peak import applies as fsdp2_applies
from .fsdp_stream_pools import stream_pool_cached
from .grad_buffer import optimizer_tensor_elems
from .lora import adapter_params_rank, frozen_weight_bytes
from .mamba import hybrid_params_rank
from .model_states import rank_state_bytes
from .offload import offload
from .param_tensors import rank_linear_weight_elems, rank_tensors
from .runtime_memory import OUTSIDE_ALLOCATOR, runtime_terms
from .shapes import block_kinds, dense_block_scenario, layer_shape
from .softmax_backward_peak import softmax_backward_beyond
from .state_rounding import megatron_state_rounding_bytes

if TYPE_CHECKING:
    from trainsim.specs import ModelSpec, Scenario, TrainingSpec

    from .model_states import StateBytes
    from .shapes import LayerShape

GiB = 1 << 30
MiB = 1 << 20
# Detail entries that explain the activations (not separate memory).
ACTIVATION_DETAILS = ("activations_per_microbatch", "recompute_working")


@dataclass(frozen=True)
class StageMemory:
    """Peak bytes on one GPU of a pipeline stage, by component; ``host`` is offloaded host memory.

    ``pcie_h2d_bytes`` / ``pcie_d2h_bytes`` are per optimizer step (offload traffic the engine times).
    ``details`` names the pieces of ``other`` and ``activations`` (bytes).
    """

    weights: float
    grads: float
    optimizer: float
    activations: float
    other: float
    host: float = 0.0
    pcie_h2d_bytes: float = 0.0
    pcie_d2h_bytes: float = 0.0
    inflight_microbatches: float = 0.0
    details: dict = field(default_factory=dict, compare=False, hash=False)
    # The caching allocator's cached-but-free bytes at this stage's reserved peak, beyond ``allocated``
    # (allocator_reserve.py); not in ``total``: the allocator frees them before it would run out of memory.
    allocator_cached: float = 0.0
    # Gradient bytes of ``grads`` that do not exist at the peak (freed before the forward, re-created after the
    # activation peak; allocator_reserve.grads_off_peak): not in ``total``, in ``allocator_cached``.
    grads_off_peak: float = 0.0
    # Cached bytes Megatron-Core DDP's start-up frees that the step's cached blocks leave unused
    # (``ddp_param_remap_bytes``): segments a later request can still take (``reserved_cached``).
    cache_slack: float = 0.0
    # FSDP's side-stream pools' reserved bytes beyond what is counted (fsdp_stream_pools.py): in ``allocator_cached``.
    stream_pools: float = 0.0

    @property
    def model_states(self) -> float:
        return self.weights + self.grads + self.optimizer

    @property
    def total(self) -> float:
        """Device bytes (host excluded): what nvidia-smi shows at the peak, allocator fragmentation aside."""
        return self.weights + self.grads - self.grads_off_peak + self.optimizer + self.activations + self.other

    @property
    def allocated(self) -> float:
        """Peak bytes the caching allocator hands out (torch.cuda.max_memory_allocated): ``total`` less the
        CUDA context and NCCL's own buffers."""
        return self.total - sum(self.details.get(k, 0.0) for k in OUTSIDE_ALLOCATOR)

    @property
    def other_terms(self) -> dict[str, float]:
        """The named pieces of ``other`` (bytes)."""
        return {k: v for k, v in self.details.items() if k not in ACTIVATION_DETAILS}


@dataclass(frozen=True)
class RankParams:
    """Parameter counts on one rank of a stage: held (TP/PP/EP-sharded) and after ZeRO sharding."""

    dense: float             # replicated over the DP×CP group
    expert: float            # replicated over the expert-data-parallel group
    weight_params: float     # weights stored on the device after ZeRO-3 sharding
    grad_params: float       # gradients stored after ZeRO-2 sharding
    optimizer_params: float  # parameters whose optimizer states this rank holds (ZeRO-1)
    unit_params: float       # largest FSDP unit (block / embedding / head) held unsharded during use
    root_params: float = 0.0   # the stage's embedding / norm / output layer: FSDP2's root unit (fsdp2_peak.py)
    block_params: float = 0.0  # the largest block: FSDP2's per-block unit
    frozen_params: float = 0.0  # LoRA: the frozen base parameters held besides (no gradient, no optimizer state)

    @property
    def held(self) -> float:
        return self.dense + self.expert


def model_state_bytes(params: float, zero: int, dp: int, *, param_bytes: int = 2, grad_bytes: int = 2,
                      optimizer_bytes: int = 12) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per device for ``params`` replicated over ``dp`` ranks (ZeRO Sec. 5)."""
    w = params * param_bytes / (dp if zero >= 3 else 1)
    g = params * grad_bytes / (dp if zero >= 2 else 1)
    o = params * optimizer_bytes / (dp if zero >= 1 else 1)
    return w, g, o


def layer_params_per_rank(model: ModelSpec, tp: int, ep: int, etp: int | None = None) -> tuple[float, float]:
    """(dense, expert) parameters of one block on one rank: a MoE block for a MoE model (routed experts,
    router, shared expert), else a dense block (``model.dense_block()`` gives a MoE model's dense blocks)."""
    h = model.hidden
    if model.is_mla:
        # MLA: the up- and output projections are split over TP; the down-projections (query latent, key/value
        # latent + shared RoPE key) and the latents' norms are replicated (Megatron-Core MLASelfAttention).
        full = model.attention_params()
        a, qk, v = model.num_heads, model.qk_head_dim, model.v_dim
        ql, kvl = model.q_lora_rank, model.kv_lora_rank
        split = (ql * a * qk if ql else h * a * qk) + kvl * a * (model.dhead + v) + a * v * h
        attn = (full - split) + split / tp
    else:
        q, kv = model.num_heads * model.dhead, model.kv_heads * model.dhead
        qkv_bias = model.bias if model.qkv_bias is None else model.qkv_bias  # Qwen2: biases on q, k, v only
        attn = (h * q + 2 * h * kv + q * h) / tp + ((q + 2 * kv) / tp if qkv_bias else 0) + (h if model.bias else 0)
        attn += 2 * model.dhead if model.qk_norm else 0  # QK-norm weights, replicated over TP
        attn += model.num_heads / tp if model.attn_sinks else 0  # one sink logit per head, heads split over TP
    norms = model.block_norm_params()  # block_norms per block (Gemma 2/3: 4, Falcon-7B: 1)

    def mlp(f: int, split: int = tp, width: int = h) -> float:
        n_in = 2 if model.gated_mlp else 1
        return (n_in * width * f + f * width) / split + ((n_in * f / split + width) if model.bias else 0)

    if model.is_hybrid:  # the mean layer of a hybrid Mamba stack
        return hybrid_params_rank(model, attn, mlp, tp, ep, etp)
    if model.is_moe:
        shared = mlp(model.shared_expert_ffn) if model.shared_expert_ffn else 0.0
        return (attn + norms + model.router_params() + shared,  # the router is replicated over TP
                (model.num_experts / ep) * mlp(model.expert_ffn, etp or tp))
    return attn + norms + mlp(model.ffn), 0.0


def stage_extra_params(model: ModelSpec, tp: int, pp: int, stage: int,
                       loss_stage: int | None = None) -> float:
    """Embedding / positions (first stage), final norm and output layer (``loss_stage``, default the last
    stage; stage 0 for DualPipeV's V, where both ends share rank 0 but keep separate copies) on one rank."""
    h, V, e = model.hidden, model.vocab_size, model.embed_dim  # e: OPT's word_embed_proj_dim, else h
    proj = e * h if model.embed_proj_dim else 0  # OPT's project_in / project_out, replicated
    extra = 0.0
    if stage == 0:
        extra += V * e / tp + proj
        if model.position_embedding == "learned":
            extra += model.max_seq_len * h
    if stage == (pp - 1 if loss_stage is None else loss_stage):
        extra += model.norm_params() + proj
        if not model.tie_embeddings or pp > 1:
            extra += V * e / tp
        if model.mtp_layers and stage != 0:  # MTP embeds the shifted tokens with a copy of the word embedding
            extra += V * e / tp
    return extra


def mtp_params_per_rank(model: ModelSpec, tp: int, ep: int, etp: int | None = None) -> tuple[float, float]:
    """(dense, expert) parameters of the model's multi-token-prediction modules on one rank of the loss stage:
    per module a block like the model's own (MoE for a MoE model), the 2h->h projection (column-parallel) and
    three RMSNorm/LayerNorm weights (embedding, hidden state, output). The shared embedding and output layer
    are the last stage's own (``stage_extra_params`` keeps a word-embedding copy there when pp > 1). A hybrid
    stack's module holds its mtp_pattern's layers (ModelSpec.mtp_block), once with shared depths (mtp_shared)."""
    k = 0 if not model.mtp_layers else 1 if model.mtp_shared else model.mtp_layers
    if not k:
        return 0.0, 0.0
    block = model.mtp_block() if model.is_hybrid else model  # a hybrid block's figures are per layer: x layers
    per_block = layer_params_per_rank(block, tp, ep, etp)
    dense, expert = (x * block.num_layers if model.is_hybrid else x for x in per_block)
    h = model.hidden
    return k * (dense + 2 * h * h / tp + 3 * model.norm_params()), k * expert


def rank_param_shards(scenario: Scenario, stage: int) -> RankParams:
    """Parameters a rank of pipeline ``stage`` holds, and what it stores after ZeRO sharding."""
    m, lay, t = scenario.model, scenario.layout, scenario.training
    _check_stage(stage, lay.pp)
    dense_l, expert_l = layer_params_per_rank(m, lay.tp, lay.ep, lay.etp)
    L = scenario.layers_on_stage(stage)  # uneven stages: Scenario.stage_layers
    L_dense = scenario.dense_layers_on_stage(stage) if m.is_moe else 0  # first_dense_layers held here
    block_l = layer_params_per_rank(dense_block_scenario(scenario).model, lay.tp, 1)[0] if L_dense else 0.0
    extra = stage_extra_params(m, lay.tp, lay.pp, stage, scenario.loss_stage)
    dense = (L - L_dense) * dense_l + L_dense * block_l + extra
    expert = (L - L_dense) * expert_l
    if stage == scenario.loss_stage and m.mtp_layers:
        mtp_dense, mtp_expert = mtp_params_per_rank(m, lay.tp, lay.ep, lay.etp)
        dense, expert = dense + mtp_dense, expert + mtp_expert
    n_dense, n_exp = shard_groups(scenario)
    if t.lora_rank:  # LoRA: the adapters are the trained parameters, the base frozen (specs/lora.py refuses ZeRO-2/3)
        adapters = scenario.layers_on_stage(stage) * adapter_params_rank(layer_shape(scenario))
        return RankParams(dense=adapters, expert=0.0, weight_params=adapters, grad_params=adapters, unit_params=adapters,
                          optimizer_params=adapters / (n_dense if t.effective_zero else 1), frozen_params=dense + expert)
    z = t.effective_zero

    def shard(level: int) -> float:
        return (dense / n_dense + expert / n_exp) if z >= level else dense + expert

    unit = max(dense_l + expert_l, block_l, extra)
    return RankParams(dense=dense, expert=expert, weight_params=shard(3), grad_params=shard(2),
                      optimizer_params=shard(1), unit_params=unit, root_params=extra,
                      block_params=max(dense_l + expert_l, block_l))


def shard_groups(scenario: Scenario) -> tuple[int, float]:
    """Ranks ZeRO shards a rank's (dense, expert) model states over: the HSDP shard group (Layout.dp_shard, else
    all of dp) times cp, and the expert-data-parallel group."""
    lay = scenario.layout
    n_dense = scenario.dp_shard * lay.cp
    return n_dense, max(1.0, n_dense * lay.tp / (lay.ep * scenario.expert_tp))


def _check_stage(stage: int, pp: int) -> None:
    if not 0 <= stage < pp:
        raise SpecError("stage", f"stage {stage} is outside 0..{pp - 1}")


def inflight_microbatches(schedule: str, pp: int, m: int, stage: int, vpp: int = 1) -> float:
    """Micro-batches whose activations a stage holds at its peak, in units of the stage's whole layer set.

    GPipe: all ``m``. 1F1B and ZB-H1: ``min(pp - stage, m)`` (stage 0-indexed). Interleaved (Megatron):
    the warm-up of ``2·(pp - stage - 1) + (vpp - 1)·pp`` model-chunk forwards plus the one in steady state,
    capped at ``m·vpp``, each holding ``1/vpp`` of the stage's layers; stage 0 gets Korthikanti's
    ``pp·(1 + (pp-1)/(pp·vpp))``; with ``m == pp`` Megatron warms up with every forward, so all ``m``.
    """
    _check_stage(stage, pp)
    if schedule == "gpipe":
        return float(m)
    if schedule in ("1f1b", "zb"):
        return float(min(pp - stage, m))
    if schedule == "interleaved":
        if m == pp:  # Megatron runs all forwards first when there are only pp micro-batches
            return float(m)
        chunks = min(2 * (pp - stage - 1) + (vpp - 1) * pp + 1, m * vpp)
        return chunks / vpp
    if schedule == "dualpipev":
        # Every rank holds 2·pp + 1 chunk activations at its peak (DeepSeek-V3 Table 2: PP+1 with PP = 2·pp
        # virtual stages; pipeline_bubble.csv f_ds_DualPipe), each chunk half the rank's layers.
        return (2 * pp + 1) / 2
    raise SpecError("training.schedule", f"unknown schedule {schedule!r}")


_inflight = inflight_microbatches  # for stage_memory, whose argument of that name shadows the function


def offloaded_layers(scenario: Scenario) -> int:
    """Layers whose saved activations are offloaded to the host (``TrainingSpec.offload_activation_layers``).

    Transformer Engine's offload handler (Megatron-Core ``--cpu-offloading-num-layers N``) offloads the first
    N layers, copying them out during the forward and back during the backward behind the other layers'
    compute (``offload_windows``). specs.scenario allows it only where Megatron-Core does -- pp = 1 (so one
    chunk holds every layer), no recompute, N below the layer count -- so N is the count as given.
    """
    return scenario.training.offload_activation_layers


def offload_windows(layers: int, offloaded: int) -> list[int]:
    """Layers of compute each of the ``offloaded`` copies has to hide behind, in Transformer Engine's schedule.

    ``AsyncDoubleBufferGroupOffloadHandler.layer_window_map``: copy k must be done at the end of layer w_k, with
    w_k = (L//N)(k+1) - 1 plus the remainder spread over the first L%N copies; copy 0 starts after layer 0,
    copy k only when the compute stream has waited for copy k-1 at w_(k-1). So the windows are w_0 and
    w_k - w_(k-1) layers (the reloads in backward mirror them).
    """
    if not 0 < offloaded < layers:
        return []
    w, carry = [], 0
    for i in range(offloaded):
        wi = (layers // offloaded) * (i + 1) - 1
        if i < layers % offloaded:
            wi += i + 1
            carry = i + 1
        else:
            wi += carry
        w.append(wi)
    return [w[0]] + [b - a for a, b in pairwise(w)]


def activation_bytes_per_microbatch(scenario: Scenario, stage: int, impl: str = "fused") -> float:
    """Saved activations of one micro-batch on one rank of ``stage`` kept on the GPU: its blocks (but the
    offloaded ones) + embedding/head extras.

    ``impl``: ``"fused"`` (Megatron/TE kernels) or ``"eager"`` (plain torch autograd, as the executor runs).
    """
    _check_stage(stage, scenario.layout.pp)
    L, L_dense = scenario.layers_on_stage(stage), scenario.dense_layers_on_stage(stage)
    dense_scn = dense_block_scenario(scenario) if scenario.model.is_moe else scenario
    off = offloaded_layers(scenario)  # the first layers (pp = 1: all of them are here), dense ones first
    off_dense = min(off, L_dense)
    total = (L - L_dense - (off - off_dense)) * act.layer_activation_bytes(scenario, impl).total
    if L_dense:
        total += (L_dense - off_dense) * act.layer_activation_bytes(dense_scn, impl).total
    if stage == 0:
        total += act.embedding_activation_bytes(scenario)
    if stage == scenario.loss_stage:
        total += act.head_activation_bytes(scenario, impl)
        if scenario.model.mtp_layers:
            total += scenario.model.mtp_layers * act.mtp_activation_bytes(scenario, impl)
    lay = scenario.layout
    if lay.pp > 1 and behaviour(scenario.training.framework).pipeline_output_kept:
        # each of the stage's ``vpp`` model chunks keeps its output, but the one that ends in the loss
        chunks = lay.vpp - (1 if stage == scenario.loss_stage else 0)
        total += chunks * act.pipeline_output_bytes(scenario)
    return total


def largest_weight_tensor_params(model: ModelSpec, tp: int = 1, ep: int = 1, etp: int | None = None) -> float:
    """Elements of the largest weight matrix of a block on one rank (fused QKV, one MLP projection or a Mamba
    in_proj; a MoE model's dense blocks and shared expert included)."""
    h = model.hidden
    qkv = h * (model.num_heads + 2 * model.kv_heads) * model.dhead / tp
    if model.is_mla:
        qkv = max(h * (model.kv_lora_rank + model.qk_rope_head_dim),
                  (model.q_lora_rank or h) * model.num_heads * model.qk_head_dim / tp)
    experts = model.expert_ffn * model.expert_width / (etp or tp) if model.is_moe else 0.0
    ffns = [0 if model.is_moe else model.ffn, model.shared_expert_ffn or 0, model.ffn if model.first_dense_layers else 0]
    mamba = h * model.mamba_in_proj / tp if "M" in (model.hybrid_pattern or "") else 0.0  # a hybrid Mamba in_proj
    return float(max(qkv, experts, max(ffns) * h / tp, h * model.num_heads * model.v_dim / tp, mamba))


def stage_memory(scenario: Scenario, stage: int, inflight_microbatches: float | None = None,
                 impl: str = "fused") -> StageMemory:
    """Peak device bytes per component on one GPU of pipeline ``stage`` (plus host bytes and PCIe traffic).

    ``inflight_microbatches`` overrides the schedule's count (the engine's memory timeline knows better);
    ``impl`` as in ``activation_bytes_per_microbatch``. Kept per scenario object while it lives: the planner's
    memory check, the cost table's step context and predict's memory report ask for the same stages.
    """
    return _STAGE_MEMORY(scenario, stage, inflight_microbatches, impl)


def _stage_memory(scenario: Scenario, stage: int, inflight_microbatches: float | None, impl: str) -> StageMemory:
    lay, t = scenario.layout, scenario.training
    rp = rank_param_shards(scenario, stage)
    if inflight_microbatches is None:
        inflight_microbatches = _inflight(t.schedule, lay.pp, scenario.num_microbatches, stage, lay.vpp)
    sb = rank_state_bytes(scenario, stage)
    off = offload(scenario, rp, sb, model_states(t, rp, sb))
    fp8_delta, fp8_copies = fp8_weights.rank_weight_terms(scenario, stage, rp)  # TE's quantized weights
    off = replace(off, weights=off.weights + fp8_delta) if fp8_delta else off

    per_mb = activation_bytes_per_microbatch(scenario, stage, impl)
    host = off.host + inflight_microbatches * offloaded_layers(scenario) * act.layer_activation_bytes(scenario, impl).total
    # One block at a time is recomputed: the larger of the stage's block kinds.
    working = max(act.recompute_working_bytes(scn, impl) for scn, _ in block_kinds(scenario))
    activations = inflight_microbatches * per_mb + working

    fsdp2 = activation_peak(scenario, stage, rp, working) if fsdp2_applies(scenario) else None
    casts = autocast_cast_params(scenario, stage, rp) if t.autocast else None
    details: dict[str, float] = {"activations_per_microbatch": per_mb, "recompute_working": working,
                                 **runtime_terms(scenario, stage),
                                 **transient_terms(scenario, stage, rp, working, fsdp2, casts),
                                 **off.device, **({"fp8_weight_copies": fp8_copies} if fp8_copies else {})}
    rounding = megatron_state_rounding_bytes(scenario, stage, optimizer_params=rp.optimizer_params)
    if rounding:
        details["state_rounding"] = rounding
    deferred = _autocast_deferred(scenario, stage, casts, inflight_microbatches, per_mb)
    deferred_beyond = max(0.0, deferred - activations - details.get("logits_workspace", 0.0))
    # A later micro-batch's backward end outgrows the activation peak (autocast.py, mechanism 4).
    if deferred_beyond:
        details["autocast_deferred_grads"] = deferred_beyond
    if softmax_peak := softmax_backward_beyond(scenario, stage, rp, details):  # softmax_backward_peak.py
        details["softmax_backward_peak"] = softmax_peak
    off_peak = grads_off_peak(framework=t.framework, zero=t.effective_zero, microbatches=scenario.num_microbatches,
                              grads=off.grads, activations=activations)
    moment = fsdp2_moment(fsdp2, rp, details, activations, off_peak)
    if moment and moment[1]:
        details["fsdp2_phase_peak"] = moment[1]
    cast = reduce_cast_bytes(scenario, rp)
    cast_beyond = max(0.0, cast - activations)  # the reduce runs after the last backward: activations freed
    if cast_beyond:
        details["grad_reduce_cast"] = cast_beyond
    # Megatron-Core DDP's construction, before the first step: beyond the step's own allocated peak.
    step_allocated = off.weights + off.grads + off.optimizer + activations + sum(
        v for k, v in details.items() if k not in ACTIVATION_DETAILS + OUTSIDE_ALLOCATOR)
    trained_weights = off.weights - rp.frozen_params * frozen_weight_bytes(t)  # DDP's buffers hold trained ones only
    remap = max(0.0, ddp_param_remap_bytes(scenario, trained_weights, off.grads) - step_allocated)
    if remap:
        details["ddp_param_remap"] = remap
    other = sum(v for k, v in details.items() if k not in ACTIVATION_DETAILS)
    gathered = None if moment is None else fsdp2.phases.gather_outputs[moment[0]]
    pools = _stream_pools(scenario, stage, sb.grads, gathered)
    cached = _allocator_cached(scenario, stage, working) + cast - cast_beyond + off_peak + pools
    return StageMemory(weights=off.weights, grads=off.grads, optimizer=off.optimizer, activations=activations,
                       other=other, host=host, pcie_h2d_bytes=off.h2d, pcie_d2h_bytes=off.d2h,
                       inflight_microbatches=inflight_microbatches, details=details,
                       allocator_cached=max(0.0, cached - remap), grads_off_peak=off_peak,
                       cache_slack=max(0.0, remap - cached), stream_pools=pools)


_STAGE_MEMORY = IdentityMemo(_stage_memory)


def reserved_cached(scenario: Scenario, stage: int, sm: StageMemory,
                    impl: str = "fused") -> tuple[float, float, str]:
    """The caching allocator's cached-but-free bytes at ``stage``'s reserved peak: ``sm.allocator_cached`` plus
    what the optimizer states created at the first step add (first_step_fragmentation.py) beyond the start-up
    segments the step leaves unused (``sm.cache_slack``). Returns (cached bytes, the first step's part, the
    sentence the memory assumptions state). Apart from ``stage_memory`` because only the reserved and nvidia-smi
    counters need it, and its replay costs more than the rest of a stage's memory."""
    first_step, note = _first_step_reserved(scenario, stage, sm, impl)
    extra = max(0.0, first_step - sm.cache_slack)
    return sm.allocator_cached + extra, extra, note


def _first_step_reserved(scenario, stage: int, sm: StageMemory, impl: str) -> tuple[float, str]:
    """Reserved bytes the optimizer states created at the first step add on ``stage`` (first_step_fragmentation.py),
    and the sentence the memory assumptions state."""
    replayed = op_sac_trace.covers(scenario)  # the op-by-op replay holds the states
    per_element, note = op_sac_trace.states_note(scenario) if replayed else lazy_state_bytes(scenario.training)
    rp = rank_param_shards(scenario, stage)
    if per_element is None or not rp.optimizer_params:
        return 0.0, note
    extra = first_step_extra_reserved(scenario, stage, inflight=max(1, round(sm.inflight_microbatches)),
                                      layers=scenario.layers_on_stage(stage),
                                      param_elems=tuple(optimizer_tensor_elems(scenario, stage)),
                                      state_bytes=per_element, impl=impl)
    if extra is None:
        return 0.0, ("Adam's m, v created at the first step, not replayed: the caching-allocator trace does not "
                     "cover this block (MoE, MLA, per-op checkpointing, ring-CP K/V, QK-norm, LoRA or a hybrid "
                     "Mamba stack); the reserved figure leaves the first-step fragmentation out")
    return extra, note


def ddp_param_remap_bytes(scenario: Scenario, weights: float, grads: float) -> float:
    """Allocated bytes on one rank while Megatron-Core's DDP wrapper builds its buffers under the distributed
    optimizer (0 for every other setting): the 16-bit weights twice and the gradient buffer.

    ``_ParamAndGradBuffer.__init__`` (megatron/core/distributed/param_and_grad_buffer.py, NVIDIA/Megatron-LM @
    d98e8a64) allocates ``param_data`` -- only when ``use_distributed_optimizer`` ("Only re-map param tensors if
    using distributed optimizer") -- and ``grad_data`` with ``torch.zeros``, and only then points every
    parameter at its view of ``param_data``, copying its values and freeing the old storage (``old_param_data =
    param.data; param.data = new_param_data; ...; del old_param_data``). So ``torch.cuda.max_memory_allocated``
    and the reserved counters record 2 x weights + grads before the optimizer exists (its fp32 main shard and
    Adam states come later: distrib_optimizer.py, the states at the first step). The freed storage stays in
    the caching allocator, where the step's tensors reuse it (``stage_memory`` takes the step's cached blocks
    from it); a device that cannot hold this fails at start-up.
    """
    t = scenario.training
    if behaviour(t.framework).megatron_ddp != "core" or t.effective_zero != 1 or t.optimizer == "muon":  # DistOpt DDP
        return 0.0
    return 2.0 * weights + grads


def reduce_cast_bytes(scenario: Scenario, rp: RankParams) -> float:
    """The 16-bit copy of the whole fp32 gradient that DeepSpeed's pipeline engine all-reduces under its
    BF16_Optimizer, on one rank (0 elsewhere).

    ``PipelineEngine._bf16_reduce_grads`` passes ``BF16_Optimizer.get_grads_for_reduction()`` -- one flat fp32
    gradient per parameter group (``fp32_groups_gradients_flat``) -- to ``buffered_allreduce_fallback``;
    ``allreduce_no_retain`` closes a bucket at the first tensor past ``MEMORY_OPT_ALLREDUCE_SIZE`` (5e8
    elements), so each group is one bucket, ``flatten`` of one tensor is a view, and ``allreduce_bucket`` casts
    it to ``communication_data_type`` -- bf16 when bf16 is enabled (engine.py, d14baad94 2021-11-26; fp32
    only from 261d63708 2023-03-30 to d56268f37 2023-04-25) -- a new tensor of ``param_bytes`` per held
    parameter (DeepSpeed 56c522386 "bf16+pipeline parallelism" #1801, 2022-04-19, and its branch of
    2022-02-28, 15293139f, through 08e0733e4, 2024-04-08, which reduces the 16-bit ``param.grad`` instead).

    The reduce runs after the last backward, when the activations are freed; their cached blocks, each a
    tensor-sized segment, cannot serve a request this large (allocator_reserve.py), so the copy takes a new
    segment: the reserved peak is the activation peak plus the copy, the allocated peak the larger of the two
    phases (``stage_memory``).
    """
    t = scenario.training
    if not (bf16_optimizer(t) and scenario.layout.pp > 1):  # the engine reduces even over a DP group of 1
        return 0.0
    return float(rp.held * t.param_bytes)


def _stream_pools(scenario, stage: int, reduce_bytes: int, gather_counted: float | None = None) -> float:
    """FSDP's side-stream pools' cached bytes on a rank of ``stage`` (fsdp_stream_pools.py): its units are the
    stage's embedding / output parameters (the root unit) and each block (the layer's TP/EP shard); under float8
    all-gather every block is gathered at the stage's average block bytes per parameter
    (fsdp2_peak.block_gather_bytes), dense and MoE blocks of a MoE stack alike."""
    m, lay = scenario.model, scenario.layout
    if getattr(scenario.cluster.gpu, "num_sms", None) is None:
        return 0.0
    layer = sum(layer_params_per_rank(m, lay.tp, lay.ep, lay.etp))
    n_dense = scenario.dense_layers_on_stage(stage) if m.is_moe else 0  # first_dense_layers, as rank_param_shards
    dense = layer_params_per_rank(dense_block_scenario(scenario).model, lay.tp, 1)[0] if n_dense else 0.0
    extra = stage_extra_params(m, lay.tp, lay.pp, stage, scenario.loss_stage)
    units = (((extra,) if extra else ()) + (dense,) * n_dense
             + (layer,) * (scenario.layers_on_stage(stage) - n_dense))
    pb = float(scenario.training.param_bytes)
    block_b = block_gather_bytes(scenario, stage) or pb
    per_unit = ((pb,) if extra else ()) + (block_b,) * (len(units) - (1 if extra else 0))
    return stream_pool_cached(scenario.training, units, shard_groups(scenario)[0], reduce_bytes,
                              scenario.num_microbatches, gather_counted, per_unit if block_b != pb else None)


def _allocator_cached(scenario, stage: int, working: float) -> float:
    """The caching allocator's cached-but-free bytes at the loss stage's peak (allocator_reserve.py), or the op-by-op
    replay's where it covers the step (op_sac_trace.py)."""
    if stage != scenario.loss_stage or getattr(scenario.cluster.gpu, "num_sms", None) is None:
        return 0.0
    if (replayed := op_sac_trace.op_sac_cached_bytes(scenario, shard_groups(scenario)[0])) is not None:
        return replayed
    shp = layer_shape(scenario)
    logits = shp.e * shp.tokens * -(-shp.vocab // shp.tp)
    return loss_stage_cached_bytes(working=working, loss_workspace=act.logits_workspace_bytes(scenario),
                                   logits_bytes=float(logits), eager_loss=shp.eager_ce, vocab=shp.vocab,
                                   ffn=max(shp.f, shp.fe))


def model_states(t: TrainingSpec, rp: RankParams, sb: StateBytes) -> dict[str, float]:
    """Weights, gradients and optimizer bytes on one rank after ZeRO sharding.

    FSDP below ZeRO-3 (SHARD_GRAD_OP = ZeRO-2): the fp32 parameters are still sharded (the FlatParameter's
    shard is the optimizer's) while the unsharded ``param_dtype`` copy stays between forward and backward
    (reshard_after_forward=False), so the weights are the full 16-bit copy plus the fp32 shard.
    """
    weights = rp.weight_params * sb.weights + rp.frozen_params * frozen_weight_bytes(t)
    if behaviour(t.framework).fp32_params and 1 <= t.effective_zero < 3 and sb.weights > t.param_bytes:
        weights = rp.held * t.param_bytes + rp.optimizer_params * sb.weights
    return {"weights": weights, "grads": rp.grad_params * sb.grads, "optimizer": rp.optimizer_params * sb.optimizer}


def transient_terms(scenario: Scenario, stage: int, rp: RankParams, working: float = 0.0,
                    fsdp2: Fsdp2Peak | None = None, casts: tuple | None = None) -> dict[str, float]:
    """Buffers that exist for part of the step but at its peak: ZeRO-3 gathered parameters and unsharded
    gradients, the loss's logits workspace, pipeline send/receive buffers, the sequence-parallel all-gather
    buffer.

    The logits workspace and the recompute ``working`` set never coexist: autograd runs the loss's backward,
    and frees its temporaries, before the last block's backward recomputes that block, so the workspace
    counts only beyond the working set (``stage_memory`` adds the working set to the activations). ``fsdp2``: FSDP2's
    moment at the activation peak, ``casts`` the rank's ``autocast_cast_params``, where the caller has them (worked
    out here otherwise)."""
    lay, t = scenario.layout, scenario.training
    fw = behaviour(t.framework)
    pb, gb = t.param_bytes, t.grad_bytes
    out: dict[str, float] = {}
    if t.effective_zero >= 3:
        if fw.zero3_gather == "tensor":
            # DeepSpeed: parameters are gathered tensor by tensor and at most stage3_max_live_parameters
            # stay gathered (but a tensor is never split); gradients leave in reduce buckets, while the
            # largest tensor's full gradient exists before its reduce.
            big = largest_weight_tensor_params(scenario.model, lay.tp, lay.ep, lay.etp)
            live = max(big, min(rp.unit_params, DEEPSPEED_MAX_LIVE_PARAMS))
            out["zero3_gather_buffers"] = live * pb + max(big, min(rp.unit_params, fw.reduce_bucket_params)) * gb
        elif fw.fsdp2:  # FSDP2: the root gathered once per pass, blocks double-buffered; or the loss's moment
            out["zero3_gather_buffers"] = (fsdp2 or activation_peak(scenario, stage, rp, working)).gathered
        elif fw.megatron_ddp == "core":  # Megatron-FSDP: layers double-buffered, the rest kept gathered
            out["zero3_gather_buffers"] = fp8_weights.megatron_fsdp_gathered(scenario, stage, rp)
        else:
            # FSDP: the unit in use and the prefetched next one unsharded, plus one unit's full gradient
            # before its reduce-scatter (twice while FSDP1's split backward concatenates the parameters'
            # gradients into the flat one: framework.fsdp_grad_prep).
            concat_copy = pb if fw.fsdp_grad_prep else 0  # the parameters' own 16-bit gradients beside the flat one
            out["zero3_gather_buffers"] = rp.unit_params * (2 * pb + gb + concat_copy)
    if stage == scenario.loss_stage:
        out["logits_workspace"] = max(0.0, act.logits_workspace_bytes(scenario) - working)
    if t.autocast:
        cast = (casts or autocast_cast_params(scenario, stage, rp))[0]
        out["autocast_weight_cache"] = autocast.weight_cast_cache_bytes(cast)
    if t.dtype == "nvfp4":
        # Transformer Engine's rowwise and columnwise NVFP4 copies of the rank's linear weights, quantized at the
        # step's first micro-batch and kept for the backward and the later micro-batches (nvfp4.py)
        out["nvfp4_weight_copies"] = nvfp4.weight_copy_bytes(rank_linear_weight_elems(scenario, stage))
    shp = layer_shape(scenario)
    if lay.pp > 1:
        out["pp_p2p_buffers"] = 2.0 * act.pipeline_output_bytes(shp)  # one send and one receive buffer
    out.update(megatron_global_buffer(scenario, shp))
    return out


def autocast_cast_params(scenario: Scenario, stage: int,
                         rp: RankParams | None = None) -> tuple[float, float, float]:
    """(cast, bias, output-layer) elements of ``stage``'s rank that torch.autocast casts to 16 bits and caches
    for the step (autocast.py): every linear weight and bias held, the output layer's weight among them."""
    rp = rp or rank_param_shards(scenario, stage)
    return autocast.cast_params(rank_tensors(scenario, stage), rp.held, loss=stage == scenario.loss_stage,
                                tied=scenario.model.tie_embeddings)


def _autocast_deferred(scenario, stage: int, casts: tuple | None, inflight: float, per_mb: float) -> float:
    """Bytes beside the model states and the weight-cast cache at the end of a later micro-batch's backward under
    torch.autocast (autocast.py, mechanism 4): the deferred gradient casts and the other in-flight micro-batches'
    activations; 0 where nothing is deferred. ``casts``: the rank's ``autocast_cast_params`` (None without
    autocast)."""
    t, m, lay = scenario.training, scenario.model, scenario.layout
    if casts is None or not autocast.defers_grad_casts(t.recompute, scenario.num_microbatches):
        return 0.0
    cast, _, head = casts
    largest = max(head, largest_weight_tensor_params(m, lay.tp, lay.ep, lay.etp))
    tied = head if (m.tie_embeddings and stage == 0 and stage == scenario.loss_stage) else 0.0
    return autocast.deferred_grad_cast_bytes(cast, largest, tied) + max(0.0, inflight - 1) * per_mb


def autocast_saved_weight_bytes(scenario: Scenario, stage: int) -> float:
    """16-bit weight copies one micro-batch's autograd graph saves under torch.autocast (0 without it): the
    cached casts, which a saved-tensor meter counting non-parameter storages sees in every micro-batch."""
    if not scenario.training.autocast:
        return 0.0
    cast, bias, head = autocast_cast_params(scenario, stage)
    return autocast.LOW_PRECISION_BYTES * autocast.saved_weight_cast_params(cast, bias, head,
                                                                            scenario.training.recompute)


def megatron_global_buffer(scenario: Scenario, shp: LayerShape) -> dict[str, float]:
    """Megatron's persistent "mpu" buffer (megatron/core/utils.py ``GlobalMemoryBuffer.get_tensor``: one tensor
    per name and dtype, reallocated only to grow, so it holds the largest request), named after its user.

    * ``sp_gather_buffer``: sequence parallelism gathers a column-parallel linear's input into it
      (tensor_parallel/layers.py): the full sequence of one micro-batch at the hidden width;
    * ``attention_scores_buffer``: unfused attention passes it to ``torch.baddbmm`` as the (ignored, beta=0)
      input of the raw scores, [b x heads/tp, sq, sk] (core/transformer/dot_product_attention.py
      ``matmul_input_buffer``); the scores themselves are a new tensor, so the buffer is memory of its own.
    """
    t, lay = scenario.training, scenario.layout
    if not behaviour(t.framework).global_memory_buffer:
        return {}
    sp = float(shp.e * shp.tokens * shp.h) if t.sequence_parallel and lay.tp > 1 else 0.0
    sq = shp.s / shp.cp
    scores = 0.0 if shp.flash else float(shp.e * shp.b * -(-shp.a // shp.tp) * sq * sq)
    if not (sp or scores):
        return {}
    return {"sp_gather_buffer" if sp >= scores else "attention_scores_buffer": max(sp, scores)}


def all_stage_memory(scenario: Scenario) -> list[StageMemory]:
    """stage_memory for every pipeline stage, first to last."""
    return [stage_memory(scenario, s) for s in range(scenario.layout.pp)]


def peak_bytes(scenario: Scenario) -> float:
    """Largest device total over the stages."""
    return max(sm.total for sm in all_stage_memory(scenario))
