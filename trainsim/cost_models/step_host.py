"""Host (CPU) time of the per-step work after the last backward pass: optimizer launches, gradient clipping's norm
and its host sync, zero_grad. Pure.

The optimizer step's kernels are few but not free: every launch is issued by the host, and where a framework
reads the gradient norm back to the host (``.item()``) the GPU drains and then waits for the host to issue the
next kernel. The step's optimizer phase lasts at least the host's issue time (the host runs ahead of the GPU
while it can, as for a block's passes in ``host_issue``):

    optimizer phase = max(GPU time of the update and norm, host issue time of the step)
                      + the norm's scalar all-reduces (``norm_reduce_s``) + lead-in per host sync

Launch counts come from the kernels' own batching:

* ``multi_tensor_apply`` (apex csrc/multi_tensor_apply.cuh, used by apex/Transformer Engine ``FusedAdam``,
  ``multi_tensor_l2norm`` and ``multi_tensor_scale``; PyTorch's ``_foreach_*`` CUDA kernels use the same loop in
  aten/src/ATen/native/cuda/MultiTensorApply.cuh, find_string ids 20803484127 and 153364168): tensors are cut into
  chunks of 65,536 elements (apex's callers pass ``2048*32``; torch's ``kChunkSize``), one CUDA block per chunk;
  a launch goes out when a launch holds ``depth_to_max_blocks`` = 320 chunks, or when its tensor list is full at
  the end of a tensor (``depth_to_max_tensors`` = {110, 64, 48, 36, 30} for 1-5 tensor lists;
  ``depth_to_max_tensors_scalarlist`` = {96, 64, 48, 36, 30} for ops with a per-tensor scalar), or at the last
  chunk. ``multi_tensor_launches`` replays that loop. (Recent torch builds for Hopper widen the kernel argument
  and allow more tensors per launch, ``DepthToMaxConfig<true>``, find_string id 1000103670: the counts here are
  the classic upper bound.)
* Megatron (all versions here): apex/TE ``FusedAdam`` over the fp32 main parameters, one
  ``multi_tensor_applier`` call per parameter group (weight decay / no decay: 2) with 4 lists (grad, param, m,
  v); the norm for clipping is ``multi_tensor_l2norm`` over the gradients (1 list), summed over the model-
  parallel group by an ``all_reduce`` and read back by ``total_norm.item()`` (megatron/core/optimizer/
  clip_grads.py ``get_grad_norm_fp32``, find_string id 67555118737; the legacy megatron/optimizer/clip_grads.py
  the same, id 47359657657): one host sync per step. The coefficient scaling (``multi_tensor_scale``) runs only
  when the norm exceeds the threshold, which the step cannot know: not counted. ``zero_grad_buffer`` zeroes the
  contiguous gradient buffer: one op.
* DeepSpeed (and Megatron-DeepSpeed, which runs DeepSpeed's engine and optimizer wrappers): ZeRO and the fp16/bf16
  optimizers flatten each parameter group into one fp32 partition per rank (``single_partition_of_fp32_groups``,
  ``fp32_groups_flat``), so ``FusedAdam`` sees 2 tensors of half the shard each; the norm is summed over the
  model-parallel group and read back with ``total_norm_cuda[0].item()`` (deepspeed/runtime/utils.py
  ``get_grad_norm`` and zero/stage_1_and_2.py ``get_grad_norm_direct``, find_string ids 52433580680 and
  19399401349): one host sync per step, counted with one norm launch per flat group. (Older ZeRO versions also
  read each gradient's norm with ``.item()`` inside the loop: not counted.)
* pytorch-fsdp (Composer's ``DecoupledAdamW``, framework.py ``per_param_loop``): 8 eager ops per parameter
  tensor (``mul_``, ``add_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div``, ``add_``, ``addcdiv_``), each a dispatch
  and a launch; FSDP's ``clip_grad_norm_`` takes one ``vector_norm`` per gradient, stacks and reduces them,
  all-reduces, and multiplies every gradient (``mul_``): 2 per tensor + 4; it returns a tensor (no sync).
* torch (``torch.optim.Adam``, foreach by default on CUDA; torch/optim/adam.py ``_multi_tensor_adam``, id
  14460399403, its non-capturable branch): per device/dtype group ``_foreach_lerp_`` (2 lists), ``_foreach_mul_``
  (1), ``_foreach_addcmul_`` (3), ``_foreach_sqrt`` (2), ``_foreach_div_`` by a scalar list (1),
  ``_foreach_add_`` (1), ``_foreach_addcdiv_`` by a scalar list (3); the step counters live on the CPU (one
  dispatch, no launch, no sync). ``zero_grad(set_to_none=True)`` launches nothing.

Per-op seconds are ``host_issue``'s (3.3 us per dispatch, 3.8 us more per launch, Grace 2.6x). A host sync's
lead-in is the dispatch and launch of the first kernel the host issues after it. Per-step logging (Megatron's
``training_log``) reads losses back only every ``log_interval`` steps: not counted per step. Per-module hooks
run per micro-batch, not per step: Megatron's local-DDP parameter hooks are in a block's backward issue time
(``host_issue.ddp_hook_adds``); FSDP's pre/post forward/backward hooks issue the gathers and reduce-scatters the
builder already counts as collectives, and their Python frames are not counted (no cited per-call measurement).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

from .collectives import collective_time
from .grad_buffer import optimizer_tensor_elems
from .host_issue import issue_s, profiled_chunk
from .muon import busiest_launches

if TYPE_CHECKING:
    from trainsim.specs import Scenario

    from .profile import CalibrationProfile

MTA_CHUNK = 65536
MTA_MAX_BLOCKS = 320
MTA_MAX_TENSORS = (110, 64, 48, 36, 30)
MTA_MAX_TENSORS_SCALARLIST = (96, 64, 48, 36, 30)
MEGATRON_PARAM_GROUPS = 2      # weight decay / no weight decay (megatron/optimizer get_param_groups)
FUSED_ADAM_DEPTH = 4           # grad, param, exp_avg, exp_avg_sq
# torch.optim.Adam foreach: (tensor lists, scalar list?) of each _foreach op with a CUDA kernel (module doc)
TORCH_FOREACH_ADAM = ((2, False), (1, False), (3, False), (2, False), (1, True), (1, False), (3, True))
PER_PARAM_LOOP_OPS = 8         # Composer DecoupledAdamW eager ops per parameter tensor
FSDP_CLIP_OPS = (2, 4)         # (per tensor, per step) launches of FSDP clip_grad_norm_


@dataclass(frozen=True)
class StepHost:
    """Host work of one optimizer step on one rank: dispatches, kernel launches, blocking host syncs, seconds."""

    dispatches: int
    launches: int
    syncs: int
    issue_s: float      # host seconds to issue the step's kernels
    sync_lead_s: float  # GPU idle after the step's host syncs (lead-in per sync)


def multi_tensor_launches(sizes: Iterable[int], depth: int, scalarlist: bool = False) -> int:
    """Kernel launches of one ``multi_tensor_apply`` call over tensors of ``sizes`` elements with ``depth`` lists
    (the launch loop of csrc/multi_tensor_apply.cuh, module doc); empty tensors are skipped."""
    sizes = [int(s) for s in sizes if s > 0]
    max_t = (MTA_MAX_TENSORS_SCALARLIST if scalarlist else MTA_MAX_TENSORS)[depth - 1]
    launches = loc_t = loc_b = 0
    for i, n in enumerate(sizes):
        loc_t += 1
        left = -(-n // MTA_CHUNK)
        if left > MTA_MAX_BLOCKS - loc_b:  # the blocks fill before the tensor ends: launch, keep the tensor
            # the loop's first launch takes the MTA_MAX_BLOCKS - loc_b free blocks, each further one
            # MTA_MAX_BLOCKS, while more than MTA_MAX_BLOCKS are left: 1 + ceil(rest / MAX) - 1 launches
            rest = left - (MTA_MAX_BLOCKS - loc_b)
            full = -(-rest // MTA_MAX_BLOCKS) - 1
            launches, loc_b, loc_t = launches + 1 + full, 0, 1
            left = rest - full * MTA_MAX_BLOCKS
        loc_b += left
        if loc_b == MTA_MAX_BLOCKS or loc_t == max_t or i == len(sizes) - 1:
            launches, loc_b, loc_t = launches + 1, 0, 0
    return launches


def rank_tensor_sizes(scenario: Scenario, stage: int) -> list[int]:
    """Elements of each parameter tensor (or tensor piece) the optimizer of a rank of ``stage`` updates: the rank's
    tensors (param_tensors.py), whole, or cut by its ZeRO shard -- the flat 1/n slice of each gradient bucket
    (Megatron's distributed optimizer, FSDP1's flat parameters) or 1/n of each tensor (torch's FSDP2):
    grad_buffer.optimizer_tensor_elems."""
    return [max(1, round(x)) for x in optimizer_tensor_elems(scenario, stage)]


def _fused_counts(sizes: list[int], groups: int) -> tuple[int, int]:
    """(dispatches, launches) of FusedAdam over ``sizes`` split into ``groups`` parameter groups."""
    per = math.ceil(len(sizes) / groups) if sizes else 0
    parts = [sizes[i:i + per] for i in range(0, len(sizes), per)] if per else []
    return len(parts), sum(multi_tensor_launches(p, FUSED_ADAM_DEPTH) for p in parts)


def step_counts(framework: str, optimizer_update: str, sizes: list[int]) -> tuple[int, int, int]:
    """(dispatches, launches, host syncs) of one optimizer step, clipping and zero_grad of a ``framework``."""
    n = len(sizes)
    if optimizer_update == "per_param_loop":
        per_t, per_s = FSDP_CLIP_OPS
        ops = PER_PARAM_LOOP_OPS * n + per_t * n + per_s
        return ops, ops, 0
    if behaviour(framework).optimizer_update == "foreach":  # torch.optim.Adam's _multi_tensor_adam
        launches = sum(multi_tensor_launches(sizes, d, s) for d, s in TORCH_FOREACH_ADAM)
        return len(TORCH_FOREACH_ADAM) + 1, launches, 0
    if behaviour(framework).deepspeed_engine:
        half = sum(sizes) / 2
        d, k = _fused_counts([math.ceil(half)] * 2, MEGATRON_PARAM_GROUPS)
        # a norm per flat group, the model-parallel all_reduce, the .item() copy
        return d + 2 + 1 + 1, k + 2 + 1 + 1, 1
    d, k = _fused_counts(sizes, MEGATRON_PARAM_GROUPS)
    norm = multi_tensor_launches(sizes, 1)
    # l2norm call + all_reduce + .item() (a copy), zero_grad_buffer's zero_
    return d + 1 + 2 + 1, k + norm + 2 + 1, 1


def step_host(framework: str, optimizer_update: str, sizes: list[int], host_cpu: str = "x86") -> StepHost:
    """Host work of one optimizer step over a rank's parameter tensors of ``sizes`` elements (module doc)."""
    dispatches, launches, syncs = step_counts(framework, optimizer_update, sizes)
    return StepHost(dispatches, launches, syncs, issue_s(dispatches, launches, host_cpu),
                    syncs * issue_s(1, 1, host_cpu))


def scenario_step_host(scenario: Scenario, stage: int,
                       profile: CalibrationProfile | None = None) -> StepHost | None:
    """Host work of ``scenario``'s optimizer step on a rank of ``stage``, or None where it is not modelled apart
    (CPU ranks, MoE models -- as for host_issue.scenario_block_issue --, and the host-offloaded optimizer).

    Where a GPU profile timed trainsim execute's own step (``CalibrationProfile.host_issue_chunk``, framework
    torch run as the executor runs it: ``host_issue.autocast_tag``), its seconds per parameter tensor and per step
    replace the counted ones: torch's foreach Adam also loops over the tensors in Python (``_get_value(step)`` for
    the bias corrections of each, the CPU step counters stepped one by one), which the launch count misses."""
    t = scenario.training
    if getattr(scenario.cluster.gpu, "num_sms", None) is None or scenario.model.is_moe or t.offload_optimizer:
        return None
    fw = behaviour(t.framework)
    sizes = rank_tensor_sizes(scenario, stage)
    host = step_host(t.framework, fw.optimizer_update, sizes, scenario.cluster.host_cpu)
    # Muon's per-parameter kernels beside the fused launches; the executor steps Adam, so a profile's timed step
    # gets them on top too
    k = busiest_launches(scenario, stage) if t.optimizer == "muon" else 0
    muon_s = issue_s(k, k, scenario.cluster.host_cpu)
    host = StepHost(host.dispatches + k, host.launches + k, host.syncs, host.issue_s + muon_s, host.sync_lead_s)
    m = profiled_chunk(scenario, profile)  # the executor's own step, timed (docstring)
    if m is None:
        return host
    timed = m.step_fixed_s + m.step_per_tensor_s * len(sizes) + muon_s
    return StepHost(host.dispatches, host.launches, host.syncs, timed, host.sync_lead_s)


def norm_reduce_s(scenario: Scenario, groups: tuple, profile: CalibrationProfile | None = None) -> float:
    """Seconds of the grad norm's all-reduces of one fp32 scalar over ``groups`` (topologies GroupShapes or None:
    the TP group, and the sharding group where ZeRO >= 1 splits the gradients): every update waits for the
    clip coefficient, so their latency is exposed once per step. The pipeline stages' share of Megatron's
    model-parallel reduction is not counted (one group shape per dimension). A scenario without collective fixed
    costs (Scenario.without_collective_fixed_costs) keeps only their bytes' time, as exposures._coll does."""
    def seconds(g) -> float:
        res = collective_time("all_reduce", 4.0, g, scenario.cluster, profile=profile)
        fixed = 0.0 if scenario.collective_fixed_costs else min(max(float(res.latency_s or 0.0), 0.0), res.time_s)
        return float(res.time_s) - fixed

    return sum(seconds(g) for g in groups if g is not None and g.size > 1)


def optimizer_phase_s(gpu_s: float, host: StepHost | None, reduce_s: float = 0.0) -> float:
    """Seconds of the optimizer phase: the GPU's time or the host's issue time, whichever is longer, plus the
    grad norm's scalar all-reduces and the lead-ins after its host syncs (the GPU's time and the all-reduces where
    the host is not modelled apart, ``host`` None)."""
    if host is None:
        return gpu_s + reduce_s
    return max(gpu_s, host.issue_s) + reduce_s + host.sync_lead_s
