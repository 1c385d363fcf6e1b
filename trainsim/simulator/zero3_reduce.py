"""DeepSpeed ZeRO-3's gradient reduction as its code issues it, on the backward's critical path
(framework.py ``zero3_reduce_serialized``).

Per micro-batch and chunk, deepspeed/runtime/zero/stage3.py (microsoft/DeepSpeed@38327e07) fills
``reduce_bucket_size``-element buckets in its backward hooks and reduces each one with
``reduce_scatter_coalesced`` (runtime/comm/coalesced_collectives.py):

* host: ``world_sz`` slice views of every gradient in the bucket (``flattened_tensor[rank * chunk_sz: ...]``
  for each rank), one aten ``slice`` dispatch each (``host_issue.op_seconds``), on the autograd thread that
  issues the backward -- ``tensors x ranks`` ops per micro-batch, a cost that grows with the rank count;
* HBM: ``torch.cat`` of those views into one interleaved buffer and its in-place ``div_`` -- two reads and
  two writes of the bucket (4 passes over the gradient bytes);
* network: one reduce-scatter of the bucket over the data-parallel group per call, its ring latency over
  all ranks included (cost_models/collectives.py).

The AMSP trace of DeepSpeed ZeRO-3 (arXiv:2311.00257v2, Sec. VI-C, Fig. 14) shows these reduce-scatters not
overlapped with computation even with ``overlap_comm`` on, so all three add to the backward pass.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trainsim.cost_models import compute, host_issue
from trainsim.cost_models.param_tensors import chunk_tensors

from .exposures import _coll

if TYPE_CHECKING:
    from .step_context import _Step

# torch.cat and the in-place div_ of reduce_scatter_coalesced: each reads and writes the bucket once.
COALESCE_HBM_PASSES = 4


def reduce_calls(params: float, bucket_params: float, tensors: int) -> int:
    """Reduce-scatter calls for ``params`` gradients in ``bucket_params``-element buckets: a bucket holds whole
    tensors (stage3.py flushes the bucket before a gradient that would overflow it), so at most one per tensor."""
    return max(1, min(math.ceil(params / bucket_params), tensors))


def host_slice_s(tensors: int, ranks: int, host_cpu: str = "x86") -> float:
    """Host seconds of reduce_scatter_coalesced's per-rank slice views: one aten dispatch per rank per tensor."""
    dispatch, _ = host_issue.op_seconds(host_cpu)
    return tensors * ranks * dispatch


def serialized_reduce_s(st: _Step, params: float, vstage: int) -> float:
    """Backward seconds per micro-batch that DeepSpeed ZeRO-3's gradient reduction of one chunk's ``params``
    adds (module doc): the reduce-scatter calls, the host's slice views and the coalescing copies."""
    scenario, tr = st.scenario, st.scenario.training
    group = st.shard_group or st.dp_group
    if group is None or group.size <= 1 or params <= 0:
        return 0.0
    tensors = len(chunk_tensors(scenario, vstage))
    calls = reduce_calls(params, st.reduce_bucket_params or params, tensors)
    grad_bytes = params * tr.grad_bytes
    lat, bw = _coll("reduce_scatter", grad_bytes / calls, group, scenario, st.profile)
    host = host_slice_s(tensors, group.size, scenario.cluster.host_cpu)
    hbm = st.slowest * compute.memory_time_s(COALESCE_HBM_PASSES * grad_bytes, st.hw, st.profile, "copy")
    return calls * (lat + bw) + host + hbm
