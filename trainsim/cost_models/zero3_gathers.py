"""How many all-gathers DeepSpeed ZeRO-3 issues to bring a model chunk's parameters in for one pass. Pure.

ZeRO-3 partitions every ``nn.Parameter`` on its own; a parameter of at most ``stage3_param_persistence_threshold``
elements (default 1e5, framework.DEEPSPEED_PERSISTENCE_THRESHOLD) stays whole on every rank (``ds_persist``,
deepspeed/runtime/zero/partition_parameters.py ``_convert_to_deepspeed_param``) and is never gathered.

* ``deepspeed`` (DeepSpeed since ``all_gather_coalesced``): before each submodule runs, ``fetch_sub_module``
  gathers the parameters the submodule itself registers (``iter_params(module, recurse=False)``) that are not
  yet available with one ``all_gather_coalesced`` call, which issues one ``all_gather_into_tensor`` over a flat
  buffer per dtype (all parameters share the training dtype here); after the trace of the first step is recorded
  the same call also prefetches the next parameters in trace order, again as one coalesced call of up to
  ``stage3_prefetch_bucket_size`` elements, bounded by ``stage3_max_live_parameters``
  (deepspeed/runtime/zero/partitioned_param_coordinator.py ``fetch_sub_module`` / ``__all_gather_params_``,
  partition_parameters.py ``all_gather_coalesced``, microsoft/DeepSpeed 38327e07). Once the live-parameter bound
  binds -- a model whose gathered layers exceed 1e9 elements, or any model whose prefetch runs ahead of its
  releases -- each prefetch replaces what the previous submodule released: one call per submodule with gathered
  parameters. That count is the one costed: per block the attention's projections (a fused ``query_key_value``
  in Megatron's module style, q, k, v separately in Hugging Face's), its output projection, the MLP's linears
  (and per local expert), their biases coalesced with their weights. Prefetch coalescing of several
  submodules into one call while the bound does not bind (small models) is not modelled: it would issue fewer.
* ``deepspeed-2021`` (the ZeRO-3 of early 2021): ``_all_gather`` loops over the submodule's parameters and issues
  one ``_allgather_param`` per tensor (partition_parameters.py at microsoft/DeepSpeed c83e49f9): one call per
  gathered tensor.
"""

from __future__ import annotations

from trainsim.specs.framework_behaviour import BEHAVIOURS

from .framework import DEEPSPEED_PERSISTENCE_THRESHOLD
from .param_tensors import ParamTensor


def _module(name: str) -> str:
    """The submodule that registers parameter ``name`` (its name without the parameter's own)."""
    return name.rsplit(".", 1)[0]


def gathered(tensors: tuple[ParamTensor, ...] | list[ParamTensor]) -> list[ParamTensor]:
    """The tensors ZeRO-3 partitions and gathers: those above the persistence threshold."""
    return [t for t in tensors if t.elems > DEEPSPEED_PERSISTENCE_THRESHOLD]


def gather_calls(tensors: tuple[ParamTensor, ...] | list[ParamTensor], framework: str) -> int:
    """All-gathers of one pass over ``tensors`` (module doc): one per submodule with gathered parameters, or one per
    gathered tensor where the framework gathers each separately (``zero3_gather_per_tensor``: deepspeed-2021)."""
    kept = gathered(tensors)
    if BEHAVIOURS[framework].zero3_gather_per_tensor:
        return len(kept)
    return len({_module(t.name) for t in kept})
