"""LoRA fine-tuning (low-rank adapters on frozen base weights) as Megatron-Bridge's PEFT runs it: which settings
a scenario may combine with it, and the adapter geometry every cost model reads.

Megatron-Bridge ``LoRA`` (src/megatron/bridge/peft/lora.py, NVIDIA-NeMo/Megatron-Bridge @ v0.5.0) freezes every
base parameter (embedding and output layer included) and wraps each target linear in ``LoRALinear``: the output
is ``base(x) + B(A(x)) * alpha / rank`` with ``A`` (linear_in: d_in -> rank) and ``B`` (linear_out: rank ->
d_out) Megatron-Core linears (``ParallelLinearAdapter``, peft/utils.py). Its default targets are ``linear_qkv,
linear_proj, linear_fc1, linear_fc2``; ``dim`` (the rank) 32 and ``alpha`` 32, which the Llama 3 70B recipe sets
to 16 and 32 (recipes/llama/h100/llama3.py ``llama3_70b_peft_8gpu_h100_bf16_config``). ``alpha`` scales the
adapter's output and costs nothing.

Under tensor parallelism the adapter follows its base linear (``ParallelLinearAdapter``): for a column-parallel
base (linear_qkv, linear_fc1) ``A`` is a ColumnParallelLinear(d_in -> rank) whose output is gathered and ``B`` a
ColumnParallelLinear(rank -> d_out) left sharded; for a row-parallel base (linear_proj, linear_fc2) ``A`` is a
RowParallelLinear(d_in -> rank) and ``B`` a ColumnParallelLinear(rank -> d_out) whose output is gathered. Every
adapter weight is thus split over TP, and Megatron-Core's ColumnParallelLinear divides its output size by the TP
size (``divide``, which asserts divisibility): the rank must be a multiple of tp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .errors import SpecError

if TYPE_CHECKING:
    from .layout import Layout
    from .model import ModelSpec
    from .training import TrainingSpec

LoraTarget = Literal["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
# Megatron-Bridge LoRA.target_modules' default (peft/lora.py): every linear of a dense block.
LORA_TARGETS: tuple[str, ...] = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
# Megatron-Bridge LoRA.alpha's default; a scale on the adapter output, no cost.
DEFAULT_LORA_ALPHA = 32.0


def target_dims(target: str, hidden: int, q: int, kv: int, ffn: int, gated: bool) -> tuple[int, int]:
    """(d_in, d_out) of the base linear ``target`` of one dense block (whole, before TP) with query width ``q`` and
    key/value width ``kv`` (heads x head dim): the fused QKV projection h -> q + 2 kv, the attention output
    projection q -> h, fc1 h -> (2 with SwiGLU) f, fc2 f -> h. The adapter adds rank x (d_in + d_out) parameters
    on it."""
    n_in = 2 if gated else 1
    return {"linear_qkv": (hidden, q + 2 * kv), "linear_proj": (q, hidden), "linear_fc1": (hidden, n_in * ffn),
            "linear_fc2": (ffn, hidden)}[target]


def adapter_dims(model: ModelSpec, target: str) -> tuple[int, int]:
    """target_dims of the linear ``target`` of one dense block of ``model``."""
    return target_dims(target, model.hidden, model.num_heads * model.dhead, model.kv_heads * model.dhead,
                       model.ffn, model.gated_mlp)


def checkpoint_params(model: ModelSpec, rank: int = 0, targets=LORA_TARGETS) -> int:
    """Parameters a training checkpoint of ``model`` saves: all of them, or under LoRA (``rank`` > 0) only the
    adapters of ``targets`` on every block, rank x (d_in + d_out) each. Megatron-Bridge's PEFT checkpoint holds only
    adapter states, the frozen base coming from ``checkpoint.pretrained_checkpoint`` (docs/training/peft.md, "PEFT
    Workflow in Training": "Checkpoint Saving: Only adapter states are saved"; training/checkpointing.py
    ``apply_peft_adapter_filter_to_state_dict``), and its optimizer tracks only the trainable adapters."""
    if not rank:
        return model.total_params()
    return model.num_layers * sum(rank * sum(adapter_dims(model, t)) for t in targets)


def training_refusal(t: TrainingSpec) -> tuple[str, str] | None:
    """(field, reason) when the LoRA settings of TrainingSpec ``t`` cannot be costed as given, else None."""
    if not t.lora_rank:
        if t.lora_fp8_base_weights or tuple(t.lora_target_modules) != LORA_TARGETS or t.lora_alpha != DEFAULT_LORA_ALPHA:
            return "lora_rank", "the lora_* settings describe LoRA adapters: set lora_rank > 0 or drop them"
        return None
    if not t.lora_target_modules:
        return "lora_target_modules", "is empty: LoRA needs at least one target linear"
    if len(set(t.lora_target_modules)) != len(t.lora_target_modules):
        return "lora_target_modules", "lists a module twice"
    if t.framework != "megatron":
        return "lora_rank", (f"LoRA is costed as Megatron-Bridge's PEFT on Megatron-Core (framework megatron); "
                             f"framework {t.framework} is not: use framework megatron")
    if t.effective_zero >= 2:
        return "lora_rank", ("LoRA is costed with Megatron-Core DDP and the distributed optimizer (zero 0 or 1); "
                             "ZeRO-2/3 of frozen base weights is not modelled")
    if t.schedule in ("zb", "dualpipev"):
        return "lora_rank", (f"the {t.schedule} schedule defers weight gradients, whose retained inputs are not "
                             f"modelled for adapters: use 1f1b, interleaved or gpipe")
    if t.offload_optimizer or t.offload_params:
        return "lora_rank", "optimizer or parameter offload with LoRA is not modelled: drop the offload settings"
    if t.dtype == "nvfp4":
        return "dtype", ("nvfp4 with LoRA is not modelled: the frozen base weights' NVFP4 copies are not counted "
                         "for adapters; use bf16 or fp8")
    if t.lora_fp8_base_weights and t.dtype != "fp8":
        return "lora_fp8_base_weights", ("fp8 base weights are Transformer Engine's fp8 primary weights of "
                                         f"an fp8 run: set dtype fp8 (got {t.dtype})")
    return None


def check_lora_model(model: ModelSpec, layout: Layout, t: TrainingSpec) -> None:
    """The model and layout rules of LoRA: a dense MHA/GQA model (Megatron-Bridge puts MoE experts' and MLA's
    adapters on other linears, not costed here), no hybrid Mamba stack (the adapter geometry here is one dense
    block's four linears on every layer, and the Mamba layers' in_proj/out_proj would still be costed with weight
    gradients), a rank within each target's dimensions, and a rank divisible by tp (module doc)."""
    if not t.lora_rank:
        return
    if model.is_hybrid:
        raise SpecError("training.lora_rank", f"LoRA is costed for uniform dense MHA/GQA stacks; {model.name} is a "
                        "hybrid Mamba stack (hybrid_pattern), whose per-layer adapters are not modelled")
    if model.is_moe or model.is_mla:
        raise SpecError("training.lora_rank", f"LoRA is costed for dense MHA/GQA blocks; {model.name} has "
                        f"{'MoE experts' if model.is_moe else 'multi-head latent attention'}")
    if model.mtp_layers:
        raise SpecError("training.lora_rank", "LoRA with multi-token-prediction modules is not modelled")
    if getattr(model, "embed_proj_dim", None):
        raise SpecError("training.lora_rank", f"{model.name}'s embedding projection is not a LoRA target modelled")
    smallest = min(min(adapter_dims(model, x)) for x in t.lora_target_modules)
    if t.lora_rank > smallest:
        raise SpecError("training.lora_rank", f"rank {t.lora_rank} exceeds the smallest target dimension "
                        f"{smallest}: a low-rank adapter needs rank <= min(d_in, d_out)")
    if t.lora_rank % layout.tp:
        raise SpecError("training.lora_rank", f"rank {t.lora_rank} must be divisible by tp = {layout.tp} "
                        "(Megatron-Core's ColumnParallelLinear splits the adapter's rank dimension over TP)")
