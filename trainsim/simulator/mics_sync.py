"""DeepSpeed-MiCS's second gradient hop: the all-reduce of each reduce bucket's gradient partition across the
replicate group, once per optimizer step (specs/mics.py; the builder's "MiCS" choice, builder.py module doc).

Everything else MiCS does is ZeRO-3 over the shard group, costed where ZeRO-3 is (grad_sync.py, zero3_reduce.py:
the per-submodule all-gathers and the per-bucket reduce-scatters run over ``_Step.shard_group``, the S innermost
data-parallel ranks). At the gradient-accumulation boundary (the step's last micro-batch) ``MiCS_Optimizer.
partition_grads`` follows each bucket's reduce-scatter with ``allreduce_mics_shard_grads`` on the same reduce
stream (deepspeed/runtime/zero/mics.py, v0.12.3 6ea44d02c and 38327e07): ``scale_tensors`` divides the bucket's
partitions by dp/S in place (one read and one write: ``SCALE_HBM_PASSES``), then ``all_reduce_coalesced`` over
``param_repli_group`` -- torch's ProcessGroupNCCL ``allreduce_coalesced`` issues one NCCL all-reduce per tensor
inside one NCCL group (``collectiveCoalesced``, ProcessGroupNCCL.cpp, find_string id 2220260), one launch per
bucket, costed as one all-reduce of the bucket's partition bytes. DeepSpeed ZeRO-3's reductions lie on the
backward's critical path (zero3_reduce.py: the AMSP trace, arXiv:2311.00257v2 Fig. 14), and these run on that
stream behind them, so the step waits for all of them: they are one transfer of the step's tail, exposed, as many
calls as the step's reduce buckets (``_bucket_calls``), each over the dp/S replicas (one rank per shard group,
the same shard position: across nodes when S fills a node).

With ``training.mics_hierarchical_gather`` (DeepSpeed's ``mics_hierarchical_params_gather``) each all-gather runs in
two hops on the gather stream (``_hierarchical_all_gather_params``): first over the shard group's ranks of the same
local index in each node it spans (``param_inter_node_shard_group``, the rank's shard and its counterparts': span/S
of the call's bytes, NIC), then, after a copy of that output into place (``HIERARCHY_COPY_PASSES``), over the group's
ranks in the node (``param_intra_node_group``, the whole call's bytes, NVLink) -- so each node's NICs carry
(span-1)/span of the parameters instead of a flat ring's (S-1)/S (``hierarchical_gather``). The two hops run one
after the other, and each call pays its own pipeline fill (cost_models/collectives.py), so on nodes whose NICs
match NVLink (8 HDR NICs per DGX A100) or with small calls the flat gather stays the faster one; on thin-NIC nodes
with large calls the hierarchical one wins, as MiCS reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainsim.cost_models import compute
from trainsim.cost_models.param_tensors import chunk_tensors
from trainsim.specs.mics import is_mics

from .costtable import Transfer
from .exposures import _coll, _links
from .zero3_reduce import reduce_buckets

if TYPE_CHECKING:
    from .step_context import _Step

# scale_tensors' in-place div_ of each gradient partition before the all-reduce: one read, one write.
SCALE_HBM_PASSES = 2
# The hierarchical gather's ``param_chunk.copy_(inter_outputs[i].detach().clone()...)``: the clone reads and writes
# the inter-node output, the copy_ reads the clone and writes the parameter's buffer.
HIERARCHY_COPY_PASSES = 4


def _bucket_calls(st: _Step, s: int) -> tuple[int, float]:
    """(reduce buckets, parameters) of stage ``s``'s gradients per micro-batch: DeepSpeed ZeRO-3's
    reduce_bucket_size buckets of whole tensors per chunk (zero3_reduce.reduce_buckets)."""
    scenario = st.scenario
    calls, params = 0, 0.0
    for c in range(scenario.layout.vpp):
        tensors = chunk_tensors(scenario, scenario.virtual_stage(s, c))
        n = sum(t.elems for t in tensors)
        if n > 0:
            calls += reduce_buckets(st, n, len(tensors))
            params += n
    return calls, params


def replica_all_reduce(st: _Step, s: int) -> tuple[Transfer, ...]:
    """Stage ``s``'s boundary all-reduces of its gradient partitions across the MiCS replicas (module doc) as one
    exposed transfer; () where the scenario is not MiCS or has one replica."""
    scenario, tr = st.scenario, st.scenario.training
    if not is_mics(scenario) or st.rep_group is None or st.rep_group.size <= 1:
        return ()
    calls, params = _bucket_calls(st, s)
    if calls == 0:
        return ()
    nbytes = params * tr.grad_bytes / scenario.dp_shard  # the rank's partition of every bucket
    lat, bw = _coll("all_reduce", nbytes / calls, st.rep_group, scenario, st.profile)
    scale = st.slowest * compute.memory_time_s(SCALE_HBM_PASSES * nbytes, st.hw, st.profile, "copy")
    return (Transfer(f"all_reduce grad partitions across {scenario.dp_replicas} MiCS replicas ({calls} calls)",
                     transfer_s=bw * calls, latency_s=lat * calls + scale, links=_links(s, st.rep_group), dim="dp",
                     nbytes=nbytes),)


def hierarchical_gather(st: _Step, s: int, call_bytes: float) -> tuple[float, float, tuple[str, ...]] | None:
    """(latency with the copy, bandwidth seconds, links) of one MiCS hierarchical all-gather of ``call_bytes``
    gathered bytes (module doc), or None where the scenario gathers flat. The links are the inter-node hop's NIC
    ports, the ones other data-parallel transfers contend for; the intra-node hop's NVLink time is in the seconds."""
    scenario = st.scenario
    if not scenario.training.mics_hierarchical_gather or call_bytes <= 0:
        return None
    intra, inter = st.pl.mics_hierarchy_groups(scenario.dp_shard)
    inter_bytes = call_bytes * inter.size / scenario.dp_shard  # the span ranks' shards
    lat_x, bw_x = _coll("all_gather", inter_bytes, inter, scenario, st.profile)
    lat_i, bw_i = _coll("all_gather", call_bytes, intra, scenario, st.profile)
    copy = st.slowest * compute.memory_time_s(HIERARCHY_COPY_PASSES * inter_bytes, st.hw, st.profile, "copy")
    return lat_x + lat_i + copy, bw_x + bw_i, _links(s, inter)
