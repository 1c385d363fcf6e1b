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
  ``TrainingSpec.ep_comm_overlap`` (the combined 1F1B schedule, ``_ep_overlapped``) hides them behind another
  micro-batch's compute on the paired share of a stage's passes (``ep_paired_fraction``).
* PP: one activation (gradient) message per micro-batch and chunk, b·(s/cp)·h elements split over the TP
  ranks (scatter/gather optimisation or SP, SC21 Sec. 4.1), on the links between the stages' GPUs.
* DP: gradients reduced in Megatron DDP buckets (max(40M, 1M·dp) parameters, Megatron-Core default) as
  each chunk's last backward produces them (or all after the backward pass when the framework does not
  overlap, ``framework.behaviour(...).overlap_grad_reduce``: Megatron 2021's local DDP): all-reduce for ZeRO-0, reduce-scatter for the distributed
  optimizer / ZeRO-1/2/3; ZeRO-2/3 reduce every micro-batch (DeepSpeed/FSDP); ZeRO-1/2 all-gather the
  updated parameters after the optimizer step; ZeRO-3 all-gathers each chunk's parameters before every
  forward and backward, prefetched one op ahead. Each collective the framework issues pays its own
  latency: one ZeRO-3 gather per block (FSDP) or per weight tensor (DeepSpeed), one reduce-scatter per
  block (FSDP) or per reduce bucket (DeepSpeed), see cost_models/framework.py. Offload adds its PCIe traffic (cost_models.memory) to the
  optimizer step, exposed.
* Links: a transfer occupies its GPU's NIC (tx/rx) when its group spans nodes, else its NVLink port, so
  pipeline messages and gradient buckets of a stage share bandwidth in the engine.
* Slowest GPU: every GPU compute time -- block ops, embedding, head, MTP, the accumulation/copy passes and
  the optimizer's GPU part -- is stretched by ``variation.slowest_gpu_factor`` of the job's GPU count (a
  synchronous step proceeds at its slowest GPU's pace; GPUSpec.speed_spread_cv) where it is read
  (``_op_times``, ``_paced``), so the exposures computed against compute (TP/EP/CP overlap, offload windows)
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
from dataclasses import dataclass, replace

from trainsim.cost_models import activations as act
from trainsim.cost_models import compute, framework, host_issue, memory, variation
from trainsim.cost_models.shapes import dense_block_scenario, layer_shape
from trainsim.specs import Scenario
from trainsim.specs.memo import IdentityMemo

from .costtable import ChunkCost, CostTable, StageCost, Transfer
from .engine import COMM_COMPUTE_SLOWDOWN, NCCL_COLLECTIVE_SMS

# Megatron-Core DistributedDataParallel: bucket_size = max(40_000_000, 1_000_000 * dp_size) parameters.
DDP_BUCKET_PARAMS = 40_000_000
DDP_BUCKET_PARAMS_PER_DP = 1_000_000
# At most this many DP buckets per chunk are simulated as separate transfers (larger ones are merged;
# the exposed last bucket grows accordingly). Bounds engine events for chunks of many layers.
MAX_BUCKETS_PER_CHUNK = 4


def _collectives():
    from trainsim.cost_models import collectives  # written by the network helper; imported lazily
    return collectives


def _coll(op: str, nbytes: float, group, scenario: Scenario, profile) -> tuple[float, float]:
    """(latency_s, bandwidth_s) of one collective on ``group`` (a topologies GroupShape)."""
    if nbytes <= 0 or group is None or group.size <= 1:
        return 0.0, 0.0
    res = _collectives().collective_time(op, nbytes, group, scenario.cluster, profile=profile)
    total = float(res.time_s)
    lat = float(getattr(res, "latency_s", 0.0) or 0.0)
    lat = min(max(lat, 0.0), total)
    return lat, total - lat


def _links(stage: int, group, peer: int | None = None) -> tuple[str, ...]:
    kind = "nic" if group.multi_node else "nvl"
    dst = stage if peer is None else peer
    return (f"s{stage}.{kind}_tx", f"s{dst}.{kind}_rx")


def comm_compute_slowdown(scenario: Scenario) -> float:
    """Fraction by which compute slows while a bulk collective runs: NCCL's SMs over the GPU's SMs, or the
    device's own figure (GPUSpec.comm_compute_slowdown: CPU ranks, where gloo shares the compute cores)."""
    own = getattr(scenario.cluster.gpu, "comm_compute_slowdown", None)
    if own is not None:
        return own
    sms = getattr(scenario.cluster.gpu, "num_sms", None)
    return min(0.5, NCCL_COLLECTIVE_SMS / sms) if sms else COMM_COMPUTE_SLOWDOWN


def w_retained_bytes_per_layer(scenario: Scenario) -> float:
    """Bytes a postponed weight-gradient pass keeps per block and micro-batch (zero-bubble schedules).

    dW = Xᵀ·dY for each linear layer needs its input X and its output gradient dY (the zero-bubble
    implementation's WeightGradStore keeps exactly these pairs): inputs of QKV (h), out-projection (q),
    MLP in (h) and MLP out (f) and gradients of their outputs (q+2kv, h, n_in·f, h) per token, sharded
    over TP. For 34·s·b·h-style blocks that is 32 of the 34 (Korthikanti's breakdown). MLA's five projections
    and a shared expert's two linears add their own pairs.
    """
    shp = layer_shape(scenario)
    e, T, t = shp.e, shp.tokens, shp.tp
    q, kv = shp.a * shp.d, shp.kv * shp.d
    if shp.is_moe:
        f, n = shp.top_k * shp.fe, shp.top_k
    else:
        f, n = shp.f, 1
    n_in = 2 if shp.gated else 1
    if shp.mla:
        # MLA's five linears: the down-projections share the norm output (h) and give the latents (q latent,
        # k/v latent + RoPE key), the up-projections take the latents and give per-head q (dqk) and k, v (d + dv),
        # the output projection takes the heads' values (dv) and gives h.
        qa = shp.a * shp.dqk
        attn_in = shp.h + shp.ql + shp.kvl + shp.a * shp.dvh
        attn_grad = (shp.ql + shp.kvl + shp.dr + (qa if shp.ql else 0) + shp.a * (shp.d + shp.dvh) + shp.h)
        if not shp.ql:
            attn_grad += qa  # the full-rank query projection's output
    else:
        attn_in, attn_grad = shp.h + q, (q + 2 * kv) + shp.h
    inputs = attn_in + n * shp.h + f
    grads = attn_grad + n_in * f + n * shp.h
    if shp.fs:  # the shared expert's fc1 (input: the router's, kept above) and fc2
        inputs += shp.fs
        grads += n_in * shp.fs + shp.h
    return e * T * (inputs + grads) / t


def _pace(scenario: Scenario, profile=None) -> float:
    """Compute-time multiplier of the job's slowest GPU (cost_models/variation.py; 1 for identical GPUs). A
    GPU calibration profile measured over at least one node's ranks supplies the spread it measured instead of
    the spec's, as its GEMM fits replace the spec's efficiencies (CalibrationProfile.pace_spread_cv)."""
    cv = profile.pace_spread_cv() if profile is not None and hasattr(profile, "pace_spread_cv") else None
    return variation.slowest_gpu_factor(scenario.num_gpus, scenario.cluster.gpu.speed_spread_cv if cv is None else cv)


def _op_times(scenario: Scenario, profile) -> tuple[compute.OpTimes, ...]:
    """Per-op times of one block at the job's pace: every exposure computed against compute uses these."""
    return _paced_ops_memo(scenario) if profile is None else _paced_ops(scenario, profile)


def _paced_ops(scenario: Scenario, profile=None) -> tuple[compute.OpTimes, ...]:
    k = _pace(scenario, profile)
    ops = compute.layer_op_times(scenario, profile)
    if k == 1.0:
        return ops
    return tuple(replace(o, fwd_s=o.fwd_s * k, bwd_input_s=o.bwd_input_s * k, bwd_weight_s=o.bwd_weight_s * k)
                 for o in ops)


_paced_ops_memo = IdentityMemo(_paced_ops)  # the planner asks for the same scenario's ops several times


def _paced(times: compute.LayerTimes, k: float) -> compute.LayerTimes:
    if k == 1.0:
        return times
    return compute.LayerTimes(times.fwd_s * k, times.bwd_input_s * k, times.bwd_weight_s * k, times.recompute_s * k)


def _attention_fwd_s(scenario: Scenario, profile) -> float:
    """Forward time of the attention core of one block (what hides CP ring exchanges)."""
    ops = _op_times(scenario, profile)
    t = [o.fwd_s for o in ops if "attn" in o.name.lower() or "attention" in o.name.lower()
         or "score" in o.name.lower() or "core" in o.name.lower()]
    return sum(t)


def _cp_exchange_s(scenario: Scenario, profile, group, e: int, tokens: int, shp) -> tuple[float, float]:
    """Exposed context-parallel communication of one block, (forward, backward), by TrainingSpec.cp_comm.

    ``tokens`` is this rank's share of the micro-batch. p2p: the ring passes K/V blocks cp-1 times, each step
    hidden behind the attention of the block before it (backward: dK/dV travel too, behind 2.5x the work);
    allgather: K and V of all cp blocks gathered before attention, and gathered again plus dK/dV reduce-
    scattered in backward, all on the critical path; a2a (Ulysses): Q, K, V re-sharded from sequence to heads
    before attention and the output back after, the same exchanges mirrored in backward, on the critical path.
    """
    cp, tp = scenario.layout.cp, scenario.layout.tp
    kv_block = e * tokens * shp.kv * (shp.dqk + shp.dvh) / tp   # K and V of this rank's sequence block
    mode = scenario.training.cp_comm
    if mode == "allgather":
        gather = sum(_coll("all_gather", kv_block * cp, group, scenario, profile))
        scatter = sum(_coll("reduce_scatter", kv_block * cp, group, scenario, profile))
        return gather, gather + scatter
    if mode == "a2a":
        q_block = e * tokens * shp.a * shp.dqk / tp
        o_block = e * tokens * shp.a * shp.dvh / tp
        a2a = sum(_coll("all_to_all", q_block + kv_block, group, scenario, profile))
        out = sum(_coll("all_to_all", o_block, group, scenario, profile))
        return a2a + out, out + a2a
    step = sum(_coll("send_recv", kv_block, group, scenario, profile))
    step_b = sum(_coll("send_recv", 2 * kv_block, group, scenario, profile))
    attn_blk = _attention_fwd_s(scenario, profile) / cp
    steps = cp - 1
    return steps * max(0.0, step - attn_blk), steps * max(0.0, step_b - compute.FLASH_BWD_FACTOR * attn_blk)


def _pipelined_exposed_s(comm_s: float, gemm_s: float, chunked_gemm_s: float, steps: int) -> float:
    """Exposed time of a collective split into ``steps`` chunks and pipelined with its GEMM (ring exchange):
    the GEMM runs as ``steps`` chunks (``chunked_gemm_s`` >= ``gemm_s``, smaller tiles), one step of the
    shorter side is the pipeline's fill/drain; what exceeds the un-split GEMM is exposed."""
    # Never negative: overlapping a collective cannot make its GEMM faster than running it alone (a tiny,
    # memory-bound GEMM whose op time exceeds the chunked tile-model time gave < 0 before).
    return max(0.0, max(comm_s, chunked_gemm_s) + min(comm_s, chunked_gemm_s) / steps - gemm_s)


def _chunk_ratio(m: int, n: int, k: int, steps: int, hw, fp8: bool, e: int) -> float:
    """Time of a GEMM run as ``steps`` row chunks over its time in one piece (tile model of compute.py)."""
    whole = compute.gemm_time_s(m, n, k, hw, fp8=fp8, e=e)
    # At least 1: smaller tiles never speed the same work up (the tile model's wave quantization can favour
    # the smaller grid of an odd shape).
    return max(1.0, steps * compute.gemm_time_s(max(1, m // steps), n, k, hw, fp8=fp8, e=e) / whole) if whole > 0 else 1.0


def _tp_overlapped(ag_s: float, rs_s: float, tp: int, scenario: Scenario, profile) -> tuple[float, float]:
    """Per-block exposed sequence-parallel TP time (forward, backward) with userbuffers overlap (see module doc)."""
    ops = {o.name: o for o in _op_times(scenario, profile)}
    shp = layer_shape(scenario)
    hw, fp8, e, T = compute.hw_of(scenario.cluster.gpu, shp.dtype), shp.dtype == "fp8", shp.e, shp.tokens
    q, kv, h, n_in = shp.a * shp.d, shp.kv * shp.d, shp.h, 2 if shp.gated else 1
    f = shp.f
    dims = {  # (m, n, k) of the un-split GEMM on one TP rank, m = the all-gathered tokens
        ("qkv", "fwd_s"): (T, (q + 2 * kv) // tp, h), ("out_proj", "fwd_s"): (T, h, q // tp),
        ("fc1", "fwd_s"): (T, n_in * f // tp, h), ("fc2", "fwd_s"): (T, h, f // tp),
        ("out_proj", "bwd_input_s"): (T, q // tp, h), ("fc2", "bwd_input_s"): (T, f // tp, h),
    }

    def gemm(name: str, field: str) -> float:
        o = ops.get(name)
        return getattr(o, field) if o is not None else 0.0  # no such GEMM (MoE experts): nothing hides it

    def ring(comm_s: float, name: str, field: str) -> float:
        g = gemm(name, field)
        r = _chunk_ratio(*dims[(name, field)], tp, hw, fp8, e) if g > 0 else 1.0
        return _pipelined_exposed_s(comm_s, g, g * r, tp)
    fwd = (ring(ag_s, "qkv", "fwd_s") + ring(rs_s, "out_proj", "fwd_s")
           + ring(ag_s, "fc1", "fwd_s") + ring(rs_s, "fc2", "fwd_s"))
    bwd = (ring(ag_s, "out_proj", "bwd_input_s") + ring(ag_s, "fc2", "bwd_input_s")
           + _column_parallel_bwd_exposed_s(ag_s, rs_s, scenario, profile))
    return fwd, bwd


# The combined 1F1B schedule's "mlp" node: the experts' and the shared expert's MLPs; attention, the pre-MLP norm,
# router and token (un)permutation belong to its "attn" node (megatron/core/models/gpt/fine_grained_callables.py).
_MOE_OPS = ("expert_", "shared_")


def _ep_overlapped(a2a_s: float, scenario: Scenario, profile) -> tuple[float, float]:
    """Exposed EP seconds (forward, backward) of a MoE block under Megatron-Core's combined 1F1B schedule
    (--overlap-moe-expert-parallel-comm --delay-wgrad-compute): the forward of micro-batch N and the backward
    of N-1 run interleaved by sub-module, each all-to-all on a communication stream beside the other micro-
    batch's compute, in three phases (megatron/core/pipeline_parallel/combined_1f1b.py):
    combine-backward | attention forward; dispatch forward + dispatch backward | MoE MLP backward (incl. its
    weight gradients) + MoE MLP forward; combine forward | attention backward (incl. weight gradients) -- where
    "attention" is the rest of the block (norms, router, permutation) and "MoE MLP" the experts + shared expert.
    Exposed per phase ``max(0, comm - compute)``, plus the compute's slowdown from the communication kernels'
    SMs over the overlapped time (``comm_compute_slowdown``). Split half-and-half over the two passes'
    records; ``a2a_s`` is one all-to-all (dispatch and combine are the same size)."""
    ops = _op_times(scenario, profile)
    moe = [o for o in ops if o.name.startswith(_MOE_OPS)]
    dense = [o for o in ops if not o.name.startswith(_MOE_OPS)]
    attn_f = sum(o.fwd_s for o in dense)
    attn_b = sum(o.bwd_input_s + o.bwd_weight_s for o in dense)
    moe_fb = sum(o.fwd_s + o.bwd_input_s + o.bwd_weight_s for o in moe)
    slow = comm_compute_slowdown(scenario)
    phases = ((a2a_s, attn_f), (2 * a2a_s, moe_fb), (a2a_s, attn_b))
    exposed = [max(0.0, c - g) + slow * min(c, g) for c, g in phases]
    return exposed[0] + exposed[1] / 2, exposed[2] + exposed[1] / 2


def ep_paired_fraction(scenario: Scenario, stage: int) -> float:
    """Share of a stage's micro-batch chunk passes that the combined 1F1B schedule pairs (a forward with another
    micro-batch's backward): all but the warm-up forwards and the matching cool-down backwards -- Megatron's
    interleaved warm-up of 2·(pp - stage - 1) + (vpp - 1)·pp chunk forwards (pp = 1: the first forward)."""
    m, pp, v = scenario.num_microbatches, scenario.layout.pp, scenario.layout.vpp
    total = m * v
    warm = 1 if pp == 1 else 2 * (pp - stage - 1) + (v - 1) * pp
    return max(0.0, (total - min(total, warm)) / total)


def _persistent_tensors(scenario: Scenario, stage: int) -> tuple[int, float]:
    """(count, elements) of the stage's parameter tensors under DeepSpeed's persistence threshold on one
    rank: norm weights (and LayerNorm biases, QK-norm weights), the linears' biases of each block, the final norm on the last
    stage (framework.py zero3_persistent_regather)."""
    m, t = scenario.model, scenario.layout.tp
    shp = layer_shape(scenario)
    per_norm = 2 if m.norm == "layernorm" else 1
    sizes = [m.hidden] * (m.block_norms * per_norm) + ([m.dhead] * 2 if m.qk_norm else [])
    if m.bias and not shp.is_moe:
        sizes += [(shp.a + 2 * shp.kv) * shp.d // t, m.hidden, (2 if shp.gated else 1) * shp.f // t, m.hidden]
    small = [x for x in sizes if x <= framework.DEEPSPEED_PERSISTENCE_THRESHOLD]
    layers = scenario.stage_layers
    v = scenario.layout.vpp
    n_layers = sum(layers[scenario.virtual_stage(stage, c)] for c in range(v))
    count, elems = n_layers * len(small), n_layers * float(sum(small))
    if stage == scenario.layout.pp - 1 and m.hidden <= framework.DEEPSPEED_PERSISTENCE_THRESHOLD:
        count, elems = count + per_norm, elems + per_norm * m.hidden
    return count, elems


def _persistent_regather_s(scenario: Scenario, stage: int, dp_group, profile) -> float:
    """DeepSpeed 2021's post-step re-gather of the persistent parameters: one all-gather of their bytes plus
    one eager copy per rank per tensor (framework.py zero3_persistent_regather)."""
    count, elems = _persistent_tensors(scenario, stage)
    if not count:
        return 0.0
    lat, bw = _coll("all_gather", elems * scenario.training.param_bytes, dp_group, scenario, profile)
    return lat + bw + count * scenario.dp * scenario.cluster.gpu.kernel_overhead_s


def _column_parallel_bwd_exposed_s(gather_s: float, reduce_s: float, scenario: Scenario, profile,
                                   slowdown: float = 0.0) -> float:
    """Exposed backward TP seconds of a block's column-parallel linears (QKV, MLP in) whose input-gradient
    reduction (``reduce_s``: all-reduce, or reduce-scatter with SP) runs behind the layer's weight-gradient
    GEMM and, with sequence parallelism, whose input re-gather (``gather_s``) runs behind its input-gradient
    GEMM (Megatron's asynchronous TP communication, framework.py tp_dgrad_overlap): ``max(0, comm - gemm)``
    per pair, plus the GEMM's slowdown while the collective holds ``slowdown`` of the SMs (NCCL kernels:
    ``comm_compute_slowdown``) over the overlapped time. A linear the block lacks (MoE experts) hides nothing."""
    ops = {o.name: o for o in _op_times(scenario, profile)}
    exposed = 0.0
    for name in ("qkv", "fc1"):
        o = ops.get(name)
        dgrad, wgrad = (o.bwd_input_s, o.bwd_weight_s) if o is not None else (0.0, 0.0)
        for comm, gemm in ((gather_s, dgrad), (reduce_s, wgrad)):
            exposed += max(0.0, comm - gemm) + slowdown * min(comm, gemm)
    return exposed


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
class _Block:
    """What one transformer block of one kind costs per micro-batch on one rank (see block_kinds)."""

    times: compute.LayerTimes
    tp_f: float
    tp_b: float
    cp_f: float
    cp_b: float
    ep_f: float
    ep_b: float
    ep_f_ov: float         # exposed EP seconds of a block whose forward is paired with another micro-batch's
    ep_b_ov: float         # backward (TrainingSpec.ep_comm_overlap, _ep_overlapped)
    act_bytes: float
    w_keep_bytes: float
    params: float          # dense + expert parameters on one rank
    gather_tensors: int    # ZeRO-3 all-gathers per pass when the framework gathers tensor by tensor


def _block(scenario: Scenario, groups: dict, profile) -> _Block:
    """The per-block costs of ``scenario``'s block (a MoE model's dense blocks: its ``dense_block()``)."""
    m, lay, tr = scenario.model, scenario.layout, scenario.training
    shp = layer_shape(scenario)
    e = shp.e
    # -- per-block communication exposed on the compute stream -----------------------------------
    tokens = shp.tokens                                   # b·s/cp tokens per rank's GEMMs
    act_msg = e * tokens * shp.h                          # one [b, s/cp, h] activation, bytes
    tp_f = tp_b = 0.0
    fw = framework.behaviour(tr.framework)
    if lay.tp > 1:
        per_linear = fw.tp_input_reduce == "per_linear"  # framework.py: torch parallelize_module
        # torch TP communicates by DTensor redistribution: its host cost beyond the raw collective is
        # measured by CPU calibrations (profile.dtensor_collective_overhead_s), else 0.
        dt_ov = (getattr(profile, "dtensor_collective_overhead_s", None) or {}) if per_linear else {}
        if tr.sequence_parallel:
            ag = sum(_coll("all_gather", act_msg, groups["tp"], scenario, profile)) + dt_ov.get("all_gather", 0.0)
            rs = sum(_coll("reduce_scatter", act_msg, groups["tp"], scenario, profile)) + dt_ov.get("reduce_scatter", 0.0)
            tp_f = tp_b = 2 * (ag + rs)
            if tr.tp_comm_overlap and not per_linear:
                tp_f, tp_b = _tp_overlapped(ag, rs, lay.tp, scenario, profile)
            elif fw.tp_dgrad_overlap:  # gathers before out_proj/fc2 dgrad wait; QKV/fc1's hide (framework.py)
                tp_b = 2 * ag + _column_parallel_bwd_exposed_s(ag, rs, scenario, profile,
                                                               comm_compute_slowdown(scenario))
            if per_linear:  # replicated SequenceParallel norm weights: Partial gradients all-reduced
                norm_tensors = 2 if m.norm == "layernorm" else 1
                tp_b += m.block_norms * norm_tensors * (sum(_coll("all_reduce", e * m.hidden, groups["tp"], scenario, profile))
                                            + dt_ov.get("all_reduce", 0.0))
        else:
            ar = sum(_coll("all_reduce", act_msg, groups["tp"], scenario, profile)) + dt_ov.get("all_reduce", 0.0)
            tp_f = tp_b = 2 * ar
            if per_linear:  # q, k, v, fc1 (, gate) reduce their input gradients one by one
                tp_b = (4 + (1 if shp.gated else 0)) * ar
            elif fw.tp_dgrad_overlap:  # each all-reduce hides behind its layer's wgrad GEMM (framework.py)
                tp_b = _column_parallel_bwd_exposed_s(0.0, ar, scenario, profile, comm_compute_slowdown(scenario))
        pair_f = tp_f / 2  # forward exposure of one of the block's two column/row-parallel pairs
        etp_s = 0.0
        if shp.is_moe:  # (specs: MoE with tp > 1 needs sequence parallelism)
            # A MoE layer takes the sequence-sharded tokens as they are and returns them sharded, so of the block's
            # two TP gather/scatter pairs only the attention's remains -- plus a shared expert's, a TP-sharded
            # dense MLP on the same input (approximated as half of every path above per pair). Its routed tokens
            # move by the dispatcher: the all-to-all over EP (below), then, with the experts split over etp > 1
            # ranks, an all-gather of the routed [T·k·etp/tp, h] tokens over the expert-TP group before the
            # experts and a reduce-scatter after them (Megatron-Core's MoEAlltoAllTokenDispatcher: its
            # dispatch_postprocess / combine_preprocess, run with the experts on the compute stream, so the EP
            # overlap does not hide them).
            pairs = 1 + (1 if shp.fs else 0)
            tp_f, tp_b = tp_f * pairs / 2, tp_b * pairs / 2
            if shp.xtp > 1:
                from trainsim.topologies.placement import place
                etp_group = place(scenario).expert_tp_group()
                msg = e * shp.routed_tokens * shp.h
                etp_s = (sum(_coll("all_gather", msg, etp_group, scenario, profile))
                         + sum(_coll("reduce_scatter", msg, etp_group, scenario, profile)))
                tp_f += etp_s
                tp_b += etp_s
        if tr.recompute == "full":
            tp_b += tp_f
        elif tr.recompute == "selective":
            # A recomputed dense MLP or shared expert (alone, or inside a recomputed MoE layer) re-runs its
            # column/row-parallel pair's forward collectives before its backward (Megatron checkpoints the module
            # with its gather and scatter inside); a recomputed MoE layer also re-gathers its routed tokens.
            rerun = ((1 if not shp.is_moe and shp.recomputes("mlp") else 0)
                     + (1 if shp.fs and (shp.recomputes("shared_experts") or shp.recomputes("moe")) else 0))
            tp_b += rerun * pair_f + (etp_s if shp.recomputes("moe") else 0.0)
    cp_f = cp_b = 0.0
    if lay.cp > 1:
        cp_f, cp_b = _cp_exchange_s(scenario, profile, groups["cp"], e, tokens, shp)
        if tr.recompute == "full":
            cp_b += cp_f
    ep_f = ep_b = ep_f_ov = ep_b_ov = 0.0
    if m.is_moe and lay.ep > 1:
        a2a_bytes = e * tokens * shp.top_k * shp.h / (lay.tp if tr.sequence_parallel else 1)
        a2a = sum(_coll("all_to_all", a2a_bytes, groups["ep"], scenario, profile))
        ep_f = ep_b = 2 * a2a
        if tr.ep_comm_overlap:
            ep_f_ov, ep_b_ov = _ep_overlapped(a2a, scenario, profile)
        if tr.recompute == "full" or shp.recomputes("moe"):  # the recomputed forward dispatches again
            ep_b += ep_f  # (specs refuse ep_comm_overlap with either, so the overlapped figures need no such term)
    dense_l, expert_l = memory.layer_params_per_rank(m, lay.tp, lay.ep, lay.etp)  # per block, one rank
    mlp = 3 if shp.gated else 2
    attn_tensors = (5 if shp.ql else 4) if shp.mla else 2  # MLA: q(down, up) | q, kv down, kv up, out
    per_block = attn_tensors + mlp * ((max(1, m.num_experts // lay.ep) + (1 if shp.fs else 0)) if shp.is_moe else 1)
    return _Block(
        times=_paced(compute.layer_times(scenario, profile), _pace(scenario, profile)),
        tp_f=tp_f, tp_b=tp_b, cp_f=cp_f, cp_b=cp_b, ep_f=ep_f,
        ep_b=ep_b, ep_f_ov=ep_f_ov, ep_b_ov=ep_b_ov, act_bytes=act.layer_activation_bytes(scenario).total,
        w_keep_bytes=w_retained_bytes_per_layer(scenario) if tr.schedule in ("zb", "dualpipev") else 0.0,
        params=dense_l + expert_l, gather_tensors=per_block)


def _local_global_blocks(scenario: Scenario, groups: dict, profile) -> tuple[_Block, _Block] | None:
    """(local, global) blocks of a dense model with one global block every ``global_every`` among sliding-window
    ones (Gemma 2/3), so that each pipeline chunk is costed with the blocks it holds; the main block carries
    their mean, exact for the whole model. None for other models (every block alike)."""
    m = scenario.model
    if m.is_moe or not m.sliding_window or not m.global_every:
        return None
    local = scenario.model_copy(update={"model": m.model_copy(update={"global_every": None})})
    full = scenario.model_copy(update={"model": m.model_copy(update={"sliding_window": None, "global_every": None})})
    return _block(local, groups, profile), _block(full, groups, profile)


def _global_layers_in(scenario: Scenario, vstage: int) -> int:
    """Global (full-attention) blocks among virtual stage ``vstage``'s layers: layer i is global when
    (i + 1) % global_every == 0 (ModelSpec.global_every)."""
    k, layers = scenario.model.global_every, scenario.stage_layers
    start = sum(layers[:vstage])
    return (start + layers[vstage]) // k - start // k


def _build(scenario: Scenario, profile, ideal_network: bool) -> CostTable:
    m, lay, tr = scenario.model, scenario.layout, scenario.training
    p, v = lay.pp, lay.vpp
    shp = layer_shape(scenario)
    e = shp.e
    # The job runs at its slowest GPU's pace: GPU compute (never communication, host or PCIe time) is
    # stretched by the expected slowest of the job's GPUs (cost_models/variation.py).
    slowest = _pace(scenario, profile)
    emb = _paced(compute.embedding_times(scenario, profile), slowest)
    head = _paced(compute.head_times(scenario, profile), slowest)
    mtp = _paced(compute.mtp_times(scenario, profile), slowest)
    from trainsim.topologies.placement import place
    pl = place(scenario)
    groups = {d: (pl.group(d) if getattr(lay, d) > 1 else None) for d in ("tp", "cp", "ep", "dp")}
    # A MoE model's first_dense_layers cost what its dense_block() costs; every other block is `main`.
    main = _block(scenario, groups, profile)
    dense = _block(dense_block_scenario(scenario), groups, profile) if m.first_dense_layers and m.is_moe else main
    local_global = _local_global_blocks(scenario, groups, profile)
    lt, layer_act = main.times, main.act_bytes
    tokens = shp.tokens
    act_msg = e * tokens * shp.h
    fw = framework.behaviour(tr.framework)
    # Megatron's scatter/gather optimisation (SC21 Sec. 4.1): each TP rank sends 1/tp of the activation and
    # the receiver all-gathers it over the TP group (gather_split_1d_tensor) on the compute stream before use.
    sg_gather = 0.0
    if lay.pp > 1 and lay.tp > 1 and not tr.sequence_parallel and fw.pp_scatter_gather:
        sg_gather = sum(_coll("all_gather", act_msg, groups["tp"], scenario, profile))

    # -- memory sizes ------------------------------------------------------------------------------
    emb_act = act.embedding_activation_bytes(scenario)
    head_act = act.head_activation_bytes(scenario)

    # -- data parallel -------------------------------------------------------------------------------
    z = tr.effective_zero
    dp_group = groups["dp"]
    bucket_params = max(DDP_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP * scenario.dp)
    reduce_op = "all_reduce" if z == 0 else "reduce_scatter"
    # Frameworks without gradient-accumulation fusion add each block's weight gradients into the
    # accumulation buffer in a separate pass every micro-batch (framework.py grad_accumulation_pass).
    hw = compute.hw_of(scenario.cluster.gpu, tr.dtype)

    # FSDP's own passes over each unit's gradient around its reduce-scatter (framework.py fsdp_grad_prep). Only the
    # concatenation runs in autograd on the compute stream; FSDP runs the cast, divides and += on its
    # post-backward stream, concurrently with the next unit's backward, where they take the same HBM bandwidth:
    # counted here as compute-stream time, a simplification that ignores any slack in the GEMMs' HBM use.
    prep_per_param = (framework.fsdp_grad_prep_bytes_per_param(shp.e, tr.grad_bytes, scenario.dp,
                                                               scenario.num_microbatches > 1)
                      if fw.fsdp_grad_prep and z >= 2 and dp_group is not None else 0.0)

    def accumulate_s(params: float) -> float:
        nbytes = params * ((3 * tr.grad_bytes if fw.grad_accumulation_pass else 0.0) + prep_per_param)
        return compute.memory_time_s(nbytes, hw, profile, "copy") * slowest if nbytes > 0 else 0.0

    def grad_buckets(s: int, params: float, label: str, layers_of_chunk: int) -> tuple[Transfer, ...]:
        if dp_group is None or params <= 0:
            return ()
        # How many collectives the framework really issues for this chunk's gradients: ZeRO-2/3 reduce-
        # scatter per block as backward produces it (FSDP), or per reduce bucket (DeepSpeed
        # reduce_bucket_size); ZeRO-0/1 use Megatron's DDP bucket size. At most MAX_BUCKETS_PER_CHUNK
        # transfers are simulated, each carrying its share of the calls' latency and bytes.
        if z >= 2 and fw.reduce_bucket_params:
            calls = max(1, math.ceil(params / fw.reduce_bucket_params))
        elif z >= 2:
            calls = max(1, layers_of_chunk)
        else:
            calls = max(1, math.ceil(params / bucket_params))
        n = min(MAX_BUCKETS_PER_CHUNK, calls)
        per_call = params * tr.grad_bytes / calls
        lat, bw = _coll(reduce_op, per_call, dp_group, scenario, profile)
        k_calls = calls / n
        links = _links(s, dp_group)
        return tuple(Transfer(f"{reduce_op} grads {label} bucket {k}", transfer_s=bw * k_calls,
                              latency_s=lat * k_calls, links=links, dim="dp", nbytes=per_call * k_calls)
                     for k in range(n))

    def gather_calls(n_main: int, n_dense: int, extra: bool) -> int:
        """ZeRO-3 all-gathers per pass over a chunk: one per block (FSDP) or per weight tensor (DeepSpeed)."""
        if fw.zero3_gather == "tensor":
            tensors = n_main * main.gather_tensors + n_dense * dense.gather_tensors
        else:
            tensors = n_main + n_dense
        return max(1, tensors + (1 if extra else 0))

    # Embedding (+ positions) on the first stage; final norm + output layer (a duplicate of a tied embedding
    # when pp > 1) on the last: memory.stage_extra_params's split, one rank.
    emb_params = memory.stage_extra_params(m, lay.tp, max(p, 2), 0)
    loss_stage = scenario.loss_stage  # p-1, or 0 in DualPipeV's V (which holds the embedding already)
    head_params = (memory.stage_extra_params(m, lay.tp, p, loss_stage, loss_stage)
                   - (emb_params if loss_stage == 0 else 0.0))
    stage_mem = [memory.stage_memory(scenario, s) for s in range(p)]
    working = stage_mem[0].details["recompute_working"]  # one block's recompute set (the largest block kind)
    stage_rank = [pl.pp_peer(0, k) for k in range(p)]  # rank 0's column of the pipeline
    issue = host_issue.scenario_block_issue(scenario, profile)  # host time to issue one block (None: not modelled)
    stages = []
    last_vs = p * v - 1
    layers = scenario.stage_layers
    for s in range(p):
        chunks = []
        pair = ep_paired_fraction(scenario, s) if tr.ep_comm_overlap else 0.0
        for c in range(v):
            vs = scenario.virtual_stage(s, c)
            n = layers[vs]
            n_d = scenario.dense_layers_in(vs) if m.is_moe else 0
            kinds = ((main, n - n_d), (dense, n_d))
            if local_global is not None:  # this chunk's own local and global blocks (dense models only)
                g = _global_layers_in(scenario, vs)
                kinds = ((local_global[0], n - g), (local_global[1], g))
            comm_kinds = kinds  # blocks whose communication and retained inputs this chunk has (+ MTP's)
            f = sum(k * b.times.fwd_s for b, k in kinds)
            bi = sum(k * b.times.bwd_input_s for b, k in kinds)
            bw = sum(k * b.times.bwd_weight_s for b, k in kinds)
            rc = sum(k * b.times.recompute_s for b, k in kinds)
            off = memory.offloaded_layers(scenario)  # pp = 1: this one chunk holds every layer
            a = sum(k * b.act_bytes for b, k in kinds) - off * layer_act
            off_f = off_b = 0.0
            if off:
                # (offloaded blocks and their windows are costed as the model's main block)
                # Activation offload: each layer's copy to the host hides behind its window of forward layers,
                # each reload behind the same window of backward (memory.offload_windows); the rest is exposed.
                # The windows are the job's (slowest GPU's) compute; the copies are PCIe time, not stretched.
                copy_s = layer_act / scenario.cluster.gpu.pcie_bw_Bps
                bwd_s = lt.bwd_input_s + lt.bwd_weight_s + lt.recompute_s
                for w in memory.offload_windows(n, off):
                    off_f += max(0.0, copy_s - w * lt.fwd_s)
                    off_b += max(0.0, copy_s - w * bwd_s)
            extra_params = 0.0
            label = f"layers {sum(layers[:vs])}-{sum(layers[:vs]) + n - 1}" if n else "no layers"
            if vs == 0:
                f += emb.fwd_s
                bi += emb.bwd_input_s
                bw += emb.bwd_weight_s
                a += emb_act
                extra_params += emb_params
                label = "embedding + " + label
            if vs == last_vs:
                f += head.fwd_s
                bi += head.bwd_input_s
                bw += head.bwd_weight_s
                rc += head.recompute_s
                a += head_act
                extra_params += head_params
                label = label + " + logits/loss"
                if m.mtp_layers:  # each MTP module: its own ops + a main block + another output-head pass
                    k = m.mtp_layers
                    f += k * (mtp.fwd_s + lt.fwd_s + head.fwd_s)
                    bi += k * (mtp.bwd_input_s + lt.bwd_input_s + head.bwd_input_s)
                    bw += k * (mtp.bwd_weight_s + lt.bwd_weight_s + head.bwd_weight_s)
                    rc += k * (mtp.recompute_s + lt.recompute_s + head.recompute_s)
                    a += k * act.mtp_activation_bytes(scenario)
                    extra_params += sum(memory.mtp_params_per_rank(m, lay.tp, lay.ep, lay.etp))
                    comm_kinds = (*kinds, (main, k))
                    label = label + f" + {k} MTP"
            params = sum(k * b.params for b, k in kinds) + extra_params
            bw += accumulate_s(params)
            if z >= 3 and dp_group is not None and n:
                # Eager FSDP2 per wrapped block (CPU profiles only; compute.wrapper_overhead_s).
                of, ob = compute.wrapper_overhead_s(scenario, profile, "fsdp")
                f += n * of
                bi += n * ob
            gather = None
            if z >= 3 and dp_group is not None:
                calls = gather_calls(n - n_d, n_d, extra_params > 0)
                lat, bwt = _coll("all_gather", params * tr.param_bytes / calls, dp_group, scenario, profile)
                gather = Transfer(f"all_gather params chunk {c}", transfer_s=bwt * calls, latency_s=lat * calls,
                                  links=_links(s, dp_group), dim="dp", nbytes=params * tr.param_bytes)
            buckets = grad_buckets(s, params, f"chunk {c}", n)
            dp_f = dp_b = 0.0
            if gather is not None and not fw.zero3_overlap:
                # Gathers and reduce-scatters serialized with compute (DeepSpeed 2021); the recomputed
                # forward of a checkpointed layer gathers again before the backward's own gather.
                # Each gathered tensor and each reduced gradient tensor also costs host ops per rank (the
                # list-based collectives of that code): framework.zero3_gather_ops_per_rank.
                host = calls * fw.zero3_gather_ops_per_rank * scenario.dp * scenario.cluster.gpu.kernel_overhead_s
                # ... and HBM copies around them: the zero-filled output plus the flat buffer copied back
                # into the list (3 passes over the gathered bytes), the gradients copied into the flat
                # reduce-scatter input (2 passes).
                copy_g = slowest * compute.memory_time_s(3 * params * tr.param_bytes, hw, profile, "copy") if host else 0.0
                copy_r = slowest * compute.memory_time_s(2 * params * tr.grad_bytes, hw, profile, "copy") if host else 0.0
                rlat, rbw = _coll("reduce_scatter", params * tr.grad_bytes / calls, dp_group, scenario, profile)
                reduce = calls * (rlat + rbw) + host + copy_r
                host += copy_g
                dp_f = gather.time_s + host
                dp_b = (2 if tr.recompute == "full" else 1) * (gather.time_s + host) + reduce
                gather, buckets = None, ()
            tp_fc = sum(k * b.tp_f for b, k in comm_kinds) + (sg_gather if vs > 0 else 0.0)
            tp_bc = sum(k * b.tp_b for b, k in comm_kinds) + (sg_gather if vs < last_vs else 0.0)
            # The GPU cannot run ahead of its host: a pass lasts at least the host's time to issue it; the
            # excess over the GPU's busy time (compute + communication on its stream) is GPU idle.
            cp_fc, cp_bc = sum(k * b.cp_f for b, k in comm_kinds), sum(k * b.cp_b for b, k in comm_kinds)
            idle_f, idle_b = host_issue.chunk_idle_s(issue, n, f + off_f + tp_fc + cp_fc + dp_f,
                                                     bi + bw + rc + off_b + tp_bc + cp_bc + dp_b)
            chunks.append(ChunkCost(
                fwd_s=f + off_f + idle_f, bwd_input_s=bi + off_b + idle_b, bwd_weight_s=bw, recompute_s=rc,
                host_idle_fwd_s=idle_f, host_idle_bwd_s=idle_b, tp_fwd_s=tp_fc, tp_bwd_s=tp_bc,
                cp_fwd_s=cp_fc, cp_bwd_s=cp_bc,
                ep_fwd_s=sum(k * (b.ep_f_ov * pair + b.ep_f * (1 - pair)) for b, k in comm_kinds),
                ep_bwd_s=sum(k * (b.ep_b_ov * pair + b.ep_b * (1 - pair)) for b, k in comm_kinds),
                dp_fwd_s=dp_f, dp_bwd_s=dp_b,
                act_bytes=a, w_retained_bytes=sum(k * b.w_keep_bytes for b, k in comm_kinds),
                bwd_transient_bytes=working if n else 0.0,
                layers=n, label=label, grad_buckets=buckets,
                param_gather=gather, param_gather_bytes=0.0,  # gather buffers are in memory.stage_memory 'other'
            ))
        send_f = send_b = None
        if p > 1:
            msg = act_msg / lay.tp
            nxt, prv = (s + 1) % p, (s - 1) % p
            if v > 1 or s < p - 1:
                g = pl.p2p(stage_rank[s], stage_rank[nxt])
                lat, bwt = _coll("send_recv", msg, g, scenario, profile)
                send_f = Transfer("send activations", transfer_s=bwt, latency_s=lat, links=_links(s, g, nxt),
                                  dim="pp", nbytes=msg, bulk=False)
            if v > 1 or s > 0:
                g = pl.p2p(stage_rank[s], stage_rank[prv])
                lat, bwt = _coll("send_recv", msg, g, scenario, profile)
                send_b = Transfer("send gradients", transfer_s=bwt, latency_s=lat, links=_links(s, g, prv),
                                  dim="pp", nbytes=msg, bulk=False)
        sm = stage_mem[s]
        opt_gpu, opt_host = compute.optimizer_step_parts(scenario, s, profile)
        opt = opt_gpu * slowest + opt_host
        if fw.zero3_persistent_regather and z >= 3 and dp_group is not None:
            opt += _persistent_regather_s(scenario, s, dp_group, profile)
        if sm.pcie_h2d_bytes or sm.pcie_d2h_bytes:
            opt += (sm.pcie_h2d_bytes + sm.pcie_d2h_bytes) / scenario.cluster.gpu.pcie_bw_Bps
        post: tuple[Transfer, ...] = ()
        if z in (1, 2) and dp_group is not None:
            held = memory.rank_param_shards(scenario, s).held
            nbytes = held * tr.param_bytes
            lat, bwt = _coll("all_gather", nbytes, dp_group, scenario, profile)
            post = (Transfer("all_gather updated params", transfer_s=bwt, latency_s=lat,
                             links=_links(s, dp_group), dim="dp", nbytes=nbytes),)
        stages.append(StageCost(
            chunks=tuple(chunks), send_fwd=send_f, send_bwd=send_b, optimizer_s=opt, post_step=post,
            weights_bytes=sm.weights, grads_bytes=sm.grads, optimizer_bytes=sm.optimizer, other_bytes=sm.other,
        ))
    table = CostTable(stages=tuple(stages), num_microbatches=scenario.num_microbatches, schedule=tr.schedule,
                      reduce_grads_every_microbatch=z >= 2, overlap_grad_reduce=fw.overlap_grad_reduce,
                      blocking_p2p=framework.p2p_blocks(tr),
                      comm_compute_slowdown=comm_compute_slowdown(scenario),
                      slowest_gpu_factor=slowest,
                      gpu_memory_bytes=scenario.cluster.gpu.memory_bytes,
                      host_bytes=max(sm.host for sm in stage_mem))
    return table.without_communication() if ideal_network else table
