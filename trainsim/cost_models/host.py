"""Host (CPU) time to issue one MoE block's kernels in eager Megatron-Core: op counts and seconds per pass.

Fine-grained MoE layers can make the host the bottleneck in eager execution -- Megatron-Core's alltoall dispatcher
blocks the host once per MoE layer forward (``d2h_event.synchronize()`` before the dispatch all-to-all; DeepEP and
dropless HybridEP wait likewise), so the host cannot queue more than a layer ahead, and Transformer Engine's
GroupedLinear (before TE 2.14) launches one cuBLASLt GEMM per local expert from C++, with a quantize kernel per
expert and input under FP8. When the host needs about as long to issue a block as the GPU needs to run it, the GPU
idles (measured: Qwen3-30B-A3B on H100 at micro-batch 1, 623 -> 484 ms per iteration with attention, router and
dispatch graphed; Megatron-Bridge docs/training/cuda-graphs.md). cost_models.moe_issue puts these seconds in the
step of a Megatron-Core MoE model with the sync's exposure rule (cost_models.hybrid_issue: a hybrid Mamba stack's
layers). docs/validation.md ("host-bound fine-grained MoE") has the reading.

Counts per transformer block and micro-batch (read from Megatron-Core and TE, BF16, router and permute fusion on;
estimates to within ~30 %):

* Python-dispatched ops (each a torch/TE call with autograd): the attention half -- fused norm + QKV, q/k norms,
  RoPE, fused attention, out-projection, residual -- 15 forward, 25 backward; the MoE layer without its expert
  GEMMs -- router GEMM, top-k, aux loss, dispatch preprocess and its device-to-host copies, permute, two
  all-to-alls, chunk sort, SwiGLU, unsort, unpermute -- 45 forward, 40 backward; a dense MLP 6 forward, 10 backward.
* Per local expert, launched in TE's C++ loop: 2 GEMMs forward (fc1, fc2), 4 backward (dgrad and wgrad of each);
  under fp8 one quantize kernel per expert for each GEMM input (2 forward, 2 backward; MXFP8's count -- FP8 current
  scaling launches three per input); nvfp4 is given the same count (TE's grouped NVFP4 quantize; its per-tensor
  path launches amax, rowwise and RHT-columnwise kernels, which is not costed here).

Host seconds per op (``HOST_OP_S``, ``HOST_LOOP_OP_S``): Transformer Engine issue #2053 timed the CPU side of one BF16
``torch.nn.Linear`` forward at 13.5 us on a Xeon Platinum 8480C and 33-37 us on Grace (GB200/GH200); a launch from
TE's C++ loop (descriptor set-up, heuristic query, ``cudaLaunchKernel``) is taken at 5 us on x86 and the same 2.6x
on Grace.
"""

from __future__ import annotations

from dataclasses import dataclass

from .shapes import LayerShape

HOST_OP_S = {"x86": 13.5e-6, "grace": 35e-6}
HOST_LOOP_OP_S = {"x86": 5e-6, "grace": 13e-6}
ATTN_OPS = (15, 25)          # (forward, backward) Python-dispatched ops of the attention half
MOE_OPS = (45, 40)           # ... of a MoE layer without its expert GEMMs
MLP_OPS = (6, 10)            # ... of a dense (or shared-expert) MLP
EXPERT_GEMMS = (2, 4)        # GEMM launches per local expert
EXPERT_QUANTIZE = (2, 2)     # fp8: quantize kernels per local expert


@dataclass(frozen=True)
class MoeHostPasses:
    """Host work of one MoE block per micro-batch by pass: (Python-dispatched ops, per-expert launches) of the
    forward and of the backward (a recomputed forward included), and each pass's seconds; ``resync``: the backward
    re-runs the MoE layer's forward (recompute), so its dispatcher syncs the host there too."""

    fwd_ops: tuple[int, int]
    bwd_ops: tuple[int, int]
    fwd_s: float
    bwd_s: float
    resync: bool

    @property
    def python_ops(self) -> int:
        return self.fwd_ops[0] + self.bwd_ops[0]

    @property
    def loop_ops(self) -> int:
        return self.fwd_ops[1] + self.bwd_ops[1]

    @property
    def seconds(self) -> float:
        return self.fwd_s + self.bwd_s


def moe_reruns(shp: LayerShape) -> tuple[bool, bool]:
    """(the MoE layer's forward, the shared expert's forward) re-run in the backward: the MoE layer (with its shared
    expert) under full recompute or the 'moe' module, the shared expert alone under 'shared_experts'."""
    rerun_moe = shp.recompute == "full" or shp.recomputes("moe")
    return rerun_moe, bool(shp.fs) and (rerun_moe or shp.recomputes("shared_experts"))


def expert_launches(shp: LayerShape, rerun_moe: bool) -> tuple[int, int]:
    """(forward, backward) kernels the routed experts launch from TE's C++ loop on one rank per micro-batch: each
    local expert's GEMMs and, under fp8 / nvfp4, its quantize kernels; a recomputed MoE forward's again in the
    backward."""
    quant = shp.dtype in ("fp8", "nvfp4")
    per_f = EXPERT_GEMMS[0] + (EXPERT_QUANTIZE[0] if quant else 0)
    per_b = EXPERT_GEMMS[1] + (EXPERT_QUANTIZE[1] if quant else 0) + (per_f if rerun_moe else 0)
    local = max(1, shp.experts // shp.ep)
    return local * per_f, local * per_b


def moe_block_host_passes(shp: LayerShape, host_cpu: str = "x86") -> MoeHostPasses:
    """Host work of one MoE block (attention half + MoE layer, a shared expert included) by pass; ``host_cpu`` is
    ClusterSpec.host_cpu. A recomputed forward issues its ops again in the backward: everything under full
    recompute, the MoE layer (with its shared expert) under the 'moe' module, the shared expert under
    'shared_experts'."""
    if not shp.is_moe:
        raise ValueError("moe_block_host_passes needs a MoE block")
    fwd_py = ATTN_OPS[0] + MOE_OPS[0] + (MLP_OPS[0] if shp.fs else 0)
    bwd_py = ATTN_OPS[1] + MOE_OPS[1] + (MLP_OPS[1] if shp.fs else 0)
    full = shp.recompute == "full"
    rerun_moe, rerun_shared = moe_reruns(shp)
    bwd_py += (ATTN_OPS[0] if full else 0) + (MOE_OPS[0] if rerun_moe else 0) + (MLP_OPS[0] if rerun_shared else 0)
    launch_f, launch_b = expert_launches(shp, rerun_moe)
    fwd, bwd = (fwd_py, launch_f), (bwd_py, launch_b)
    op, loop = HOST_OP_S[host_cpu], HOST_LOOP_OP_S[host_cpu]
    return MoeHostPasses(fwd, bwd, fwd[0] * op + fwd[1] * loop, bwd[0] * op + bwd[1] * loop, rerun_moe)

