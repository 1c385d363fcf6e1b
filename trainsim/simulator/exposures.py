"""Exposed communication of one transformer block or optimizer step, and the per-op times it is exposed against.

The choices these functions implement are documented once, in trainsim/simulator/builder.py's module docstring
(TP, CP, EP and ZeRO-3 items); here each function states the formula it evaluates. Every compute time read
here runs at the job's slowest GPU's pace (``_pace``), communication never does.
"""

from __future__ import annotations

from dataclasses import replace

from trainsim.cost_models import compute, framework, variation
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import Scenario
from trainsim.specs.memo import IdentityMemo

from .engine import COMM_COMPUTE_SLOWDOWN, NCCL_COLLECTIVE_SMS


def _collectives():
    from trainsim.cost_models import collectives  # written by the network helper; imported lazily
    return collectives


def _coll(op: str, nbytes: float, group, scenario: Scenario, profile) -> tuple[float, float]:
    """(latency_s, bandwidth_s) of one collective on ``group`` (a topologies GroupShape); the latency part is 0 on
    a scenario without collective fixed costs (Scenario.without_collective_fixed_costs, predict's what-if)."""
    if nbytes <= 0 or group is None or group.size <= 1:
        return 0.0, 0.0
    res = _collectives().collective_time(op, nbytes, group, scenario.cluster, profile=profile)
    total = float(res.time_s)
    lat = float(getattr(res, "latency_s", 0.0) or 0.0)
    lat = min(max(lat, 0.0), total)
    return (lat if scenario.collective_fixed_costs else 0.0), total - lat


def _chained_lat(op: str, nbytes: float, group, scenario: Scenario, profile) -> float:
    """Latency of each call after the first of a burst of ``op`` calls queued back to back on ``group``
    (collectives.chained_call_latency_s: ring reduces and broadcasts follow each other through the chain); the
    one call's whole latency for other ops; 0 without collective fixed costs, like _coll."""
    if nbytes <= 0 or group is None or group.size <= 1 or not scenario.collective_fixed_costs:
        return 0.0
    coll = _collectives()
    res = coll.collective_time(op, nbytes, group, scenario.cluster, profile=profile)
    return min(max(float(coll.chained_call_latency_s(res, group)), 0.0), float(res.time_s))


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
    scattered in backward, all on the critical path (Llama 3's); torch_allgather: torch context_parallel's
    rotation (_torch_allgather_cp_s); a2a (Ulysses): Q, K, V re-sharded from sequence to heads
    before attention and the output back after, the same exchanges mirrored in backward, on the critical path.
    """
    cp, tp = scenario.layout.cp, scenario.layout.tp
    kv_block = e * tokens * shp.kv * (shp.dqk + shp.dvh) / tp   # K and V of this rank's sequence block
    mode = scenario.training.cp_exchange
    if mode == "torch_allgather":
        return _torch_allgather_cp_s(scenario, profile, group, e, kv_block)
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


# torch's context parallelism accumulates dK/dV in fp32 and rotates them so (_ContextParallelOptions.convert_to_f32
# = True: ``accum_dtype = torch.float32``, _templated_ring_attention_backward).
TORCH_CP_GRAD_BYTES = 4


def _torch_allgather_cp_s(scenario: Scenario, profile, group, e: int, kv_block: float) -> tuple[float, float]:
    """Exposed (forward, backward) context-parallel time of one block under torch's all-gather rotation
    (torch/distributed/tensor/experimental/_attention.py, _AllGatherRotater; find_string id 106942014).

    Forward: K/V of all cp blocks in one asynchronous all-gather issued before the local block's attention and
    waited for before the next block's, so it hides behind one block's attention. Backward: the same all-gather
    behind the local block's backward, and dK/dV passed to the next rank after each of the cp blocks (the dkv
    rotater is always _RotateMethod.ALL_TO_ALL), fp32 (TORCH_CP_GRAD_BYTES), each behind the next block's backward
    but the last, which the function waits for before it returns.
    """
    cp = scenario.layout.cp
    gather = sum(_coll("all_gather", kv_block * cp, group, scenario, profile))
    dkv = sum(_coll("send_recv", kv_block * TORCH_CP_GRAD_BYTES / e, group, scenario, profile))
    attn_blk = _attention_fwd_s(scenario, profile) / cp
    bwd_blk = compute.FLASH_BWD_FACTOR * attn_blk
    fwd = max(0.0, gather - attn_blk)
    return fwd, max(0.0, gather - bwd_blk) + (cp - 1) * max(0.0, dkv - bwd_blk) + dkv


def _pipelined_exposed_s(comm_s: float, gemm_s: float, chunked_gemm_s: float, steps: int) -> float:
    """Exposed time of a collective split into ``steps`` chunks and pipelined with its GEMM (ring exchange):
    the GEMM runs as ``steps`` chunks (``chunked_gemm_s`` >= ``gemm_s``, smaller tiles), one step of the
    shorter side is the pipeline's fill/drain; what exceeds the un-split GEMM is exposed."""
    # Never negative: overlapping a collective cannot make its GEMM faster than running it alone (a tiny,
    # memory-bound GEMM whose op time exceeds the chunked tile-model time would otherwise give < 0).
    return max(0.0, max(comm_s, chunked_gemm_s) + min(comm_s, chunked_gemm_s) / steps - gemm_s)


def _chunk_ratio(m: int, n: int, k: int, steps: int, hw, fp8: bool, e: int, fp4: bool = False) -> float:
    """Time of a GEMM run as ``steps`` row chunks over its time in one piece (tile model of compute.py)."""
    whole = compute.gemm_time_s(m, n, k, hw, fp8=fp8, e=e, fp4=fp4)
    # At least 1: smaller tiles never speed the same work up (the tile model's wave quantization can favour
    # the smaller grid of an odd shape).
    chunk = compute.gemm_time_s(max(1, m // steps), n, k, hw, fp8=fp8, e=e, fp4=fp4)
    return max(1.0, steps * chunk / whole) if whole > 0 else 1.0


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
        r = _chunk_ratio(*dims[(name, field)], tp, hw, fp8, e, shp.dtype == "nvfp4") if g > 0 else 1.0
        return _pipelined_exposed_s(comm_s, g, g * r, tp)
    fwd = (ring(ag_s, "qkv", "fwd_s") + ring(rs_s, "out_proj", "fwd_s")
           + ring(ag_s, "fc1", "fwd_s") + ring(rs_s, "fc2", "fwd_s"))
    bwd = (ring(ag_s, "out_proj", "bwd_input_s") + ring(ag_s, "fc2", "bwd_input_s")
           + _column_parallel_bwd_exposed_s(ag_s, rs_s, scenario, profile))
    return fwd, bwd


# The combined 1F1B schedule's "mlp" node: the experts' and the shared expert's MLPs, with the alltoall dispatcher's
# sort and unsort by local expert around them ("post dispatch->experts->combine preprocess"); attention, the pre-MLP
# norm, router and token (un)permutation belong to its "attn" node (megatron/core/models/gpt/fine_grained_callables.py
# at Megatron-LM b0cc2706, submodule_moe_forward).
_MOE_OPS = ("expert_", "shared_", "moe_sort_chunks", "moe_unsort_chunks")


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


def _persistent_regather_s(scenario: Scenario, stage: int, dp_group, profile, how: str = "rank_copies") -> float:
    """ZeRO-3's post-step re-gather of the persistent parameters (framework_behaviour zero3_persistent_regather):
    DeepSpeed 2021's one all-gather of their bytes plus one eager copy per rank per tensor ("rank_copies"), or
    today's one all-gather per tensor, each paying its latency over the group ("per_tensor")."""
    count, elems = _persistent_tensors(scenario, stage)
    if not count:
        return 0.0
    if how == "per_tensor":
        lat, bw = _coll("all_gather", elems / count * scenario.training.param_bytes, dp_group, scenario, profile)
        return count * (lat + bw)
    lat, bw = _coll("all_gather", elems * scenario.training.param_bytes, dp_group, scenario, profile)
    return lat + bw + count * dp_group.size * scenario.cluster.gpu.kernel_overhead_s


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
