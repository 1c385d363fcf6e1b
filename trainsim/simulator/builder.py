"""Build the engine's CostTable from a Scenario: the one place the simulator touches cost models and topologies.

What goes where (choices documented here, once):

* Compute: `cost_models.compute.layer_times` per block × the chunk's layers; the embedding is added to the
  first virtual stage, final norm + logits + loss to the last (Megatron). Uneven stages follow
  `Scenario.stage_layers`.
* TP: per block 2 all-reduces forward and 2 backward (Megatron column/row-parallel pairs, SC21 Sec. 3.2,
  formulas.csv tp_comm_sc21), or with sequence parallelism 2 all-gathers + 2 reduce-scatters each way
  (Korthikanti Sec. 4.2.2); full recompute re-runs the forward's collectives before backward. They are
  exposed on the compute stream: Megatron waits for them before the dependent GEMM -- except, where the
  framework does it (``framework.tp_dgrad_overlap``: Megatron-Core, Megatron-LM 2022), the backward reduction
  of QKV's and fc1's input gradient (and with SP their input's re-gather), which runs behind the same layer's
  wgrad (dgrad) GEMM: exposed ``max(0, comm - gemm)`` plus the GEMM's slowdown from NCCL's SMs. With
  ``TrainingSpec.tp_comm_overlap`` (Megatron-Core ``--tp-comm-overlap``, Transformer Engine userbuffers; off
  by default, on in the Megatron-Bridge performance recipes) each sequence-parallel collective is overlapped
  with the GEMM it feeds or drains, as Megatron-Bridge's userbuffers configs set it
  (megatron/bridge/training/comm_overlap.py, e.g. ``userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192``):
  ring-exchange (chunked in tp steps, pipelined) for the forward all-gathers before qkv/fc1, the forward
  reduce-scatters after out_proj/fc2 and the backward all-gathers before the out_proj/fc2 input-gradient GEMMs
  -- exposed ``max(comm, gemm) + min(comm, gemm)/tp - gemm`` (one step of the shorter side is the pipeline's
  fill/drain) -- and "bulk" overlap of the backward reduce-scatters of the qkv/fc1 input gradients with the
  same layer's weight-gradient GEMM -- exposed ``max(0, comm - wgrad)``. A ring-exchange GEMM runs as tp row
  chunks, so its time is the tile model's (compute.gemm_time_s) for m/tp rows, tp times (wave quantization
  of the smaller grids); what exceeds the un-split GEMM counts as exposed TP time. The SMs the overlap
  kernels use (1-24 of 132) are not modelled.
* CP: ring attention sends each of the cp-1 key/value blocks to the next rank (backward: key/value and
  their gradients) while attention computes on the current block; only what the attention compute of
  that block cannot hide is exposed.
* EP: token dispatch and combine all-to-alls per MoE block, forward and backward, exposed -- unless
  ``TrainingSpec.ep_comm_overlap`` (the combined 1F1B schedule, exposures.py ``_ep_overlapped``) hides them behind another
  micro-batch's compute on the paired share of a stage's passes (``ep_paired_fraction``).
* PP: one activation (gradient) message per micro-batch and chunk, b·(s/cp)·h elements split over the TP
  ranks (scatter/gather optimisation or SP, SC21 Sec. 4.1), on the links between the stages' GPUs.
* DP: gradients reduced in Megatron DDP buckets (max(40M, 1M·dp) parameters, Megatron-Core default) as
  each chunk's last backward produces them (or all after the backward pass when the framework does not
  overlap, ``framework.behaviour(...).overlap_grad_reduce``: Megatron 2021's local DDP): all-reduce for ZeRO-0, reduce-scatter for the distributed
  optimizer / ZeRO-1/2/3 (torch's ZeroRedundancyOptimizer, framework ``torch`` ZeRO-1: all-reduce); DeepSpeed's
  ZeRO 0-2 in its own 5e8-element buckets, not overlapped (ZeRO-2: in its hooks, on the compute stream), one
  all-reduce per bucket, or one reduce per owner rank and bucket (``deepspeed-2021``; framework.dp_grad_calls);
  ZeRO-2/3 reduce every micro-batch (DeepSpeed/FSDP); ZeRO-1/2 gather the updated parameters after the
  optimizer step in the framework's calls (``framework.param_gather``: one per buffer (Megatron), one per
  5e8-element DeepSpeed allgather bucket, or one broadcast per parameter from its owner), each a collective over the
  whole DP group paying its ring latency; ZeRO-3 all-gathers each chunk's parameters before every
  forward and backward, prefetched one op ahead. Each collective the framework issues pays its own
  latency: one ZeRO-3 gather per block (FSDP) or per weight tensor (DeepSpeed), one reduce-scatter per
  block (FSDP) or per reduce bucket (DeepSpeed), see cost_models/framework.py. Offload adds its PCIe traffic (cost_models.memory) to the
  optimizer step, exposed. ``TrainingSpec.dp_bucket_mb`` and ``overlap_grad_reduce`` replace the framework's
  bucket size and overlap (_bucket_settings). At most MAX_BUCKETS_PER_CHUNK transfers per chunk are simulated:
  with more calls than that the last transfer is exactly one bucket (the exposed one) and the others share the
  remaining calls' bytes and latency.
* HSDP (``Layout.dp_shard`` = S < dp, torch FSDP2 on a (replicate, shard) mesh): the ZeRO-3 gathers and each
  block's reduce-scatter run over the shard group (the S innermost DP ranks, torchtitan's dp_shard placement),
  and each reduce-scattered shard (1/S of the block's gradient bytes) is then all-reduced over the dp/S replicas
  on a stream of its own (FSDP2's all_reduce_stream, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py),
  every micro-batch as FSDP2 does by default (set_requires_all_reduce(False) deferring it is not modelled).
* Links: a transfer occupies its GPU's NIC (tx/rx) when its group spans nodes, else its NVLink port, so
  pipeline messages and gradient buckets of a stage share bandwidth in the engine.
* Slowest GPU: every GPU compute time -- block ops, embedding, head, MTP, the accumulation/copy passes and
  the optimizer's GPU part -- is stretched by ``variation.slowest_gpu_factor`` of the job's GPU count (a
  synchronous step proceeds at its slowest GPU's pace; GPUSpec.speed_spread_cv) where it is read
  (exposures.py ``_op_times``, ``_paced``), so the exposures computed against compute (TP/EP/CP overlap, offload windows)
  see the stretched times; communication, PCIe copies and host time are not stretched.
* Host: a chunk's forward (backward, with its recomputed forward) lasts at least the time its host needs to issue
  the blocks' kernels in eager PyTorch (cost_models/host_issue.py); the excess over the GPU's busy time is GPU
  idle, recorded on ChunkCost.host_idle_* (dense blocks on GPUs; MoE blocks keep predict's host-bound warning).
* Memory: static weights/grads/optimizer/other from `cost_models.memory.stage_memory`; activations per
  chunk and micro-batch from `cost_models.activations` (the engine times their life); the recompute working
  set is held during each backward. A postponed weight-gradient pass (ZB) keeps the inputs and output
  gradients of the block's linear layers (see w_retained_bytes_per_layer).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from trainsim.cost_models import activations as act
from trainsim.cost_models import compute, framework, host_issue, memory, step_host
from trainsim.cost_models.shapes import dense_block_scenario, layer_shape
from trainsim.specs import Scenario
from trainsim.specs.pools import link_view, pool_views, stage_pools

from .block import _Block, _block, _global_layers_in, _local_global_blocks, w_retained_bytes_per_layer
from .costtable import ChunkCost, CostTable, StageCost, Transfer
from .exposures import (
    _coll,
    _ep_overlapped,
    _links,
    _op_times,
    _pace,
    _paced,
    _persistent_regather_s,
    _persistent_tensors,
    comm_compute_slowdown,
    ep_paired_fraction,
)

# Re-exported for callers that reach the block and exposure helpers through the builder.
__all__ = [
    "_block",
    "_ep_overlapped",
    "_op_times",
    "_persistent_tensors",
    "build_cost_table",
    "clear_cache",
    "data_parallel_settings",
    "comm_compute_slowdown",
    "ep_paired_fraction",
    "w_retained_bytes_per_layer",
]

# Megatron-Core DistributedDataParallel: bucket_size = max(40_000_000, 1_000_000 * dp_size) parameters.
DDP_BUCKET_PARAMS = 40_000_000
DDP_BUCKET_PARAMS_PER_DP = 1_000_000
MiB = 1 << 20  # torch DDP's bucket_cap_mb counts MiB (bucket_cap_mb * 1024 * 1024 bytes)
# At most this many DP buckets per chunk are simulated as separate transfers (larger ones are merged;
# the exposed last bucket grows accordingly). Bounds engine events for chunks of many layers.
MAX_BUCKETS_PER_CHUNK = 4


_CACHE: OrderedDict[tuple, tuple] = OrderedDict()  # memo: key -> (CostTable, profile); tables are pure functions of the key
_CACHE_SIZE = 512


def clear_cache() -> None:
    _CACHE.clear()


def build_cost_table(scenario: Scenario, *, profile=None, ideal_network: bool = False) -> CostTable:
    """The CostTable of one optimizer step of ``scenario`` (memoised on the scenario's JSON and the profile)."""
    key = (scenario.model_dump_json(), id(profile) if profile is not None else None, ideal_network)
    hit = _CACHE.get(key)
    if hit is not None and (profile is None or hit[1] is profile):
        _CACHE.move_to_end(key)
        return hit[0]
    table = _build(scenario, profile, ideal_network)
    _CACHE[key] = (table, profile)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return table


@dataclass(frozen=True)
class _Step:
    """What every chunk and stage of one optimizer step shares, worked out once per cost table: the paced
    end-of-model times, the blocks, the parallel groups, the DP settings and the stages' memory."""

    scenario: Scenario
    profile: object
    slowest: float                    # compute-time multiplier of the job's slowest GPU
    emb: compute.LayerTimes
    head: compute.LayerTimes
    mtp: compute.LayerTimes
    pl: object                        # topologies Placement
    groups: dict
    main: _Block
    dense: _Block                     # a MoE model's first_dense_layers (else ``main``)
    local_global: tuple | None        # (local, global) blocks of a sliding-window dense model
    act_msg: float                    # one [b, s/cp, h] activation, bytes
    fw: framework.FrameworkBehaviour
    sg_gather: float                  # Megatron's scatter/gather re-gather of a received activation
    emb_act: float
    head_act: float
    z: int                            # effective ZeRO stage
    dp_group: object
    shard_group: object               # ZeRO's sharding group: HSDP's shard group, else dp_group
    rep_group: object                 # HSDP's replicate group (None without HSDP)
    bucket_params: float              # ZeRO-0/1 DDP bucket (parameters)
    reduce_bucket_params: float | None  # ZeRO-2/3 reduce bucket (parameters; None: one call per block)
    overlap: bool                     # gradient reduction overlapped with backward
    reduce_op: str
    hw: object
    prep_per_param: float             # FSDP's gradient-preparation bytes per parameter
    emb_params: float
    head_params: float
    stage_mem: tuple
    working: float                    # one block's recompute working set (the largest block kind)
    stage_rank: tuple                 # rank 0's column of the pipeline
    issue: object                     # host time to issue one block (None: not modelled)
    last_vs: int


def _step_context(scenario: Scenario, profile) -> _Step:
    """The shared per-step inputs of ``scenario`` (see _Step)."""
    m, lay, tr = scenario.model, scenario.layout, scenario.training
    p = lay.pp
    shp = layer_shape(scenario)
    # The job runs at its slowest GPU's pace: GPU compute (never communication, host or PCIe time) is
    # stretched by the expected slowest of the job's GPUs (cost_models/variation.py).
    slowest = _pace(scenario, profile)
    from trainsim.topologies.placement import place
    pl = place(scenario)
    groups = {d: (pl.group(d) if getattr(lay, d) > 1 else None) for d in ("tp", "cp", "ep", "dp")}
    # A MoE model's first_dense_layers cost what its dense_block() costs; every other block is `main`.
    main = _block(scenario, groups, profile)
    dense = _block(dense_block_scenario(scenario), groups, profile) if m.first_dense_layers and m.is_moe else main
    act_msg = shp.e * shp.tokens * shp.h
    fw = framework.behaviour(tr.framework)
    # Megatron's scatter/gather optimisation (SC21 Sec. 4.1): each TP rank sends 1/tp of the activation and
    # the receiver all-gathers it over the TP group (gather_split_1d_tensor) on the compute stream before use.
    sg_gather = 0.0
    if lay.pp > 1 and lay.tp > 1 and not tr.sequence_parallel and fw.pp_scatter_gather:
        sg_gather = sum(_coll("all_gather", act_msg, groups["tp"], scenario, profile))
    z = tr.effective_zero
    dp_group = groups["dp"]
    shard_group, rep_group = _hsdp_groups(scenario, pl, dp_group)
    # FSDP's own passes over each unit's gradient around its reduce-scatter (framework.py fsdp_grad_prep). Only the
    # concatenation runs in autograd on the compute stream; FSDP runs the cast, divides and += on its
    # post-backward stream, concurrently with the next unit's backward, where they take the same HBM bandwidth:
    # counted here as compute-stream time, a simplification that ignores any slack in the GEMMs' HBM use.
    prep_per_param = (framework.fsdp_grad_prep_bytes_per_param(shp.e, tr.grad_bytes, scenario.dp_shard,
                                                               scenario.num_microbatches > 1)
                      if fw.fsdp_grad_prep and z >= 2 and dp_group is not None else 0.0)
    # Embedding (+ positions) on the first stage; final norm + output layer (a duplicate of a tied embedding
    # when pp > 1) on the last: memory.stage_extra_params's split, one rank.
    emb_params = memory.stage_extra_params(m, lay.tp, max(p, 2), 0)
    loss_stage = scenario.loss_stage  # p-1, or 0 in DualPipeV's V (which holds the embedding already)
    head_params = (memory.stage_extra_params(m, lay.tp, p, loss_stage, loss_stage)
                   - (emb_params if loss_stage == 0 else 0.0))
    stage_mem = tuple(memory.stage_memory(scenario, s) for s in range(p))
    return _Step(
        scenario=scenario, profile=profile, slowest=slowest,
        emb=_paced(compute.embedding_times(scenario, profile), slowest),
        head=_paced(compute.head_times(scenario, profile), slowest),
        mtp=_paced(compute.mtp_times(scenario, profile), slowest),
        pl=pl, groups=groups, main=main, dense=dense,
        local_global=_local_global_blocks(scenario, groups, profile),
        act_msg=act_msg, fw=fw, sg_gather=sg_gather,
        emb_act=act.embedding_activation_bytes(scenario), head_act=act.head_activation_bytes(scenario),
        z=z, dp_group=dp_group, shard_group=shard_group, rep_group=rep_group,
        **_bucket_settings(scenario, fw), reduce_op=framework.grad_reduce_op(tr),
        hw=compute.hw_of(scenario.cluster.gpu, tr.dtype), prep_per_param=prep_per_param,
        emb_params=emb_params, head_params=head_params, stage_mem=stage_mem,
        working=stage_mem[0].details["recompute_working"],
        stage_rank=tuple(pl.pp_peer(0, k) for k in range(p)),
        issue=host_issue.scenario_block_issue(scenario, profile),
        last_vs=p * lay.vpp - 1,
    )


def _hsdp_groups(scenario: Scenario, pl, dp_group) -> tuple[object, object]:
    """(sharding group, replicate group): HSDP's shard group of Layout.dp_shard ranks (innermost in the DP group,
    so on the fastest links) and its replicate group; without HSDP the whole DP group and None."""
    if dp_group is None or scenario.dp_shard == scenario.dp:
        return dp_group, None
    shard_g, rep_g = pl.hsdp_groups(scenario.dp_shard)
    return (shard_g if shard_g.size > 1 else None), rep_g


def _bucket_settings(scenario: Scenario, fw: framework.FrameworkBehaviour) -> dict:
    """The gradient bucket sizes (parameters) and overlap of the step: TrainingSpec.dp_bucket_mb (MiB of
    gradients) and overlap_grad_reduce where set, else the framework's -- Megatron-Core DDP's
    max(40M, 1M x dp) parameters for ZeRO 0-1, DeepSpeed's reduce_bucket_size or FSDP's per-block calls for
    ZeRO 2-3."""
    tr = scenario.training
    bucket = max(DDP_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP * scenario.dp)
    reduce_bucket = fw.reduce_bucket_params
    if tr.dp_bucket_mb is not None:
        bucket = tr.dp_bucket_mb * MiB / tr.grad_bytes
        reduce_bucket = bucket if reduce_bucket else None  # FSDP's per-block calls have no size (specs refuse it)
    overlap = framework.default_overlap_grad_reduce(tr) if tr.overlap_grad_reduce is None else tr.overlap_grad_reduce
    return {"bucket_params": bucket, "reduce_bucket_params": reduce_bucket, "overlap": overlap}


def data_parallel_settings(scenario: Scenario) -> dict:
    """The data-parallel settings a prediction costs (predict --json ``data_parallel``): HSDP's shard group and
    replicas, the gradient bucket (MiB of gradients per reduction call; None where the framework reduces one
    call per block) and whether the reduction overlaps the backward."""
    tr = scenario.training
    fw = framework.behaviour(tr.framework)
    b = _bucket_settings(scenario, fw)
    per_block = tr.effective_zero >= 2 and not b["reduce_bucket_params"]
    bucket = b["reduce_bucket_params"] if tr.effective_zero >= 2 else b["bucket_params"]
    return {"dp_shard": scenario.dp_shard, "dp_replicas": scenario.dp_replicas,
            "grad_bucket_mib": None if per_block else bucket * tr.grad_bytes / MiB,
            "grad_reduce_per_block": per_block, "overlap_grad_reduce": b["overlap"]}


def _accumulate_s(st: _Step, params: float) -> float:
    """Compute-stream seconds of the passes over a chunk's ``params`` gradients outside the GEMMs: frameworks
    without gradient-accumulation fusion add each block's weight gradients into the accumulation buffer in a
    separate pass every micro-batch (framework.py grad_accumulation_pass), FSDP's gradient prep, autocast's casts."""
    tr, cast = st.scenario.training, framework.autocast_cast_bytes_per_param(st.scenario)
    nbytes = params * ((3 * tr.grad_bytes if st.fw.grad_accumulation_pass else 0.0) + st.prep_per_param + cast)
    return compute.memory_time_s(nbytes, st.hw, st.profile, "copy") * st.slowest if nbytes > 0 else 0.0


def _grad_buckets(st: _Step, s: int, params: float, label: str, layers_of_chunk: int) -> tuple[Transfer, ...]:
    """The DP gradient reductions of one chunk's ``params`` as engine transfers."""
    tr = st.scenario.training
    if st.dp_group is None or params <= 0:
        return ()
    tensors = _chunk_tensors(st.scenario, layers_of_chunk)
    ds_calls = (framework.zero12_reduce_calls(tr, params, st.shard_group.size, st.reduce_bucket_params,
                                              max_buckets=tensors) if st.reduce_bucket_params else None)
    # DeepSpeed ZeRO 0-2: its own buckets, per owner rank before v0.12.4 (framework.py); else _grad_calls
    calls = ds_calls or _grad_calls(st, params, layers_of_chunk, tensors)
    per_call = params * tr.grad_bytes / calls
    return tuple(_bucket_transfer(st, s, per_call, k_calls, f"{label} bucket {k}")
                 for k, k_calls in enumerate(_calls_per_transfer(calls)))


def _grad_calls(st: _Step, params: float, layers_of_chunk: int, tensors: int) -> int:
    """Collectives the framework issues for a chunk's ``params`` gradients: ZeRO-2/3 reduce-scatter per block
    as backward produces it (FSDP), or per reduce bucket (DeepSpeed); ZeRO-0/1 per DDP bucket. A bucket holds
    whole tensors (specs/data_parallel.py), so a chunk issues at most one call per tensor (``tensors``)."""
    z = st.z
    if z >= 2 and not st.reduce_bucket_params:
        return max(1, layers_of_chunk)
    bucket = st.reduce_bucket_params if z >= 2 else st.bucket_params
    return max(1, min(math.ceil(params / bucket), tensors))


def _chunk_tensors(scenario: Scenario, layers_of_chunk: int) -> int:
    """Parameter tensors of a chunk, an upper bound: its blocks' (ModelSpec.block_param_tensors; a MoE block adds
    its router and each local expert's two or three projections) plus the embedding and the output layer a
    first or last chunk holds (two, an upper bound elsewhere)."""
    m = scenario.model
    per_block = m.block_param_tensors()
    if m.is_moe:
        per_block += 1 + -(-m.num_experts // scenario.layout.ep) * (3 if m.gated_mlp else 2)
    return max(1, layers_of_chunk) * per_block + 2


def _calls_per_transfer(calls: int) -> tuple[float, ...]:
    """How many of the ``calls`` bucket collectives each simulated transfer carries: one each up to
    MAX_BUCKETS_PER_CHUNK; beyond that the last transfer is exactly one bucket (the one that becomes ready when
    backward ends, so the exposed tail is one bucket's time whatever the count) and the others share the rest."""
    n = min(MAX_BUCKETS_PER_CHUNK, calls)
    if n == calls:
        return (1.0,) * n
    return ((calls - 1) / (n - 1),) * (n - 1) + (1.0,)


def _bucket_transfer(st: _Step, s: int, per_call: float, k_calls: float, name: str) -> Transfer:
    """``k_calls`` gradient-reduction calls of ``per_call`` bytes each as one engine transfer."""
    then = _replica_all_reduce(st, s, per_call, k_calls, name)
    if st.shard_group is None:  # HSDP with one-rank shard groups: the all-reduce is all there is
        return then
    lat, bw = _coll(st.reduce_op, per_call, st.shard_group, st.scenario, st.profile)
    return Transfer(f"{st.reduce_op} grads {name}", transfer_s=bw * k_calls, latency_s=lat * k_calls,
                    links=_links(s, st.shard_group), dim="dp", nbytes=per_call * k_calls, then=then)


def _replica_all_reduce(st: _Step, s: int, per_call: float, k_calls: float, label: str) -> Transfer | None:
    """HSDP: the all-reduce of each reduce-scattered gradient shard (1/S of a call's bytes) across the replicate
    group, ``k_calls`` calls of it (torch FSDP2 foreach_reduce: reduce-scatter over the shard dimension, then
    all-reduce over the replicate dimension); None without HSDP."""
    if st.rep_group is None:
        return None
    nbytes = per_call / st.scenario.dp_shard
    lat, bw = _coll("all_reduce", nbytes, st.rep_group, st.scenario, st.profile)
    return Transfer(f"all_reduce grad shard {label} across replicas", transfer_s=bw * k_calls,
                    latency_s=lat * k_calls, links=_links(s, st.rep_group), dim="dp", nbytes=nbytes * k_calls)


def _gather_calls(st: _Step, n_main: int, n_dense: int, extra: bool) -> int:
    """ZeRO-3 all-gathers per pass over a chunk: one per block (FSDP) or per weight tensor (DeepSpeed)."""
    if st.fw.zero3_gather == "tensor":
        tensors = n_main * st.main.gather_tensors + n_dense * st.dense.gather_tensors
    else:
        tensors = n_main + n_dense
    return max(1, tensors + (1 if extra else 0))


@dataclass
class _ChunkSums:
    """Running per-micro-batch totals of one chunk: compute seconds by pass, activation bytes, parameters beyond
    the blocks', its label and the blocks whose communication it carries (``comm_kinds``: (block, count))."""

    f: float
    bi: float
    bw: float
    rc: float
    a: float
    extra_params: float
    label: str
    kinds: tuple
    comm_kinds: tuple


def _chunk_blocks(st: _Step, vs: int) -> tuple[_ChunkSums, int, int]:
    """The blocks of virtual stage ``vs``: their summed costs, the chunk's layer count and its dense layers."""
    scenario = st.scenario
    layers = scenario.stage_layers
    n = layers[vs]
    n_d = scenario.dense_layers_in(vs) if scenario.model.is_moe else 0
    kinds = ((st.main, n - n_d), (st.dense, n_d))
    if st.local_global is not None:  # this chunk's own local and global blocks (dense models only)
        g = _global_layers_in(scenario, vs)
        kinds = ((st.local_global[0], n - g), (st.local_global[1], g))
    off = memory.offloaded_layers(scenario)  # pp = 1: this one chunk holds every layer
    sums = _ChunkSums(
        f=sum(k * b.times.fwd_s for b, k in kinds),
        bi=sum(k * b.times.bwd_input_s for b, k in kinds),
        bw=sum(k * b.times.bwd_weight_s for b, k in kinds),
        rc=sum(k * b.times.recompute_s for b, k in kinds),
        a=sum(k * b.act_bytes for b, k in kinds) - off * st.main.act_bytes,
        extra_params=0.0,
        label=f"layers {sum(layers[:vs])}-{sum(layers[:vs]) + n - 1}" if n else "no layers",
        kinds=kinds, comm_kinds=kinds,  # blocks whose communication and retained inputs this chunk has (+ MTP's)
    )
    return sums, n, n_d


def _offload_exposed_s(st: _Step, n: int) -> tuple[float, float]:
    """Exposed activation-offload seconds (forward, backward) of a chunk of ``n`` layers.

    Each layer's copy to the host hides behind its window of forward layers, each reload behind the same
    window of backward (memory.offload_windows); the rest is exposed. The windows are the job's (slowest
    GPU's) compute; the copies are PCIe time, not stretched. Offloaded blocks and their windows are costed as
    the model's main block.
    """
    off = memory.offloaded_layers(st.scenario)
    off_f = off_b = 0.0
    if off:
        lt = st.main.times
        copy_s = st.main.act_bytes / st.scenario.cluster.gpu.pcie_bw_Bps
        bwd_s = lt.bwd_input_s + lt.bwd_weight_s + lt.recompute_s
        for w in memory.offload_windows(n, off):
            off_f += max(0.0, copy_s - w * lt.fwd_s)
            off_b += max(0.0, copy_s - w * bwd_s)
    return off_f, off_b


def _add_embedding(st: _Step, cs: _ChunkSums) -> None:
    """The first virtual stage also runs the embedding."""
    cs.f += st.emb.fwd_s
    cs.bi += st.emb.bwd_input_s
    cs.bw += st.emb.bwd_weight_s
    cs.a += st.emb_act
    cs.extra_params += st.emb_params
    cs.label = "embedding + " + cs.label


def _add_head(st: _Step, cs: _ChunkSums) -> None:
    """The last virtual stage also runs the final norm, logits and loss, and each MTP module: its own ops + a
    main block + another output-head pass."""
    scenario, head, m = st.scenario, st.head, st.scenario.model
    cs.f += head.fwd_s
    cs.bi += head.bwd_input_s
    cs.bw += head.bwd_weight_s
    cs.rc += head.recompute_s
    cs.a += st.head_act
    cs.extra_params += st.head_params
    cs.label = cs.label + " + logits/loss"
    if m.mtp_layers:
        k, mtp, lt, lay = m.mtp_layers, st.mtp, st.main.times, scenario.layout
        cs.f += k * (mtp.fwd_s + lt.fwd_s + head.fwd_s)
        cs.bi += k * (mtp.bwd_input_s + lt.bwd_input_s + head.bwd_input_s)
        cs.bw += k * (mtp.bwd_weight_s + lt.bwd_weight_s + head.bwd_weight_s)
        cs.rc += k * (mtp.recompute_s + lt.recompute_s + head.recompute_s)
        cs.a += k * act.mtp_activation_bytes(scenario)
        cs.extra_params += sum(memory.mtp_params_per_rank(m, lay.tp, lay.ep, lay.etp))
        cs.comm_kinds = (*cs.kinds, (st.main, k))
        cs.label = cs.label + f" + {k} MTP"


def _zero3_serialized_s(st: _Step, gather: Transfer, calls: int, params: float) -> tuple[float, float]:
    """Exposed ZeRO-3 seconds (forward, backward) of a chunk whose gathers and reduce-scatters are serialized
    with compute (DeepSpeed 2021); the recomputed forward of a checkpointed layer gathers again before the
    backward's own gather.

    Each gathered tensor and each reduced gradient tensor also costs host ops per rank (the list-based
    collectives of that code: framework.zero3_gather_ops_per_rank) and HBM copies around them: the zero-filled
    output plus the flat buffer copied back into the list (3 passes over the gathered bytes), the gradients
    copied into the flat reduce-scatter input (2 passes).
    """
    scenario, tr, profile, hw = st.scenario, st.scenario.training, st.profile, st.hw
    host = calls * st.fw.zero3_gather_ops_per_rank * scenario.dp * scenario.cluster.gpu.kernel_overhead_s
    copy_g = st.slowest * compute.memory_time_s(3 * params * tr.param_bytes, hw, profile, "copy") if host else 0.0
    copy_r = st.slowest * compute.memory_time_s(2 * params * tr.grad_bytes, hw, profile, "copy") if host else 0.0
    rlat, rbw = _coll("reduce_scatter", params * tr.grad_bytes / calls, st.shard_group, scenario, profile)
    reduce = calls * (rlat + rbw) + host + copy_r
    host += copy_g
    dp_f = gather.time_s + host
    dp_b = (2 if tr.recompute == "full" else 1) * (gather.time_s + host) + reduce
    return dp_f, dp_b


def _chunk_dp(st: _Step, s: int, c: int, params: float, extra: bool, n: int, n_d: int):
    """A chunk's DP work on its ``params`` (``extra``: parameters beyond its blocks'): (ZeRO-3 parameter gather
    transfer or None, gradient buckets, exposed dp forward and backward seconds) -- gathers and buckets go to
    the engine unless the framework serializes them."""
    scenario, tr, profile = st.scenario, st.scenario.training, st.profile
    gather, calls = None, 0
    if st.z >= 3 and st.dp_group is not None:
        calls = _gather_calls(st, n - n_d, n_d, extra)
        lat, bwt = _coll("all_gather", params * tr.param_bytes / calls, st.shard_group, scenario, profile)
        gather = Transfer(f"all_gather params chunk {c}", transfer_s=bwt * calls, latency_s=lat * calls,
                          links=_links(s, st.shard_group or st.dp_group), dim="dp", nbytes=params * tr.param_bytes)
    buckets = _grad_buckets(st, s, params, f"chunk {c}", n)
    if st.z == 2 and not st.overlap:  # reduced in backward hooks on the compute stream, every micro-batch
        return None, (), 0.0, sum(b.transfer_s + b.latency_s for b in buckets)
    if gather is not None and not st.fw.zero3_overlap:
        dp_f, dp_b = _zero3_serialized_s(st, gather, calls, params)
        return None, (), dp_f, dp_b
    return gather, buckets, 0.0, 0.0


def _chunk(st: _Step, s: int, c: int, pair: float) -> ChunkCost:
    """The ChunkCost of stage ``s``'s chunk ``c``; ``pair`` is the share of its passes the combined 1F1B schedule
    pairs (EP overlap)."""
    scenario, profile = st.scenario, st.profile
    vs = scenario.virtual_stage(s, c)
    cs, n, n_d = _chunk_blocks(st, vs)
    off_f, off_b = _offload_exposed_s(st, n)
    if vs == 0:
        _add_embedding(st, cs)
    if vs == st.last_vs:
        _add_head(st, cs)
    elif st.fw.pipeline_output_kept:
        cs.a += act.pipeline_output_bytes(scenario)  # the chunk's output, kept until its backward
    params = sum(k * b.params for b, k in cs.kinds) + cs.extra_params
    cs.bw += _accumulate_s(st, params)
    if st.z >= 3 and st.dp_group is not None and n:
        # Eager FSDP2 per wrapped block (CPU profiles only; compute.wrapper_overhead_s).
        of, ob = compute.wrapper_overhead_s(scenario, profile, "fsdp")
        cs.f += n * of
        cs.bi += n * ob
    gather, buckets, dp_f, dp_b = _chunk_dp(st, s, c, params, cs.extra_params > 0, n, n_d)
    ck = cs.comm_kinds
    tp_fc = sum(k * b.tp_f for b, k in ck) + (st.sg_gather if vs > 0 else 0.0)
    tp_bc = sum(k * b.tp_b for b, k in ck) + (st.sg_gather if vs < st.last_vs else 0.0)
    # The GPU cannot run ahead of its host: a pass lasts at least the host's time to issue it; the
    # excess over the GPU's busy time (compute + communication on its stream) is GPU idle.
    cp_fc, cp_bc = sum(k * b.cp_f for b, k in ck), sum(k * b.cp_b for b, k in ck)
    idle_f, idle_b = host_issue.chunk_idle_s(st.issue, n, cs.f + off_f + tp_fc + cp_fc + dp_f,
                                             cs.bi + cs.bw + cs.rc + off_b + tp_bc + cp_bc + dp_b, first=vs == 0,
                                             queued=framework.queued_microbatches(scenario))
    return ChunkCost(
        fwd_s=cs.f + off_f + idle_f, bwd_input_s=cs.bi + off_b + idle_b, bwd_weight_s=cs.bw, recompute_s=cs.rc,
        host_idle_fwd_s=idle_f, host_idle_bwd_s=idle_b, tp_fwd_s=tp_fc, tp_bwd_s=tp_bc,
        cp_fwd_s=cp_fc, cp_bwd_s=cp_bc,
        ep_fwd_s=sum(k * (b.ep_f_ov * pair + b.ep_f * (1 - pair)) for b, k in ck),
        ep_bwd_s=sum(k * (b.ep_b_ov * pair + b.ep_b * (1 - pair)) for b, k in ck),
        dp_fwd_s=dp_f, dp_bwd_s=dp_b,
        act_bytes=cs.a, w_retained_bytes=sum(k * b.w_keep_bytes for b, k in ck),
        bwd_transient_bytes=st.working if n else 0.0,
        layers=n, label=cs.label, grad_buckets=buckets,
        param_gather=gather, param_gather_bytes=0.0,  # gather buffers are in memory.stage_memory 'other'
    )


def _pp_sends(st: _Step, s: int, nets: tuple[Scenario, Scenario] | None = None
              ) -> tuple[Transfer | None, Transfer | None]:
    """Stage ``s``'s activation send to the next stage and gradient send to the previous one (None: no peer);
    ``nets`` are the scenarios the two links are priced on (default the stage's own: a link inside one pool)."""
    scenario, lay = st.scenario, st.scenario.layout
    net_f, net_b = nets or (scenario, scenario)
    from trainsim.topologies.placement import place
    pl_f, pl_b = (st.pl if n is scenario else place(n) for n in (net_f, net_b))  # a link's rates: its net's
    p, v = lay.pp, lay.vpp
    send_f = send_b = None
    if p > 1:
        msg = st.act_msg / lay.tp
        nxt, prv = (s + 1) % p, (s - 1) % p
        if v > 1 or s < p - 1:
            g = pl_f.p2p(st.stage_rank[s], st.stage_rank[nxt])
            lat, bwt = _coll("send_recv", msg, g, net_f, st.profile)
            send_f = Transfer("send activations", transfer_s=bwt, latency_s=lat, links=_links(s, g, nxt),
                              dim="pp", nbytes=msg, bulk=False)
        if v > 1 or s > 0:
            g = pl_b.p2p(st.stage_rank[s], st.stage_rank[prv])
            lat, bwt = _coll("send_recv", msg, g, net_b, st.profile)
            send_b = Transfer("send gradients", transfer_s=bwt, latency_s=lat, links=_links(s, g, prv),
                              dim="pp", nbytes=msg, bulk=False)
    return send_f, send_b


def _optimizer_s(st: _Step, s: int) -> tuple[float, float]:
    """Stage ``s``'s optimizer step and the GPU's wait for its host in it: GPU part at the job's pace or the host's
    issue of the step's kernels, whichever is longer, with the lead-ins after its host syncs (cost_models/
    step_host.py); host (offloaded) update, DeepSpeed's persistent re-gather and the offload's PCIe traffic,
    exposed."""
    scenario = st.scenario
    sm = st.stage_mem[s]
    opt_gpu, opt_host = compute.optimizer_step_parts(scenario, s, st.profile)
    gpu = opt_gpu * st.slowest
    host = step_host.scenario_step_host(scenario, s, st.profile)
    groups = (st.groups["tp"], st.shard_group if st.z >= 1 else None)
    reduce_s = step_host.norm_reduce_s(scenario, groups, st.profile) if host is not None else 0.0
    phase = step_host.optimizer_phase_s(gpu, host, reduce_s)
    opt = phase + opt_host
    if st.fw.zero3_persistent_regather and st.z >= 3 and st.dp_group is not None:
        opt += _persistent_regather_s(scenario, s, st.dp_group, st.profile)
    if sm.pcie_h2d_bytes or sm.pcie_d2h_bytes:
        opt += (sm.pcie_h2d_bytes + sm.pcie_d2h_bytes) / scenario.cluster.gpu.pcie_bw_Bps
    return opt, phase - gpu - reduce_s


def _param_gather(st: _Step) -> str:
    """The framework's way of gathering updated parameters; torch's per-parameter broadcasts are its ZeRO-1
    (ZeroRedundancyOptimizer), not its ZeRO-2, which gathers once per buffer here."""
    how = st.fw.param_gather
    return "buffer" if how == "broadcast_per_param" and st.z != 1 else how


def _param_gather_calls(st: _Step, s: int, held: float) -> int:
    """How many collectives the framework issues for ZeRO-1/2's updated parameters of stage ``s`` (``held``
    parameters; framework.FrameworkBehaviour.param_gather): each one pays its latency over the whole DP group."""
    how = _param_gather(st)
    if how == "allgather_bucket":
        return max(1, int(held // framework.DEEPSPEED_ALLGATHER_BUCKET_PARAMS))
    if how == "broadcast_per_param":
        return _stage_param_tensors(st, s)
    return 1


def _stage_param_tensors(st: _Step, s: int) -> int:
    """Parameter tensors stage ``s`` holds: each block's weight tensors (block.gather_tensors, q/k/v counted as one)
    and its two norm weights, the embedding on the first stage, the final norm and output head on the loss stage.
    Biases are not counted, so this is a lower bound for models with biases."""
    scenario = st.scenario
    n = scenario.layers_on_stage(s)
    n_d = scenario.dense_layers_on_stage(s) if scenario.model.is_moe else 0
    blocks = (n - n_d) * (st.main.gather_tensors + 2) + n_d * (st.dense.gather_tensors + 2)
    return max(1, blocks + (1 if s == 0 else 0) + (2 if s == scenario.loss_stage else 0))


def _post_step(st: _Step, s: int) -> tuple[Transfer, ...]:
    """ZeRO-1/2's gather of the updated parameters after the optimizer step, in the framework's calls: all-gathers,
    or one broadcast per parameter from its owner (torch ZeroRedundancyOptimizer)."""
    if st.z in (1, 2) and st.dp_group is not None:
        held = memory.rank_param_shards(st.scenario, s).held
        nbytes = held * st.scenario.training.param_bytes
        calls = _param_gather_calls(st, s, held)
        op = "broadcast" if _param_gather(st) == "broadcast_per_param" else "all_gather"
        lat, bwt = _coll(op, nbytes / calls, st.dp_group, st.scenario, st.profile)
        name = f"{op} updated params" + (f" ({calls} calls)" if calls > 1 else "")
        return (Transfer(name, transfer_s=bwt * calls,
                         latency_s=lat * calls, links=_links(s, st.dp_group), dim="dp", nbytes=nbytes),)
    return ()


def _stage(st: _Step, s: int, nets: tuple[Scenario, Scenario] | None = None) -> StageCost:
    """The StageCost of pipeline stage ``s``: its chunks, pipeline sends (their links priced on ``nets``),
    optimizer step and static memory."""
    pair = ep_paired_fraction(st.scenario, s) if st.scenario.training.ep_comm_overlap else 0.0
    chunks = tuple(_chunk(st, s, c, pair) for c in range(st.scenario.layout.vpp))
    send_f, send_b = _pp_sends(st, s, nets)
    sm = st.stage_mem[s]
    opt_s, opt_idle = _optimizer_s(st, s)
    return StageCost(
        chunks=chunks, send_fwd=send_f, send_bwd=send_b, optimizer_s=opt_s, optimizer_host_idle_s=opt_idle,
        post_step=_post_step(st, s),
        weights_bytes=sm.weights, grads_bytes=sm.grads - sm.grads_off_peak, optimizer_bytes=sm.optimizer,
        other_bytes=sm.other,
    )


def _pooled_stages(scenario: Scenario, profile) -> tuple[tuple[StageCost, ...], list[_Step], tuple[int, ...]]:
    """The stages of a pipeline whose stages sit on GPU pools (``placement: stages``, specs/pools.py): each stage
    priced on its pool's node type, a message between two pools on the slower pool's scale-out."""
    views = pool_views(scenario)
    where = stage_pools(scenario)
    steps = [_step_context(v, profile) for v in views]
    p = scenario.layout.pp
    stages = []
    for s in range(p):
        k, nxt, prv = where[s], where[(s + 1) % p], where[(s - 1) % p]
        nets = (views[k] if nxt == k else link_view(scenario, k, nxt),
                views[k] if prv == k else link_view(scenario, k, prv))
        stages.append(_stage(steps[k], s, nets))
    return tuple(stages), steps, where


def dp_pacing_pool(scenario: Scenario, profile=None, ideal_network: bool = False) -> int:
    """Under ``placement: dp`` (specs/pools.py) the pool whose replicas pace the step: the one whose replica's step
    (its own table, closed form) is the longest -- the gradient reduction waits for the slowest replica."""
    from .analytic import estimate
    views = pool_views(scenario)
    steps = [estimate(build_cost_table(v, profile=profile, ideal_network=ideal_network)).step_time_s for v in views]
    return max(range(len(views)), key=lambda k: (steps[k], -k))


def _build(scenario: Scenario, profile, ideal_network: bool) -> CostTable:
    tr = scenario.training
    if scenario.cluster.pools is not None and scenario.cluster.placement == "dp":
        k = dp_pacing_pool(scenario, profile, ideal_network)
        return build_cost_table(pool_views(scenario)[k], profile=profile, ideal_network=ideal_network)
    if scenario.cluster.pools is not None and scenario.cluster.placement == "stages":
        stages, steps, where = _pooled_stages(scenario, profile)
    else:
        steps, where = [_step_context(scenario, profile)], (0,) * scenario.layout.pp
        stages = tuple(_stage(steps[0], s) for s in range(scenario.layout.pp))
    st = steps[0]
    used = [steps[k] for k in sorted(set(where))]
    # Several pools: the engine's one compute slowdown under NCCL is the largest pool's (conservative); the
    # memory capacity the smallest pool's (predict checks each pool against its own, simulator/pools.py).
    table = CostTable(stages=stages, num_microbatches=scenario.num_microbatches, schedule=tr.schedule,
                      reduce_grads_every_microbatch=st.z >= 2, overlap_grad_reduce=st.overlap,
                      blocking_p2p=framework.p2p_blocks(tr),
                      comm_compute_slowdown=max(comm_compute_slowdown(u.scenario) for u in used),
                      slowest_gpu_factor=max(u.slowest for u in used),
                      gpu_memory_bytes=min(u.scenario.cluster.gpu.memory_bytes for u in used),
                      host_bytes=max(steps[where[s]].stage_mem[s].host for s in range(scenario.layout.pp)))
    return table.without_communication() if ideal_network else table
