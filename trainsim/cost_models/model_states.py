"""Model-state bytes per parameter -- weights, gradients, optimizer states -- as each framework's code keeps them
under the training's precision, and the notes that state those assumptions in predict's output.

The framework behaviours these read (fp32 parameters, FSDP's gradient preparation, DeepSpeed's BF16_Optimizer)
live in ``specs/framework_behaviour.py``, the bytes they cost in ``framework.py``; ``memory.py`` multiplies these
bytes by each rank's parameter count.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from trainsim.specs.fp8_library import resolved as resolved_fp8_library
from trainsim.specs.framework_behaviour import BEHAVIOURS, behaviour
from trainsim.specs.optimizer_choice import ADAM_STATE_BYTES

from . import muon
from .framework import BF16_LP_GRAD_BYTES, FSDP_SHARD_GRAD_BYTES, bf16_optimizer

if TYPE_CHECKING:
    from trainsim.specs import Scenario, TrainingSpec


def held_grad_bytes(training: TrainingSpec) -> int:
    """Bytes per gradient element a rank holds for the optimizer: FSDP keeps its reduced shards in the fp32
    parameter dtype whatever the reduce dtype (fsdp_grad_prep); otherwise the training's gradient dtype."""
    if BEHAVIOURS[training.framework].fsdp_grad_prep and training.effective_zero >= 2:
        return FSDP_SHARD_GRAD_BYTES
    return training.grad_bytes


# Mixed-precision Adam: fp32 master weight + m + v (TrainingSpec.optimizer_bytes_per_param's default).
MIXED_ADAM_BYTES = ADAM_STATE_BYTES


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the model states as a framework keeps them, before any sharding.

    ``weights``: the stored parameters; ``grads``: the gradients held for the optimizer; ``optimizer``: the
    optimizer's own state (fp32 master copy when separate from the weights, Adam m and v). ``note`` says in
    words which dtypes these are (predict and the report print it).
    """

    weights: float
    grads: float
    optimizer: float
    note: str

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def _dtype_name(nbytes: float, low: str) -> str:
    return {4: "fp32", 2: low, 1: "fp8"}.get(int(nbytes), f"{nbytes:g}-byte")


def state_bytes(training: TrainingSpec) -> StateBytes:
    """Model-state bytes per parameter under ``training``'s framework and precision (see StateBytes).

    * megatron*: 16-bit parameters (``param_bytes``), the DDP main-grad buffer in ``grad_bytes`` (fp32 with
      bf16: FrameworkBehaviour.megatron_arguments), and the optimizer's fp32 main parameters + Adam m, v
      (``optimizer_bytes_per_param`` = 12; megatron/core/optimizer/distrib_optimizer.py builds the fp32 main
      shard, optimizer.py Float16OptimizerWithFloat16Params the unsharded one). 2 + 4 + 12 = 18 bytes, the
      figure of megatron/training/theoretical_memory_usage.py (6 + 12/DP with the distributed optimizer).
    * pytorch-fsdp / torch (``fp32_params``): the stored (sharded) parameters are fp32 -- FSDP2's
      MixedPrecisionPolicy casts them to ``param_dtype`` only for the unsharded compute copy, and torch AMP
      autocasts per op --, the gradients land in the fp32 parameter dtype (``held_grad_bytes``), and Adam keeps
      m and v (8 bytes; no separate master). 4 + 4 + 8 = 16 bytes. A ``param_dtype_bytes`` or a
      non-default ``optimizer_bytes_per_param`` in the scenario is taken as given.
    * deepspeed*: 16-bit parameters and gradients, the fp32 partition + Adam m, v (ZeRO paper Sec. 3.1:
      2 + 2 + 12; deepspeed/runtime/zero/stage_1_and_2.py ``single_partition_of_fp32_groups``). bf16 with
      fp32 gradient accumulation at ZeRO 0/1 is the BF16_Optimizer: the bf16 gradients stay beside the fp32
      accumulation buffer, 2 + (2 + 4) + 12 (``bf16_optimizer``).
    * fp32 training: no master copy, 4 + 4 + 8 (Megatron's FP32Optimizer; torch.optim on fp32 parameters).
    * ``master_weights=false`` (pure low-precision, torchtune's default): weights and gradients in the
      training dtype and Adam's m and v in the parameters' dtype (torch.optim allocates them ``zeros_like``
      the parameter): 2 + 2 + 4. Under framework deepspeed (bf16_master_weights_and_grads +
      bf16_optimizer_states) ZeRO keeps a bf16 master partition besides: 2 + 2 + (2 + 4).
    """
    low = "fp16" if training.dtype == "fp16" else "bf16"
    grads = held_grad_bytes(training)
    # optimizer_bytes_per_param at its default (MIXED_ADAM_BYTES) means "Adam as this precision keeps it";
    # any other value (SGD, an 8-bit Adam, the executor's 8) is taken as given, as are explicit dtype bytes.
    default_adam = training.optimizer_bytes_per_param == MIXED_ADAM_BYTES
    if not training.master_weights and BEHAVIOURS[training.framework].bf16_master_weights:
        # bf16_master_weights_and_grads: ZeRO clones the 16-bit partition into a master partition, itself in
        # bf16 (stage_1_and_2.py ``weights_partition = ...detach().clone().to(dtype=self.master_weights_and_grads
        # _dtype)``), beside Adam's m and v in bf16 (bf16_optimizer_states)
        opt = 3 * training.param_bytes if default_adam else training.optimizer_bytes_per_param
        return StateBytes(training.param_bytes, grads, opt, "pure bf16 (DeepSpeed bf16_master_weights_and_grads + "
                          "bf16_optimizer_states): bf16 weights and grads, a bf16 master partition and Adam m, v "
                          "in bf16")
    if not training.master_weights:
        opt = 2 * training.param_bytes if default_adam else training.optimizer_bytes_per_param
        grad_name = _dtype_name(grads, low)
        note = (f"pure {low}: weights and Adam m, v in {low}, {grad_name} grads, no fp32 master" if grad_name != low
                else f"pure {low}: weights, grads and Adam m, v in {low}, no fp32 master")
        return StateBytes(training.param_bytes, grads, opt, note)
    if BEHAVIOURS[training.framework].fp32_params and training.dtype != "fp32" and not training.param_dtype_bytes:
        if not (training.grad_dtype_bytes or training.grad_dtype):
            grads = 4
        opt = 8 if default_adam else training.optimizer_bytes_per_param
        note = (f"fp32 sharded weights (the {low} unsharded copy only during compute), "
                f"{_dtype_name(grads, low)} grads, Adam m, v fp32 ({opt:g} B)")
        return StateBytes(4, grads, opt, note)
    w, opt = training.param_bytes, training.optimizer_bytes_per_param
    if bf16_optimizer(training):
        note = (f"bf16 weights, bf16 grads + fp32 accumulated grads (DeepSpeed BF16_Optimizer), "
                f"{'fp32 master + Adam m, v' if opt == MIXED_ADAM_BYTES else f'optimizer {opt:g} B'}")
        return StateBytes(w, grads + BF16_LP_GRAD_BYTES, opt, note)
    if training.optimizer == "muon":
        return _muon_state_bytes(training, w, grads, low)
    if training.dtype == "fp32" and default_adam:
        # fp32 training has no separate master copy (Megatron's FP32Optimizer, torch.optim on fp32 parameters):
        # Adam's m and v only.
        return StateBytes(w, grads, 8, f"fp32 weights, {_dtype_name(grads, low)} grads, Adam m, v fp32 (no master "
                                       "copy)")
    master = "fp32 master + Adam m, v" if opt == MIXED_ADAM_BYTES else f"optimizer {opt:g} B"
    note = f"{_dtype_name(w, low)} weights, {_dtype_name(grads, low)} grads, {master}"
    return StateBytes(w, grads, opt, note)


def _muon_state_bytes(training, w: float, grads: float, low: str) -> StateBytes:
    """Megatron-Core's Muon (cost_models/muon.py): the optimizer figure is a Muon matrix's; rank_state_bytes
    weighs in the AdamW parameters' larger state."""
    master = w < 4
    opt = muon.state_bytes(True, master)
    main = "fp32 main + " if master else ""
    note = (f"{_dtype_name(w, low)} weights, {_dtype_name(grads, low)} grads, {main}Muon momentum fp32 ({opt:g} B) "
            f"on Muon's matrices, {main}Adam m, v ({muon.state_bytes(False, master):g} B) on the embedding, output "
            f"layer, norms and biases")
    return StateBytes(w, grads, opt, note)


def rank_state_bytes(scenario: Scenario, stage: int) -> StateBytes:
    """state_bytes of the scenario's training, with Muon's optimizer bytes per parameter the mean over the
    parameters a rank of ``stage`` holds (Muon's on its matrices, Adam's on the rest)."""
    sb = state_bytes(scenario.training)
    if scenario.training.optimizer != "muon":
        return sb
    return replace(sb, optimizer=muon.rank_state_bytes_per_param(scenario, stage))


def memory_assumptions(training: TrainingSpec) -> dict:
    """The model-state dtypes a prediction assumed, for predict / report output (bytes per parameter)."""
    sb = state_bytes(training)
    return {"framework": training.framework, "weights_bytes_per_param": sb.weights,
            "grads_bytes_per_param": sb.grads, "optimizer_bytes_per_param": sb.optimizer,
            "grad_reduce_dtype": training.grad_dtype_name, "master_weights": training.master_weights,
            "note": sb.note, **({"compile": _compile_note(training)} if training.compile else {}),
            **({"optimizer_sharding": training.optimizer_sharding_note} if training.optimizer_sharding_note else {}),
            **({"mixed_precision": AUTOCAST_NOTE} if training.autocast else {}),
            **({"fp8_weights": _fp8_note(training)} if training.dtype == "fp8" else {}),
            **({"lora": LORA_NOTE.format(fp8=" in fp8" if training.lora_fp8_base_weights else "")}
               if training.lora_rank else {})}


# What predict states under training.lora_rank (cost_models/lora.py, specs/lora.py).
LORA_NOTE = ("LoRA: every base parameter frozen and held{fp8} without gradient or optimizer state; these bytes per "
             "parameter apply to the adapters only, whose gradients alone are reduced over data parallelism")


# What predict states under training.autocast (cost_models/autocast.py holds the mechanisms and their sources).
AUTOCAST_NOTE = ("torch.autocast on fp32 weights: a 16-bit copy of every linear weight and bias cached for the step "
                 "(autocast_weight_cache), an fp32 residual stream (fp32 norm inputs, one 16-bit cast of a norm output "
                 "per linear reading it), and without recompute later micro-batches' weight gradients cast at the end "
                 "of their backward (autocast_deferred_grads)")


def _fp8_note(training) -> str:
    """How the fp8 linears' weights are held (cost_models/fp8_weights.py for Transformer Engine; torchao's
    Float8Linear casts per use, cost_models/torchao_float8.py)."""
    if resolved_fp8_library(training) == "torchao":
        if training.float8_all_gather:
            return ("no fp8 weight copy held: FSDP2 gathers the blocks' linear weights in fp8 (1 byte), each shard "
                    "cast before its gather, and the backward copies them into its GEMM's layout")
        return "no fp8 weight copy held: torchao's Float8Linear casts each weight's 16-bit compute copy per use"
    recipe = "MXFP8 (rowwise + columnwise, e8m0 scale per 32)" if training.fp8_recipe == "mxfp8" else \
        "per-tensor fp8 (a transpose too where the GPU lacks non-TN fp8 GEMMs)"
    if training.fp8_param_gather:
        return f"fp8 primary weights (--fp8-param-gather): the blocks' linear weights held only as {recipe}, no 16-bit copy"
    if not (behaviour(training.framework).fp8_weight_cache and training.effective_zero < 3):
        return "16-bit weights; Transformer Engine quantizes each block linear weight per use (no cached copy)"
    return f"16-bit weights plus Transformer Engine's cached {recipe} copy of every block linear weight"


def _compile_note(training) -> str:
    """What a compiled block is assumed to save (TrainingSpec.compile; measured in tests/test_compile_oracle.py)."""
    if training.recompute == "full":
        return "torch.compile under full AC: each block keeps its input, as eager"
    if training.recompute == "selective":
        rs = " and the MLP's reduce-scatter output" if training.sequence_parallel else ""
        return ("torch.compile under per-op SAC: AOTAutograd's min-cut partitioner drops the unread w2 output"
                f"{rs} the policy marks saved")
    return "torch.compile without AC: blocks keep what fused kernels keep (no fp32 norm copies, SwiGLU 3·f)"
