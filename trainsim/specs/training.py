"""TrainingSpec: what one optimizer step does (precision, batch, schedule, recompute, sharding, overlaps...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, model_validator

from . import partial_distopt
from .errors import SpecError
from .fp8_library import Fp8Library
from .fp8_library import refusal as fp8_library_refusal
from .framework_behaviour import BEHAVIOURS, Framework
from .framework_era import era_refusal, feature_refusal
from .lora import DEFAULT_LORA_ALPHA, LORA_TARGETS, LoraTarget
from .lora import training_refusal as lora_refusal
from .optimizer_choice import MUON_NS_STEPS, muon_refusal
from .spec_config import SPEC_CONFIG

Recompute = Literal["none", "selective", "full"]
# Megatron-Core --recompute-modules (with --recompute-granularity selective): the parts of a block whose
# activations are dropped after the forward and recomputed before the backward.
# "op_sac" is torchtitan's per-op selective checkpointing policy (activation_checkpoint.mode="selective",
# selective_ac_option="op"; trainsim/cost_models/activations.py): frameworks torch / pytorch-fsdp, alone.
RecomputeModule = Literal["core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act", "moe", "shared_experts",
                          "op_sac"]
RECOMPUTE_MODULES: tuple[str, ...] = get_args(RecomputeModule)
Schedule = Literal["gpipe", "1f1b", "interleaved", "zb", "dualpipev"]
# nvfp4: Transformer Engine's NVFP4BlockScaling recipe under Megatron-Core (cost_models/nvfp4.py): the blocks' linear
# GEMMs on FP4 tensor cores, everything else as under fp8 (bf16 weights, fp32 master weights and Adam states).
TrainDtype = Literal["bf16", "fp16", "fp8", "nvfp4", "fp32"]
# Dtype of the gradients a rank accumulates and reduces (Megatron's main-grad buffer, FSDP's reduce dtype).
GradDtype = Literal["fp32", "bf16", "fp16"]
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# Bytes per gradient element a run can accumulate and reduce in: the widths of GradDtype (no framework trainsim
# models keeps fp8 gradients).
GRAD_WIDTHS = frozenset(DTYPE_BYTES[d] for d in get_args(GradDtype))

def default_cp_comm(framework: str) -> str:
    """The context-parallel exchange a framework runs when the scenario leaves ``cp_comm`` unset
    (FrameworkBehaviour.default_cp_comm). DeepSpeed's Ulysses (a2a) is asked for by name (specs/framework_era.py
    refuses a ring there)."""
    return BEHAVIOURS[framework].default_cp_comm


class TrainingSpec(BaseModel):
    """One optimizer step: batch, precision, memory-saving techniques and pipeline schedule."""

    model_config = SPEC_CONFIG

    seq_len: int = Field(default=2048, gt=0, le=100_000_000)
    global_batch: int = Field(default=512, gt=0, le=1_000_000_000, description="sequences per step")
    micro_batch: int = Field(default=1, gt=0, le=1_000_000, description="sequences per pipeline replica")
    dtype: TrainDtype = Field(
        default="bf16", description="compute precision: bf16, fp16, fp32; fp8 = Transformer Engine's fp8 GEMMs in the "
        "blocks' linears; nvfp4 = Transformer Engine's NVFP4BlockScaling recipe (Megatron-Core --fp4-format e2m1 "
        "--fp4-recipe nvfp4: fprop, dgrad and wgrad of every block linear on FP4 tensor cores, bf16 parameters, fp32 "
        "master weights; cost_models/nvfp4.py), framework megatron on a GPU with an fp4 peak (Blackwell)")
    recompute: Recompute = "none"
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None, description="with recompute=selective: the modules recomputed (Megatron-Core --recompute-"
        "modules): core_attn (the attention core, Korthikanti's selective recompute; the default), mla_up_proj (MLA's "
        "up-projections and RoPE: the per-head q, k, v), layernorm (the two norms' outputs), mlp (a dense block's "
        "MLP), moe_act (the experts' activation function), moe (the whole MoE layer, its all-to-alls included), "
        "shared_experts -- framework megatron only; op_sac alone: torchtitan's per-op policy (frameworks torch, "
        "pytorch-fsdp)")
    sequence_parallel: bool = False
    zero: int = Field(default=0, ge=0, le=3, description="ZeRO stage; 3 = FSDP full shard")
    distributed_optimizer: bool = Field(default=False, description="Megatron: optimizer states sharded over DP (= ZeRO-1)")
    distributed_optimizer_instances: int = Field(
        default=1, ge=1, le=1_000_000, description="Megatron-Core's partial distributed optimizer "
        "(--num-distributed-optimizer-instances N): the DP group split into N instances of dp/N consecutive ranks; "
        "gradients reduce-scattered within the instance, then all-reduced across the N instances; updated "
        "parameters all-gathered within it; optimizer states and fp32 main params sharded over dp/N ranks and "
        "replicated N times (specs/partial_distopt.py). 1..1e6, dividing dp with dp/N >= 2; N > 1 needs "
        "framework megatron, distributed_optimizer true, zero <= 1")
    schedule: Schedule = "1f1b"
    flash_attention: bool = True
    # FlashAttention generation of the fused kernel: 2 = FlashAttention-2 (the GPU presets' measured
    # attention_efficiency); 1 = first-generation kernels (FlashAttention v1, the Triton kernel of 2023
    # MPT/llm-foundry), which Dao 2023 (arXiv:2307.08691) reports about 2x slower than FlashAttention-2.
    flash_attention_version: Literal[1, 2] = 2
    dropout: bool = Field(default=False, description="dropout layers present (their masks are saved)")
    attention_softmax_fp32: bool = Field(
        default=False, description="unfused attention (flash_attention false) takes its softmax in fp32 and saves "
        "the fp32 probabilities besides their 16-bit cast for the value GEMM (fairseq MultiheadAttention: "
        "utils.softmax(x, dtype=float32) then type_as; Hugging Face eager attention: "
        "softmax(dtype=float32).to(dtype))")
    softmax_backward_keeps_input: bool = Field(
        default=False, description="the torch version's softmax backward keeps the softmax input as well as its "
        "output (torch <= 1.10: _softmax_backward_data(grad, output, dim, self), removed in torch 1.11 by "
        "pytorch/pytorch#65242); one more score-sized tensor at unfused attention's softmax backward "
        "(cost_models/softmax_backward_peak.py)")
    offload_optimizer: bool = False
    offload_params: bool = False
    offload_activation_layers: int = Field(
        default=0, ge=0, le=1_000_000, description="activation CPU offloading (Megatron-Core --cpu-offloading "
        "--cpu-offloading-num-layers, Transformer Engine's offload handler): the saved activations of the first "
        "this many transformer layers are copied to host memory during the forward and back before their "
        "backward, overlapped with the other layers' compute; needs pp=1 and recompute=none, as in Megatron-Core")
    optimizer_bytes_per_param: int = Field(default=12, gt=0, le=64, description="fp32 master + Adam m, v")
    optimizer: Literal["adam", "muon"] = Field(
        default="adam", description="the update rule: adam (AdamW, optimizer_bytes_per_param of state) or muon "
        "(Megatron-Core's emerging-optimizers Muon, cost_models/muon.py: every 2D hidden matrix -- attention "
        "projections, MLP and each expert's fc1/fc2, the router -- takes Nesterov momentum orthogonalised by "
        "Newton-Schulz in bf16 GEMMs, split per q/k/v for a fused linear_qkv and blockwise over TP; embeddings, "
        "output layer, norms and biases stay on AdamW; with distributed_optimizer the LayerWise distributed "
        "optimizer (dist_muon) assigns whole parameters to data-parallel ranks, all-reduces the gradients and "
        "all-gathers the updated parameters); framework megatron, bf16/fp8/fp32, zero <= 1")
    muon_tp_mode: Literal["blockwise", "duplicated"] = Field(
        default="blockwise", description="with optimizer muon, how a TP-sharded matrix is orthogonalised "
        "(Megatron-Core --muon-tp-mode): blockwise = each TP rank its own shard, no collective (Megatron-Bridge's "
        "recipes); duplicated = the fp32 momentum all-gathered over the TP group and the whole matrix iterated on "
        "every TP rank (Megatron-LM's default); distributed is not costed")
    muon_ns_steps: int = Field(
        default=MUON_NS_STEPS, ge=1, le=100, description="with optimizer muon: Newton-Schulz iterations per matrix and step "
        "(Megatron-Core --muon-num-ns-steps, default 5 as in Keller Jordan's Muon)")
    grad_dtype_bytes: int = Field(default=0, ge=0, le=8, description="bytes per gradient element: 2 (bf16/fp16) or "
                                  "4 (fp32), the widths of grad_dtype; 0 = from grad_dtype, else the framework's "
                                  "default (see grad_bytes)")
    grad_dtype: GradDtype | None = Field(
        default=None, description="dtype gradients are accumulated and reduced in (Megatron: fp32 = "
        "--accumulate-allreduce-grads-in-fp32, bf16 = --grad-reduce-in-bf16); None = the framework's default: fp32 "
        "for Megatron with bf16/fp8, else the parameters' dtype")
    master_weights: bool = Field(
        default=True, description="fp32 master weights in the optimizer (mixed precision). False = pure low-"
        "precision training (torchtune's default with dtype bf16): weights, gradients and Adam's m and v all in "
        "the training dtype, 2 + 2 + 4 bytes per parameter")
    optimizer_offload_fraction: float = Field(
        default=1.0, gt=0.0, le=1.0, description="with offload_optimizer: the share of the optimizer shard "
        "updated on the host (Megatron-Core --optimizer-offload-fraction, HybridDeviceOptimizer); the rest "
        "stays on the GPU")
    param_dtype_bytes: int = Field(default=0, ge=0, le=8,
                                   description="bytes per stored weight; 0 = the dtype's (2 for bf16/fp16/fp8). "
                                               "torch AMP keeps fp32 weights (4) and casts per op")
    mixed_precision: Literal["autocast", "param_dtype"] | None = Field(
        default=None, description="how fp32 weights (param_dtype_bytes 4) meet bf16/fp16 compute: autocast = "
        "torch.autocast around the step (casts per op, a bf16 copy of every weight cached for the step, an fp32 "
        "residual stream: cost_models/autocast.py); param_dtype = the weights are cast once per use by the "
        "framework (FSDP2 MixedPrecisionPolicy, FSDP's mixed_precision); None = autocast for framework torch "
        "below ZeRO-3 with fp32 weights and a bf16/fp16 dtype, else param_dtype")
    block_code: Literal["fused", "torchtitan"] | None = Field(
        default=None, description="whose block code saves the activations: fused = fused norms and SwiGLU "
        "(Megatron/Transformer Engine, compiled blocks); torchtitan = torchtitan's eager Llama block (fp32 copies "
        "of the RMSNorm input, repeat_kv copies of k and v, SwiGLU saving 4 ffn-wide tensors, TP linears saving "
        "their all-gathered input; cost_models/activations.py impl titan; framework torch, or pytorch-fsdp running "
        "torchtitan's model as torchtitan's FSDP1 wrapper of early 2024 did); None = torchtitan "
        "for framework torch where its code applies (ModelSpec.plain_llama_block, bf16/fp16, flash SDPA, neither "
        "compiled nor under autocast), else fused")
    titan_norm: Literal["rmsnorm", "fused_rmsnorm"] = Field(
        default="rmsnorm", description="torchtitan's model.norm_type, where a block runs torchtitan's eager Llama "
        "code (block_code): rmsnorm = its RMSNorm class, an aten chain in fp32 (8 kernels forward, 16 backward, "
        "the fp32 input copy saved; cost_models/titan_ops.py); fused_rmsnorm = its Triton TritonFusedRMSNorm (one "
        "kernel forward, the input and rstd saved; torchtitan/models/norms.py until PR #826 of 2025-02, the "
        "norm_type of its 7B, 8B and 13B train_configs at 1ea476e9f). Other blocks run a fused norm already")
    cross_entropy: Literal["fused", "vocab_parallel", "eager_fp32", "eager_fp32_kept"] | None = Field(
        default=None, description="how the loss runs: fused = one fused (or torch.compile'd) kernel that saves the "
        "16-bit logits and a logsumexp per token; vocab_parallel = Megatron's cross-entropy (in-place ops on an "
        "fp32 copy of the logits); eager_fp32 = torch's eager F.cross_entropy on an fp32 copy (torchtitan, "
        "trainsim execute); eager_fp32_kept = the same on fp32 logits the model returns and the "
        "caller keeps through the backward (torchtitan of early 2024; frameworks torch and pytorch-fsdp only); None = the framework's default (specs/framework_behaviour.py)")
    cuda_context_bytes: int = Field(
        default=0, ge=0, le=16 << 30, description="device bytes of the CUDA context as measured for the run's "
        "software stack (nvidia-smi after the first CUDA call, e.g. torch.ones(1).cuda()): module images loaded "
        "eagerly (before CUDA_MODULE_LOADING=LAZY became the default in CUDA 12.2) count here; 0 = derived from "
        "the GPU (cost_models/runtime_memory.py)")
    framework: Framework = Field(default="megatron", description="software stack whose documented behaviours "
                                 "apply (specs/framework_behaviour.py); the historic presets (-2021, -2022, -2023) refuse "
                                 "features their code predates and megatron-deepspeed what that fork lacks "
                                 "(specs/framework_era.py)")
    compile: bool = Field(
        default=False, description="the model's blocks run under torch.compile (torchtitan --training.compile): "
        "AOTAutograd's min_cut_rematerialization_partition (torch/_functorch/partitioners.py) keeps only the "
        "tensors the backward graph reads, so a matmul output that torchtitan's per-op SAC policy marks saved but "
        "no backward op reads (SwiGLU's down-projection output, and under sequence parallelism the MLP's "
        "reduce-scatter output) is not kept; without AC a compiled block keeps what fused kernels keep (norm "
        "inputs and outputs, the gate and up outputs and their product) and with full AC its input. Frameworks "
        "torch and pytorch-fsdp; refused with Megatron's selective module recompute and, with dtype fp8 or "
        "nvfp4, with op_sac under sequence parallelism (not measured). With host_issue eager the host issues the "
        "compiled kernels (host_issue compile: cost_models/compiled_issue.py)")
    fsdp_reduce_scatter_input: Literal["compute_stream", "reduce_scatter_stream"] | None = Field(
        default=None, description="where FSDP2 (framework torch) allocates each unit's unsharded reduce-scatter "
        "input: compute_stream (torch 2.5 on, pytorch/pytorch#129721) or reduce_scatter_stream (the FSDP2 of torch "
        "2.3-2.4, e.g. torchtitan PR #165), whose pool keeps those bytes reserved beside the activations' "
        "(cost_models/fsdp_stream_pools.py); None = compute_stream; framework torch only")
    fsdp_unsharded_after_forward: Literal["none", "root", "root_and_last_block"] | None = Field(
        default=None, description="the FSDP2 units (framework torch) left unsharded from their forward to their "
        "backward, so gathered while the loss runs: none (every unit resharded after forward: fully_shard("
        "reshard_after_forward=True) from torch 2.8 on, pytorch/pytorch#154704, as the executor builds), root (the "
        "FSDP2 of torch 2.3-2.7 never reshards the root unit after forward, pytorch/pytorch#131965) or "
        "root_and_last_block (also the last block, which torchtitan wraps with reshard_after_forward=False since "
        "its PR #165); None = none (cost_models/fsdp2_peak.py); framework torch with zero 3 only")
    host_issue: Literal["eager", "cuda_graphs", "compile"] = Field(
        default="eager", description="how the host issues each block's kernels (cost_models/host_issue.py): eager "
        "PyTorch (an aten dispatch per op, a launch per kernel), cuda_graphs (one graph launch per block and pass) "
        "or compile (torch.compile: one launch per Inductor kernel -- GEMMs, attention and one fused kernel per "
        "pointwise/norm region -- no Python dispatch; implied by compile: true); a pass lasts at least its issue time")
    overlap_p2p: bool | None = Field(default=None, description="pipeline sends overlap compute (Megatron "
                                     "--overlap-p2p-communication); None = the framework's default")
    cp_comm: Literal["p2p", "allgather", "a2a", "torch_allgather"] | None = Field(
        default=None, description="context-parallel exchange (Megatron-Core/TE --cp-comm-type): p2p = ring "
        "passing K/V blocks, overlapped with attention; allgather = K/V all-gathered before attention and their "
        "gradients reduce-scattered after (Llama 3, arXiv:2407.21783 Sec. 3.3.2), exposed; a2a = all-to-all of "
        "Q/K/V and of the output between sequence and head sharding (DeepSpeed-Ulysses), exposed; torch_allgather "
        "= torch context_parallel's all-gather rotation (framework torch only): one K/V all-gather behind the "
        "local block's attention, dK/dV passed in an fp32 ring. None = the framework's default: torch_allgather "
        "for torch (torch's _ContextParallelOptions.rotate_method, torchtitan's context_parallel_rotate_method "
        "'allgather'), else p2p (Megatron-Core's --cp-comm-type)")
    ep_comm_overlap: bool = Field(
        default=False, description="MoE expert-parallel all-to-alls of one micro-batch overlapped with the compute of "
        "another (Megatron-Core --overlap-moe-expert-parallel-comm --delay-wgrad-compute, the combined 1F1B schedule; "
        "DualPipe's overlap): needs ep > 1, and pp = 1 or model chunks (interleaved, dualpipev)")
    fused_grouped_mlp: bool = Field(
        default=False, description="MoE experts through Transformer Engine's op fuser (Megatron-Core "
        "use_transformer_engine_op_fuser, the cuteDSL fused grouped MLP): grouped fc1 and fc2 with their biases and the "
        "clamped GLU run inside TE ops, so the eager clamp and per-expert fc2-bias passes of TEGroupedMLP are not run "
        "(cost_models/flops.py); framework megatron")
    moe_token_dispatcher: Literal["alltoall", "flex"] | None = Field(
        default=None, description="Megatron-Core's MoE token dispatcher (--moe-token-dispatcher-type): alltoall = "
        "MoEAlltoAllTokenDispatcher, which with more than one local expert sorts the received tokens by local expert "
        "after the dispatch all-to-all and restores their order before the combine (sort_chunks_by_idxs: one more read "
        "and write of the routed tokens each way, forward and backward); flex = MoEFlexTokenDispatcher (DeepEP / "
        "HybridEP), which permutes once after its dispatch and hands the experts fp32 router probabilities (the eager "
        "per-expert bias pass of a biased expert MLP then runs in fp32, cost_models/mcore_experts.py). None = not "
        "stated: the permute and unpermute every dispatcher makes, no sort passes. The all-to-alls themselves are "
        "costed as NCCL all-to-alls either way; framework megatron")
    moe_imbalance: float | None = Field(
        default=None, ge=1.0, description="MoE routing imbalance: tokens of the most loaded "
        "expert-parallel rank over the mean (1 = even routing, at most ep); it scales the experts' GEMM time, the "
        "all-to-all bytes and the experts' activation memory (cost_models/moe_balance.py). None: from moe_load_cv "
        "and moe_capacity_factor")
    moe_load_cv: float = Field(
        default=0.0, ge=0.0, le=1.0, description="dropless MoE routing: coefficient of "
        "variation of the tokens per EP rank; the most loaded of ep ranks carries 1 + cv * E[max of ep standard "
        "normals] times the mean, so it needs ep > 1. 0 = even routing (the default: set the value measured on the run)")
    moe_capacity_factor: float | None = Field(
        default=None, gt=0.0, le=1000.0, description="token-dropping MoE routing (Megatron-"
        "Core --moe-expert-capacity-factor): an expert takes at most this many times its mean tokens, so the "
        "most loaded rank's factor is capped at it. None = dropless")
    overlap_grad_reduce: bool | None = Field(
        default=None, description="data-parallel gradient reduction overlapped with the backward pass (Megatron-Core "
        "--overlap-grad-reduce, DeepSpeed overlap_comm); False = every bucket reduced after the backward pass. "
        "None = the framework's default (specs/framework_behaviour.py); torch DDP/FSDP always overlap")
    dp_bucket_mb: float | None = Field(
        default=None, gt=0.0, le=1_000_000.0, description="data-parallel gradient bucket, MiB "
        "of gradients per reduction call (torch DDP bucket_cap_mb, default 25; Megatron-Core DDP bucket_size, "
        "default max(40M, 1M x dp) parameters; DeepSpeed reduce_bucket_size): sets the number of calls, each "
        "paying the collective's latency, and the last, exposed bucket. None = the framework's default. FSDP "
        "reduces per wrapped block and has no bucket. Frameworks put whole tensors in a bucket, so a chunk "
        "issues at most one call per parameter tensor however small the bucket (specs/data_parallel.py)")
    mics_hierarchical_gather: bool = Field(
        default=False, description="DeepSpeed-MiCS's hierarchical parameter all-gather (zero_optimization."
        "mics_hierarchical_params_gather, off by default): each gather first over the shard group's ranks of the same "
        "local index in the nodes it spans, then within each node (deepspeed/runtime/zero/mics.py); needs MiCS "
        "(framework deepspeed / deepspeed-2023, zero 3, layout.dp_shard) with a shard group of whole nodes, two or more")
    tp_comm_overlap: bool = Field(default=False, description="Transformer Engine userbuffers overlap of the "
                                  "sequence-parallel all-gathers / reduce-scatters with their GEMMs (Megatron-Core "
                                  "--tp-comm-overlap, off by default; on in Megatron-Bridge performance recipes). "
                                  "Needs sequence_parallel")
    lora_rank: int = Field(
        default=0, ge=0, le=65_536, description="LoRA fine-tuning (Megatron-Bridge PEFT, specs/lora.py): the rank "
        "of the low-rank adapters put beside each target linear; every base parameter is frozen (no weight "
        "gradient, main grad or optimizer state), the adapters are trained. 0 = full training. Framework "
        "megatron, zero 0/1, dense MHA/GQA models; a multiple of tp")
    lora_alpha: float = Field(
        default=DEFAULT_LORA_ALPHA, gt=0.0, le=1_000_000.0, description="LoRA scale numerator "
        "(output x alpha/rank); recorded, it costs nothing")
    lora_target_modules: tuple[LoraTarget, ...] = Field(
        default=LORA_TARGETS, description="with lora_rank: the linears that get adapters (Megatron-Bridge "
        "LoRA.target_modules; default all four)")
    lora_fp8_base_weights: bool = Field(
        default=False, description="with lora_rank and dtype fp8: the frozen base weights are held in fp8 only "
        "(Transformer Engine fp8 primary weights, fp8_model_init): 1 byte per base weight and no per-step weight "
        "quantization; else they are held in the parameter dtype")

    fp8_recipe: Literal["tensorwise", "mxfp8", "rowwise", "rowwise_with_gw_hp"] = Field(
        default="tensorwise", description="with dtype fp8: the scaling recipe -- tensorwise (one scale per tensor: "
        "Transformer Engine's delayed or current scaling, Megatron-Core --fp8-recipe delayed|tensorwise; torchao's "
        "default), mxfp8 (Transformer Engine: an e8m0 scale per 32 elements, Blackwell; sets the bytes of TE's "
        "quantized weight copies, cost_models/fp8_weights.py), or torchao's rowwise (a scale per row of every "
        "GEMM operand) and rowwise_with_gw_hp (rowwise, the weight-gradient GEMM in 16 bits) -- torchtitan "
        "--float8.recipe_name (cost_models/torchao_float8.py); each refused for the library that lacks it")
    fp8_library: Fp8Library = Field(
        default="auto", description="with dtype fp8: the library of the float8 linears -- transformer_engine, or "
        "torchao (Float8Linear with dynamic scaling, as torchtitan runs it: X, W and dY each take their own amax "
        "pass, W's forward amax reused by its backward re-cast, dY cast once for both backward GEMMs under "
        "tensorwise; recipes in fp8_recipe; cost_models/torchao_float8.py); auto = torchao for framework torch, "
        "transformer_engine elsewhere")
    float8_all_gather: bool = Field(
        default=False, description="torchao float8 under FSDP2 (zero 3): each float8 linear's weight shard is cast "
        "to float8 before the all-gather, which moves 1 byte per such weight element and leaves 1-byte gathered "
        "weights (torchtitan float8.enable_fsdp_float8_all_gather)")
    float8_precompute_scale: bool = Field(
        default=False, description="with float8_all_gather: the weights' amax computed once per step after the "
        "optimizer, one all-reduce for all of them (torchtitan float8.precompute_float8_dynamic_scale_for_fsdp); "
        "false: each shard cast computes its amax and all-reduces it")
    fp8_param_gather: bool = Field(
        default=False, description="with dtype fp8, framework megatron, master_weights and the distributed "
        "optimizer (distributed_optimizer or zero >= 1): fp8 primary weights (Megatron-Core "
        "--fp8-param-gather, TE quantized_model_init): the blocks' linear weights are held only quantized, no "
        "16-bit copy, the distributed optimizer keeping their fp32 main copy (cost_models/fp8_weights.py)")

    @model_validator(mode="after")
    def _check(self) -> TrainingSpec:
        if self.recompute_modules is not None:
            if self.recompute != "selective":
                raise SpecError("recompute_modules", "needs recompute=selective (Megatron-Core: --recompute-modules "
                                                     "with --recompute-granularity selective)")
            if not self.recompute_modules:
                raise SpecError("recompute_modules", "is empty: use recompute=none")
            if len(set(self.recompute_modules)) != len(self.recompute_modules):
                raise SpecError("recompute_modules", "lists a module twice")
            if "op_sac" in self.recompute_modules:
                self._check_op_sac()
            elif self.framework != "megatron":
                self._refuse_megatron_modules()
        if self.offload_params and self.zero != 3:
            raise SpecError("offload_params", "needs zero=3 (parameters must be sharded to be offloaded)")
        if self.dtype == "nvfp4":
            self._check_nvfp4()
        self._check_fp8_weights()
        self._check_conflicts()
        return self

    def _check_nvfp4(self) -> None:
        """nvfp4 is costed as Megatron-Core drives Transformer Engine's NVFP4BlockScaling recipe (Megatron-Bridge
        bf16_with_nvfp4_mixed: bf16 parameters, fp32 master weights; cost_models/nvfp4.py)."""
        if self.framework != "megatron":
            raise SpecError("dtype", f"nvfp4 is costed as Megatron-Core with Transformer Engine's NVFP4BlockScaling "
                                     f"recipe (--fp4-format e2m1 --fp4-recipe nvfp4, 2025); framework "
                                     f"{self.framework} does not run it: use framework megatron")
        if self.param_bytes != 2:
            raise SpecError("param_dtype_bytes", f"nvfp4 training keeps bf16 parameters (2 bytes) that Transformer "
                                                 f"Engine quantizes per step; got {self.param_bytes}")

    def _check_fp8_weights(self) -> None:
        """fp8_recipe and fp8_param_gather describe Transformer Engine fp8 training; fp8 primary weights are
        Megatron-Core's (--fp8-param-gather), whose distributed optimizer keeps the fp32 main copy."""
        if self.dtype != "fp8" and (self.fp8_param_gather or self.fp8_recipe != "tensorwise"):
            field = "fp8_param_gather" if self.fp8_param_gather else "fp8_recipe"
            raise SpecError(field, f"applies to dtype fp8 only (got dtype {self.dtype})")
        if self.fp8_param_gather and self.framework != "megatron":
            raise SpecError("fp8_param_gather", f"fp8 primary weights are costed as Megatron-Core's --fp8-param-gather "
                                                f"(framework megatron); framework {self.framework} does not run it")
        if self.fp8_param_gather and not self.master_weights:
            raise SpecError("fp8_param_gather", "fp8 primary weights need fp32 master weights (master_weights true): "
                                                "Megatron-Core updates the fp32 main copy and re-quantizes")
        if self.fp8_param_gather and self.effective_zero < 1:
            # Megatron-LM arguments.py: "--fp8-param-gather only supported with distributed optimizer, torch fsdp2,
            # megatron fsdp, or inference mode"
            raise SpecError("fp8_param_gather", "fp8 primary weights need the distributed optimizer or Megatron-FSDP "
                                                "(distributed_optimizer true or zero >= 1), as Megatron-LM asserts")

    def _check_op_sac(self) -> None:
        """torchtitan's per-op policy is a whole-block policy of torch's checkpoint API, not a Megatron module."""
        if len(self.recompute_modules or ()) > 1:
            raise SpecError("recompute_modules", "op_sac (torchtitan's per-op policy) replaces the module list; "
                             "list it alone")
        if not BEHAVIOURS[self.framework].torch_training_loop:
            raise SpecError("recompute_modules", f"op_sac is torchtitan's per-op policy (torch.utils.checkpoint); "
                             f"framework {self.framework} has no such policy: use framework torch or pytorch-fsdp")

    def _refuse_megatron_modules(self) -> None:
        """A Megatron module list is Megatron-Core's --recompute-modules (megatron/training/arguments.py, with
        --recompute-granularity selective): the Megatron-LM of megatron-2021/2022 and Megatron-DeepSpeed recompute
        the attention core under selective recompute with no module list (--recompute-activations), DeepSpeed's
        engine checkpoints what the model code wraps, and the torch frameworks' policy trainsim models is op_sac
        (specs/framework_era.py: a setting a framework's code lacks is refused, not priced)."""
        torch_loop = BEHAVIOURS[self.framework].torch_training_loop
        raise SpecError("recompute_modules", f"{', '.join(self.recompute_modules or ())}: a module list is "
                        f"Megatron-Core's --recompute-modules (framework megatron); framework {self.framework} has "
                        f"no such option: drop it (selective recompute then recomputes core_attn)"
                        f"{', list op_sac (torchtitan per-op policy)' if torch_loop else ''} or use framework megatron")

    def _check_compile(self) -> None:
        """torch.compile's saved tensors are measured (tests/test_compile_oracle.py) for no AC, full AC and op_sac."""
        if not BEHAVIOURS[self.framework].torch_training_loop:
            raise SpecError("compile", f"torch.compile of the model's blocks is a torch setting (framework torch or "
                             f"pytorch-fsdp), not {self.framework}")
        if self.recompute == "selective" and list(self.recompute_modules or ()) != ["op_sac"]:
            raise SpecError("compile", "with selective recompute only torchtitan's per-op policy "
                             "(recompute_modules [op_sac]) is modelled under torch.compile")
        if self.sequence_parallel and self.recompute == "selective" and self.dtype in ("fp8", "nvfp4"):
            raise SpecError("compile", f"op_sac with sequence parallelism under torch.compile is measured with "
                             f"16-bit and fp32 linears (tests/test_compile_oracle.py); with dtype {self.dtype} the "
                             f"tensor-parallel float8 linears' saved tensors are not")

    def _check_conflicts(self) -> None:
        """Settings that contradict each other or that the framework does not have: refused, never overridden."""
        self._check_precision()
        self._check_framework_features()
        self._check_values()
        self._check_inapplicable()
        if why := fp8_library_refusal(self):
            raise SpecError(*why)
        if why := lora_refusal(self):
            raise SpecError(*why)
        self._check_mixed_precision()
        self._check_distributed_optimizer()
        if why := partial_distopt.training_refusal(self):
            raise SpecError("distributed_optimizer_instances", why)
        if why := muon_refusal(self):
            raise SpecError(*why)
        why = era_refusal(self)  # a feature the historic preset's code did not have (specs/framework_era.py)
        if why:
            raise SpecError(re.match(r"\w+", why).group(), why)

    def _check_precision(self) -> None:
        """Gradient dtype, pure low-precision training and torch.compile settings that contradict each other."""
        if self.grad_dtype_bytes and self.grad_dtype_bytes not in GRAD_WIDTHS:
            raise SpecError("grad_dtype_bytes", f"{self.grad_dtype_bytes} is not a gradient width trainsim models "
                                                f"(one of {', '.join(map(str, sorted(GRAD_WIDTHS)))}, or 0 for the "
                                                "default)")
        if self.grad_dtype and self.grad_dtype_bytes and DTYPE_BYTES[self.grad_dtype] != self.grad_dtype_bytes:
            raise SpecError("grad_dtype", f"grad_dtype={self.grad_dtype} contradicts "
                                          f"grad_dtype_bytes={self.grad_dtype_bytes}")
        if not self.master_weights and self.dtype in ("fp32", "fp8", "nvfp4"):
            raise SpecError("master_weights", f"master_weights=false needs dtype bf16 or fp16 (pure low-precision "
                                              f"training), got {self.dtype}")
        if not self.master_weights and BEHAVIOURS[self.framework].deepspeed_engine:
            self._check_deepspeed_pure_bf16()
        if self.compile:
            self._check_compile()
        if self.titan_norm == "fused_rmsnorm" and (self.compile or self.host_issue == "compile"):
            raise SpecError("titan_norm", "torchtitan's fused_rmsnorm does not run under torch.compile (its "
                            "apply_compile raises NotImplementedError: 'fused_rmsnorm is not compatible with "
                            "torch.compile yet'): use titan_norm rmsnorm, or neither compile nor host_issue compile")

    def _check_framework_features(self) -> None:
        """Losses, block code, FSDP2 placement, Megatron-Core overlaps (and what TP overlap needs), fused experts and offloads the
        framework does not have."""
        if self.cross_entropy == "eager_fp32_kept" and not BEHAVIOURS[self.framework].torch_training_loop:
            # the caller of a torch model keeps the fp32 logits it returns (torchtitan PR #165's loss); Megatron's
            # GPT computes the loss inside the model with its vocab-parallel cross entropy
            # (megatron/core/tensor_parallel/cross_entropy.py), as Megatron-DeepSpeed's and DeepSpeed's GPT do
            raise SpecError("cross_entropy", f"eager_fp32_kept is a torch training loop's loss on fp32 logits the "
                             f"model returns (torchtitan); framework {self.framework} runs Megatron's vocab-parallel "
                             f"cross entropy inside the model: use framework torch or pytorch-fsdp, or another "
                             f"cross_entropy")
        if self.fsdp_reduce_scatter_input and not BEHAVIOURS[self.framework].fsdp2:
            raise SpecError("fsdp_reduce_scatter_input", f"it places FSDP2's reduce-scatter input (framework torch); "
                             f"framework {self.framework} has no FSDP2: drop it")
        if self.block_code == "torchtitan" and not BEHAVIOURS[self.framework].torch_fsdp:
            raise SpecError("block_code", f"torchtitan is torchtitan's eager Llama block under torch's FSDP "
                             f"(framework torch or pytorch-fsdp); framework {self.framework} runs its own block "
                             f"code: use framework torch or pytorch-fsdp, or block_code fused")
        if BEHAVIOURS[self.framework].no_mcore_overlap and self.tp_comm_overlap:
            torch_note = ("; torch's async TP (torchtitan enable_async_tensor_parallel) is not modelled"
                          if BEHAVIOURS[self.framework].torch_training_loop else "")
            raise SpecError("tp_comm_overlap", f"Transformer Engine's userbuffers overlap (Megatron-Core) is not in "
                                               f"framework {self.framework}, whose TP runs without it{torch_note}: use "
                                               f"framework megatron or drop it")
        if self.tp_comm_overlap and not self.sequence_parallel:
            # Megatron-LM arguments.py: "Tensor parallel communication/GEMM overlap can happen only when sequence
            # parallelism is enabled" (find_string id 2536926475); without it the setting would change nothing
            raise SpecError("tp_comm_overlap", "it overlaps the sequence-parallel all-gathers / reduce-scatters with "
                                               "their GEMMs: it needs sequence_parallel=true (and tp > 1), as "
                                               "Megatron-LM asserts")
        if BEHAVIOURS[self.framework].no_mcore_overlap and self.ep_comm_overlap:
            raise SpecError("ep_comm_overlap", f"Megatron-Core's combined 1F1B overlap is not in framework "
                                               f"{self.framework}, which has no expert-parallel overlap: use "
                                               f"framework megatron or drop it")
        if self.fused_grouped_mlp and self.framework != "megatron":
            raise SpecError("fused_grouped_mlp", f"Megatron-Core's TE op-fuser experts are not in framework "
                                                 f"{self.framework}: use framework megatron or drop it")
        if self.moe_token_dispatcher and self.framework != "megatron":
            raise SpecError("moe_token_dispatcher", f"it names a Megatron-Core token dispatcher, not in framework "
                                                    f"{self.framework}: use framework megatron or drop it")
        fsdp = BEHAVIOURS[self.framework].torch_fsdp
        if fsdp and self.offload_optimizer != self.offload_params:
            raise SpecError("offload_optimizer", "FSDP's CPU offload (CPUOffload / CPUOffloadPolicy) moves parameters, "
                                                 "gradients and the optimizer step to the host together: set "
                                                 "offload_params and offload_optimizer both")
        if self.offload_params and BEHAVIOURS[self.framework].megatron_arguments:
            raise SpecError("offload_params", "Megatron offloads the optimizer (--optimizer-cpu-offload), not the "
                                              "parameters: use offload_optimizer, or framework deepspeed for ZeRO-3 "
                                              "parameter offload")

    def _check_values(self) -> None:
        """Settings that contradict one another whatever the framework: MoE imbalance given twice, an offload
        fraction without offload, unfused-attention softmax settings with a flash kernel."""
        if self.moe_imbalance is not None and self.moe_load_cv:
            raise SpecError("moe_imbalance", "moe_imbalance (a measured factor) and moe_load_cv (a spread the factor "
                                             "is derived from) both given: set one")
        if self.optimizer_offload_fraction != 1.0 and not self.offload_optimizer:
            raise SpecError("optimizer_offload_fraction", "needs offload_optimizer=true")
        if self.attention_softmax_fp32 and self.flash_attention:
            raise SpecError("attention_softmax_fp32", "describes unfused attention's saved probabilities; a flash "
                                                      "kernel saves none: set flash_attention false")
        if self.softmax_backward_keeps_input and self.flash_attention:
            raise SpecError("softmax_backward_keeps_input", "describes unfused attention's softmax backward; a "
                                                            "flash kernel runs none: set flash_attention false")

    def _check_mixed_precision(self) -> None:
        """torch.autocast needs a torch training loop and fp32 weights under a bf16/fp16 dtype."""
        if self.mixed_precision == "autocast" and not BEHAVIOURS[self.framework].torch_training_loop:
            # Megatron and DeepSpeed cast the model once (Float16Module / the fp16 engine), never torch.autocast
            raise SpecError("mixed_precision", f"autocast is torch.autocast in a torch training loop; framework "
                             f"{self.framework} casts the model to 16 bits itself: use framework torch or "
                             f"pytorch-fsdp, or mixed_precision param_dtype")
        if self.mixed_precision == "autocast" and not (self.param_bytes == 4 and self.dtype in ("bf16", "fp16")):
            raise SpecError("mixed_precision", f"autocast casts fp32 weights (param_dtype_bytes 4) to a bf16/fp16 "
                             f"dtype; got {self.param_bytes}-byte weights and dtype {self.dtype}")

    def _check_inapplicable(self) -> None:
        """Settings the scenario's framework or its other settings leave nothing to act on: refused, naming why
        (each was accepted and changed nothing, or changed what the framework does not do)."""
        if self.optimizer_offload_fraction != 1.0 and self.framework != "megatron":
            # Megatron-Core's HybridDeviceOptimizer (--optimizer-offload-fraction); DeepSpeed's ZeRO-Offload and FSDP's
            # CPUOffload move the whole optimizer (DeepSpeed's partial offload_optimizer.ratio, ZeRO-3 Twin-Flow, is
            # not costed)
            raise SpecError("optimizer_offload_fraction", f"it is Megatron-Core's --optimizer-offload-fraction; "
                             f"framework {self.framework} offloads the whole optimizer as costed: drop it, or use "
                             f"framework megatron")
        if self.fsdp_unsharded_after_forward and not (BEHAVIOURS[self.framework].fsdp2 and self.effective_zero >= 3):
            raise SpecError("fsdp_unsharded_after_forward", f"it describes FSDP2 (framework torch, zero 3), which "
                            f"framework {self.framework} with zero {self.effective_zero} does not run: drop it")
        if self.fsdp_reduce_scatter_input and self.effective_zero < 3:
            raise SpecError("fsdp_reduce_scatter_input", f"it places FSDP2's reduce-scatter input, which zero "
                             f"{self.effective_zero} (no FSDP) does not have: set zero 3 or drop it")
        if self.cp_comm == "torch_allgather" and self.framework != "torch":
            raise SpecError("cp_comm", f"torch_allgather is torch context_parallel's rotation (framework torch); "
                             f"framework {self.framework} does not run it: use allgather, p2p or a2a")
        if self.softmax_backward_keeps_input and not BEHAVIOURS[self.framework].torch_training_loop:
            # Megatron's FusedScaleMaskSoftmax (Megatron-DeepSpeed's too) runs its own backward on the output only
            raise SpecError("softmax_backward_keeps_input", f"it describes torch's softmax backward; framework "
                            f"{self.framework}'s unfused attention is not costed as torch's softmax: drop it")
        if self.host_issue == "compile" and not BEHAVIOURS[self.framework].torch_training_loop:
            raise SpecError("host_issue", f"compile is torch.compile's kernel issue, refused like compile: true outside "
                            f"a torch training loop; trainsim does not model compiling framework {self.framework}'s "
                            f"blocks: use eager or cuda_graphs")
        if self.flash_attention_version == 1 and not self.flash_attention:
            raise SpecError("flash_attention_version", "a FlashAttention generation needs flash_attention=true")
        if (self.distributed_optimizer and BEHAVIOURS[self.framework].deepspeed_optimizer
                and feature_refusal(self.framework, "distributed_optimizer", True) is None):  # else by its date
            # DeepSpeed shards optimizer states with its ZeRO stage 1 (deepspeed/runtime/zero/stage_1_and_2.py); it has
            # no Megatron DistributedOptimizer (specs/framework_era.py)
            raise SpecError("distributed_optimizer", f"Megatron's DistributedOptimizer is not in framework "
                             f"{self.framework}, which shards optimizer states with ZeRO stage 1: set zero 1 instead")

    def _check_deepspeed_pure_bf16(self) -> None:
        """DeepSpeed keeps an fp32 master partition (ZeRO's single_partition_of_fp32_groups, BF16_Optimizer's fp32
        groups) unless bf16.bf16_master_weights_and_grads (with bf16_optimizer_states) is set
        (deepspeedai/DeepSpeed PR #7700): a bf16 master partition, gradients and Adam states, which
        deepspeed/runtime/config.py asserts only with ZeRO stage 1, 2 or 3 (read_file id 51845822457)."""
        if not BEHAVIOURS[self.framework].bf16_master_weights:
            raise SpecError("master_weights", f"framework {self.framework} keeps fp32 master weights (DeepSpeed's "
                             "bf16 master weights, bf16_master_weights_and_grads, came with deepspeedai/DeepSpeed PR "
                             "#7700, after this code): use framework deepspeed, or master_weights true")
        if self.dtype != "bf16":
            raise SpecError("master_weights", f"DeepSpeed drops fp32 master weights only for bf16 "
                             f"(bf16_master_weights_and_grads), not dtype {self.dtype}")
        if self.effective_zero == 0:
            raise SpecError("master_weights", "DeepSpeed's bf16_master_weights_and_grads is a ZeRO stage 1-3 setting "
                             "(deepspeed/runtime/config.py asserts it): set zero 1, 2 or 3")
        if self.grad_bytes != 2:
            raise SpecError("master_weights", "DeepSpeed's bf16_master_weights_and_grads keeps the gradients in bf16: "
                             "drop grad_dtype / grad_dtype_bytes")

    def _check_distributed_optimizer(self) -> None:
        """Megatron-Core's DistributedOptimizer where the framework has it, and what needs it."""
        if self.distributed_optimizer and BEHAVIOURS[self.framework].torch_training_loop:
            # Megatron-LM arguments.py: "--use-torch-fsdp2 is not supported with MCore's distributed optimizer"
            raise SpecError("distributed_optimizer", f"Megatron-Core's DistributedOptimizer is not in framework "
                                                     f"{self.framework}: use zero 1 (torch's ZeroRedundancyOptimizer) "
                                                     f"or zero 3 (FSDP) instead")
        if self.offload_optimizer and self.framework == "megatron" and self.effective_zero == 0:
            # Megatron-LM arguments.py asserts --optimizer-cpu-offload needs --use-precision-aware-optimizer, and
            # megatron/core/optimizer/__init__.py get_megatron_optimizer raises "--use-precision-aware-optimizer
            # only supported with distributed optimizer" (commit d98e8a64)
            raise SpecError("offload_optimizer", "under framework megatron (--optimizer-cpu-offload) it needs the "
                                                 "distributed optimizer, as Megatron-Core requires: set "
                                                 "distributed_optimizer=true")

    @property
    def optimizer_sharding_note(self) -> str | None:
        """The stated resolution of ``distributed_optimizer`` beside ZeRO stage 2 or 3 (None otherwise): the
        distributed optimizer's optimizer-state sharding (ZeRO-1) is part of the higher stage, which is what is
        costed; under Megatron that stage is Megatron-FSDP's --data-parallel-sharding-strategy (optim_grads,
        optim_grads_params), which runs on the DistributedOptimizer (Megatron-LM arguments.py)."""
        if not (self.distributed_optimizer and self.zero >= 2):
            return None
        how = ""
        if BEHAVIOURS[self.framework].megatron_arguments:
            how = f" (Megatron-FSDP {'optim_grads' if self.zero == 2 else 'optim_grads_params'} on the distributed optimizer)"
        return (f"distributed_optimizer with zero {self.zero}: costed as ZeRO-{self.zero}{how}, which includes the "
                f"distributed optimizer's sharding of the optimizer states")

    @property
    def cp_exchange(self) -> str:
        """The context-parallel exchange costed: ``cp_comm`` as given, else the framework's (default_cp_comm)."""
        return self.cp_comm or default_cp_comm(self.framework)

    @property
    def host_issue_mode(self) -> str:
        """How the host issues the blocks' kernels (cost_models.host_issue): ``compile`` implies torch.compile's
        fused kernels where ``host_issue`` is left eager; CUDA graphs stay graphs."""
        return "compile" if self.compile and self.host_issue == "eager" else self.host_issue

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
        """ZeRO stage with Megatron's distributed optimizer counted as stage 1 (predict prints this one; an
        explicit ``--zero 0`` beside the distributed optimizer is refused: zero_conflict)."""
        return max(self.zero, 1 if self.distributed_optimizer else 0)

    @property
    def autocast(self) -> bool:
        """Whether compute runs under ``torch.autocast`` on fp32 weights (``mixed_precision``; its default:
        framework torch, fp32 weights, a bf16/fp16 dtype, no ZeRO-3/FSDP2 whose MixedPrecisionPolicy casts the
        gathered parameters instead)."""
        if self.mixed_precision is not None:
            return self.mixed_precision == "autocast"
        return (self.framework == "torch" and self.param_bytes == 4 and self.dtype in ("bf16", "fp16")
                and self.effective_zero < 3)

    @property
    def param_bytes(self) -> int:
        return self.param_dtype_bytes or (4 if self.dtype == "fp32" else 2)

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element as accumulated and reduced: ``grad_dtype_bytes``, ``grad_dtype``, or the
        framework's default (fp32 main grads for Megatron with bf16/fp8,
        FrameworkBehaviour.megatron_arguments: fp8 and nvfp4 runs keep bf16 parameters, with fp16 the buffer is fp16; else the
        parameters' dtype; pure low-precision training keeps them in the training dtype)."""
        if self.grad_dtype_bytes:
            return self.grad_dtype_bytes
        if self.grad_dtype:
            return DTYPE_BYTES[self.grad_dtype]
        if self.master_weights and BEHAVIOURS[self.framework].megatron_arguments and self.dtype in ("bf16", "fp8",
                                                                                                  "nvfp4"):
            return 4
        return self.param_bytes

    @property
    def grad_dtype_name(self) -> str:
        """The gradient dtype for display (fp32, bf16/fp16, or ``N-byte``)."""
        names = {4: "fp32", 2: "fp16" if self.dtype == "fp16" else "bf16", 1: "fp8", 8: "fp64"}
        return names.get(self.grad_bytes, f"{self.grad_bytes}-byte")


def zero_conflict(zero: int | None, training: Mapping[str, Any]) -> str | None:
    """Why an explicitly requested ZeRO stage contradicts ``training`` (None when it does not).

    ``zero=0`` beside ``distributed_optimizer: true`` asks for replicated optimizer states while the
    distributed optimizer shards them (ZeRO-1); a spec cannot tell a default 0 from a requested one, so the
    command line and scenario loaders ask this with the value as given."""
    if zero == 0 and training.get("distributed_optimizer"):
        return ("zero 0 contradicts distributed_optimizer: true, which shards the optimizer states over data "
                "parallelism (ZeRO-1): drop one of them")
    return None
