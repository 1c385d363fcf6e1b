"""Rules for the data-parallel settings: the HSDP shard group, the gradient bucket size and reduction overlap.

* ``Layout.dp_shard`` (HSDP): torch's ``fully_shard`` on a 2-D device mesh ("dp_replicate", "dp_shard")
  shards parameters, gradients and optimizer states over the shard dimension and replicates them over the
  other (torch/distributed/fsdp/_fully_shard/_fully_shard.py docstring: "If 2D, then parameters are sharded
  across the 1st dim and replicated across the 0th dim"); torchtitan builds that mesh with dp_shard inside
  dp_replicate. It is a ZeRO-3 (full-shard) layout of the FSDP frameworks, so it needs ``zero=3`` and framework
  ``pytorch-fsdp`` or ``torch``. MoE expert parallelism carved out of the data-parallel ranks is refused with
  HSDP: its expert-data-parallel sharding over a shard group is not costed.
* ``TrainingSpec.dp_bucket_mb``: a bucket size exists where the framework buckets gradients -- DDP / Megatron's
  DDP for ZeRO 0-1, DeepSpeed's ``reduce_bucket_size`` for ZeRO 2-3. FSDP (and Megatron's ZeRO-2/3 path as
  costed here) reduce-scatter each wrapped block's gradients as one call, so a bucket size there is refused.
* ``TrainingSpec.overlap_grad_reduce``: torch DDP and FSDP always overlap the reduction with the backward
  (DDP's autograd hooks, FSDP's post-backward hooks); turning it off is refused for them.
"""

from __future__ import annotations

from .errors import SpecError
from .training import Layout, TrainingSpec

# Frameworks whose ZeRO-3 is torch FSDP (FSDP1 HYBRID_SHARD / FSDP2 2-D mesh have HSDP).
FSDP_FRAMEWORKS = ("pytorch-fsdp", "torch")
# Frameworks whose ZeRO-2/3 gradient reduction goes in reduce_bucket_size buckets (DeepSpeed ZeRO config).
BUCKETED_ZERO_FRAMEWORKS = ("deepspeed", "deepspeed-2021")


def check_data_parallel(layout: Layout, t: TrainingSpec, dp: int) -> None:
    """Refuse inconsistent HSDP, bucket and overlap settings with one line naming the field."""
    _check_hsdp(layout, t, dp)
    if t.dp_bucket_mb is not None and t.effective_zero >= 2 and t.framework not in BUCKETED_ZERO_FRAMEWORKS:
        raise SpecError("training.dp_bucket_mb", f"zero={t.effective_zero} with framework {t.framework} reduce-"
                        "scatters each block's gradients as one call (FSDP): there is no bucket size; drop it")
    if t.overlap_grad_reduce is False and t.framework in FSDP_FRAMEWORKS:
        raise SpecError("training.overlap_grad_reduce", f"framework {t.framework} (torch DDP/FSDP) always reduces "
                        "gradients in backward hooks, overlapped: there is no switch to turn it off")


def _check_hsdp(layout: Layout, t: TrainingSpec, dp: int) -> None:
    """The shard group divides dp and is a full-shard (ZeRO-3) FSDP layout without expert parallelism."""
    s = layout.dp_shard
    if s is None:
        return
    field = "layout.dp_shard"
    if dp % s:
        raise SpecError(field, f"shard group size {s} must divide dp={dp}")
    if s == dp:
        return  # full sharding: plain ZeRO-3 / FSDP
    if t.effective_zero != 3:
        raise SpecError(field, f"HSDP (shard group {s} < dp={dp}) shards the model states like ZeRO-3: needs zero=3, "
                        f"got zero={t.effective_zero}")
    if t.framework not in FSDP_FRAMEWORKS:
        raise SpecError(field, f"HSDP is torch FSDP's hybrid sharding: use framework pytorch-fsdp or torch, not "
                        f"{t.framework}")
    if layout.ep > 1:
        raise SpecError(field, f"HSDP with expert parallelism (ep={layout.ep}) is not costed: the experts' "
                        "data-parallel sharding over a shard group is not modelled")
