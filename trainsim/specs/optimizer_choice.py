"""Which settings the Muon optimizer (``TrainingSpec.optimizer = "muon"``) is costed under, and why the others are
refused.

Muon is costed as Megatron-Core builds it (megatron/core/optimizer/__init__.py ``_get_megatron_emerging_optimizer``
and emerging_optimizers.py ``TensorParallelMuon``, NVIDIA/Megatron-LM @ d98e8a64; Megatron-Bridge's
``distributed_muon_with_cosine_annealing``, recipes/utils/optimizer_utils.py @ 067f987d). That code refuses fp16
("emerging optimizer with fp16 is not supported") and Megatron-FSDP ("MFSDP v2 with emerging optimizers is not
currently validated"); its LayerWise distributed optimizer runs on Megatron DDP, so ZeRO 2/3 have no Muon path, and
the host-offloaded HybridDeviceOptimizer steps torch Adam only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .training import TrainingSpec

# Defaults of TrainingSpec: Megatron-Core's --muon-num-ns-steps and mixed-precision Adam's fp32 main + m + v. A
# scenario that dumps and reloads its training carries every field, so a default value is not refused.
MUON_NS_STEPS = 5
ADAM_STATE_BYTES = 12


def muon_refusal(training: TrainingSpec) -> tuple[str, str] | None:
    """(field, reason) of the first setting Muon cannot be costed under, or None."""
    t = training
    if t.optimizer != "muon":
        if t.muon_ns_steps != MUON_NS_STEPS:
            return "muon_ns_steps", "counts Muon's Newton-Schulz iterations: it needs optimizer muon"
        if t.muon_tp_mode != "blockwise":
            return "muon_tp_mode", "says how Muon orthogonalises TP-sharded matrices: it needs optimizer muon"
        return None
    if t.framework != "megatron":
        return "optimizer", (f"muon is costed as Megatron-Core's Muon (emerging_optimizers.py); framework "
                             f"{t.framework} has no such optimizer: use framework megatron or optimizer adam")
    if t.lora_rank:
        return "optimizer", ("muon with LoRA is not modelled: the adapters' optimizer states and step are costed as "
                             "AdamW's (cost_models/lora.py): use optimizer adam")
    if t.dtype == "fp16":
        return "optimizer", ("Megatron-Core refuses muon with fp16 ('emerging optimizer with fp16 is not "
                             "supported'): use dtype bf16 or fp8")
    if t.zero >= 2:
        return "optimizer", ("Megatron-Core's Muon runs on DDP (the LayerWise distributed optimizer shards whole "
                             "parameters over data parallelism); Megatron-FSDP (zero 2/3) has no Muon path: "
                             "use zero <= 1 with distributed_optimizer")
    if t.offload_optimizer:
        return "offload_optimizer", ("the host-offloaded optimizer (HybridDeviceOptimizer) steps torch Adam only; "
                                     "muon runs on the GPU: drop offload_optimizer")
    if t.optimizer_bytes_per_param != ADAM_STATE_BYTES:
        return "optimizer_bytes_per_param", ("with optimizer muon the state bytes follow from the parameters: fp32 "
                                             "main + momentum on Muon's matrices, fp32 main + Adam m, v on "
                                             "the rest (cost_models/muon.py): drop it")
    if not t.master_weights:
        return "optimizer", ("Megatron-Core's Muon keeps fp32 main parameters "
                             "(Float16OptimizerWithFloat16Params): drop master_weights false")
    return None
