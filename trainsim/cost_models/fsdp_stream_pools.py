"""Bytes FSDP's side streams keep reserved in the CUDA caching allocator beyond what is allocated at the peak.

The allocator keeps one pool of cached blocks per stream: a request is served only from free blocks of the stream
it is made on (c10/cuda/CUDACachingAllocator.cpp ``get_free_block``: ``(*it)->stream != p.stream()`` fails,
read_file id 3232397), so bytes a side stream has cudaMalloc'd stay reserved for it and the compute stream's
activations never reuse them (allocator_reserve.py). FSDP allocates on two side streams:

* **the reduce-scatter pool.** FSDP1 (framework ``pytorch-fsdp``) casts each unit's unsharded flat gradient to
  the reduce dtype inside ``with state._device_handle.stream(state._post_backward_stream)``: ``flat_param.grad
  .data = flat_param.grad.to(handle._reduce_dtype)`` when the gradient's dtype is not the reduce dtype
  (torch/distributed/fsdp/_runtime_utils.py ``_post_backward_hook``, find_string id 5735400598), and
  ``_reduce_grad`` allocates the sharded gradient there too. FSDP2 (framework ``torch``) allocated its flat
  reduce-scatter input (``torch.empty(..., dtype=reduce_dtype)``) inside ``with torch.cuda.stream(
  reduce_scatter_stream)`` (torch/distributed/_composable/fsdp/_fsdp_collectives.py ``foreach_reduce``, read_file
  id 588052386) until pytorch/pytorch#129721 (2024-06-27; torch 2.5) moved the copy-in to the default stream "to
  avoid fragmenting that memory across stream memory pools" -- "that memory cannot be reused by the default
  stream outside of that spike" (the PR's description); the reduce-scatter outputs, the sharded gradients, stay
  in the reduce-scatter stream (TrainingSpec.fsdp_reduce_scatter_input). Each input is freed when its unit's
  reduction is issued, so the next unit's input takes its block (best fit): the pool holds one input per distinct
  unit size -- a transformer block's and the embedding / output unit's -- beside the sharded gradients.
* **the all-gather pool** (FSDP2): ``foreach_all_gather`` allocates each unit's flat all-gather output inside
  ``with torch.cuda.stream(all_gather_copy_in_stream)`` (_fsdp_collectives.py, same read). In the forward the
  result stays referenced (``AllGatherState``) until the next unit's ``wait_for_unshard``, which runs after that
  unit's ``unshard`` has allocated its own output; in the backward it is freed right after its copy-out, before
  the next unit is prefetched (torch/distributed/_composable/fsdp/_fsdp_param_group.py ``wait_for_unshard``,
  find_string id 2400678). So two outputs are alive in the forward: the pool holds a block's and the embedding /
  output unit's output.

Both are replayed through the allocator (caching_allocator.replay) over two steps, on the unit sizes of the rank
(each unit padded to a multiple of the shard group, as FSDP pads its shards). What the memory model already
counts is subtracted: the sharded gradients (``grads`` / ``StageMemory.grads_off_peak``) and the all-gather outputs
FSDP2's peak moment holds (fsdp2_peak.py: one block's at the activation peak, the root's and the first block's in
the forward, none at the root's reduce-scatter). FSDP1's all-gather pool holds its unsharded flat
parameters themselves, which ``zero3_gather_buffers`` counts; its ``record_stream`` frees are bounded by the
rate limiter (``limit_all_gathers``) and not modelled. With CPU offload the sharded gradients leave the device
and neither pool is modelled (0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import BEHAVIOURS
from trainsim.specs.memo import memoised

from .caching_allocator import replay

if TYPE_CHECKING:
    from trainsim.specs import TrainingSpec


def _padded(params: float, shard: int) -> int:
    """Elements of a unit padded to a multiple of the shard group (FSDP's padded flat / dim-0 shards)."""
    return -(-int(params) // shard) * shard


@memoised(maxsize=256)
def reduce_pool_extra(units: tuple[float, ...], shard: int, reduce_bytes: int, input_in_pool: bool,
                      microbatches: int) -> float:
    """Reserved bytes of the reduce-scatter pool beyond the sharded gradients it holds, replayed over two steps.

    ``units``: parameter elements of each FSDP unit in forward order (the backward reduces them in reverse);
    ``input_in_pool``: the unsharded reduce-dtype copy is allocated on this stream (module doc). Per micro-batch
    each unit's input (when in the pool) and its sharded output are allocated, then the input freed; outputs of
    later micro-batches are accumulated into the first's and freed; ``zero_grad`` frees the first's at the step's
    end. From the third micro-batch on each request takes the block its predecessor of the same unit freed, so
    two micro-batches stand for any larger number (the replay's cost stays linear in the units)."""
    events: list[tuple] = []
    for step in range(2):
        for mb in range(min(microbatches, 2)):
            for i, u in enumerate(reversed(units)):
                n = _padded(u, shard)
                if input_in_pool:
                    events.append(("alloc", ("in", step, mb, i), n * reduce_bytes))
                events.append(("alloc", ("out", step, mb, i), n // shard * reduce_bytes))
                if input_in_pool:
                    events.append(("free", ("in", step, mb, i)))
                if mb:
                    events.append(("free", ("out", step, mb, i)))
        events.extend(("free", ("out", step, 0, i)) for i in range(len(units)))
    outputs = sum(_padded(u, shard) // shard * reduce_bytes for u in units)
    return float(max(0, replay(events).peak_reserved - outputs))


@memoised(maxsize=256)
def gather_pool_extra(units: tuple[float, ...], shard: int, param_bytes: int,
                      counted: float | None = None, unit_bytes: tuple[float, ...] | None = None) -> float:
    """Reserved bytes of FSDP2's all-gather pool beyond the all-gather outputs the memory model counts as
    allocated at its peak (``counted``; default the largest unit's output: fsdp2_peak.py says which), replayed over
    two steps: the forward gathers every unit, each output freed once the next one is allocated; the backward every
    block again, each freed before the next is allocated (module doc). The first unit, the root's embedding /
    output, is gathered in the backward only where it was resharded after forward (FSDP2 leaves the root unsharded
    by default, _fsdp_state.py ``_lazy_init``), and then alone, before any block: its output takes the block the
    forward's left, so the replay leaves it out. ``unit_bytes``: each unit's gathered bytes per parameter (under
    torchao's float8 all-gather a block's float8 weights arrive in 1 byte: fsdp2_peak.block_gather_bytes); default
    ``param_bytes`` for every unit."""
    per = unit_bytes or (float(param_bytes),) * len(units)
    size = [int(-(-_padded(u, shard) * b // 1)) for u, b in zip(units, per, strict=True)]  # whole bytes
    events: list[tuple] = []
    for step in range(2):
        for j in range(len(units)):
            events.append(("alloc", (step, "f", j), size[j]))
            if j:
                events.append(("free", (step, "f", j - 1)))
        events.append(("free", (step, "f", len(units) - 1)))
        for j, n in enumerate(reversed(size[1:])):
            events += [("alloc", (step, "b", j), n), ("free", (step, "b", j))]
    if counted is None:
        counted = max(size)
    return float(max(0, replay(events).peak_reserved - counted))


def reduce_input_in_pool(training: TrainingSpec, reduce_bytes: int) -> bool:
    """Whether the unsharded reduce-dtype gradient is allocated on the reduce-scatter stream (module doc)."""
    if not BEHAVIOURS[training.framework].fsdp2:  # FSDP1 (pytorch-fsdp)
        return reduce_bytes != training.param_bytes
    return training.fsdp_reduce_scatter_input == "reduce_scatter_stream"


def stream_pool_cached(training: TrainingSpec, units: tuple[float, ...], shard: int, reduce_bytes: int,
                       microbatches: int, gather_counted: float | None = None,
                       gather_bytes: tuple[float, ...] | None = None) -> float:
    """Cached bytes FSDP's side-stream pools hold at the reserved peak beyond what the memory model counts
    (module doc; ``gather_counted`` and ``gather_bytes`` as ``gather_pool_extra``'s ``counted`` and
    ``unit_bytes``); 0 outside FSDP (ZeRO-2/3 of
    ``FrameworkBehaviour.torch_fsdp``), with CPU offload, or without units."""
    t = training
    if not BEHAVIOURS[t.framework].torch_fsdp or t.effective_zero < 2 or t.offload_params or not units:
        return 0.0
    extra = reduce_pool_extra(units, shard, reduce_bytes, reduce_input_in_pool(t, reduce_bytes), microbatches)
    if BEHAVIOURS[t.framework].fsdp2 and t.effective_zero >= 3:
        extra += gather_pool_extra(units, shard, t.param_bytes, gather_counted, gather_bytes)
    return extra
