"""Device memory a training process holds besides the model: CUDA context, library workspaces, NCCL buffers.

Each term is derived from a documented default or a device measurement (constants below), none fitted to a
validation row. The CUDA context and NCCL's buffers are cudaMalloc'd outside PyTorch's caching allocator
(``OUTSIDE_ALLOCATOR``): nvidia-smi sees them, ``torch.cuda.max_memory_allocated`` does not. The cuBLAS
workspaces come from the caching allocator.

The caching allocator's reserved-but-unused memory is not a runtime term: allocator_reserve.py derives the part
it can (cached blocks at the loss's peak); the rest depends on the allocation order, not on the layout alone.
GMLake (Guo et al., ASPLOS 2024, arXiv:2401.08156) measures an average of 9.2 GB (up to 25 GB) of it on
A100-80GB over eight LLM fine-tuning setups with recomputation, offload and ZeRO. The planner leaves headroom
for it (simulator/planner.DEFAULT_MEMORY_HEADROOM).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour

if TYPE_CHECKING:
    from trainsim.specs import Layout, Scenario

MiB = 1 << 20
# --- runtime memory outside the model, each term derived from a documented default -----------------------
# CUDA context: the driver reserves local memory for every thread the device can hold resident, at the
# per-thread stack limit (cudaLimitStackSize, default 1 KiB: CUDA Runtime API cudaDeviceSetLimit), plus the
# printf FIFO (cudaLimitPrintfFifoSize, 1 MiB) and the device malloc heap (cudaLimitMallocHeapSize, 8 MiB).
CUDA_STACK_BYTES_PER_THREAD = 1024
MAX_THREADS_PER_SM = 2048                # Volta..Hopper, CUDA C++ Programming Guide, compute capabilities table
CUDA_FIFO_AND_HEAP_BYTES = 9 * MiB
# The rest of the context is per process, not per SM: the driver's own context structures and the module images
# a training step loads (lazily, at each kernel's first launch). Measured on one H200 (132 SMs; torch 2.11.0+cu130,
# driver 580.159.04, lazy loading by default; benchmarks/device/context_memory.py, record
# benchmarks/data/context_memory_h200.json): nvidia-smi's process memory less torch.cuda.memory_reserved is
# 610 MiB after the first CUDA call and 694 MiB once a bf16 GEMM (cuBLAS / cuBLASLt), SDPA forward and backward,
# a fused AdamW step and cross-entropy have run; the local memory, FIFO and heap above are 273 MiB of it on
# 132 SMs, which leaves 421 MiB. A stack that loads modules eagerly (CUDA before 12.2) holds more: a row
# states its measured context then (TrainingSpec.cuda_context_bytes).
CUDA_MEASURED_H200_BYTES = 694 * MiB
CUDA_MEASURED_H200_SMS = 132
CUDA_DRIVER_AND_MODULES_BYTES = CUDA_MEASURED_H200_BYTES - (
    CUDA_MEASURED_H200_SMS * MAX_THREADS_PER_SM * CUDA_STACK_BYTES_PER_THREAD + CUDA_FIFO_AND_HEAP_BYTES)
# cuBLAS workspace: PyTorch's default CUBLAS_WORKSPACE_CONFIG ":4096:8" on Hopper (aten/src/ATen/cuda/
# CublasHandlePool.cpp getChosenWorkspaceSize; cuBLAS docs recommend 32 MiB on sm90), one for the cuBLAS and
# one for the cuBLASLt handle of the compute stream, both from the caching allocator.
CUBLAS_WORKSPACE_BYTES = 4096 * 1024 * 8
CUBLAS_HANDLES = 2
# NCCL buffers of one communicator: per channel, one receive buffer per protocol -- Simple NCCL_BUFFSIZE
# (4 MiB, NCCL environment-variable docs), LL128 120 elems x 640 threads x 8 steps x 8 B = 4.6875 MiB and
# LL 8 lines x 512 threads x 8 steps x 16 B = 512 KiB (NCCL src/include/device.h DEFAULT_LL128_BUFFSIZE,
# DEFAULT_LL_BUFFSIZE) -- on up to MAXCHANNELS = 32 channels: an upper bound, as NCCL connects protocols
# lazily (NCCL_RUNTIME_CONNECT). cudaMalloc'd by NCCL, outside the caching allocator.
NCCL_BUFFERS_PER_CHANNEL_BYTES = 4 * MiB + 120 * 640 * 8 * 8 + 8 * 512 * 8 * 16
# NCCL's own state beyond the channel buffers, measured on one H200 (NCCL 2.28.9, torch 2.11.0+cu130;
# benchmarks/device/nccl_single_rank_memory.py, record benchmarks/data/nccl_single_rank_memory_h200.json): the first
# one-rank communicator adds 558 MiB outside the allocator and each further one 388-390 MiB (NCCL's defaults); with
# NCCL_CUMEM_ENABLE=0, 684 MiB and 512-514 MiB. The difference, 170-172 MiB either way, is per process (NCCL's
# device code and process-wide state): ``NCCL_PROCESS_STATE_BYTES``, on every rank that creates a communicator.
# What a one-rank communicator adds is its channels' device structures: NCCL gives it MAXCHANNELS = 64 channels
# (the log prints "64 coll channels"), and initChannel (src/channel.cc) makes three device allocations per channel
# (the shared-resource peers, the channel's peers, its ring's user ranks), each rounded up to the cuMem
# allocation granularity (src/include/alloc.h ``ALIGN_SIZE(size, granularity)``; 2 MiB): 64 x 3 x 2 MiB = 384 MiB
# of the measured 388 (the rest is its work FIFO and device communicator). With cuMem off the same structures
# are small cudaMallocs and the 512 MiB is instead the local net proxy's shared point-to-point buffer, p2p
# channels x NCCL_SHARED_STEPS (16) x p2pChunkSize (512 KiB on all-NVLink) = 64 x 16 x 512 KiB (src/transport/
# net.cc sharedNetBuffersInit, called from init.cc "Connect to local net proxy" on the eager-connect path; the
# same 536,870,912-byte calloc is NVIDIA/nccl issue #2363); NCCL_RUNTIME_CONNECT=0 pays both (902 MiB each).
# The defaults' 388 MiB is ``NCCL_ONE_RANK_COMM_BYTES``: Megatron and DeepSpeed run ``pretrain``'s start-time
# all-reduce over the world group even when it has one rank (``communicators``), so a one-GPU run of them holds
# one. A communicator of several ranks holds the same three allocations per channel on a cuMem stack (32
# channels: 192 MiB) and, on the eager path (NCCL before 2.22, or cuMem off), the shared p2p buffer; which of
# them a row's stack had is not known from its source, so only the channel buffers below count for it. A
# 4-rank Megatron run of 2023 on A800s bounds context and NCCL together at 866 MiB (nvidia-smi less the reserved
# peak, which never shrinks without empty_cache: memory_runs.csv mlm23_345m_dp4_resv / _smi), below the
# 1,404 MiB these terms give it: on that stack the context, or NCCL's channels below the 32-channel bound, were
# smaller.
NCCL_PROCESS_STATE_BYTES = 170 * MiB
NCCL_ONE_RANK_COMM_BYTES = 388 * MiB
NCCL_CHANNELS = 32
# A CPU "GPU" (one torch process per core, gloo): the process's own runtime; a torch worker's resident
# size is ~330 MiB here (/shared/notes/torch-distributed-on-cpu.md, "Costs").
CPU_RUNTIME_RESERVE_BYTES = 330 * (1 << 20)
# Terms of ``StageMemory.details`` that live outside PyTorch's caching allocator.
OUTSIDE_ALLOCATOR = ("cuda_context", "nccl_buffers")
# NCCL point-to-point (pipeline send/recv): NCCL_NCHANNELS_PER_NET_PEER (default 2) channels per peer, Simple
# protocol only, to the previous and the next stage.
NCCL_P2P_CHANNELS_PER_PEER = 2


def cuda_context_bytes(num_sms: int) -> float:
    """Local memory for every resident thread at the default stack limit, printf FIFO and malloc heap, plus the
    per-process driver state and module images (``CUDA_DRIVER_AND_MODULES_BYTES``)."""
    return float(num_sms * MAX_THREADS_PER_SM * CUDA_STACK_BYTES_PER_THREAD + CUDA_FIFO_AND_HEAP_BYTES
                 + CUDA_DRIVER_AND_MODULES_BYTES)


def communicators(layout: Layout, dp: int, *, framework: str = "torch", stage: int | None = None,
                  tied_embeddings: bool = False, instances: int = 1) -> dict[str, int]:
    """Collective communicators a rank uses (size > 1): name -> ranks. torch creates one NCCL communicator per
    process group (ProcessGroupNCCL), also for a group whose ranks repeat another's.

    Every framework: one per parallel dimension (megatron/core/parallel_state.py), the gradient reduction
    over DP x CP when cp > 1; HSDP (FSDP2's 2-D mesh) a shard-group and a replicate-group communicator;
    Megatron-Core's partial distributed optimizer (``instances`` > 1) its intra- and inter-partial data-parallel
    groups besides the dp-cp one (parallel_state.py creates all three; the loss is still averaged over dp-cp).
    Megatron and DeepSpeed's pipeline engine (FrameworkBehaviour.model_parallel_groups; ``pp``:
    pp_loss_broadcast) also run collectives on:

    * ``world``: ``pretrain`` all-reduces its start time over the default group (megatron/training/training.py,
      read_file id 2244501596; Megatron-DeepSpeed keeps it);
    * ``mp``: the gradient norm (and fp16's found-inf) is all-reduced over the model-parallel group, TP x PP
      (megatron/core/optimizer/optimizer.py ``get_grad_stats_parallel_group`` -> parallel_state
      ``get_model_parallel_group``; DeepSpeed BF16_Optimizer ``get_global_norm_of_tensors(mpu=...)``);
    * ``embedding``: with tied embeddings and pp > 1, the first and the last stage all-reduce the word
      embedding's gradient (megatron/core/distributed/finalize_model_grads.py ``_allreduce_word_embedding_grads``
      over ``get_embedding_group``; DeepSpeed pipe/module.py ``allreduce_tied_weight_gradients`` over the
      tied-module group), on those stages only (``stage``);
    * ``pp`` (DeepSpeed): ``PipelineEngine._aggregate_total_loss`` broadcasts the loss over the pipe-parallel
      group (deepspeed/runtime/pipe/engine.py, DeepSpeed 15293139f).
    """
    groups = {"tp": layout.tp, "cp": layout.cp, "dp": dp * layout.cp, "ep": layout.ep}
    if layout.dp_shard and layout.dp_shard < dp:  # HSDP: a shard group (with CP) and a replicate group instead
        del groups["dp"]
        groups.update(dp_shard=layout.dp_shard * layout.cp, dp_replicate=dp // layout.dp_shard)
    if instances > 1:  # partial distributed optimizer: the intra- and inter-partial groups beside dp-cp
        groups.update(dp_intra_instance=dp * layout.cp // instances, dp_inter_instance=instances)
    fw = behaviour(framework)
    if fw.model_parallel_groups:
        groups.update(world=layout.tp * layout.pp * layout.cp * dp, mp=layout.tp * layout.pp)
        if tied_embeddings and layout.pp > 1 and stage in (0, layout.pp - 1):
            groups["embedding"] = 2
    if fw.pp_loss_broadcast:
        groups["pp"] = layout.pp
    return {k: n for k, n in groups.items() if n > 1}


def nccl_buffer_bytes(layout: Layout, dp: int, **which) -> float:
    """NCCL's device memory on one rank: every collective communicator's channels (``communicators``, keyword
    arguments passed on), pipeline p2p, and NCCL's per-process state on a rank that creates any communicator --
    also a one-GPU run of a framework that all-reduces over its one-rank world group (``world_size_one_comm``),
    which holds that communicator's channel structures (``NCCL_ONE_RANK_COMM_BYTES``)."""
    coll = len(communicators(layout, dp, **which)) * NCCL_CHANNELS * NCCL_BUFFERS_PER_CHANNEL_BYTES
    p2p = (2 * NCCL_P2P_CHANNELS_PER_PEER * 4 * MiB) if layout.pp > 1 else 0
    one_rank = NCCL_ONE_RANK_COMM_BYTES if world_size_one_comm(layout, dp, which.get("framework", "torch")) else 0
    process = NCCL_PROCESS_STATE_BYTES if (coll or p2p or one_rank) else 0
    return float(coll + p2p + one_rank + process)


def world_size_one_comm(layout: Layout, dp: int, framework: str) -> bool:
    """Whether a one-GPU run creates a one-rank NCCL communicator: Megatron's ``pretrain`` (and Megatron-DeepSpeed's)
    all-reduces its start time over the default group whatever its size (``communicators``, ``world``)."""
    one_gpu = layout.tp * layout.pp * layout.cp * dp == 1
    return one_gpu and behaviour(framework).model_parallel_groups


def runtime_terms(scenario: Scenario, stage: int | None = None) -> dict[str, float]:
    """Named runtime bytes on one rank: ``cuda_context`` (``TrainingSpec.cuda_context_bytes`` where the run's stack
    was measured, else derived), ``cublas_workspace``, ``nccl_buffers`` (GPU; on pipeline ``stage`` where
    given), or the torch process itself
    (``cuda_context`` holds it on a CPU "GPU", which has no SM count)."""
    gpu = scenario.cluster.gpu
    if getattr(gpu, "num_sms", None) is None:
        return {"cuda_context": float(CPU_RUNTIME_RESERVE_BYTES)}
    measured = scenario.training.cuda_context_bytes
    return {"cuda_context": float(measured) if measured else cuda_context_bytes(gpu.num_sms),
            "cublas_workspace": float(CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES),
            "nccl_buffers": nccl_buffer_bytes(scenario.layout, scenario.dp, framework=scenario.training.framework,
                                              stage=stage, tied_embeddings=scenario.model.tie_embeddings,
                                              instances=scenario.training.distributed_optimizer_instances)}
