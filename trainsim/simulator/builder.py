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
* DP: gradients reduced in Megatron DDP's buckets -- one call per bucket of the chunk's gradient buffer as
  Megatron-Core lays it out (max(40M, 1M·dp) parameters on pipeline rank 0's first chunk only, one bucket
  elsewhere; one call per chunk buffer for Megatron-LM 2021/2022; cost_models/ddp_buckets.py), each launched
  when the chunk's last backward has produced its last gradient (Transfer.ready_at) -- or all after the backward
  pass when the framework does not overlap (``framework_behaviour.behaviour(...).overlap_grad_reduce``: Megatron 2021's
  local DDP): all-reduce for ZeRO-0, reduce-scatter for the distributed
  optimizer / ZeRO-1/2/3 (torch's ZeroRedundancyOptimizer, framework ``torch`` ZeRO-1: all-reduce); DeepSpeed's
  ZeRO 0-2 in its own 5e8-element buckets, not overlapped (ZeRO-2: in its hooks, on the compute stream), one
  all-reduce per bucket, or one reduce per owner rank and bucket (``deepspeed-2021``, ``deepspeed-2023``; framework.dp_grad_calls);
  ZeRO-2/3 reduce every micro-batch (DeepSpeed/FSDP); ZeRO-1/2 gather the updated parameters after the
  optimizer step in the framework's calls (``framework.param_gather``: one per buffer (Megatron), one per
  5e8-element DeepSpeed allgather bucket, or one broadcast per parameter from its owner), each a collective over the
  whole DP group paying its ring latency. The DP group of these collectives is the data-parallel x
  context-parallel group (topologies.placement.dp_cp_ranks: Megatron-Core's intra_dp_cp_group, torchtitan's
  dp_shard_cp, DeepSpeed's seq_data_parallel_group), so dp = 1 with cp > 1 still reduces; a MoE model's expert
  gradients, gathers and updated-parameter gathers run in calls of their own over the expert-data-parallel group
  (placement.expert_dp_ranks, tp*cp*dp/(ep*etp) ranks; none with one rank; step_context._expert_dp), except under
  HSDP. ZeRO-3 all-gathers each chunk's parameters before every
  forward and backward, prefetched one op ahead. Each collective the framework issues pays its own
  latency: one ZeRO-3 gather per block (FSDP) or per submodule (DeepSpeed; per tensor in 2021:
  cost_models/zero3_gathers.py), one reduce-scatter per
  block (FSDP) or per reduce bucket (DeepSpeed), see cost_models/framework.py. Offload adds its PCIe traffic (cost_models.memory) to the
  optimizer step, exposed. ``TrainingSpec.dp_bucket_mb`` and ``overlap_grad_reduce`` replace the framework's
  bucket size and overlap (grad_sync.py _bucket_settings). At most grad_sync.MAX_BUCKETS_PER_CHUNK transfers per chunk are simulated:
  with more calls than that the last transfer is exactly one bucket (the exposed one) and the others carry the
  remaining calls' bytes and latency (Megatron: consecutive buckets, each group ready with its last member).
* HSDP (``Layout.dp_shard`` = S < dp, torch FSDP2 on a (replicate, shard) mesh): the ZeRO-3 gathers and each
  block's reduce-scatter run over the shard group (the S innermost DP ranks with their cp ranks, torchtitan's
  dp_shard_cp), and each reduce-scattered shard (1/(S x cp) of the block's gradient bytes) is then all-reduced over the dp/S replicas
  on a stream of its own (FSDP2's all_reduce_stream, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py),
  every micro-batch as FSDP2 does by default (set_requires_all_reduce(False) deferring it is not modelled).
* MiCS (``Layout.dp_shard`` = S < dp under DeepSpeed, specs/mics.py): ZeRO-3's gathers and reduce-scatters run
  over the shard group as above, and the step ends with the all-reduce of each reduce bucket's gradient partition
  across the dp/S replicas, once per step at the accumulation boundary (mics_sync.py).
* Partial distributed optimizer (``training.distributed_optimizer_instances`` = N, specs/partial_distopt.py):
  each Megatron DDP bucket is reduce-scattered over the instance's dp/N innermost ranks, then its shard
  all-reduced across the N instances on the same stream, one after the other (one transfer per bucket, on both
  groups' links); the updated parameters are all-gathered within the instance.
* Links: a transfer occupies its GPU's NIC (tx/rx) when its group spans nodes, else its NVLink port, so
  pipeline messages and gradient buckets of a stage share bandwidth in the engine.
* Slowest GPU: every GPU compute time -- block ops, embedding, head, MTP, the accumulation/copy passes and
  the optimizer's GPU part -- is stretched by ``variation.slowest_gpu_factor`` of the job's GPU count (a
  synchronous step proceeds at its slowest GPU's pace; GPUSpec.speed_spread_cv) where it is read
  (exposures.py ``_op_times``, ``_paced``), so the exposures computed against compute (TP/EP/CP overlap, offload windows)
  see the stretched times; communication, PCIe copies and host time are not stretched.
* Host: a chunk's forward (backward, with its recomputed forward) lasts at least the time its host needs to issue
  the blocks' kernels in eager PyTorch (cost_models/host_issue.py); the excess over the GPU's busy time is GPU
  idle, recorded on ChunkCost.host_idle_* (dense blocks; Megatron-Core MoE blocks and hybrid stacks by their
  dispatcher's per-layer host sync, cost_models.moe_issue and hybrid_issue).
* Memory: static weights/grads/optimizer/other from `cost_models.memory.stage_memory`; activations per
  chunk and micro-batch from `cost_models.activations` (the engine times their life); the recompute working
  set is held during each backward. A postponed weight-gradient pass (ZB) keeps the inputs and output
  gradients of the block's linear layers (see w_retained_bytes_per_layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.cost_models import activations as act
from trainsim.cost_models import (
    compute,
    framework,
    host_issue,
    hybrid_issue,
    memory,
    moe_issue,
    step_host,
    torchao_float8,
)
from trainsim.cost_models.grad_buffer import DDP_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP, MiB
from trainsim.cost_models.param_tensors import blocks_among, chunk_tensors, layer_tensors, rank_tensors
from trainsim.specs import Scenario
from trainsim.specs.memo import active_memo
from trainsim.specs.pools import link_view, pool_views, stage_pools
from trainsim.topologies.placement import place

from .analytic import estimate
from .block import _block, _global_layers_in, w_retained_bytes_per_layer
from .costtable import ChunkCost, CostTable, StageCost, Transfer
from .exposures import (
    _coll,
    _ep_overlapped,
    _links,
    _op_times,
    _persistent_regather_s,
    _persistent_tensors,
    comm_compute_slowdown,
    ep_paired_fraction,
)
from .grad_sync import _chunk_dp, _post_step, data_parallel_settings
from .step_context import _Step, _step_context

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile

# Re-exported for callers that reach the block and exposure helpers through the builder.
__all__ = [
    "DDP_BUCKET_PARAMS",
    "DDP_BUCKET_PARAMS_PER_DP",
    "MiB",
    "_block",
    "_ep_overlapped",
    "_op_times",
    "_persistent_tensors",
    "build_cost_table",
    "clear_cache",
    "comm_compute_slowdown",
    "data_parallel_settings",
    "ep_paired_fraction",
    "w_retained_bytes_per_layer",
]

_TABLE_MEMO, _CACHE_SIZE = "trainsim.simulator.builder.build_cost_table", 512  # per memo scope (specs.memo)


def clear_cache() -> None:
    """Drop the active memo scope's cost tables (benchmarks timing a cold build)."""
    if (memo := active_memo()) is not None:
        memo.forget(_TABLE_MEMO)


def build_cost_table(scenario: Scenario, *, profile: CalibrationProfile | None = None,
                     ideal_network: bool = False) -> CostTable:
    """The CostTable of one optimizer step of ``scenario``, kept in the active memo scope (a pure function of the
    scenario's JSON and collective_fixed_costs, the profile object and ``ideal_network``)."""
    if (memo := active_memo()) is None:
        return _build(scenario, profile, ideal_network)
    key = (scenario.model_dump_json(), id(profile) if profile is not None else None, ideal_network,
           scenario.collective_fixed_costs)
    table, owner = memo.lookup(_TABLE_MEMO, key, lambda: (_build(scenario, profile, ideal_network), profile),
                               _CACHE_SIZE)
    return table if profile is None or owner is profile else _build(scenario, profile, ideal_network)


def _accumulate_s(st: _Step, params: float, tied: float = 0.0) -> float:
    """Compute-stream seconds of the passes over a chunk's ``params`` gradients outside the GEMMs: frameworks
    without gradient-accumulation fusion add each block's weight gradients into the accumulation buffer in a
    separate pass every micro-batch (framework.grad_accumulation_bytes_per_param: the framework's
    grad_accumulation_pass, DeepSpeed's ZeRO-0/1 optimizers), FSDP's gradient prep, autocast's casts. ``tied``:
    the tied table's parameters whose two gradients autograd sums in its input buffer every micro-batch, the first
    included (``_tied_sum_params``: read, read, write)."""
    tr, cast = st.scenario.training, framework.autocast_cast_bytes_per_param(st.scenario)
    acc = framework.grad_accumulation_bytes_per_param(tr, st.scenario.num_microbatches)
    nbytes = params * (acc + st.prep_per_param + cast) + tied * (3.0 * tr.grad_bytes + st.prep_per_param + cast)
    return compute.memory_time_s(nbytes, st.hw, st.profile, "copy") * st.slowest if nbytes > 0 else 0.0


def _fsdp2_copies_s(st: _Step, params: float, regathered: tuple[float, float], vs: int) -> tuple[float, float]:
    """Compute-stream seconds (forward, backward) per micro-batch of FSDP2's copies around a chunk's collectives
    (framework_behaviour ``fsdp2_copies``): the forward's all-gather copy-out of all ``params``, the backward's
    copy-out of the ``regathered`` (parameters, float8 weight elements) of the blocks gathered again (_regathered)
    and the reduce-scatter copy-in of every gradient. Under torchao's float8 all-gather the float8 weights are
    copied out in 1 byte and their shards are cast before each gather (torchao_float8.shard_cast_bytes): in the
    forward all of the chunk's, in the backward the regathered blocks'."""
    tr = st.scenario.training
    if not (st.fw.fsdp2 and st.z >= 3 and st.dp_group is not None and params > 0):
        return 0.0, 0.0
    (back, back_f8), pb, pb_b = regathered, tr.param_bytes, tr.param_bytes  # gathered bytes per parameter
    cast_f = cast_b = 0.0
    if tr.float8_all_gather:
        tensors = chunk_tensors(st.scenario, vs)
        pb = torchao_float8.gather_bytes_per_param(st.scenario, tensors, params)
        f8, sb = torchao_float8.float8_weight_elems(tensors), torchao_float8.sharded_param_bytes(tr)
        if back > 0:
            pb_b = torchao_float8.gathered_bytes(back, back_f8, tr.param_bytes) / back
        n = st.shard_group.size
        cast_f = torchao_float8.shard_cast_bytes(f8 / n, sb, tr.float8_precompute_scale)
        cast_b = torchao_float8.shard_cast_bytes(back_f8 / n, sb, tr.float8_precompute_scale)
    out, copy_in = framework.fsdp2_copy_bytes_per_param(pb, tr.grad_bytes)
    copy_in += tr.param_bytes - pb  # the unsharded gradient stays in the parameter dtype
    fwd = compute.memory_time_s(params * out + cast_f, st.hw, st.profile, "copy")
    out_b = framework.fsdp2_copy_bytes_per_param(pb_b, tr.grad_bytes)[0]
    bwd = compute.memory_time_s(back * out_b + params * copy_in + cast_b, st.hw, st.profile, "copy")
    return fwd * st.slowest, bwd * st.slowest


def _tied_sum_params(st: _Step, vs: int) -> float:
    """Parameters whose two gradients autograd sums before accumulating them: a tied word embedding whose lookup
    and output layer run in the same chunk receives a dense gradient from each (the logits GEMM's weight gradient,
    the embedding's dense backward), which the engine adds in its input buffer (torch/csrc/autograd/
    input_buffer.cpp ``InputBuffer::accumulate``, find_string id 670689175: ``old_var.add_(var)``, one more
    read-read-write pass over the local table) before
    AccumulateGrad adds the sum into ``param.grad``. Frameworks fusing the weight-gradient accumulation into the
    GEMM (no ``grad_accumulation_pass``) write the output layer's share straight into ``main_grad`` instead."""
    m, tp = st.scenario.model, st.scenario.layout.tp
    if vs != 0 or vs != st.last_vs or not m.tie_embeddings or not st.fw.grad_accumulation_pass:
        return 0.0
    return m.vocab_size * m.embed_dim / tp


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
    if st.local_global is not None:  # this chunk's own local and global blocks (no dense blocks among MoE ones)
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
        k, mtp, lt, lay = m.mtp_layers, st.mtp, st.mtp_block.times, scenario.layout
        cs.f += k * (mtp.fwd_s + lt.fwd_s + head.fwd_s)
        cs.bi += k * (mtp.bwd_input_s + lt.bwd_input_s + head.bwd_input_s)
        cs.bw += k * (mtp.bwd_weight_s + lt.bwd_weight_s + head.bwd_weight_s)
        cs.rc += k * (mtp.recompute_s + lt.recompute_s + head.recompute_s)
        cs.a += k * act.mtp_activation_bytes(scenario)
        cs.extra_params += sum(memory.mtp_params_per_rank(m, lay.tp, lay.ep, lay.etp))
        cs.comm_kinds = (*cs.kinds, (st.mtp_block, k))
        cs.label = cs.label + f" + {k} MTP"


def _regathered(st: _Step, vs: int, blocks: float) -> tuple[float, float]:
    """(block parameters, their float8 weight elements) of virtual stage ``vs`` whose copy-out and shard cast FSDP2
    repeats in the backward: its ``blocks`` block parameters (the root's, embedding, output layer and MTP, are not
    counted), but the model's last block where FSDP2 keeps it unsharded from its forward to its backward
    (TrainingSpec.fsdp_unsharded_after_forward root_and_last_block: torchtitan wraps it with
    reshard_after_forward=False), found by the chunk's layer range. The gather collective itself is one transfer
    per chunk for both passes (grad_sync._zero3_gather)."""
    scenario, tr = st.scenario, st.scenario.training
    start, n = sum(scenario.stage_layers[:vs]), scenario.stage_layers[vs]
    keeps_last = tr.fsdp_unsharded_after_forward == "root_and_last_block" and n > 0 and start + n == \
        scenario.model.num_layers
    if not (keeps_last or tr.float8_all_gather):
        return blocks, 0.0
    layer_ts = blocks_among(chunk_tensors(scenario, vs))
    last = layer_tensors(layer_ts, scenario.model.num_layers - 1) if keeps_last else ()
    kept = min(blocks, sum(t.elems for t in last))
    f8 = torchao_float8.float8_weight_elems(layer_ts) - torchao_float8.float8_weight_elems(last)
    return blocks - kept, (f8 if tr.float8_all_gather else 0.0)


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
    cs.bw += _accumulate_s(st, params, _tied_sum_params(st, vs))
    copy_f, copy_b = _fsdp2_copies_s(st, params, _regathered(st, vs, params - cs.extra_params), vs)
    cs.f += copy_f
    cs.bw += copy_b
    if st.z >= 3 and st.dp_group is not None and n:
        # Eager FSDP2 per wrapped block (CPU profiles only; compute.wrapper_overhead_s).
        of, ob = compute.wrapper_overhead_s(scenario, profile, "fsdp")
        cs.f += n * of
        cs.bi += n * ob
    gather, buckets, dp_f, dp_b = _chunk_dp(st, s, c, params, cs.extra_params > 0, n, n_d)
    ck = cs.comm_kinds
    tp_fc = sum(k * b.tp_f for b, k in ck) + (st.sg_gather if vs > 0 else 0.0)
    tp_bc = sum(k * b.tp_b for b, k in ck) + (st.sg_gather if vs < st.last_vs else 0.0)
    tp_fc += (st.vocab_tp.emb_fwd_s if vs == 0 else 0.0) + (st.vocab_tp.head_fwd_s if vs == st.last_vs else 0.0)
    tp_bc += st.vocab_tp.head_bwd_s if vs == st.last_vs else 0.0
    cp_fc, cp_bc = sum(k * b.cp_f for b, k in ck), sum(k * b.cp_b for b, k in ck)
    ep_fc = sum(k * (b.ep_f_ov * pair + b.ep_f * (1 - pair)) for b, k in ck)
    ep_bc = sum(k * (b.ep_b_ov * pair + b.ep_b * (1 - pair)) for b, k in ck)
    gpu_f = cs.f + off_f + tp_fc + cp_fc + dp_f  # the chunk's forward on the GPU's stream (EP: _host_issue)
    gpu_b = cs.bi + cs.bw + cs.rc + off_b + tp_bc + cp_bc + dp_b  # ... its backward
    idle_f, idle_b, host_f, host_b = _host_issue(st, cs, vs, (n, n_d), (gpu_f, gpu_b, ep_bc), pair)
    return ChunkCost(
        fwd_s=cs.f + off_f + idle_f, bwd_input_s=cs.bi + off_b + idle_b, bwd_weight_s=cs.bw, recompute_s=cs.rc,
        host_idle_fwd_s=idle_f, host_idle_bwd_s=idle_b, host_issue_fwd_s=host_f, host_issue_bwd_s=host_b,
        tp_fwd_s=tp_fc, tp_bwd_s=tp_bc,
        cp_fwd_s=cp_fc, cp_bwd_s=cp_bc,
        ep_fwd_s=ep_fc, ep_bwd_s=ep_bc,
        dp_fwd_s=dp_f, dp_bwd_s=dp_b,
        act_bytes=cs.a, w_retained_bytes=sum(k * b.w_keep_bytes for b, k in ck),
        bwd_transient_bytes=st.working if n else 0.0,
        layers=n, label=cs.label, grad_buckets=buckets,
        param_gather=gather, param_gather_bytes=0.0,  # gather buffers are in memory.stage_memory 'other'
    )


def _host_issue(st: _Step, cs: _ChunkSums, vs: int, blocks: tuple[int, int], gpu: tuple[float, float, float],
                pair: float) -> tuple[float, float, float, float]:
    """(forward idle, backward idle, forward host, backward host) seconds per micro-batch of virtual stage ``vs``'s
    chunk: the GPU cannot run ahead of its host, so a pass lasts at least the host's time to issue it and the excess
    over the GPU's busy time (compute + communication on its stream) is GPU idle. ``blocks``: (all, dense) blocks
    of the chunk; ``gpu``: its (forward, backward) GPU seconds without EP and its exposed backward EP seconds. Each
    host model has its own rule: a hybrid stack's sync-bounded spans (cost_models.hybrid_issue), a MoE model's
    per-block syncs (cost_models.moe_issue), and the dense blocks' (cost_models.host_issue)."""
    (n, n_d), (gpu_f, gpu_b, ep_b) = blocks, gpu
    if st.hybrid_issue is not None:
        return (*_hybrid_idle(st, n, gpu_b + ep_b, pair), *hybrid_issue.hybrid_chunk_issue_s(st.hybrid_issue))
    if st.moe_issue is not None:
        return (*_moe_idle(st, cs, n_d, gpu_b + ep_b, pair), *moe_issue.moe_chunk_issue_s(st.moe_issue, n - n_d, n_d))
    tp_calls = max(1, host_issue.tp_collective_calls(st.scenario)[0])  # a forward's sync drains one of them
    head = _head_issue(st) if vs == st.last_vs else None
    kinds = tuple((k, *b.gpu_passes(), b.tp_f / tp_calls) for b, k in cs.kinds if k)
    idle = host_issue.chunk_idle_s(st.issue, n, gpu_f, gpu_b, first=vs == 0, blocks=kinds,
                                   queued=framework.queued_microbatches(st.scenario), head=head)
    return (*idle, *host_issue.chunk_issue_s(st.issue, n, first=vs == 0, head=head))


def _moe_idle(st: _Step, cs: _ChunkSums, n_d: int, gpu_bwd_s: float, pair: float) -> tuple[float, float]:
    """(forward, backward) GPU idle per micro-batch of a Megatron-Core MoE chunk waiting for its host
    (cost_models.moe_issue): each MoE block's passes on the GPU's stream -- compute, TP, CP and the EP all-to-alls,
    unpaired and paired under EP overlap -- the dense blocks' (``n_d``: st.dense), and the chunk's backward."""
    moe = tuple((k, *b.ep_passes()) for b, k in cs.kinds if k and not (n_d and b is st.dense))
    dense = (n_d, *st.dense.gpu_passes()) if n_d else (0, 0.0, 0.0)
    return moe_issue.moe_chunk_idle_s(st.moe_issue, moe, dense, gpu_bwd_s, pair)


def _hybrid_idle(st: _Step, n: int, gpu_bwd_s: float, pair: float) -> tuple[float, float]:
    """(forward, backward) GPU idle per micro-batch of a hybrid stack's chunk (it holds the whole pattern: one stage,
    specs/scenario.py _check_hybrid) waiting for its host (cost_models.hybrid_issue): each layer kind's passes on
    the GPU's stream -- compute, TP, CP and the EP all-to-alls, unpaired and paired under EP overlap."""
    issue = st.hybrid_issue
    if n != len(issue.pattern):
        raise ValueError(f"a hybrid stack's chunk holds its whole pattern ({len(issue.pattern)} layers), not {n}")
    passes = {k: b.ep_passes() for k, b in st.hybrid_kinds}
    gpu_f = {k: p[0] for k, p in passes.items()}
    gpu_b = {k: p[1] for k, p in passes.items()}
    paired = {k: p[2] + p[3] for k, p in passes.items()}
    return hybrid_issue.hybrid_chunk_idle_s(issue, gpu_f, gpu_b, gpu_bwd_s, pair, paired)


def _head_issue(st: _Step) -> tuple[float, float, float, float] | None:
    """(host forward, host backward, GPU forward, GPU backward) seconds of the output head and loss per micro-batch
    (cost_models.loss_issue; GPU: the head's ops and its vocabulary-parallel collectives), None where its host
    time is not modelled apart."""
    if st.head_issue == (0.0, 0.0):
        return None
    return (*st.head_issue, st.head.fwd_s + st.vocab_tp.head_fwd_s,
            st.head.bwd_input_s + st.head.bwd_weight_s + st.vocab_tp.head_bwd_s)


def _pp_sends(st: _Step, s: int, nets: tuple[Scenario, Scenario] | None = None
              ) -> tuple[Transfer | None, Transfer | None]:
    """Stage ``s``'s activation send to the next stage and gradient send to the previous one (None: no peer);
    ``nets`` are the scenarios the two links are priced on (default the stage's own: a link inside one pool)."""
    scenario, lay = st.scenario, st.scenario.layout
    net_f, net_b = nets or (scenario, scenario)
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


def _norm_groups(st: _Step) -> tuple:
    """The groups the gradient norm's partial sums are all-reduced over (step_host.norm_reduce_s): the TP group and,
    where ZeRO >= 1 shards the gradients, the sharding group. Megatron-Core keeps a MoE model's expert parameters in
    an optimizer of their own (megatron/core/optimizer/__init__.py get_megatron_optimizer: model_parallel_group =
    the expert tensor-model-pipeline group, data_parallel_group = the expert-data-parallel group); its
    ChainedOptimizer.get_grad_norm takes one norm over every gradient where the optimizers share their
    grad-stats group -- the distributed optimizer's intra-instance group, the dense groups here -- and otherwise
    each optimizer's norm over its own group: without the distributed optimizer the expert norm is all-reduced
    over the expert-TP x EP group besides the dense one over TP (megatron/core/optimizer/optimizer.py,
    read_file id 28117659708; the groups: find_string ids 70434993956 and 44928196)."""
    groups = (st.groups["tp"], st.shard_group if st.z >= 1 else None)
    if st.expert_apart and st.z == 0 and st.fw.megatron_ddp == "core":
        groups += (st.pl.expert_tp_ep_group(),)
    return groups


def _optimizer_s(st: _Step, s: int) -> tuple[float, float, float]:
    """Stage ``s``'s optimizer step, the GPU's wait for its host in it and the host's issue time of its kernels:
    GPU part at the job's pace or the host's
    issue of the step's kernels, whichever is longer, with the lead-ins after its host syncs (cost_models/
    step_host.py); host (offloaded) update, DeepSpeed's persistent re-gather and the offload's PCIe traffic,
    exposed."""
    scenario = st.scenario
    sm = st.stage_mem[s]
    opt_gpu, opt_host = compute.optimizer_step_parts(scenario, s, st.profile)
    gpu = opt_gpu * st.slowest
    host = step_host.scenario_step_host(scenario, s, st.profile)
    costed = host is not None or (scenario.model.is_moe and scenario.cluster.gpu.num_sms is not None)
    reduce_s = step_host.norm_reduce_s(scenario, _norm_groups(st), st.profile) if costed else 0.0
    phase = step_host.optimizer_phase_s(gpu, host, reduce_s)
    opt = phase + opt_host
    regather_group = st.shard_group or st.dp_group  # the parameters' partition group (MiCS: its shard group)
    if st.fw.zero3_persistent_regather != "none" and st.z >= 3 and regather_group is not None:
        opt += _persistent_regather_s(scenario, s, regather_group, st.profile, st.fw.zero3_persistent_regather)
    opt += _float8_precompute_s(st, s)
    if sm.pcie_h2d_bytes or sm.pcie_d2h_bytes:
        opt += (sm.pcie_h2d_bytes + sm.pcie_d2h_bytes) / scenario.cluster.gpu.pcie_bw_Bps
    if host is None:  # no host work modelled apart: the phase is the device's and its all-reduces, no idle
        return opt, 0.0, 0.0
    return opt, phase - gpu - reduce_s, host.issue_s


def _float8_precompute_s(st: _Step, s: int) -> float:
    """torchao's ``precompute_float8_dynamic_scale_for_fsdp`` after the optimizer step on a rank of stage ``s``
    (TrainingSpec.float8_precompute_scale): one read of its float8 weight shards and one all-reduce of their
    amaxes over the shard group (torchao_float8.py)."""
    tr = st.scenario.training
    if not (tr.float8_precompute_scale and st.shard_group is not None):
        return 0.0
    tensors = rank_tensors(st.scenario, s)
    shard = torchao_float8.float8_weight_elems(tensors) / st.shard_group.size
    read = compute.memory_time_s(torchao_float8.precompute_bytes(shard, torchao_float8.sharded_param_bytes(tr)),
                                 st.hw, st.profile, "copy")
    n = torchao_float8.float8_weight_count(tensors)
    lat, bw = _coll("all_reduce", n * torchao_float8.AMAX_BYTES, st.shard_group, st.scenario, st.profile)
    return read * st.slowest + lat + bw


def _stage(st: _Step, s: int, nets: tuple[Scenario, Scenario] | None = None) -> StageCost:
    """The StageCost of pipeline stage ``s``: its chunks, pipeline sends (their links priced on ``nets``),
    optimizer step and static memory."""
    pair = ep_paired_fraction(st.scenario, s) if st.scenario.training.ep_comm_overlap else 0.0
    chunks = tuple(_chunk(st, s, c, pair) for c in range(st.scenario.layout.vpp))
    send_f, send_b = _pp_sends(st, s, nets)
    sm = st.stage_mem[s]
    opt_s, opt_idle, opt_issue = _optimizer_s(st, s)
    return StageCost(
        chunks=chunks, send_fwd=send_f, send_bwd=send_b, optimizer_s=opt_s, optimizer_host_idle_s=opt_idle,
        optimizer_host_issue_s=opt_issue,
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


def dp_pacing_pool(scenario: Scenario, profile: CalibrationProfile | None = None,
                   ideal_network: bool = False) -> int:
    """Under ``placement: dp`` (specs/pools.py) the pool whose replicas pace the step: the one whose replica's step
    (its own table, closed form) is the longest -- the gradient reduction waits for the slowest replica."""
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
                      blocking_p2p=framework.p2p_blocks(tr), batched_p2p=framework.p2p_batched(tr),
                      comm_compute_slowdown=max(comm_compute_slowdown(u.scenario) for u in used),
                      slowest_gpu_factor=max(u.slowest for u in used),
                      gpu_memory_bytes=min(u.scenario.cluster.gpu.memory_bytes for u in used),
                      host_bytes=max(steps[where[s]].stage_mem[s].host for s in range(scenario.layout.pp)))
    return table.without_communication() if ideal_network else table
