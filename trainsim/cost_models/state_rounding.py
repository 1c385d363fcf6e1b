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

``megatron_state_rounding_bytes`` replays these start-up allocations (the rank's parameter tensors of
param_tensors.rank_tensors in registration order, and the optimizer's pieces of grad_buffer.optimizer_tensor_elems) through the caching allocator and returns
the allocated bytes beyond the states' own. Adam's m and v are left out: they are created at the first step in
the segments the freed activations leave (first_step_fragmentation.py), where the remainder a block keeps
depends on which cached block each takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import IdentityMemo, memoised

from .caching_allocator import CachingAllocator
from .grad_buffer import optimizer_pieces_key, pieces_of
from .param_tensors import key_tensors, rank_keys

if TYPE_CHECKING:
    from trainsim.specs import Scenario

FP32_BYTES = 4


@memoised(maxsize=1024)
def _rounding(weights: tuple[int, ...], mains: tuple[int, ...], param_bytes: int) -> float:
    """Allocated bytes beyond the element sizes after the start-up allocations (module doc): one 16-bit tensor per
    element count in ``weights``, then one fp32 main parameter per element count in ``mains``."""
    alloc, own = CachingAllocator(), 0.0
    for i, n in enumerate(weights):
        alloc.malloc(("w", i), n * param_bytes)
        own += n * param_bytes
    for i, n in enumerate(mains):
        alloc.malloc(("clone", i), n * param_bytes)
        alloc.malloc(("main", i), n * FP32_BYTES)
        alloc.free_tensor(("clone", i))
        own += n * FP32_BYTES
    return max(0.0, alloc.allocated - own)


def megatron_state_rounding_bytes(scenario: Scenario, stage: int, *, optimizer_params: float) -> float:
    """Allocated bytes the caching allocator's rounding adds to one rank's 16-bit parameters (without the
    distributed optimizer) and fp32 main parameters on ``stage``, for Megatron (0 elsewhere: other frameworks,
    a CPU "GPU", the optimizer on the host, no fp32 main parameters). ``optimizer_params``: the parameters whose
    optimizer states the rank holds."""
    t = scenario.training
    if (not behaviour(t.framework).lazy_optimizer_states or t.offload_optimizer or not optimizer_params
            or getattr(scenario.cluster.gpu, "num_sms", None) is None):
        return 0.0
    masters = t.master_weights and t.param_bytes < FP32_BYTES
    distributed = t.effective_zero >= 1
    if distributed and not masters:
        return 0.0
    keys = rank_keys(scenario, stage) if not distributed else ()
    pieces = optimizer_pieces_key(scenario, stage) if masters else None
    return _ROUNDING(scenario.model, keys, pieces, t.param_bytes)


def _model_rounding(model, keys: tuple, pieces, param_bytes: int) -> float:
    """_rounding of the 16-bit tensors of the chunks ``keys`` and the fp32 main parameters of the optimizer
    pieces ``pieces`` (grad_buffer.optimizer_pieces_key; None: no main parameters) of ``model``."""
    weights = tuple(round(x.elems) for k in keys for x in key_tensors(model, k))
    mains = tuple(round(n) for n in pieces_of(model, pieces)) if pieces is not None else ()
    return _rounding(weights, mains, param_bytes)


_ROUNDING = IdentityMemo(_model_rounding)  # per model object and chunk keys: the planner's candidates share them
