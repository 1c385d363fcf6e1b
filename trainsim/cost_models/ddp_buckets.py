"""The data-parallel gradient reductions Megatron's DDP issues for one model chunk, and when each can start. Pure.

Megatron-Core (framework ``megatron``, ``DistributedDataParallel``): one gradient buffer per chunk for the dense
parameters and one for the expert parameters, each cut into buckets by grad_buffer.buffer_buckets; each bucket is
a bucket group of its own and one reduce-scatter (distributed optimizer) or all-reduce, launched once every
gradient in it has been produced in the last micro-batch's backward (``partition_buckets`` case 2; param_and_grad_
buffer.py ``register_grad_ready``). The bucket size ``max(40M, 1M x dp)`` applies only with ``overlap_grad_reduce``,
only to the first model chunk (``disable_bucketing=(model_chunk_idx > 0)``) and only on pipeline rank 0:
``if disable_bucketing or pp_rank > 0: self.bucket_size = None`` (megatron/core/distributed/
distributed_data_parallel.py, NVIDIA/Megatron-LM d98e8a64, find_string id 51877415627; since 5d745a79 of
2023-10-23), so every other chunk is one bucket. The 64-element alignment, lcm(dp, 128) bucket padding and the
tied embedding's own bucket belong to the distributed optimizer's layout (``DistributedOptimizer._compute_per_
buffer_param_layout``; ``_compute_default_per_buffer_param_layout`` pads nothing and splits nothing).

Megatron-LM 2021/2022 (``megatron-2021``, ``megatron-2022``): the local DDP's ``allreduce_gradients`` issues one
``all_reduce`` of each dtype's contiguous grad buffer per model chunk after the backward (megatron/model/
distributed.py at a8d172b3, 2021-04, and 55ba1f7b, 2022-05; the main grads are all fp32: one buffer), and the 2022
distributed optimizer one ``_reduce_scatter_base`` per chunk buffer (megatron/optimizer/distrib_optimizer.py
``reduce_model_grads`` at 52e63688): one call per chunk. Those versions have no overlapped reduction; a scenario
that turns ``overlap_grad_reduce`` on for them gets Megatron-Core's buckets, the code that brought the overlap.

A bucket becomes ready when the gradient of its last tensor in buffer order -- the earliest registered, as the
buffer runs in reverse registration order -- is produced. The backward of a chunk runs its output head (and MTP
modules) first, then its blocks from the last to the first, then the embedding; ``ready_fractions`` places each
tensor's gradient at its module's share of the chunk's backward time, within a block in proportion to the
tensors' elements (a weight gradient GEMM's time is proportional to its weight's elements at a fixed token count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import IdentityMemo

from .framework import overlap_grad_reduce
from .grad_buffer import buffer_buckets, megatron_bucket_params
from .param_tensors import ChunkKey, ParamTensor, chunk_key, key_tensors

if TYPE_CHECKING:
    from trainsim.specs import Scenario, TrainingSpec


@dataclass(frozen=True)
class DpBucket:
    """One gradient reduction call of a chunk: its elements (padded), whether it holds expert gradients and the
    registration index (in chunk_tensors) of the tensor whose gradient completes it."""

    elems: int
    expert: bool
    closing_tensor: int


def issues_ddp_buckets(training: TrainingSpec) -> bool:
    """Whether the chunk's gradient reduction is Megatron DDP's (the Megatron-Core or legacy Megatron-LM wrapper at
    ZeRO 0-1; Megatron-DeepSpeed reduces in DeepSpeed's engine)."""
    return behaviour(training.framework).megatron_ddp is not None and training.effective_zero <= 1


def chunk_dp_buckets(scenario: Scenario, stage: int, chunk: int, n: int,
                     n_expert: int | None = None) -> tuple[DpBucket, ...]:
    """The DDP buckets of ``stage``'s model chunk ``chunk`` in launch order (module doc): dense buffer first, laid
    out for ``n`` data-parallel ranks, then the expert buffer, laid out for the ``n_expert`` ranks of the
    expert-data-parallel group it reduces over (default ``n``). Memoised per model object and chunk."""
    tr = scenario.training
    key = chunk_key(scenario, scenario.virtual_stage(stage, chunk))
    if behaviour(tr.framework).megatron_ddp == "local" and not overlap_grad_reduce(tr):
        return _CHUNK_BUCKETS(scenario.model, key, None, n, n, False, False)
    dist_opt = tr.effective_zero >= 1 and tr.optimizer != "muon"  # dist_muon's DDP lays out no DistOpt shards
    bucketed = overlap_grad_reduce(tr) and chunk == 0 and stage == 0
    size = megatron_bucket_params(scenario, tr.dp_bucket_mb) if bucketed else None
    shared = dist_opt and scenario.model.tie_embeddings and scenario.layout.pp > 1
    return _CHUNK_BUCKETS(scenario.model, key, size, n, n_expert or n, dist_opt, shared, True)


def _chunk_buckets(model, key: ChunkKey, size: float | None, n: int, n_expert: int, dist_opt: bool, shared: bool,
                   bucketed: bool = False) -> tuple[DpBucket, ...]:
    """chunk_dp_buckets of the chunk ``key`` describes; not ``bucketed``: the legacy DDP's one call per chunk."""
    tensors = key_tensors(model, key)
    if not bucketed:
        return (DpBucket(round(sum(t.elems for t in tensors)), False, 0),) if tensors else ()
    out: list[DpBucket] = []
    for expert in (False, True):
        idx = [i for i, t in enumerate(tensors) if t.expert == expert]
        if not idx:
            continue
        own = frozenset(k for k, i in enumerate(idx) if shared and tensors[i].kind in ("embedding", "head"))
        sizes = [max(1, round(tensors[i].elems)) for i in idx]
        pos = 0  # tensors of this buffer laid out so far (the buffer runs in reverse registration order)
        for b in buffer_buckets(sizes, n_expert if expert else n, size, dist_opt, own):
            pos += len(b.ranges)
            out.append(DpBucket(b.size, expert, idx[len(idx) - pos]))
    return tuple(out)


_CHUNK_BUCKETS = IdentityMemo(_chunk_buckets)


def _segment(name: str) -> str:
    """The module of a chunk's backward a tensor's gradient comes from: 'head', 'embedding' or 'layers.<i>'."""
    if name.startswith("layers."):
        return ".".join(name.split(".")[:2])
    return "embedding" if name.startswith("embedding.") else "head"


@dataclass(frozen=True)
class SegmentProfile:
    """Where each tensor's gradient falls in a chunk's backward (ready_fractions): the chunk's modules in backward
    order ('head', 'embedding' or 'layers.<i>'), and per tensor its module's position in that order and the
    elements of its module produced up to and including it, over the module's elements (at least 1)."""

    segments: tuple[str, ...]
    position: tuple[int, ...]
    done: tuple[float, ...]
    seg_elems: tuple[float, ...]


def segment_profile(tensors: tuple[ParamTensor, ...]) -> SegmentProfile:
    """The SegmentProfile of a chunk's tensors (registration order)."""
    names = [_segment(t.name) for t in tensors]
    seg_elems: dict[str, float] = {}
    for name, t in zip(names, tensors):
        seg_elems[name] = seg_elems.get(name, 0.0) + t.elems
    segments: list[str] = []
    position, done_of, elems_of = [0] * len(tensors), [0.0] * len(tensors), [1.0] * len(tensors)
    current, done = None, 0.0
    for i in reversed(range(len(tensors))):
        if names[i] != current:
            current, done = names[i], 0.0
            segments.append(current)
        done += tensors[i].elems
        position[i], done_of[i], elems_of[i] = len(segments) - 1, done, max(seg_elems[current], 1.0)
    return SegmentProfile(tuple(segments), tuple(position), tuple(done_of), tuple(elems_of))


def chunk_segment_profile(scenario: Scenario, vstage: int) -> SegmentProfile:
    """segment_profile of virtual stage ``vstage``'s tensors (param_tensors.chunk_tensors). Memoised per model
    object and chunk."""
    return _PROFILES(scenario.model, chunk_key(scenario, vstage))


_PROFILES = IdentityMemo(lambda model, key: segment_profile(key_tensors(model, key)))


def ready_fractions(tensors: tuple[ParamTensor, ...], closing: list[int], head_s: float, block_s: float,
                    embedding_s: float) -> tuple[float, ...]:
    """For each bucket (``closing``: the registration index of the tensor that completes it) the fraction of the
    chunk's backward after which it is ready (module doc); ``head_s``, ``block_s``, ``embedding_s`` are the
    backward seconds of the head (with MTP), of one block and of the embedding."""
    return profile_ready_fractions(segment_profile(tensors), closing, head_s, block_s, embedding_s)


def profile_ready_fractions(profile: SegmentProfile, closing: list[int], head_s: float, block_s: float,
                            embedding_s: float) -> tuple[float, ...]:
    """ready_fractions from the chunk's SegmentProfile: each module's backward starts once every module before it
    in backward order has run, and a tensor's gradient is ready at its module's start plus the module's time in
    proportion to the elements produced up to it."""
    seg_s = {"head": head_s, "embedding": embedding_s}
    starts, clock = [], 0.0
    for seg in profile.segments:
        starts.append(clock)
        clock += seg_s.get(seg, block_s)
    total = clock
    out = []
    for i in closing:
        k = profile.position[i]
        ready = starts[k] + seg_s.get(profile.segments[k], block_s) * profile.done[i] / profile.seg_elems[i]
        out.append(min(1.0, ready / total) if total > 0 else 1.0)
    return tuple(out)
