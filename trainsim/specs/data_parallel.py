"""Rules for the data-parallel settings: the HSDP shard group, the gradient bucket size and reduction overlap.

* ``Layout.dp_shard`` (HSDP): torch's ``fully_shard`` on a 2-D device mesh ("dp_replicate", "dp_shard")
  shards parameters, gradients and optimizer states over the shard dimension and replicates them over the
  other (torch/distributed/fsdp/_fully_shard/_fully_shard.py docstring: "If 2D, then parameters are sharded
  across the 1st dim and replicated across the 0th dim"); torchtitan builds that mesh with dp_shard inside
  dp_replicate. It is a ZeRO-3 (full-shard) layout of the FSDP frameworks, so it needs ``zero=3`` and framework
  ``pytorch-fsdp`` or ``torch``. MoE expert parallelism carved out of the data-parallel ranks is refused with
  HSDP: its expert-data-parallel sharding over a shard group is not costed. Under DeepSpeed (frameworks
  ``deepspeed``, ``deepspeed-2023``) the same field is MiCS's ``mics_shard_size`` with ZeRO-3 (specs/mics.py,
  which says which MiCS layouts are costed).
* ``TrainingSpec.dp_bucket_mb``: a bucket size exists where the framework buckets gradients -- DDP / Megatron's
  DDP for ZeRO 0-1, DeepSpeed's ``reduce_bucket_size`` for ZeRO 2-3. FSDP (and Megatron's ZeRO-2/3 path as
  costed here) reduce-scatter each wrapped block's gradients as one call, so a bucket size there is refused.
  Its lower bound is physical: every framework fills a bucket with whole parameter tensors and starts the next
  one after the tensor that fills it -- torch DDP's reducer (``compute_bucket_assignment_by_size``, reducer.cpp,
  find_string id 18621914), Megatron-Core's gradient buffer (a bucket ends at the parameter whose end reaches
  ``bucket_size``, param_and_grad_buffer.py, id 54126231258), DeepSpeed ZeRO-1/2 (the bucket is flushed before a
  parameter that would overflow it, stage_1_and_2.py ``reduce_independent_p_g_buckets_and_remove_grads``, id
  4579479047) -- so a chunk issues at most one call per parameter tensor, however small the bucket. The cost
  model charges min(ceil(gradient bytes / bucket), parameter tensors of the chunk) calls
  (the chunk's tensors as cost_models/param_tensors.py lists them), so a bucket of any positive size
  costs at most one call per tensor, as the frameworks issue them.
* ``TrainingSpec.zero`` beside pipeline parallelism and the framework's code: zero_stage_refusal, the one rule the
  specs, the planner's ZeRO options and the what-if levers (through the specs) ask.
* ``TrainingSpec.overlap_grad_reduce``: torch DDP and FSDP always overlap the reduction with the backward
  (DDP's autograd hooks, FSDP's post-backward hooks); turning it off is refused for them.
"""

from __future__ import annotations

from . import mics
from .errors import SpecError
from .framework_behaviour import BEHAVIOURS
from .layout import Layout
from .training import TrainingSpec

# The framework facts read here (specs/framework_behaviour.py): ``torch_fsdp`` (ZeRO-3 is torch FSDP, with HSDP),
# ``reduce_bucket_params`` (ZeRO-2/3 gradients reduced in DeepSpeed's reduce_bucket_size buckets; None where each
# block's are one call) and ``deepspeed_engine`` (ZeRO-1/2 is DeepSpeed's engine, sharding over the whole
# data-parallel group: DeepSpeed and Megatron-DeepSpeed, which runs ZeRO through deepspeed.initialize).


def check_data_parallel(layout: Layout, t: TrainingSpec, dp: int) -> None:
    """Refuse inconsistent HSDP, bucket and overlap settings with one line naming the field."""
    _check_hsdp(layout, t, dp)
    if t.dp_bucket_mb is not None and t.effective_zero >= 2 and BEHAVIOURS[t.framework].reduce_bucket_params is None:
        raise SpecError("training.dp_bucket_mb", f"zero={t.effective_zero} with framework {t.framework} reduce-"
                        "scatters each block's gradients as one call (FSDP): there is no bucket size; drop it")
    if t.offload_optimizer and t.effective_zero == 0 and BEHAVIOURS[t.framework].deepspeed_engine:
        # deepspeed/runtime/engine.py _do_optimizer_sanity_check: without ZeRO (stage 0) the optimizer is wrapped
        # as BF16/FP16_Optimizer, never _configure_zero_optimizer, where ZeRO-Offload lives; the offload_optimizer
        # block of zero_optimization does nothing there (read_file id 30958683708)
        raise SpecError("training.offload_optimizer", f"framework {t.framework} offloads the optimizer with "
                        "ZeRO-Offload, a ZeRO stage 1-3 setting: set zero 1, 2 or 3")
    if t.overlap_grad_reduce is False and BEHAVIOURS[t.framework].torch_fsdp:
        raise SpecError("training.overlap_grad_reduce", f"framework {t.framework} (torch DDP/FSDP) always reduces "
                        "gradients in backward hooks, overlapped: there is no switch to turn it off")


def _check_hsdp(layout: Layout, t: TrainingSpec, dp: int) -> None:
    """A scenario's shard group passes :func:`hsdp_refusal`."""
    if layout.dp_shard is not None:
        why = hsdp_refusal(layout.dp_shard, t.effective_zero, t.framework, dp=dp, ep=layout.ep)
        if why is None and mics.mics_zero3(t):
            # any given shard group selects MiCS's gathers (mics.gathers_in_place), the whole dp included
            why = (mics.single_rank_refusal(layout.dp_shard, dp)
                   or mics.layout_refusal(layout.tp, layout.pp, layout.cp, t.offload_optimizer or t.offload_params))
        if why is not None:
            raise SpecError("layout.dp_shard", why)


def hsdp_refusal(shard: int, zero: int, framework: str, dp: int | None = None, ep: int = 1) -> str | None:
    """Why a shard group of ``shard`` ranks is not a costed HSDP / MiCS layout, or None when it is: the group
    divides dp (a group of all dp ranks is plain full sharding, ZeRO-3 / FSDP, and needs nothing more); below dp it
    is a ZeRO-3 layout of an FSDP framework (HSDP) or of DeepSpeed (MiCS, specs/mics.py; its layout rules are
    checked with the scenario) without expert parallelism. ``dp=None`` (the planner's pin, before a
    layout fixes dp) checks the ZeRO stage and framework only. The specs, ``plan``'s pin and the planner's
    shard-group search all ask this one function."""
    if dp is not None:
        if dp % shard:
            return f"shard group size {shard} must divide dp={dp}"
        if shard == dp:
            return None
    if zero != 3 and BEHAVIOURS[framework].deepspeed_engine:
        return (f"ZeRO-{zero} sharded within a subgroup and replicated across it (AMSP-style partial "
                f"sharding) is not costed for framework {framework}: DeepSpeed ZeRO-1/2 shard over all dp ranks "
                "(its mics_shard_size, MiCS, is a ZeRO-3 setting: zero=3)")
    if zero != 3 and framework == "megatron":
        return (f"HSDP shards the model states like ZeRO-3: needs zero=3, got zero={zero}; ZeRO-1 within a subgroup "
                "is Megatron-Core's partial distributed optimizer: training.distributed_optimizer_instances = dp/S")
    if zero != 3:
        return f"HSDP shards the model states like ZeRO-3: needs zero=3, got zero={zero}"
    if BEHAVIOURS[framework].deepspeed_engine:
        why = mics.framework_refusal(framework)
        if why is not None:
            return why
    elif not BEHAVIOURS[framework].torch_fsdp:
        return f"HSDP is torch FSDP's hybrid sharding: use framework pytorch-fsdp or torch, not {framework}"
    if ep > 1:
        what = "MiCS" if BEHAVIOURS[framework].deepspeed_engine else "HSDP"
        return (f"{what} with expert parallelism (ep={ep}) is not costed: the experts' data-parallel sharding over "
                "a shard group is not modelled")
    return None


# Megatron-LM presets whose code has no ZeRO-2/3 (specs/framework_era.py dates them).
_MEGATRON_WITHOUT_FSDP = ("megatron-2021", "megatron-2022")


def zero_stage_refusal(framework: str, zero: int, pp: int) -> str | None:
    """Why ``framework``'s code cannot run ZeRO stage ``zero`` (the effective stage) with ``pp`` pipeline stages,
    or None. Predict's validation (specs.resolve), the planner's ZeRO options (simulator/search_space.py) and the
    what-if levers (re-resolved through the specs) all ask this one function, so what one refuses the others
    neither search nor suggest.

    * DeepSpeed's engine (deepspeed, deepspeed-2023, deepspeed-2021, megatron-deepspeed): its PipelineEngine
      asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" (deepspeed/runtime/pipe/engine.py):
      ZeRO-2/3 with pp > 1 refused.
    * megatron (Megatron-Core): ZeRO-1 is the distributed optimizer, ZeRO-2/3 Megatron-FSDP
      (--use-megatron-fsdp, --data-parallel-sharding-strategy optim_grads / optim_grads_params), which composes
      with pipeline parallelism: Megatron-Bridge's Megatron FSDP page lists pipeline parallelism among the
      parallelisms it works with (NVIDIA-NeMo/Megatron-Bridge docs/training/megatron-fsdp.md @033eb68f,
      "Compatibility and Caveats"), and Megatron-LM derives a PP3 1F1B schedule over Megatron-FSDP's HFSDP
      (megatron/core/distributed/fsdp/src/megatron_fsdp/experimental/docs/deepseek_v4_pro_pp3_hfsdp_ep64_schedule.md).
      Only Megatron's torch-FSDP2 path "is not currently working with Pipeline Parallel" (--use-torch-fsdp2 help,
      megatron/training/arguments.py), which trainsim's megatron does not run. Every pp allowed.
    * megatron-2021, megatron-2022: the Megatron-LM of 2021-22 shards only the optimizer states (the distributed
      optimizer, NVIDIA/Megatron-LM@d07d29df14, 2022-06-08); Megatron-FSDP (first --use-custom-fsdp) came with
      Megatron-Core years later: ZeRO-2/3 refused at any pp.
    * torch (torchtitan): FSDP2 composes with torch.distributed.pipelining, each pipeline stage's model chunk
      fully_shard-ed (TorchTitan, Liang et al., arXiv:2410.06511, Sec. 2: FSDP2 + TP + PP). Every pp allowed.
    * pytorch-fsdp: FSDP1 at any stage; pipeline parallelism itself is not checked here."""
    if zero < 2:
        return None
    if framework in _MEGATRON_WITHOUT_FSDP:
        return (f"ZeRO-{zero} is not in framework {framework}'s code: Megatron-LM of 2021-22 shards only the "
                "optimizer states (the distributed optimizer, ZeRO-1); Megatron-FSDP (ZeRO-2/3) came with "
                "Megatron-Core: use zero 0 or 1, or framework megatron")
    if pp > 1 and BEHAVIOURS[framework].deepspeed_engine:
        return (f"ZeRO-{zero} with pipeline parallelism (pp={pp}) does not run under {framework}: DeepSpeed's "
                "pipeline engine refuses ZeRO-2/3; use zero 0 or 1, or pp 1")
    return None
