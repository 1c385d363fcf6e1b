"""Layout (how ranks are split) and TrainingSpec (what one optimizer step does)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Recompute = Literal["none", "selective", "full"]
# Megatron-Core --recompute-modules (with --recompute-granularity selective): the parts of a block whose
# activations are dropped after the forward and recomputed before the backward.
RecomputeModule = Literal["core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act", "moe", "shared_experts"]
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act", "moe",
                                      "shared_experts")
Schedule = Literal["gpipe", "1f1b", "interleaved", "zb", "dualpipev"]
TrainDtype = Literal["bf16", "fp16", "fp8", "fp32"]
# The training framework: selects documented software-stack behaviours (gradient-reduction overlap,
# cross-entropy kernel, ZeRO-3 gather granularity), see trainsim/cost_models/framework.py.
Framework = Literal["megatron", "megatron-2021", "megatron-2022", "pytorch-fsdp", "deepspeed", "deepspeed-2021",
                    "torch"]

DEFAULT_PLACEMENT = ("tp", "cp", "ep", "dp", "pp")


class Layout(BaseModel):
    """Parallel degrees. ``dp=None`` means derive it from the GPU count.

    gpus = tp · cp · pp · dp; expert parallelism is carved out of the other ranks (as in Megatron-Core's MoE
    parallel folding): the experts are split over ``etp`` ranks (default tp) and ``ep`` must divide
    ``dp·cp·tp/etp``; it does not multiply the GPU count.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = Field(default=1, gt=0, le=1_000_000)
    pp: int = Field(default=1, gt=0, le=1_000_000)
    dp: int | None = Field(default=None, gt=0, le=10_000_000)
    cp: int = Field(default=1, gt=0, le=1_000_000)
    ep: int = Field(default=1, gt=0, le=1_000_000)
    vpp: int = Field(default=1, gt=0, le=10_000, description="model chunks per pipeline rank (interleaving)")
    etp: int | None = Field(default=None, gt=0, le=1_000_000, description="expert tensor parallelism (Megatron-Core "
                            "--expert-tensor-parallel-size): the experts' MLPs split over etp ranks; None = tp. With "
                            "etp < tp the expert-parallel group also spans tp/etp of the TP ranks (MoE parallel folding)")
    placement: tuple[str, ...] = Field(default=DEFAULT_PLACEMENT, description="innermost first")
    stage_layers: tuple[int, ...] | None = Field(
        default=None, description="transformer layers of each virtual pipeline stage, pp*vpp entries in model "
        "order (virtual stage = chunk*pp + stage), summing to num_layers; the embedding stays on the first, the "
        "loss on the last (Megatron-Core --pipeline-model-parallel-layout). None: even, or Megatron's split "
        "counting embedding and loss as layers")

    @model_validator(mode="after")
    def _check(self) -> Layout:
        if sorted(self.placement) != sorted(DEFAULT_PLACEMENT):
            raise ValueError(f"placement must order exactly {', '.join(DEFAULT_PLACEMENT)}")
        if self.stage_layers is not None:
            if len(self.stage_layers) != self.pp * self.vpp:
                raise ValueError(f"stage_layers has {len(self.stage_layers)} entries, pp*vpp = {self.pp * self.vpp}")
            if any(n < 0 for n in self.stage_layers):
                raise ValueError("stage_layers entries must be >= 0")
        return self

    @property
    def model_parallel(self) -> int:
        return self.tp * self.cp * self.pp


class TrainingSpec(BaseModel):
    """One optimizer step: batch, precision, memory-saving techniques and pipeline schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_len: int = Field(default=2048, gt=0, le=100_000_000)
    global_batch: int = Field(default=512, gt=0, le=1_000_000_000, description="sequences per step")
    micro_batch: int = Field(default=1, gt=0, le=1_000_000, description="sequences per pipeline replica")
    dtype: TrainDtype = "bf16"
    recompute: Recompute = "none"
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None, description="with recompute=selective: the modules recomputed (Megatron-Core --recompute-"
        "modules): core_attn (the attention core, Korthikanti's selective recompute; the default), mla_up_proj (MLA's "
        "up-projections and RoPE: the per-head q, k, v), layernorm (the two norms' outputs), mlp (a dense block's "
        "MLP), moe_act (the experts' activation function), moe (the whole MoE layer, its all-to-alls included), "
        "shared_experts")
    sequence_parallel: bool = False
    zero: int = Field(default=0, ge=0, le=3, description="ZeRO stage; 3 = FSDP full shard")
    distributed_optimizer: bool = Field(default=False, description="Megatron: optimizer states sharded over DP (= ZeRO-1)")
    schedule: Schedule = "1f1b"
    flash_attention: bool = True
    # FlashAttention generation of the fused kernel: 2 = FlashAttention-2 (the GPU presets' measured
    # attention_efficiency); 1 = first-generation kernels (FlashAttention v1, the Triton kernel of 2023
    # MPT/llm-foundry), which Dao 2023 (arXiv:2307.08691) reports about 2x slower than FlashAttention-2.
    flash_attention_version: Literal[1, 2] = 2
    dropout: bool = Field(default=False, description="dropout layers present (their masks are saved)")
    offload_optimizer: bool = False
    offload_params: bool = False
    offload_activation_layers: int = Field(
        default=0, ge=0, le=1_000_000, description="activation CPU offloading (Megatron-Core --cpu-offloading "
        "--cpu-offloading-num-layers, Transformer Engine's offload handler): the saved activations of the first "
        "this many transformer layers are copied to host memory during the forward and back before their "
        "backward, overlapped with the other layers' compute; needs pp=1 and recompute=none, as in Megatron-Core")
    optimizer_bytes_per_param: int = Field(default=12, gt=0, le=64, description="fp32 master + Adam m, v")
    grad_dtype_bytes: int = Field(default=0, ge=0, le=8, description="0 = same as dtype (fp32 for fp8)")
    param_dtype_bytes: int = Field(default=0, ge=0, le=8,
                                   description="bytes per stored weight; 0 = the dtype's (2 for bf16/fp16/fp8). "
                                               "torch AMP keeps fp32 weights (4) and casts per op")
    framework: Framework = Field(default="megatron", description="software stack whose documented behaviours "
                                 "apply (cost_models/framework.py)")
    host_issue: Literal["eager", "cuda_graphs", "compile"] = Field(
        default="eager", description="how the host issues each block's kernels (cost_models/host_issue.py): eager "
        "PyTorch (an aten dispatch per op, a launch per kernel), cuda_graphs (one graph launch per block and pass) "
        "or compile (torch.compile: one launch per kernel, no Python dispatch); a pass lasts at least its issue time")
    overlap_p2p: bool | None = Field(default=None, description="pipeline sends overlap compute (Megatron "
                                     "--overlap-p2p-communication); None = the framework's default")
    cp_comm: Literal["p2p", "allgather", "a2a"] = Field(
        default="p2p", description="context-parallel exchange (Megatron-Core/TE --cp-comm-type): p2p = ring "
        "passing K/V blocks, overlapped with attention; allgather = K/V all-gathered before attention and their "
        "gradients reduce-scattered after (Llama 3, arXiv:2407.21783 Sec. 3.3.2), exposed; a2a = all-to-all of "
        "Q/K/V and of the output between sequence and head sharding (DeepSpeed-Ulysses), exposed")
    ep_comm_overlap: bool = Field(
        default=False, description="MoE expert-parallel all-to-alls of one micro-batch overlapped with the compute of "
        "another (Megatron-Core --overlap-moe-expert-parallel-comm --delay-wgrad-compute, the combined 1F1B schedule; "
        "DualPipe's overlap): needs ep > 1, and pp = 1 or model chunks (interleaved, dualpipev)")
    tp_comm_overlap: bool = Field(default=False, description="Transformer Engine userbuffers overlap of the "
                                  "sequence-parallel all-gathers / reduce-scatters with their GEMMs (Megatron-Core "
                                  "--tp-comm-overlap, off by default; on in Megatron-Bridge performance recipes). "
                                  "Needs sequence_parallel")

    @model_validator(mode="after")
    def _check(self) -> TrainingSpec:
        if self.recompute_modules is not None:
            if self.recompute != "selective":
                raise ValueError("recompute_modules needs recompute=selective (Megatron-Core: --recompute-modules "
                                 "with --recompute-granularity selective)")
            if not self.recompute_modules:
                raise ValueError("recompute_modules is empty: use recompute=none")
            if len(set(self.recompute_modules)) != len(self.recompute_modules):
                raise ValueError("recompute_modules lists a module twice")
        if self.offload_params and self.zero != 3:
            raise ValueError("offload_params needs zero=3 (parameters must be sharded to be offloaded)")
        return self

    @property
    def selective_modules(self) -> frozenset[str]:
        """Modules recomputed under recompute=selective (core_attn unless recompute_modules says otherwise)."""
        if self.recompute != "selective":
            return frozenset()
        return frozenset(self.recompute_modules or ("core_attn",))

    @property
    def recompute_label(self) -> str:
        """``recompute`` for display, with the module list when one is given (e.g. ``selective (mla_up_proj, mlp)``)."""
        if self.recompute_modules:
            return f"{self.recompute} ({', '.join(self.recompute_modules)})"
        return self.recompute

    @property
    def effective_zero(self) -> int:
        """ZeRO stage with Megatron's distributed optimizer counted as stage 1."""
        return max(self.zero, 1 if self.distributed_optimizer else 0)

    @property
    def param_bytes(self) -> int:
        return self.param_dtype_bytes or (4 if self.dtype == "fp32" else 2)

    @property
    def grad_bytes(self) -> int:
        return self.grad_dtype_bytes or self.param_bytes
