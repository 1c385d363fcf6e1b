"""Allocated bytes the caching allocator adds to Megatron's per-tensor model states beyond their element sizes.

PyTorch's caching allocator hands a request above 10 MiB a segment of its size rounded up to 2 MiB
(``kRoundLarge``) and one between 1 and 10 MiB a 20 MiB segment (``kLargeBuffer``); it splits the block only when
more than 1 MiB (``kSmallSize``) would remain, so a remainder of up to 1 MiB stays part of the handed-out block
and counts in ``torch.cuda.max_memory_allocated`` (c10/cuda/CUDACachingAllocator.cpp ``get_allocation_size``,
``should_split``; caching_allocator.py replays these rules). Tensors that live for the whole run in segments
of their own therefore each carry up to 1 MiB that the element count does not show.

Megatron allocates its model states tensor by tensor where it does not use a contiguous buffer:

* without the distributed optimizer, Megatron-Core DDP keeps each 16-bit parameter as its own tensor (the
  contiguous ``param_data`` buffer exists only with ``use_distributed_optimizer``:
  megatron/core/distributed/param_and_grad_buffer.py, NVIDIA/Megatron-LM @ d98e8a64); the gradients live in
  the contiguous ``grad_data`` buffer either way (one segment: negligible rounding);
* the fp32 main parameters are made per parameter, ``param.detach().clone().float()``
  (megatron/core/optimizer/optimizer.py ``Float16OptimizerWithFloat16Params``), or per parameter shard,
  ``shard_model_param.clone().float()`` (distrib_optimizer.py ``_build_model_and_main_param_groups``): a
  16-bit clone freed right after its fp32 copy exists.

``megatron_state_rounding_bytes`` replays these start-up allocations (parameter tensors of
first_step_fragmentation.param_tensor_elems, in registration order) through the caching allocator and returns
the allocated bytes beyond the states' own. Adam's m and v are left out: they are created at the first step in
the segments the freed activations leave (first_step_fragmentation.py), where the remainder a block keeps
depends on which cached block each takes.
"""

from __future__ import annotations

from functools import lru_cache

from .caching_allocator import CachingAllocator
from .first_step_fragmentation import LAZY_STATE_FRAMEWORKS, param_tensor_elems
from .shapes import layer_shape

FP32_BYTES = 4


@lru_cache(maxsize=1024)
def _rounding(elems: tuple[float, ...], param_bytes: int, per_tensor_weights: bool, masters: bool) -> float:
    """Allocated bytes beyond the element sizes after the start-up allocations of ``elems`` (module doc)."""
    alloc, own = CachingAllocator(), 0.0
    if per_tensor_weights:
        for i, n in enumerate(elems):
            alloc.malloc(("w", i), n * param_bytes)
            own += n * param_bytes
    if masters:
        for i, n in enumerate(elems):
            alloc.malloc(("clone", i), n * param_bytes)
            alloc.malloc(("main", i), n * FP32_BYTES)
            alloc.free_tensor(("clone", i))
            own += n * FP32_BYTES
    return max(0.0, alloc.allocated - own)


def megatron_state_rounding_bytes(scenario, stage: int, *, held: float, optimizer_params: float,
                                  ends: tuple[float, float]) -> float:
    """Allocated bytes the caching allocator's rounding adds to one rank's 16-bit parameters (without the
    distributed optimizer) and fp32 main parameters on ``stage``, for Megatron's dense blocks (0 elsewhere: other
    frameworks, MoE or MLA blocks, a CPU "GPU", the optimizer on the host, no fp32 main parameters). ``held``: the rank's parameters;
    ``optimizer_params``: those whose optimizer states it holds; ``ends``: the stage's embedding and its final
    norm + output layer parameters."""
    t = scenario.training
    if (t.framework not in LAZY_STATE_FRAMEWORKS or t.offload_optimizer or not optimizer_params
            or getattr(scenario.cluster.gpu, "num_sms", None) is None):
        return 0.0
    masters = t.master_weights and t.param_bytes < FP32_BYTES
    distributed = t.effective_zero >= 1
    if not (masters or not distributed):
        return 0.0
    shp = layer_shape(scenario)
    if shp.is_moe or shp.mla:  # param_tensor_elems lists a dense block's tensors only
        return 0.0
    elems = param_tensor_elems(shp, True, scenario.layers_on_stage(stage), ends, held / optimizer_params)
    return _rounding(tuple(round(n) for n in elems), t.param_bytes, not distributed, masters)
