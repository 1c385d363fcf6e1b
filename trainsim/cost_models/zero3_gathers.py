"""How many all-gathers DeepSpeed ZeRO-3 issues to bring a model chunk's parameters in for one pass. Pure.

ZeRO-3 partitions every ``nn.Parameter`` on its own; a parameter of at most ``stage3_param_persistence_threshold``
elements (default 1e5, framework.DEEPSPEED_PERSISTENCE_THRESHOLD) stays whole on every rank (``ds_persist``,
deepspeed/runtime/zero/partition_parameters.py ``_convert_to_deepspeed_param``) and is never gathered.

* ``deepspeed`` (DeepSpeed since ``all_gather_coalesced``): before each submodule runs, ``fetch_sub_module``
  gathers those of its own parameters (``iter_params(module, recurse=False)``) not yet available with one
  ``all_gather_coalesced`` call; once the first step's trace is recorded the same call pops the submodule's
  parameters off the trace-ordered parameter queue and prefetches the next ones as one more coalesced call: it
  takes queued parameters while the elements it holds stay below ``min(stage3_max_live_parameters - gathered,
  stage3_prefetch_bucket_size)`` (defaults 1e9 and 5e7, framework.DEEPSPEED_MAX_LIVE_PARAMS /
  DEEPSPEED_PREFETCH_BUCKET), counting the elements of every call as gathered until the submodule that uses
  them releases them after its pass (deepspeed/runtime/zero/partitioned_param_coordinator.py
  ``fetch_sub_module`` / ``__all_gather_params_`` / ``release_sub_module``, microsoft/DeepSpeed v0.12.3 and
  38327e07). ``prefetch_calls`` replays that rule over one pass in trace order (the gathered submodules in
  the order their tensors are listed: the forward's order) and gives each call's parameters: LLaMA-13B's
  q, k, v, o (2.6e7 elements each) pair up under the 5e7 bucket, its 7.1e7-element MLP linears go one by
  one, and the live bound, once the gathered elements near 1e9, shrinks each prefetch to what the previous
  submodule released. Submodules without gathered parameters (containers, norms under the persistence
  threshold, activations) also run the prefetch; they are left out, which moves a few calls' grouping only.
* Handle work per call (``deepspeed``): ``all_gather_coalesced`` of a single parameter takes its own path --
  ``all_gather_into_tensor`` straight into the parameter's full-size buffer, returned as an ``AllGatherHandle``
  whose ``wait`` only waits -- so it loops over no ranks and copies nothing. Only a call holding two or more
  parameters builds the flat buffer's per-rank ``narrow`` views and returns an ``AllGatherCoalescedHandle``,
  whose ``wait`` narrows each parameter's piece out of every rank's partition, ``torch.cat``s them into
  ``param.data`` and ``record_stream``s each piece (partition_parameters.py ``if len(params) == 1: # have an
  opportunity to avoid some intermediate memory allocations``, the same in v0.10.0, v0.12.3 and 38327e07).
  ``coalesced`` counts the calls, parameters and elements that take the coalesced path.
* ``deepspeed-2021`` (the ZeRO-3 of early 2021): ``_all_gather`` loops over the submodule's parameters and issues
  one ``_allgather_param`` per tensor (partition_parameters.py at microsoft/DeepSpeed c83e49f9): one call per
  gathered tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainsim.specs.framework_behaviour import BEHAVIOURS

from .framework import DEEPSPEED_MAX_LIVE_PARAMS, DEEPSPEED_PERSISTENCE_THRESHOLD, DEEPSPEED_PREFETCH_BUCKET
from .param_tensors import ParamTensor


def _module(name: str) -> str:
    """The submodule that registers parameter ``name`` (its name without the parameter's own)."""
    return name.rsplit(".", 1)[0]


def gathered(tensors: tuple[ParamTensor, ...] | list[ParamTensor]) -> list[ParamTensor]:
    """The tensors ZeRO-3 partitions and gathers: those above the persistence threshold."""
    return [t for t in tensors if t.elems > DEEPSPEED_PERSISTENCE_THRESHOLD]


def _submodules(tensors: tuple[ParamTensor, ...] | list[ParamTensor]) -> list[list[float]]:
    """The gathered tensors' elements of each submodule, submodules in the order their tensors are listed."""
    groups: dict[str, list[float]] = {}
    for t in gathered(tensors):
        groups.setdefault(_module(t.name), []).append(t.elems)
    return list(groups.values())


def prefetch_calls(modules: list[list[float]], bucket: float = DEEPSPEED_PREFETCH_BUCKET,
                   max_live: float = DEEPSPEED_MAX_LIVE_PARAMS) -> list[tuple[float, ...]]:
    """The all-gathers of one pass over ``modules`` (each a submodule's gathered tensors' elements, in trace
    order), each as its parameters' elements (module doc): the submodule's own missing parameters on demand, then
    one prefetch of queued parameters until it holds ``min(max_live - live, bucket)`` elements; the submodule's
    parameters are released after it runs."""
    queue = [e for m in modules for e in m]
    avail: set[int] = set()
    calls: list[tuple[float, ...]] = []
    live, head, first = 0.0, 0, 0
    for sizes in modules:
        own = range(first, first + len(sizes))
        first += len(sizes)
        missing = [k for k in own if k not in avail]
        if missing:
            calls.append(tuple(queue[k] for k in missing))
            avail.update(missing)
            live += sum(queue[k] for k in missing)
        head, budget, got, held = max(head, own.stop), min(max_live - live, bucket), [], 0.0
        while head < len(queue) and held < budget:
            if head not in avail:
                got.append(head)
                held += queue[head]
            head += 1
        if got:
            calls.append(tuple(queue[k] for k in got))
            avail.update(got)
            live += held
        avail.difference_update(own)
        live -= sum(sizes)
    return calls


@dataclass(frozen=True)
class PassGathers:
    """ZeRO-3's all-gathers of one pass over a list of tensors (module doc)."""

    calls: int                # all-gather calls
    gathered: int             # tensors gathered (above the persistence threshold)
    coalesced_calls: int      # calls that hold two or more tensors (all_gather_coalesced's flat-buffer path)
    coalesced_tensors: int    # tensors those calls hold
    coalesced_elems: float    # their elements


def pass_gathers(tensors: tuple[ParamTensor, ...] | list[ParamTensor], framework: str) -> PassGathers:
    """The all-gathers of one pass over ``tensors``, the prefetch replayed once (module doc): the prefetcher's calls,
    or one per gathered tensor, none coalesced, where the framework gathers each separately
    (``zero3_gather_per_tensor``: deepspeed-2021, whose list all-gathers are costed in simulator/grad_sync.py)."""
    n_gathered = len(gathered(tensors))
    if BEHAVIOURS[framework].zero3_gather_per_tensor:
        return PassGathers(n_gathered, n_gathered, 0, 0, 0.0)
    calls = prefetch_calls(_submodules(tensors))
    held = [c for c in calls if len(c) > 1]
    return PassGathers(len(calls), n_gathered, len(held), sum(len(c) for c in held), sum(sum(c) for c in held))


def gather_calls(tensors: tuple[ParamTensor, ...] | list[ParamTensor], framework: str) -> int:
    """All-gathers of one pass over ``tensors`` (``pass_gathers``)."""
    return pass_gathers(tensors, framework).calls


def coalesced(tensors: tuple[ParamTensor, ...] | list[ParamTensor], framework: str) -> tuple[int, int, float]:
    """(calls, tensors, elements) of ``tensors``' all-gathers that hold two or more gathered tensors and so take
    ``all_gather_coalesced``'s flat-buffer path with its per-rank views and unpacking copy (module doc); a
    single-tensor call takes neither. (0, 0, 0.0) where the framework gathers each tensor separately."""
    g = pass_gathers(tensors, framework)
    return g.coalesced_calls, g.coalesced_tensors, g.coalesced_elems
