"""What PyTorch's CUDA caching allocator holds beyond the allocated peak: the reserved-but-free bytes at the
reserved peak (``torch.cuda.max_memory_reserved`` - ``max_memory_allocated``), derived from how it works.

The allocator (c10/cuda/CUDACachingAllocator.cpp, read via find_string ids 6306562085 and 3232397):

* serves a request from the smallest cached free block of its pool that is at least as large (best fit,
  ``get_free_block``), splitting it; a freed block goes back to the cache, merged only with free neighbours
  of its own segment -- blocks are never joined across segments;
* when no cached block is large enough it cudaMallocs a new segment the size of the (rounded) request
  (``alloc_block``: requests above 10 MiB get their own segment, rounded to 2 MiB) and keeps it;
* frees cached segments only when a cudaMalloc fails (``release_available_cached_blocks`` /
  ``release_cached_blocks``, then retry) or on ``empty_cache``. So cached bytes never cause an out-of-memory
  error by themselves, and the planner's fit check does not count them (memory.StageMemory.total); only the
  reserved and nvidia-smi counters do.

Applied to the step's tensors on the loss stage, whose peak is the loss when its logits dwarf the blocks' own
tensors (vocabulary larger than the MLP width): by the time the loss runs, the last block's forward
temporaries are freed and cached, each smaller than any logits-sized request, so the loss's tensors take new
segments beside them -- that block's working set (``recompute_working``: what recomputation materializes, the
same tensors the checkpointed forward freed) stays cached, up to the loss's own workspace, which it could
otherwise have served. torch's eager fp32 loss adds its 16-bit logits' segment: freed before the backward
(torchtitan ``del pred``), it sits idle while the fp32 gradients need larger blocks. The first step's optimizer
states, created into the freed activation segments, are first_step_fragmentation.py's (a replay of the allocator,
caching_allocator.py); the pools of FSDP's side streams are fsdp_stream_pools.py's; other phases are not
modelled. Held against torch's own allocation trace of torchtitan's eager Llama 2 7B step replayed through the
allocator (kernels/alloc_trace.py; benchmarks/bench_titan_allocator_trace.py, PR #165's shapes), the compute
stream's reserved-but-free bytes are 1.8 GiB with full AC and 4.3 GiB with per-op SAC where this term gives 3.8
and 2.9 (the PR's FSDP2 runs, less the side-stream pools: 3.0 and 4.6): the blocks' saved tensors interleave with
their transients under SAC, which the loss-stage term does not see. Where a scenario runs that code under per-op
SAC, eager or compiled (the eager step's tables standing in for the compiled one's), op_sac_trace.py generates the
step's allocations op by op from the shapes and its replay's cached bytes replace this term
(memory._allocator_cached).

This is the allocator's default segment mode. With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` a request
that no free block holds grows the stream's one segment, and a free block at its end counts toward it
(``find_expandable_block``), so the last block's temporaries can be reused; that mode is not modelled (the
memory dataset's torchtitan runs state no allocator setting: PR #165's run_llama_train.sh sets none, read_file
id 17467273460; the June 2025 run's torchrun command sets none, id 23486694764).
"""

from __future__ import annotations

from trainsim.specs.framework_behaviour import behaviour


def loss_stage_cached_bytes(*, working: float, loss_workspace: float, logits_bytes: float, eager_loss: bool,
                            vocab: int, ffn: int) -> float:
    """Cached-but-free bytes at the loss's peak on the loss stage, beyond what is allocated then.

    ``working``: the last block's recompute working set (freed forward temporaries); ``loss_workspace``: the
    loss's transient bytes (activations.logits_workspace_bytes); ``logits_bytes``: the 16-bit logits of the
    rank's vocabulary shard; ``eager_loss``: torch's eager fp32 cross-entropy. Zero where the block's tensors
    are not smaller than the logits' (``vocab <= ffn``).
    """
    if vocab <= ffn:
        return 0.0
    return min(working, loss_workspace) + (logits_bytes if eager_loss else 0.0)


def grads_off_peak(*, framework: str, zero: int, microbatches: int, grads: float, activations: float) -> float:
    """Sharded gradient bytes that do not exist at the activation peak but stay reserved, cached in the
    reduce-scatter stream's pool.

    FSDP2 allocates each unit's reduce-scatter output -- the sharded gradient, which ``.grad`` views -- under
    ``torch.cuda.stream(reduce_scatter_stream)`` (torch/distributed/_composable/fsdp/_fsdp_collectives.py
    ``foreach_reduce``, read_file id 588052386: "the GPU sharded gradient is allocated in the RS stream"); FSDP1
    its ``new_sharded_grad`` inside ``_post_backward_stream`` (torch/distributed/fsdp/_runtime_utils.py
    ``_reduce_grad``, read_file id 411759125). ``zero_grad(set_to_none=True)`` frees them before the forward
    (torchtitan train.py calls it at the top of every step), and the backward re-creates them unit by unit,
    after the activation peak at its start. So with one micro-batch per step (no accumulation across
    micro-batches) the peak holds ``max(activations, grads)`` of the two, not both: ``min(grads, activations)``
    is off the peak. The allocator serves a request only from blocks of the requesting stream
    (c10/cuda/CUDACachingAllocator.cpp ``get_free_block``: ``(*it)->stream != p.stream()`` fails, read_file id
    3232397), so the freed gradients' blocks stay reserved in the side stream's pool, unusable by the forward:
    the reserved counter keeps them. torch's FSDPMemTracker shows one unit's gradient shard at the peak of an
    FSDP2 step (tests/test_memory_oracle.py).
    """
    if not behaviour(framework).side_stream_grads or zero < 2 or microbatches > 1:
        return 0.0
    return min(grads, activations)
