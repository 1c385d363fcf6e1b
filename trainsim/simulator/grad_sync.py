"""Data-parallel communication of one optimizer step as engine transfers: gradient buckets (their size, the calls a
framework issues, HSDP's replica all-reduce), ZeRO-3 parameter gathers and ZeRO-1/2's gather of the updated
parameters (the builder's "DP" and "HSDP" choices, builder.py module doc)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.cost_models import (
    compute,
    ddp_buckets,
    framework,
    host_issue,
    memory,
    torchao_float8,
    zero3_gathers,
)
from trainsim.cost_models.grad_buffer import MiB, megatron_bucket_params, whole_tensor_buckets
from trainsim.cost_models.param_tensors import chunk_tensors, rank_tensors
from trainsim.specs import Scenario, framework_behaviour
from trainsim.specs.partial_distopt import partial

from . import mics_sync, zero3_reduce
from .costtable import Transfer
from .exposures import _chained_lat, _coll, _links

if TYPE_CHECKING:
    from .step_context import _Step

# At most this many DP buckets per chunk are simulated as separate transfers (larger ones are merged;
# the exposed last bucket grows accordingly). Bounds engine events for chunks of many layers.
MAX_BUCKETS_PER_CHUNK = 4


def _bucket_settings(scenario: Scenario, fw: framework_behaviour.FrameworkBehaviour) -> dict:
    """The gradient bucket sizes (parameters) and overlap of the step: TrainingSpec.dp_bucket_mb (MiB of
    gradients) and overlap_grad_reduce where set, else the framework's -- Megatron-Core DDP's
    max(40M, 1M x dp) parameters for ZeRO 0-1, DeepSpeed's reduce_bucket_size or FSDP's per-block calls for
    ZeRO 2-3."""
    tr = scenario.training
    bucket = megatron_bucket_params(scenario, tr.dp_bucket_mb)
    reduce_bucket = fw.reduce_bucket_params
    if tr.dp_bucket_mb is not None:
        reduce_bucket = bucket if reduce_bucket else None  # FSDP's per-block calls have no size (specs refuse it)
    return {"bucket_params": bucket, "reduce_bucket_params": reduce_bucket,
            "overlap": framework.overlap_grad_reduce(tr)}


def data_parallel_settings(scenario: Scenario) -> dict:
    """The data-parallel settings a prediction costs (predict --json ``data_parallel``): HSDP's shard group and
    replicas, the gradient bucket (MiB of gradients per reduction call; None where the framework reduces one
    call per block) and whether the reduction overlaps the backward."""
    tr = scenario.training
    fw = framework_behaviour.behaviour(tr.framework)
    b = _bucket_settings(scenario, fw)
    per_block = tr.effective_zero >= 2 and not b["reduce_bucket_params"]
    bucket = b["reduce_bucket_params"] if tr.effective_zero >= 2 else b["bucket_params"]
    return {"dp_shard": scenario.dp_shard, "dp_replicas": scenario.dp_replicas,
            "distributed_optimizer_instances": tr.distributed_optimizer_instances,
            "grad_bucket_mib": None if per_block else bucket * tr.grad_bytes / MiB,
            "grad_reduce_per_block": per_block, "overlap_grad_reduce": b["overlap"]}


def _grad_buckets(st: _Step, s: int, params: float, label: str, layers_of_chunk: int,
                  vstage: int) -> tuple[Transfer, ...]:
    """The DP gradient reductions of one chunk's (virtual stage ``vstage``'s) ``params`` as engine transfers; a
    bucket holds whole tensors, so the chunk issues at most one call per tensor it holds (param_tensors.py). A MoE
    model's expert gradients reduce in calls of their own over the expert-data-parallel group (_Step.expert_apart),
    issued before the dense ones' last (the embedding's, which backward produces last)."""
    tr = st.scenario.training
    if st.dp_group is None or params <= 0:
        return ()
    if ddp_buckets.issues_ddp_buckets(tr) and st.shard_group is not None and (st.rep_group is None or partial(tr)):
        return _ddp_transfers(st, s, label, vstage)
    tensors = chunk_tensors(st.scenario, vstage)
    if not st.expert_apart:
        return _part_buckets(st, s, params, st.shard_group, len(tensors), layers_of_chunk, label)
    n_exp = sum(1 for t in tensors if t.expert)
    expert = _expert_share(tensors, params)
    moe_layers = layers_of_chunk - st.scenario.dense_layers_in(vstage)
    experts = (_part_buckets(st, s, expert, st.expert_dp_group, n_exp, moe_layers, f"{label} experts", True)
               if (st.expert_dp_group is not None or st.rep_group is not None) and expert > 0 else ())
    return experts + _part_buckets(st, s, params - expert, st.shard_group, len(tensors) - n_exp, layers_of_chunk,
                                   label)


def _expert_share(tensors, params: float) -> float:
    """The part of ``params`` that is expert parameters, in proportion to the expert tensors' elements."""
    return params * sum(t.elems for t in tensors if t.expert) / max(1.0, sum(t.elems for t in tensors))


def _part_buckets(st: _Step, s: int, params: float, group, tensors: int, layers: int,
                  label: str, expert: bool = False) -> tuple[Transfer, ...]:
    """The reductions of ``params`` gradients held in ``tensors`` tensors over ``group`` (``expert``: the expert
    parameters' group) where they are not Megatron DDP's buckets: DeepSpeed ZeRO 0-2's own buckets (per owner rank
    before v0.12.4, framework.py), else _grad_calls'."""
    tr = st.scenario.training
    if params <= 0:
        return ()
    ds_calls = (framework.zero12_reduce_calls(tr, params, group.size, st.reduce_bucket_params,
                                              max_buckets=tensors) if st.reduce_bucket_params else None)
    calls = ds_calls or _grad_calls(st, params, layers, tensors)
    per_call = params * tr.grad_bytes / calls
    lat = _owner_reduce_latency(st, per_call, group, calls, tensors, params) if ds_calls else None
    return tuple(_bucket_transfer(st, s, per_call, k_calls, f"{label} bucket {k}", group, lat, expert)
                 for k, k_calls in enumerate(_calls_per_transfer(calls)))


def _owner_reduce_latency(st: _Step, per_call: float, group, calls: int, tensors: int,
                          params: float) -> float | None:
    """Mean latency per call of DeepSpeed's per-owner reduces (framework.zero12_reduce_calls), or None where its
    calls are not per-owner reduces. ``average_tensor`` issues a bucket's reduces back to back (``async_op=True``,
    then waits on all of them; stage_1_and_2.py of v0.12.3, stage2.py of v0.3.13 in 2021), owners in rank order, so
    each bucket is one burst of chained ring reduces: the first pays the chain's whole latency, the others one step
    each (exposures._chained_lat)."""
    if st.reduce_op != "reduce":
        return None
    bursts = min(calls, whole_tensor_buckets(params, st.reduce_bucket_params, tensors))
    lat, _ = _coll(st.reduce_op, per_call, group, st.scenario, st.profile)
    follow = _chained_lat(st.reduce_op, per_call, group, st.scenario, st.profile)
    return (bursts * lat + (calls - bursts) * follow) / calls


def _ddp_transfers(st: _Step, s: int, label: str, vstage: int) -> tuple[Transfer, ...]:
    """Megatron DDP's reductions of virtual stage ``vstage``'s gradients: one call per bucket of its gradient buffers
    (cost_models/ddp_buckets.py; the expert buffer's over the expert-data-parallel group, none where that group is
    one rank), each ready when backward has produced its last gradient; more than MAX_BUCKETS_PER_CHUNK are merged
    into consecutive groups (the last bucket stays alone), a group ready with its last member."""
    scenario, tr = st.scenario, st.scenario.training
    chunk = next(c for c in range(scenario.layout.vpp) if scenario.virtual_stage(s, c) == vstage)
    n_exp = (st.expert_dp_group.size if st.expert_dp_group is not None else 1) if st.expert_apart else None
    buckets = ddp_buckets.chunk_dp_buckets(scenario, s, chunk, st.shard_group.size, n_exp)
    n = scenario.stage_layers[vstage]
    block_s = sum(k * (b.times.bwd_input_s + b.times.bwd_weight_s + b.times.recompute_s)
                  for b, k in ((st.main, n - (scenario.dense_layers_in(vstage) if scenario.model.is_moe else 0)),
                               (st.dense, scenario.dense_layers_in(vstage) if scenario.model.is_moe else 0)))
    head = st.head.bwd_input_s + st.head.bwd_weight_s + st.head.recompute_s
    emb = st.emb.bwd_input_s + st.emb.bwd_weight_s
    ready = ddp_buckets.profile_ready_fractions(ddp_buckets.chunk_segment_profile(scenario, vstage),
                                                [b.closing_tensor for b in buckets], head, block_s / max(1, n), emb)

    def group_of(k: int):
        return st.expert_dp_group if buckets[k].expert and st.expert_apart else st.shard_group

    order = sorted((k for k in range(len(buckets)) if group_of(k) is not None), key=lambda k: ready[k])
    groups = _merge_groups(len(order))
    out, start = [], 0
    for g, size in enumerate(groups):
        members = order[start:start + size]
        start += size
        parts = [_coll(st.reduce_op, buckets[k].elems * tr.grad_bytes, group_of(k), scenario, st.profile)
                 for k in members] + _instance_all_reduces(st, [buckets[k].elems * tr.grad_bytes for k in members])
        nbytes = sum(buckets[k].elems for k in members) * tr.grad_bytes
        groups = [group_of(k) for k in members] + ([st.rep_group] if partial(tr) else [])
        links = tuple(dict.fromkeys(x for g in groups for x in _links(s, g)))
        out.append(Transfer(f"{st.reduce_op} grads {label} bucket {g}" + (f" ({size} calls)" if size > 1 else ""),
                            transfer_s=sum(p[1] for p in parts), latency_s=sum(p[0] for p in parts),
                            links=links, dim="dp", nbytes=nbytes, ready_at=ready[members[-1]]))
    return tuple(out)


def _instance_all_reduces(st: _Step, bucket_bytes: list[float]) -> list[tuple[float, float]]:
    """(latency, bandwidth seconds) of the partial distributed optimizer's all-reduce of each bucket's reduce-scattered
    shard (1/(dp/N x cp) of its bytes) across the N instances (specs/partial_distopt.py); [] with one instance.
    Megatron issues it after the bucket's reduce-scatter on the same communication stream, synchronously, so the
    two run one after the other and belong to the bucket's one transfer (its links are both groups')."""
    if not partial(st.scenario.training):
        return []
    shard = st.shard_group.size
    return [_coll("all_reduce", b / shard, st.rep_group, st.scenario, st.profile) for b in bucket_bytes]


def _merge_groups(calls: int) -> tuple[int, ...]:
    """Consecutive bucket counts per simulated transfer: one each up to MAX_BUCKETS_PER_CHUNK, else the first
    ``calls - 1`` shared as evenly as possible by MAX_BUCKETS_PER_CHUNK - 1 transfers and the last alone."""
    if calls <= MAX_BUCKETS_PER_CHUNK:
        return (1,) * calls
    k, rest = MAX_BUCKETS_PER_CHUNK - 1, calls - 1
    return tuple(rest // k + (1 if i < rest % k else 0) for i in range(k)) + (1,)


def _grad_calls(st: _Step, params: float, layers_of_chunk: int, tensors: int) -> int:
    """Collectives the framework issues for a chunk's ``params`` gradients where they are not Megatron DDP's buckets
    (_ddp_transfers): ZeRO-2/3 reduce-scatter per block as backward produces it (FSDP), or per reduce bucket
    (DeepSpeed); ZeRO-0/1 per DDP bucket of equal size. A bucket holds
    whole tensors (specs/data_parallel.py), so a chunk issues at most one call per tensor (``tensors``)."""
    z = st.z
    if z >= 2 and not st.reduce_bucket_params:
        return max(1, layers_of_chunk)
    bucket = st.reduce_bucket_params if z >= 2 else st.bucket_params
    return whole_tensor_buckets(params, bucket, tensors)


def _calls_per_transfer(calls: int) -> tuple[float, ...]:
    """How many of the ``calls`` bucket collectives each simulated transfer carries: one each up to
    MAX_BUCKETS_PER_CHUNK; beyond that the last transfer is exactly one bucket (the one that becomes ready when
    backward ends, so the exposed tail is one bucket's time whatever the count) and the others share the rest."""
    n = min(MAX_BUCKETS_PER_CHUNK, calls)
    if n == calls:
        return (1.0,) * n
    return ((calls - 1) / (n - 1),) * (n - 1) + (1.0,)


def _bucket_transfer(st: _Step, s: int, per_call: float, k_calls: float, name: str, group,
                     lat_per_call: float | None = None, expert: bool = False) -> Transfer:
    """``k_calls`` gradient-reduction calls of ``per_call`` bytes each over ``group`` (the shard group, or the
    expert-data-parallel group: ``expert``) as one engine transfer; ``lat_per_call`` replaces one call's latency
    where the calls chain (_owner_reduce_latency)."""
    then = _replica_all_reduce(st, s, per_call, k_calls, name, expert)
    if group is None:  # HSDP with one-rank shard groups: the all-reduce is all there is
        return then
    lat, bw = _coll(st.reduce_op, per_call, group, st.scenario, st.profile)
    lat = lat if lat_per_call is None else lat_per_call
    return Transfer(f"{st.reduce_op} grads {name}", transfer_s=bw * k_calls, latency_s=lat * k_calls,
                    links=_links(s, group), dim="dp", nbytes=per_call * k_calls, then=then)


def _replica_all_reduce(st: _Step, s: int, per_call: float, k_calls: float, label: str,
                        expert: bool = False) -> Transfer | None:
    """HSDP: the all-reduce of each reduce-scattered gradient shard (1/(S x cp) of a call's bytes: the shard group
    is torchtitan's dp_shard_cp; an expert call's 1/(S x cp x tp/(ep x etp)), its expert shard group's) across the
    replicate group, ``k_calls`` calls of it (torch FSDP2 foreach_reduce: reduce-scatter over the shard dimension,
    then all-reduce over the replicate dimension); None without HSDP."""
    if st.rep_group is None:
        return None
    nbytes = per_call / memory.shard_groups(st.scenario)[1 if expert else 0]
    lat, bw = _coll("all_reduce", nbytes, st.rep_group, st.scenario, st.profile)
    return Transfer(f"all_reduce grad shard {label} across replicas", transfer_s=bw * k_calls,
                    latency_s=lat * k_calls, links=_links(s, st.rep_group), dim="dp", nbytes=nbytes * k_calls)


def _gather_calls(st: _Step, vstage: int, n_main: int, n_dense: int, extra: bool) -> int:
    """ZeRO-3 all-gathers per pass over virtual stage ``vstage``'s chunk: one per block and one for the parameters
    beyond them (FSDP), or DeepSpeed's per submodule (per tensor in 2021) over the chunk's parameter tensors
    (cost_models/zero3_gathers.py)."""
    if st.fw.zero3_gather == "tensor":
        return max(1, zero3_gathers.gather_calls(chunk_tensors(st.scenario, vstage), st.scenario.training.framework))
    return max(1, n_main + n_dense + (1 if extra else 0))


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
    host = calls * st.fw.zero3_gather_ops_per_rank * st.dp_group.size * scenario.cluster.gpu.kernel_overhead_s
    copy_g = st.slowest * compute.memory_time_s(3 * params * tr.param_bytes, hw, profile, "copy") if host else 0.0
    copy_r = st.slowest * compute.memory_time_s(2 * params * tr.grad_bytes, hw, profile, "copy") if host else 0.0
    rlat, rbw = _coll("reduce_scatter", params * tr.grad_bytes / calls, st.shard_group, scenario, profile)
    reduce = calls * (rlat + rbw) + host + copy_r
    host += copy_g
    dp_f = gather.time_s + host
    dp_b = (2 if tr.recompute == "full" else 1) * (gather.time_s + host) + reduce
    return dp_f, dp_b


def _zero3_gather(st: _Step, s: int, c: int, params: float, calls: int, moe_layers: int) -> Transfer:
    """ZeRO-3's all-gathers of chunk ``c``'s ``params`` (``calls`` of them) as one engine transfer; a MoE model's
    expert parameters (_Step.expert_apart) gather apart over the expert-data-parallel group -- torchtitan shards
    each block's experts as an FSDP unit of their own on the ``dp_shard_mod_ep`` mesh, one call per MoE block;
    DeepSpeed per expert submodule -- and nothing where that group is one rank."""
    scenario, tr = st.scenario, st.scenario.training
    vs = scenario.virtual_stage(s, c)
    tensors = chunk_tensors(scenario, vs) if st.expert_apart or tr.float8_all_gather else ()
    # (parameters, calls, group, gathered bytes per parameter): float8 all-gather gathers the non-expert linear
    # weights in 1 byte; routed experts are no nn.Linear and gather in param_bytes (torchao_float8.py)
    pb = torchao_float8.gather_bytes_per_param(scenario, tensors, params)
    whole = params * pb
    parts = [(params, calls, st.shard_group, pb)]
    if st.expert_apart:
        expert = _expert_share(tensors, params)
        e_calls = (zero3_gathers.gather_calls([t for t in tensors if t.expert], tr.framework)
                   if st.fw.zero3_gather == "tensor" else moe_layers)
        dense = [t for t in tensors if not t.expert]
        parts = [(params - expert, calls, st.shard_group,
                  torchao_float8.gather_bytes_per_param(scenario, dense, params - expert))]
        if expert > 0 and st.expert_dp_group is not None:
            parts.append((expert, max(1, e_calls), st.expert_dp_group, float(tr.param_bytes)))
    hier = mics_sync.hierarchical_gather(st, s, whole / calls)  # MiCS's two hops: the whole chunk, experts in it
    if hier is not None:
        return Transfer(f"all_gather params chunk {c} (MiCS hierarchical)", transfer_s=calls * hier[1],
                        latency_s=calls * hier[0], links=hier[2], dim="dp", nbytes=whole)
    costs = [(k, _coll("all_gather", p * pb / k, g, scenario, st.profile)) for p, k, g, pb in parts]
    if tr.float8_all_gather and not tr.float8_precompute_scale:  # each shard cast all-reduces its amax first
        amax = _coll("all_reduce", torchao_float8.AMAX_BYTES, st.shard_group, scenario, st.profile)
        costs.append((torchao_float8.float8_weight_count(tensors), amax))
    links = tuple(dict.fromkeys(x for _, _, g, _ in parts for x in _links(s, g or st.dp_group)))
    return Transfer(f"all_gather params chunk {c}", transfer_s=sum(k * bw for k, (_, bw) in costs),
                    latency_s=sum(k * lat for k, (lat, _) in costs), links=links, dim="dp",
                    nbytes=sum(p * pb for p, _, _, pb in parts))


def _chunk_dp(st: _Step, s: int, c: int, params: float, extra: bool, n: int, n_d: int):
    """A chunk's DP work on its ``params`` (``extra``: parameters beyond its blocks'): (ZeRO-3 parameter gather
    transfer or None, gradient buckets, exposed dp forward and backward seconds) -- gathers and buckets go to
    the engine unless the framework serializes them."""
    gather, calls = None, 0
    if st.z >= 3 and st.dp_group is not None:
        calls = _gather_calls(st, st.scenario.virtual_stage(s, c), n - n_d, n_d, extra)
        gather = _zero3_gather(st, s, c, params, calls, n - n_d)
    buckets = _grad_buckets(st, s, params, f"chunk {c}", n, st.scenario.virtual_stage(s, c))
    if st.z == 2 and not st.overlap:  # reduced in backward hooks on the compute stream, every micro-batch
        return None, (), 0.0, sum(b.transfer_s + b.latency_s for b in buckets)
    if gather is not None and not st.fw.zero3_overlap:
        dp_f, dp_b = _zero3_serialized_s(st, gather, calls, params)
        return None, (), dp_f, dp_b
    if gather is not None and st.fw.zero3_reduce_serialized:  # DeepSpeed: gathers prefetched, reductions not
        return gather, (), *zero3_reduce.serialized_reduce_s(st, params, st.scenario.virtual_stage(s, c))
    return gather, buckets, 0.0, 0.0


def _param_gather(st: _Step) -> str:
    """The framework's way of gathering updated parameters; torch's per-parameter broadcasts are its ZeRO-1
    (ZeroRedundancyOptimizer), not its ZeRO-2, which gathers once per buffer here."""
    how = st.fw.param_gather
    return "buffer" if how == "broadcast_per_param" and st.z != 1 else how


def _param_gather_calls(st: _Step, s: int, held: float, expert: bool | None = None) -> int:
    """How many collectives the framework issues for ZeRO-1/2's updated parameters of stage ``s`` (``held``
    parameters; only the expert or only the dense tensors where ``expert`` says which;
    framework_behaviour.FrameworkBehaviour.param_gather): each one pays its latency over its whole group."""
    how = _param_gather(st)
    if how == "param_group":
        return 1
    if how == "allgather_bucket":
        return max(1, int(held // framework.DEEPSPEED_ALLGATHER_BUCKET_PARAMS))
    if how == "broadcast_per_param":  # one broadcast per parameter tensor
        return max(1, sum(1 for t in rank_tensors(st.scenario, s) if expert is None or t.expert == expert))
    return 1


def _post_step(st: _Step, s: int) -> tuple[Transfer, ...]:
    """ZeRO-1/2's gather of the updated parameters after the optimizer step, in the framework's calls: all-gathers,
    or one broadcast per parameter from its owner (torch ZeroRedundancyOptimizer). A MoE model's expert parameters
    gather over the expert-data-parallel group their optimizer states are sharded over (memory.shard_groups;
    Megatron-Core's distributed optimizer keeps the expert buffers' shards on intra_expt_dp_group), none where that
    group is one rank. DeepSpeed-MiCS's step ends with its replica all-reduce instead (mics_sync.py)."""
    if (mics := mics_sync.replica_all_reduce(st, s)):
        return mics
    if st.z not in (1, 2) or st.dp_group is None:
        return ()
    held = memory.rank_param_shards(st.scenario, s)
    if partial(st.scenario.training):  # within the instance (intra-partial group, specs/partial_distopt.py)
        return (_param_gather_transfer(st, s, held.held, st.shard_group, None, ""),)
    if not st.expert_apart:
        return (_param_gather_transfer(st, s, held.held, st.dp_group, None, ""),)
    parts = ((held.expert, st.expert_dp_group, True, " expert"), (held.dense, st.dp_group, False, ""))
    return tuple(_param_gather_transfer(st, s, n, g, e, label) for n, g, e, label in parts if g is not None and n > 0)


def _param_gather_transfer(st: _Step, s: int, params: float, group, expert: bool | None, label: str) -> Transfer:
    """The gather of ``params`` updated parameters over ``group`` as one engine transfer."""
    nbytes = params * st.scenario.training.param_bytes
    calls = _param_gather_calls(st, s, params, expert)
    op = "broadcast" if _param_gather(st) == "broadcast_per_param" else "all_gather"
    lat, bwt = _coll(op, nbytes / calls, group, st.scenario, st.profile)
    name = f"{op} updated{label} params" + (f" ({calls} calls)" if calls > 1 else "")
    return Transfer(name, transfer_s=bwt * calls, latency_s=lat * calls + _list_gather_copies_s(st, nbytes, calls, group),
                    links=_links(s, group), dim="dp", nbytes=nbytes)


def _list_gather_copies_s(st: _Step, nbytes: float, calls: int, group) -> float:
    """Seconds of the copies behind DeepSpeed's list all-gathers of the updated parameters ("allgather_bucket":
    ``dist.all_gather(shard_list, ...)`` with one ``narrow`` view per rank, deepspeed/runtime/utils.py
    ``all_gather_dp_groups`` of v0.12.3), else 0. torch's ProcessGroupNCCL ``allgather`` of a tensor list gathers
    into a flat buffer and copies it back with one ``copy_`` (and ``recordStream``) per output tensor, i.e. per
    rank and call (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, "Copy the flattened output tensors to the
    outputs", find_string id 2220260): ``calls x ranks`` aten ops and kernel launches issued by the host in the
    optimizer step (host_issue.issue_s), running on the NCCL stream while the host issues the next ones, which
    together read and write the gathered bytes once: the longer of the two."""
    if _param_gather(st) != "allgather_bucket" or group is None or group.size <= 1 or nbytes <= 0:
        return 0.0
    issue = calls * group.size * host_issue.issue_s(1, 1, st.scenario.cluster.host_cpu)
    copy = st.slowest * compute.memory_time_s(2 * nbytes, st.hw, st.profile, "copy")
    return max(issue, copy)
