"""Gradient buckets and the optimizer's shard of a rank's parameter tensors (param_tensors.py). Pure.

Megatron's data-parallel wrapper lays each model chunk's parameters into one contiguous gradient buffer and cuts it
into buckets; the distributed optimizer gives each data-parallel rank the same contiguous 1/n slice of every
bucket, cutting tensors at the slice boundaries (NVIDIA/Megatron-LM megatron/core/distributed/
param_and_grad_buffer.py ``_ParamAndGradBuffer.__init__``, find_string id 28228442; megatron/core/optimizer/
distrib_optimizer.py ``_build_model_gbuf_range`` / ``_build_model_gbuf_param_range_map``, read_file id
27234603916):

* parameters go into the buffer in reverse registration order ("to roughly follow backprop order");
* with the distributed optimizer each parameter starts at a multiple of 64 elements (``_pad_start_of_param_if_
  needed``), and a bucket ends padded to a multiple of lcm(n, 128) (``_pad_end_of_bucket_if_needed``);
* a bucket closes once it holds ``bucket_size`` elements (DDP: max(40M, 1M x dp), or ``--ddp-bucket-size``);
  without gradient-reduction overlap, for every model chunk after the first (``disable_bucketing=
  (model_chunk_idx > 0)``, megatron/training/training.py, find_string id 8571023248) and on every pipeline rank
  but the first (``if disable_bucketing or pp_rank > 0: self.bucket_size = None``, megatron/core/distributed/
  distributed_data_parallel.py, find_string id 51877415627), one bucket holds the chunk; a tied word embedding / output layer of a pipelined model gets a bucket of its own
  (``_does_param_require_new_bucket``: ``shared_embedding``, which Megatron-Core's LanguageModule sets on both
  when pp > 1, megatron/core/models/common/language_module/language_module.py, find_string id 47602216427);
* expert parameters sit in a buffer of their own, sharded over the expert-data-parallel group.

Rank r owns ``[r * size/n, (r + 1) * size/n)`` of each bucket; its optimizer holds one fp32 main parameter (and
Adam's states) per intersected tensor piece. Megatron-LM's legacy distributed optimizer (2022) shards its one
unbucketed buffer per chunk the same way, without the 64-element alignment. FSDP1's flat parameters (one per
wrapped block, the embedding and head in the root unit, each padded to a multiple of n) are sharded the same way.
torch's FSDP2 (framework ``torch``) shards every tensor on dim 0 instead: 1/n of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import BEHAVIOURS
from trainsim.specs.memo import IdentityMemo

from .framework import overlap_grad_reduce
from .param_tensors import ChunkKey, ParamTensor, chunk_key, key_tensors

if TYPE_CHECKING:
    from trainsim.specs import ModelSpec, Scenario

# Megatron-Core DistributedDataParallel: bucket_size = max(40_000_000, 1_000_000 * dp_size) parameters.
DDP_BUCKET_PARAMS = 40_000_000
DDP_BUCKET_PARAMS_PER_DP = 1_000_000
MiB = 1 << 20  # torch DDP's bucket_cap_mb counts MiB (bucket_cap_mb * 1024 * 1024 bytes)
PARAM_ALIGN = 64        # _pad_start_of_param_if_needed: 128-byte aligned starts of >= 16-bit values
BUCKET_ALIGN = 128      # _pad_end_of_bucket_if_needed: lcm(dp, 128)


@dataclass(frozen=True)
class Bucket:
    """One bucket of a gradient buffer: its padded size and each tensor's (start, end) inside it."""

    size: int
    ranges: tuple[tuple[int, int], ...]


def whole_tensor_buckets(params: float, bucket_params: float, tensors: int | None = None) -> int:
    """Buckets of at most ``bucket_params`` elements that ``params`` gradients fill, at most one per tensor: a bucket
    holds whole tensors -- DeepSpeed's ZeRO hooks flush the bucket before a gradient that would overflow it
    (stage_1_and_2.py ``reduce_independent_p_g_buckets_and_remove_grads``, stage3.py ``reduce_ready_partitions_and_
    remove_grads``), torch DDP's reducer closes a bucket at the tensor that reaches ``bucket_cap_mb`` -- so ``tensors``
    tensors fill no more than ``tensors`` buckets (None: no tensor bound)."""
    buckets = max(1, math.ceil(params / bucket_params))
    return buckets if tensors is None else max(1, min(buckets, tensors))


def megatron_bucket_params(scenario: Scenario, bucket_mb: float | None = None) -> float:
    """Megatron-Core DDP's bucket size in parameters: max(40M, 1M x dp), or ``bucket_mb`` MiB of gradients."""
    if bucket_mb is not None:
        return bucket_mb * MiB / scenario.training.grad_bytes
    return max(DDP_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP * scenario.dp)


def buffer_buckets(sizes: list[int], n: int, bucket_size: float | None, align_params: bool,
                   own_bucket: frozenset[int] = frozenset()) -> list[Bucket]:
    """The buckets of one gradient buffer over tensors of ``sizes`` elements (registration order; laid out in
    reverse), sharded ``n`` ways; tensors whose index is in ``own_bucket`` get a bucket of their own. Each
    bucket ends padded to a multiple of n (lcm(n, 128) with ``align_params``, which also starts every tensor
    at a multiple of 64 elements)."""
    end_align = math.lcm(n, BUCKET_ALIGN) if align_params else n
    buckets: list[Bucket] = []
    ranges: list[tuple[int, int]] = []
    bucket_start = param_start = end = 0

    def close(at: int) -> int:
        padded = -(-at // end_align) * end_align
        buckets.append(Bucket(padded - bucket_start, tuple(ranges)))
        ranges.clear()
        return padded

    for i in reversed(range(len(sizes))):
        if align_params:
            param_start = -(-param_start // PARAM_ALIGN) * PARAM_ALIGN
        if i in own_bucket and ranges:  # the tensors gathered so far close a bucket first
            bucket_start = param_start = close(param_start)
        end = param_start + sizes[i]
        ranges.append((param_start - bucket_start, end - bucket_start))
        if i in own_bucket or (bucket_size is not None and end - bucket_start >= bucket_size):
            bucket_start = param_start = close(end)
        else:
            param_start = end
    if ranges:
        close(end)
    return buckets


def shard_pieces(buckets: list[Bucket], n: int, rank: int) -> list[int]:
    """Elements of each tensor piece inside rank ``rank``'s contiguous 1/n slice of every bucket, in buffer
    order (distrib_optimizer.py ``_build_model_gbuf_param_range_map``)."""
    out = []
    for b in buckets:
        lo, hi = rank * b.size // n, (rank + 1) * b.size // n
        out += [min(e, hi) - max(s, lo) for s, e in b.ranges if min(e, hi) > max(s, lo)]
    return out


@dataclass(frozen=True)
class BufferRules:
    """How a rank's gradient buffers are cut (module doc), from the scenario: ``megatron`` Megatron's per-chunk
    buffers (else FSDP1's flat parameters), ``core`` Megatron-Core's distributed-optimizer layout (64-element
    starts, lcm(n, 128) ends), ``bucket`` the first chunk's bucket size in parameters (None: one bucket),
    ``shared`` a tied embedding / output layer in buckets of their own, ``fsdp2`` per-tensor sharding."""

    megatron: bool
    core: bool
    bucket: float | None
    shared: bool
    fsdp2: bool


def buffer_rules(scenario: Scenario, first_chunk: bool) -> BufferRules:
    """The BufferRules of ``scenario``; ``first_chunk``: pipeline rank 0's first chunk."""
    tr = scenario.training
    fw = BEHAVIOURS[tr.framework]
    core = fw.megatron_ddp == "core"
    bucket = megatron_bucket_params(scenario, tr.dp_bucket_mb) if (core and overlap_grad_reduce(tr) and first_chunk) \
        else None
    return BufferRules(fw.megatron_arguments, core, bucket, scenario.model.tie_embeddings and scenario.layout.pp > 1
                       and core, fw.fsdp2)


def _chunk_units(rules: BufferRules, tensors: tuple[ParamTensor, ...], expert: bool) -> list[list[ParamTensor]]:
    """The buffers (Megatron: one per chunk) or flat parameters (FSDP1: one per block, the rest in one) of a chunk's
    dense or expert tensors."""
    chosen = [t for t in tensors if t.expert == expert]
    if rules.megatron:
        return [chosen] if chosen else []
    units: dict[str, list[ParamTensor]] = {}
    for t in chosen:
        key = t.name.split(".")[1] if t.name.startswith("layers.") else "root"
        units.setdefault(key, []).append(t)
    return list(units.values())


def _unit_buckets(rules: BufferRules, unit: list[ParamTensor], n: int) -> list[Bucket]:
    """The buckets of one buffer or flat parameter (module doc)."""
    sizes = [max(1, round(t.elems)) for t in unit]
    if not rules.megatron:
        return buffer_buckets(sizes, n, None, False)
    own = frozenset(i for i, t in enumerate(unit) if rules.shared and t.kind in ("embedding", "head"))
    return buffer_buckets(sizes, n, rules.bucket, rules.core, own)


def optimizer_tensor_elems(scenario: Scenario, stage: int, rank: int = 0) -> list[float]:
    """Elements of each tensor the optimizer of data-parallel rank ``rank`` of ``stage`` updates: every tensor
    whole without ZeRO; with ZeRO >= 1 the pieces of its flat 1/n slices (module doc), or 1/n of every tensor
    under torch's FSDP2 / per-tensor sharding (framework ``torch``); n is memory.shard_groups' group. Memoised
    per Scenario object, and per model and chunk (specs/memo.py)."""
    return list(_OPTIMIZER_ELEMS(scenario, stage, rank))


PiecesKey = tuple[tuple[ChunkKey, BufferRules, bool, int, int], ...]


def optimizer_pieces_key(scenario: Scenario, stage: int, rank: int = 0) -> PiecesKey:
    """What optimizer_tensor_elems depends on, per chunk and buffer (dense, expert): the chunk's key, its
    BufferRules, expert or not, the shard group n and the rank in it."""
    from .memory import shard_groups  # cycle: memory imports this module

    sharded = scenario.training.effective_zero >= 1
    groups = dict(zip((False, True), shard_groups(scenario))) if sharded else {False: 1, True: 1}
    out = []
    for c in range(scenario.layout.vpp):
        key = chunk_key(scenario, scenario.virtual_stage(stage, c))
        rules = buffer_rules(scenario, c == 0 and stage == 0)
        for expert, group in groups.items():
            n = max(1, round(group))
            out.append((key, rules, expert, n, rank % n))
    return tuple(out)


def pieces_of(model: ModelSpec, key: PiecesKey) -> tuple[float, ...]:
    """optimizer_tensor_elems of the scenario ``key`` describes (optimizer_pieces_key) of ``model``: its chunks'
    pieces, each memoised per model object and chunk."""
    return tuple(x for part in key for x in _CHUNK_PIECES(model, *part))


def _optimizer_tensor_elems(scenario, stage: int, rank: int) -> tuple[float, ...]:
    return pieces_of(scenario.model, optimizer_pieces_key(scenario, stage, rank))


def _chunk_pieces(model, key: ChunkKey, rules: BufferRules, expert: bool, n: int, rank: int) -> tuple[float, ...]:
    """The optimizer's tensor pieces of one chunk's dense or expert tensors on rank ``rank`` of ``n``."""
    tensors = key_tensors(model, key)
    if n == 1 or rules.fsdp2:
        return tuple(t.elems / n for t in tensors if t.expert == expert)
    out: list[float] = []
    for unit in _chunk_units(rules, tensors, expert):
        out += shard_pieces(_unit_buckets(rules, unit, n), n, rank)
    return tuple(out)


_OPTIMIZER_ELEMS = IdentityMemo(_optimizer_tensor_elems)
_CHUNK_PIECES = IdentityMemo(_chunk_pieces)
