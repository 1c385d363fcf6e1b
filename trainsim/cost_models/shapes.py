"""LayerShape: the few numbers of a scenario that per-layer costs depend on, as a hashable key.

Cost functions take a Scenario, extract this frozen dataclass once (cheap attribute reads, no pydantic
objects built) and cache their results on it, so the planner's millions of calls mostly hit caches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainsim.specs.fp8_library import resolved as resolved_fp8_library
from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import IdentityMemo

from .moe_balance import scenario_moe_load_factor

if TYPE_CHECKING:
    from trainsim.specs import Scenario

# Bytes per activation element for each training dtype. fp8 training (Transformer Engine) keeps
# activations in bf16 and casts GEMM operands to fp8 on the fly, so activations stay 2 bytes -- except the
# inputs TE's linears save for their weight-gradient GEMMs, which are saved already cast (activations.py).
DEFAULT_SELECTIVE = frozenset({"core_attn"})  # Megatron's selective recompute without --recompute-modules
ACT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "nvfp4": 2, "fp32": 4}  # nvfp4 as fp8 (nvfp4.py)


@dataclass(frozen=True)
class LayerShape:
    """One transformer block on one rank for one micro-batch (parallel degrees included)."""

    b: int            # micro-batch, sequences
    s: int            # full sequence length (tokens)
    h: int            # hidden size
    a: int            # attention (query) heads
    kv: int           # key/value heads (GQA); == a for MHA
    d: int            # head dim
    f: int            # dense MLP hidden
    gated: bool       # SwiGLU (two input projections) vs GeLU
    norm: str         # "layernorm" | "rmsnorm"
    rope: bool        # rotary position embedding applied to q and k
    bias: bool
    experts: int      # 1 = dense
    top_k: int
    fe: int           # expert MLP hidden
    vocab: int
    fs: int = 0       # shared-expert MLP hidden of a MoE block (0: none)
    lat: int = 0      # LatentMoE width the routed experts and the dispatcher see (ModelSpec.moe_latent_size; 0: h)
    # Multi-head latent attention (ModelSpec.kv_lora_rank); 0 = plain MHA/GQA. d is then the no-RoPE q/k dims.
    ql: int = 0       # query latent rank (0 with MLA: full-rank query projection)
    kvl: int = 0      # key/value latent rank
    dr: int = 0       # decoupled RoPE dims per head (q and the one shared RoPE key)
    dv: int = 0       # value dims per head (0: d)
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 0      # expert tensor parallelism (0: = tp)
    sp: bool = False  # Megatron sequence parallelism (norms/dropouts/residuals sharded over tp)
    dtype: str = "bf16"
    recompute: str = "none"
    rc_modules: frozenset = frozenset()  # recompute=selective: TrainingSpec.selective_modules
    compiled: bool = False  # blocks under torch.compile (TrainingSpec.compile): AOTAutograd's partitioner
    flash: bool = True
    dropout: bool = False
    softmax_fp32: bool = False  # unfused attention also saves fp32 probabilities (TrainingSpec.attention_softmax_fp32)
    causal: bool = True  # decoder LMs: a fused kernel skips the masked half (time only, not FLOP counts)
    megatron_softmax: bool = False  # unfused attention's softmax is Megatron's FusedScaleMaskSoftmax (flops.py)
    flash_version: int = 2  # FlashAttention generation (TrainingSpec.flash_attention_version)
    fused_ce: bool = False  # fused cross-entropy kernel (TrainingSpec.cross_entropy, else the framework's)
    eager_ce: bool = False  # torch's eager F.cross_entropy on an fp32 copy of the logits (TrainingSpec.cross_entropy)
    ce_logits_kept: bool = False  # the caller keeps the fp32 logits through the backward (cross_entropy eager_fp32_kept)
    autocast: bool = False  # fp32 weights under torch.autocast (TrainingSpec.autocast; cost_models/autocast.py)
    titan: bool = False  # a dense Llama block as torchtitan's eager model code runs it (_titan_block)
    titan_fused_norm: bool = False  # that block's norms as torchtitan's Triton fused_rmsnorm (TrainingSpec.titan_norm)
    titan_compiled: bool = False  # torchtitan's block under torch.compile (_titan_compiled; inductor_bytes.py)
    metric_ce_passes: int = 0  # no-grad cross-entropy forwards of train metrics (framework.py)
    bias_grad_pass: bool = False  # biases reduce their gradient in a separate kernel (framework.py)
    fp8_weight_casts: float = 1.0  # fp8 weight quantizations per micro-batch (1, or 1/m with TE's step cache)
    moe_weighted_act: bool = False  # MoE probabilities applied in the experts' SwiGLU (moe_probs_in_activation)
    mxfp8: bool = False  # fp8 under the MXFP8 recipe: saved linear inputs carry an e8m0 scale per 32 elements
    torchao_fp8: int = 0  # fp8 linears as torchao's Float8Linear: 1, 2 with FSDP2 float8 all-gather (torchao_float8.py)
    ao_recipe: str = ""  # that Float8Linear's recipe (TrainingSpec.fp8_recipe: tensorwise, rowwise, rowwise_with_gw_hp)
    norms: int = 2            # norm layers per block (ModelSpec.block_norms)
    qk_norm: bool = False     # RMSNorm on every query and key head (Qwen3, Gemma 3)
    window: int = 0           # sliding-window keys of the local blocks (0: none)
    local_frac: float = 0.0   # fraction of the model's blocks that are local (windowed)
    attn_softcap: bool = False   # attention logits soft-capped (Gemma 2)
    sinks: bool = False       # a learned sink logit per head in every softmax denominator (gpt-oss)
    glu_clamp: bool = False   # gpt-oss's clamped SwiGLU (ModelSpec.swiglu_limit)
    mcore_rope_eager: bool = False  # Megatron runs RoPE unfused (YaRN: Megatron-Bridge turns apply_rope_fusion off)
    mcore_experts: bool = False  # the experts run Megatron-Core's eager TEGroupedMLP path (megatron, no op fuser)
    a2a_sort: bool = False  # Megatron-Core's alltoall dispatcher: received tokens sorted by local expert and back
    fp32_probs: bool = False  # the experts get fp32 router probabilities (Megatron-Core's flex dispatcher)
    final_softcap: bool = False  # output logits soft-capped (Gemma 2)
    proj: int = 0             # word-embedding width projected to/from h (OPT word_embed_proj_dim; 0: none)
    moe_load: float = 1.0     # most loaded EP rank's tokens over the mean (moe_balance.py; 1 = even routing)
    te_cp_p2p: bool = False   # context parallelism by Transformer Engine's K/V ring (Megatron-Core, cp_comm p2p)
    lora_rank: int = 0        # LoRA adapters' rank (TrainingSpec.lora_rank; 0: full training, nothing frozen)
    lora_targets: frozenset = frozenset()  # the linears with adapters (TrainingSpec.lora_target_modules)
    # Hybrid stacks (ModelSpec.hybrid_pattern): the layer's kind, "M" / "*" / "-" / "E" (cost_models/mamba.py), "mix"
    # for a stack of several kinds (costed kind by kind: block_kinds), "" for a transformer block; Mamba-2 dims.
    kind: str = ""
    mh: int = 0               # Mamba heads H
    mp: int = 0               # Mamba head dim P
    mg: int = 0               # Mamba groups G
    mn: int = 0               # SSM state size N
    mconv: int = 0            # causal conv1d width
    mchunk: int = 1           # SSD chunk length Q

    @property
    def e(self) -> int:
        """Bytes per activation element."""
        return ACT_BYTES.get(self.dtype, 2)

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def xw(self) -> int:
        """Width of the routed tokens: dispatched, run through the experts and combined (LatentMoE: its latent)."""
        return self.lat or self.h

    @property
    def xtp(self) -> int:
        """Ranks each expert's MLP is split over (Layout.etp, default tp)."""
        return self.etp or self.tp

    @property
    def routed_tokens(self) -> int:
        """Expert token-copies the most loaded rank computes per micro-batch: its TP group's T tokens x top_k
        are spread over the tp/etp ranks of the folded expert group (T·k with etp = tp), times ``moe_load``
        (routing imbalance, moe_balance.py; exactly the balanced count at 1)."""
        mean = self.tokens * self.top_k * self.xtp // self.tp
        return mean if self.moe_load == 1.0 else round(mean * self.moe_load)

    @property
    def mla(self) -> bool:
        return self.kvl > 0

    @property
    def dqk(self) -> int:
        """Query/key dims per head in the scores (MLA: d + dr)."""
        return self.d + self.dr

    @property
    def dvh(self) -> int:
        """Value / attention-output dims per head."""
        return self.dv or self.d

    @property
    def attn_keys(self) -> float:
        """Keys per query of a fused (flash) kernel, averaged over the model's blocks, in the full-matrix convention
        (``s`` for causal attention, whose masked half ``work_fraction`` removes): a local block's window kernel
        computes ``P_w = w(w+1)/2 + (s - w)·w`` query-key pairs of the causal ``s(s+1)/2``, so it counts
        ``s · P_w / P_s`` keys. With local and global blocks this is their mean (exact for whole-model FLOPs); the
        builder costs each pipeline chunk with its own local and global blocks."""
        s, w = self.s, self.window
        if not w or w >= s:
            return float(s)
        local = s * (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
        return self.local_frac * local + (1.0 - self.local_frac) * s

    @property
    def tokens(self) -> int:
        """Tokens a TP rank's GEMMs see per micro-batch: b·s/cp (TP replicates or all-gathers them)."""
        return self.b * self.s // self.cp

    @property
    def sp_div(self) -> int:
        """Divisor of the 'sequence region' (norms, dropouts, residuals): tp with SP, else 1."""
        return self.tp if self.sp else 1

    def recomputes(self, module: str) -> bool:
        """Whether recompute=selective re-runs ``module`` (TrainingSpec.recompute_modules)."""
        return self.recompute == "selective" and module in (self.rc_modules or DEFAULT_SELECTIVE)

    def unsharded(self) -> LayerShape:
        """The same block with no TP/CP/EP/SP: whole-model FLOP counts (model FLOPs) come from this."""
        return replace(self, tp=1, cp=1, ep=1, etp=0, sp=False, moe_load=1.0)




def _titan_code(m, t) -> bool:
    """Whether a block runs torchtitan's Llama model code: not where the scenario states fused block code
    (TrainingSpec.block_code), else torchtitan's code stated (block_code torchtitan: torch's FSDP1 running
    torchtitan's model) or a framework whose blocks are torchtitan's
    (framework_behaviour.FrameworkBehaviour.eager_llama_block), 16-bit parameters as FSDP2's MixedPrecisionPolicy
    casts them (no autocast; under torchao float8 only the linears change, Float8Linear, the rest of the block is
    the same code), flash SDPA, and the architecture that code implements (ModelSpec.plain_llama_block)."""
    if t.block_code == "fused":
        return False
    code = t.block_code == "torchtitan" or behaviour(t.framework).eager_llama_block
    sixteen_bit = t.dtype in ("bf16", "fp16") or resolved_fp8_library(t) == "torchao"
    return code and not t.autocast and sixteen_bit and t.flash_attention and m.plain_llama_block


def _titan_block(m, t) -> bool:
    """Whether torchtitan's block code runs eagerly (activations.py ``impl="titan"``): not compiled (AOTAutograd's
    partitioner saves the fused set, tests/test_compile_oracle.py; ``host_issue: compile`` issues Inductor's fused
    kernels, not the eager op chains of titan_ops.py)."""
    return _titan_code(m, t) and not t.compile and t.host_issue != "compile"


def _titan_compiled(m, t) -> bool:
    """Whether torchtitan's block code runs under torch.compile (``compile``, or ``host_issue: compile``, which
    issues Inductor's kernels): Inductor's bytes for its RoPE and norms (cost_models/inductor_bytes.py). Its
    Triton fused_rmsnorm does not compile (TrainingSpec refuses the pair)."""
    return _titan_code(m, t) and (t.compile or t.host_issue == "compile")


def _hybrid_kind(m) -> str:
    """LayerShape.kind of a model: its one hybrid layer kind, "mix" for several, "" without a pattern."""
    if not m.is_hybrid:
        return ""
    kinds = set(m.hybrid_pattern)
    return next(iter(kinds)) if len(kinds) == 1 else "mix"


def _layer_shape(scenario) -> LayerShape:
    m, lay, t = scenario.model, scenario.layout, scenario.training
    kind, titan, ao = _hybrid_kind(m), _titan_block(m, t), resolved_fp8_library(t) == "torchao"
    moe = m.is_moe and kind in ("", "E", "mix")
    return LayerShape(
        b=t.micro_batch, s=t.seq_len, h=m.hidden, a=m.num_heads, kv=m.kv_heads, d=m.dhead, f=m.ffn,
        gated=m.gated_mlp, norm=m.norm, rope=m.position_embedding == "rope", bias=m.bias,
        experts=m.num_experts if moe else 1, top_k=m.top_k if moe else 1, fe=m.expert_ffn, vocab=m.vocab_size,
        fs=(m.shared_expert_ffn or 0) if moe else 0, lat=(m.moe_latent_size or 0) if moe else 0,
        ql=m.q_lora_rank or 0, kvl=m.kv_lora_rank or 0, dr=m.qk_rope_head_dim or 0,
        dv=(m.v_head_dim or 0) if m.is_mla else 0,
        tp=lay.tp, cp=lay.cp, ep=lay.ep, etp=(lay.etp or 0) if moe else 0, sp=t.sequence_parallel, dtype=t.dtype, recompute=t.recompute,
        rc_modules=t.selective_modules,
        compiled=t.compile,
        flash=t.flash_attention, dropout=t.dropout, flash_version=t.flash_attention_version,
        softmax_fp32=t.attention_softmax_fp32 and not t.flash_attention,
        megatron_softmax=behaviour(t.framework).megatron_arguments,
        fused_ce=(t.cross_entropy == "fused" if t.cross_entropy
                  else behaviour(t.framework).fused_cross_entropy),
        eager_ce=(t.cross_entropy in ("eager_fp32", "eager_fp32_kept") if t.cross_entropy
                  else behaviour(t.framework).eager_fp32_cross_entropy and not behaviour(t.framework).fused_cross_entropy),
        ce_logits_kept=t.cross_entropy == "eager_fp32_kept",
        autocast=t.autocast,
        titan=titan, titan_fused_norm=titan and t.titan_norm == "fused_rmsnorm", titan_compiled=_titan_compiled(m, t),
        metric_ce_passes=behaviour(t.framework).train_metric_loss_passes,
        bias_grad_pass=m.bias and not behaviour(t.framework).fused_bias_grad,
        fp8_weight_casts=(0.0 if t.lora_fp8_base_weights else 1.0 / scenario.num_microbatches
                          if behaviour(t.framework).fp8_weight_cache else 1.0),
        mxfp8=t.dtype == "fp8" and t.fp8_recipe == "mxfp8",
        torchao_fp8=(1 + t.float8_all_gather) if ao else 0, ao_recipe=t.fp8_recipe if ao else "",
        moe_weighted_act=m.is_moe and m.gated_mlp and behaviour(t.framework).moe_probs_in_activation,
        norms=m.block_norms, qk_norm=m.qk_norm, window=m.sliding_window or 0,
        local_frac=(1.0 - m.num_global_layers / m.num_layers) if m.sliding_window else 0.0,
        attn_softcap=m.attn_softcap is not None, final_softcap=m.final_softcap is not None,
        sinks=m.attn_sinks, glu_clamp=m.swiglu_limit is not None,
        mcore_experts=t.framework == "megatron" and m.is_moe and not t.fused_grouped_mlp,
        a2a_sort=m.is_moe and t.moe_token_dispatcher == "alltoall",
        fp32_probs=m.is_moe and t.moe_token_dispatcher == "flex",
        mcore_rope_eager=t.framework == "megatron" and m.rope_yarn,
        proj=m.embed_proj_dim or 0, moe_load=scenario_moe_load_factor(scenario),
        te_cp_p2p=t.framework == "megatron" and lay.cp > 1 and t.cp_exchange == "p2p",
        lora_rank=t.lora_rank, lora_targets=frozenset(t.lora_target_modules) if t.lora_rank else frozenset(),
        kind=kind, mh=m.mamba_nheads if kind else 0, mp=m.mamba_head_dim if kind else 0,
        mg=m.mamba_groups if kind else 0, mn=m.mamba_state_dim if kind else 0,
        mconv=m.mamba_conv_kernel if kind else 0, mchunk=m.mamba_chunk_size if kind else 1,
    )


_layer_shape_memo = IdentityMemo(_layer_shape)


def layer_shape(scenario: Scenario) -> LayerShape:
    """The LayerShape of a resolved Scenario (no validation here: the Scenario is already valid)."""
    return _layer_shape_memo(scenario)


def as_layer_shape(scenario_or_shape: Scenario | LayerShape) -> LayerShape:
    """A LayerShape as is, or the LayerShape of a Scenario: the cost functions take either."""
    if isinstance(scenario_or_shape, LayerShape):
        return scenario_or_shape
    return layer_shape(scenario_or_shape)


_dense_block_memo = IdentityMemo(lambda scenario: scenario.dense_block())


def dense_block_scenario(scenario: Scenario):
    """``Scenario.dense_block()``, memoised per scenario object: the scenario whose block costs are those of
    a MoE model's dense blocks (its first_dense_layers)."""
    return _dense_block_memo(scenario)


_hybrid_kinds_memo = IdentityMemo(lambda scenario: tuple(
    (scenario.model_copy(update={"model": scenario.model.hybrid_kind(k)}), n)
    for k, n in scenario.model.hybrid_counts().items()))


_mtp_kinds_memo = IdentityMemo(lambda scenario: block_kinds(
    scenario.model_copy(update={"model": scenario.model.mtp_block()})))


def mtp_kinds(scenario: Scenario) -> tuple[tuple[object, int], ...]:
    """(scenario to cost one layer with, layers of that kind in one MTP depth) of a hybrid stack's mtp_pattern."""
    return _mtp_kinds_memo(scenario)


def block_kinds(scenario: Scenario) -> tuple[tuple[object, int], ...]:
    """(scenario to cost one block with, number of such blocks in the model): one entry for a dense model or a
    MoE model without dense blocks; MoE blocks and dense blocks for a model with ``first_dense_layers``; one entry
    per layer kind of a hybrid stack (ModelSpec.hybrid_kind)."""
    m = scenario.model
    if m.is_hybrid:
        return _hybrid_kinds_memo(scenario)
    if not m.is_moe or not m.first_dense_layers:
        return ((scenario, m.num_layers),)
    return ((scenario, m.num_moe_layers), (dense_block_scenario(scenario), m.num_dense_layers))
