"""What LoRA fine-tuning (TrainingSpec.lora_rank; specs/lora.py) changes in a block's ops: frozen base weights
and the adapters' own kernels.

Frozen base (Megatron-Bridge PEFT freezes every base parameter): the forward of every base GEMM is unchanged and
its input-gradient GEMM still runs (the adapters of earlier layers need the gradient to flow through), but no
weight-gradient GEMM runs for a frozen weight -- Transformer Engine's linears skip wgrad, and the input save it
needs, where ``weight.requires_grad`` is False (transformer_engine/pytorch/module/linear.py ``if
weight.requires_grad: saved_inputmat = ...``; read_file id 4745523727), as does the embedding's scatter-add and the
output layer's wgrad. So ``frozen`` zeroes an op's weight-gradient pass.

Adapters, per target linear on one rank (Megatron-Bridge ``LoRALinear.forward`` = ``base(x) + adapter(x)``,
``ParallelLinearAdapter.forward`` = ``linear_out(linear_in(x)) * (alpha / dim)``; peft/lora_layers.py and
peft/utils.py @ v0.5.0): forward two GEMMs ``A`` (T x d_in -> rank) and ``B`` (rank -> d_out), the scale (read and
write T x d_out) and the add to the base output (read 2, write 1); backward the scale's gradient, both GEMMs'
input and weight gradients, and the sum of the adapter's input gradient into the base's (read 2, write 1 of T x
d_in). Every adapter weight is split over TP like its base (specs/lora.py), so each rank runs rank x d / tp of
it: a column-parallel base's ``A`` sees all T tokens and d_in whole with rank/tp outputs, its ``B`` the base's
d_out/tp; a row-parallel base's ``A`` d_in/tp, its ``B`` rank -> d_out/tp. The adapters are Megatron-Core
linears, not Transformer Engine's, so they run 16-bit in fp8 recipes. Their small TP collectives (``A``'s
gather of T x rank/tp outputs, a row-parallel ``A``'s all-reduce of T x rank) are not costed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trainsim.specs.lora import target_dims

from .flops import Op, _linear
from .shapes import LayerShape

if TYPE_CHECKING:
    from trainsim.specs import TrainingSpec

# Host issue of one target's adapter per micro-batch, eager (host_issue.block_issue ``extra``): (forward aten ops,
# forward kernels, backward ops, backward kernels), counted from the code (not timed). Forward: LoRALinear's
# ``layernorm_output.contiguous()`` and ``reshape`` (2 dispatches, no kernel) and its add (1, 1); each adapter linear
# through Megatron-Core's LinearWithGradAccumulationAndAsyncCommunication, ``torch.matmul(input, weight.t())`` on a
# 3-D input (t, view, mm, _unsafe_view: 4, 1), twice; the scale ``x * (alpha / dim)`` (1, 1): 12 ops, 4 kernels.
# Backward: the scale's mul (1, 1); per adapter linear ``grad_output.matmul(weight)`` (view, mm, _unsafe_view: 3, 1)
# and the wgrad GEMM accumulating into the fp32 main_grad (gradient_accumulation_fusion's
# ``wgrad_gemm_accum_fp32`` after two views: 3, 1); the adapter's input gradient added to the base's (1, 1): 14, 6.
ISSUE_PER_TARGET = (12, 4, 14, 6)
# flops.py op name of each Megatron-Bridge target linear of a dense block.
TARGET_OPS = {"linear_qkv": "qkv", "linear_proj": "out_proj", "linear_fc1": "fc1", "linear_fc2": "fc2"}
COLUMN_PARALLEL = frozenset({"linear_qkv", "linear_fc1"})


def frozen(op: Op) -> Op:
    """``op`` with a frozen weight: no weight-gradient FLOPs, bytes or GEMMs (the module doc)."""
    if not (op.bwd_weight_flops or op.bwd_weight_bytes):
        return op
    return replace(op, bwd_weight_flops=0.0, bwd_weight_bytes=0.0, bwd_weight_gemms=())


def adapter_ops(shp: LayerShape, target: str, base: Op) -> tuple[Op, ...]:
    """The adapter of ``target`` beside its base op ``base`` on one rank (module doc): A, B and the scale-and-add
    pass, each re-run by the recompute modules that re-run the base. ``base``'s forward GEMM (m, n, k) gives the
    tokens m, the rank's input width k and output width n."""
    e, r, tp = shp.e, shp.lora_rank, shp.tp
    T, d_out, d_in = base.fwd_gemms[0]
    if target in COLUMN_PARALLEL:  # A: d_in whole -> rank/tp (gathered); B: rank -> the base's d_out/tp
        a, b = _linear(f"lora_a_{base.name}", T, r // tp, d_in, e), _linear(f"lora_b_{base.name}", T, d_out, r, e)
        out = T * d_out
    else:  # A: the base's d_in/tp -> rank (all-reduced); B: rank -> d_out/tp, added to the reduced base output
        a, b = _linear(f"lora_a_{base.name}", T, r, d_in, e), _linear(f"lora_b_{base.name}", T, d_out // tp, r, e)
        out = T * d_out // shp.sp_div
    glue = Op(name=f"lora_add_{base.name}", kind="elementwise", fwd_flops=2.0 * out,
              bwd_input_flops=float(out + T * d_in), bwd_weight_flops=0.0, fwd_bytes=float((2 + 3) * e * out),
              bwd_input_bytes=float(2 * e * out + 3 * e * T * d_in))
    return tuple(replace(op, modules=base.modules) for op in (a, b, glue))


def with_adapters(shp: LayerShape, ops: tuple[Op, ...] | list[Op]) -> list[Op]:
    """A block's ``ops`` under LoRA: every op frozen, each target's adapter ops right after its base op."""
    targets = {TARGET_OPS[t]: t for t in shp.lora_targets}
    out: list[Op] = []
    for op in ops:
        out.append(frozen(op))
        if op.name in targets:
            out.extend(adapter_ops(shp, targets[op.name], op))
    return out


def adapter_params_rank(shp: LayerShape) -> float:
    """Adapter parameters of one block on one TP rank: rank x (d_in + d_out) / tp per target (specs/lora.py
    target_dims)."""
    q, kv = shp.a * shp.d, shp.kv * shp.d
    return sum(shp.lora_rank * sum(target_dims(t, shp.h, q, kv, shp.f, shp.gated))
               for t in shp.lora_targets) / shp.tp


def frozen_weight_bytes(training: TrainingSpec) -> int:
    """Bytes per frozen LoRA base weight: 1 with Transformer Engine fp8 primary weights
    (TrainingSpec.lora_fp8_base_weights), else the parameter dtype's."""
    return 1 if training.lora_fp8_base_weights else training.param_bytes


def adapter_issue_counts(shp: LayerShape) -> tuple[int, int, int, int]:
    """(forward ops, forward kernels, backward ops, backward kernels) the adapters add to one block's eager issue."""
    n = len(shp.lora_targets)
    return tuple(n * c for c in ISSUE_PER_TARGET)
