"""DeepSpeed ZeRO-3's per-rank work at many ranks: its gradient reduction on the backward's critical path and
the host loops over ranks around each gathered and reduced tensor (framework.py ``zero3_reduce_serialized``).

deepspeed/runtime/zero/stage3.py (microsoft/DeepSpeed@38327e07) fills ``reduce_bucket_size``-element buckets
in its backward hooks and reduces each with ``reduce_scatter_coalesced`` (runtime/comm/coalesced_collectives.py);
partition_parameters.py unpacks each gathered parameter in ``AllGatherCoalescedHandle.wait``. Per micro-batch:

* GPU, on the backward's critical path: one reduce-scatter per bucket over all data-parallel ranks, its ring
  latency over n - 1 steps included (cost_models/collectives.py), the backward hook's copy of each gradient into
  the contiguous bucket (``__add_grad_to_ipg_bucket``: ``new_grad_tensor.copy_(param.grad)`` into
  ``__ipg_bucket_flat_buffer`` on the reduce stream, with ``contiguous_gradients`` on by default; stage3.py of
  v0.12.3 and of 38327e07), and reduce_scatter_coalesced's ``torch.cat`` of the per-rank views into one
  interleaved buffer and its in-place ``div_`` (read and write the bucket three times: ``COALESCE_HBM_PASSES``).
  The AMSP trace of DeepSpeed ZeRO-3 (arXiv:2311.00257v2, Sec. VI-C, Fig. 14) shows these reduce-scatters not
  overlapped with computation even with ``overlap_comm`` on.
* GPU, on the compute stream: the wait's ``torch.cat`` of a gathered parameter's per-rank pieces into
  ``param.data`` (read and write the parameter: ``UNPACK_HBM_PASSES``) each time it is gathered, for the
  parameters of calls that hold two or more (``zero3_gathers.coalesced``); a single-parameter call gathers
  straight into the parameter's buffer (``all_gather_coalesced``'s ``len(params) == 1`` path) and copies nothing.
* host, on the thread that issues the passes (``with_rank_loops``): ``world_sz`` slice views of every gradient
  (``flattened_tensor[rank * chunk_sz: ...]``, ``REDUCE_OPS_PER_RANK``), and for the coalesced calls alone one
  ``narrow`` and one ``record_stream`` per rank for each of their parameters (``UNPACK_OPS_PER_RANK``) and the
  flat output's ``narrow`` for every rank (``GATHER_OPS_PER_RANK``) -- aten dispatches
  (``host_issue.op_seconds``) whose count grows with the rank count. Parameters under
  ``stage3_param_persistence_threshold`` stay resident and are not gathered; every gradient is reduced.
* host, per module and pass (``hook_ops``): the hooks ZeRO-3 registers on every module
  (deepspeed/runtime/zero/parameter_offload.py ``_register_hooks_recursively``, v0.12.3 and 38327e07). Forward:
  ``_post_backward_module_hook`` and ``_pre_backward_module_hook`` wrap the module's input and output in
  ``PostBackwardFunction`` / ``PreBackwardFunction`` (an ``autograd.Function`` whose forward ``detach``es:
  ``HOOK_FUNCTION_OPS``), and ``fetch_sub_module`` ends with ``current_stream().wait_stream(allgather_stream)``
  (torch's ``Stream.wait_stream``: an event created and recorded, a stream wait: ``WAIT_STREAM_CALLS``); the
  backward's ``fetch_sub_module`` waits the same way. Per gathered parameter and pass: the handle's ``wait`` and
  a new recorded event (``PARAM_WAIT_CALLS``), and its release (``free_param``: ``record_stream`` and
  ``torch.empty(0)``, ``RELEASE_OPS``); per all-gather call ``all_gather_coalesced``'s ``torch.empty`` output,
  the shard's ``.to``, and ``narrow``, ``view``, ``.to`` of the result (``GATHER_CALL_OPS``). Modules are those
  that own parameters plus each block's three containers (block, attention, MLP); parameter-less leaves
  (rotary embedding, activation, dropout) are left out, and the hooks' Python frames are not counted beyond
  their aten and CUDA-runtime calls (each charged ``host_issue.op_seconds``' dispatch): a lower bound.
* host pace over the shard group (``shard_paced``): the host of each rank blocks on the device within a few
  collectives of the whole shard group. ``fetch_sub_module`` records an event on the all-gather stream after each
  parameter's ``wait`` and, once more than ``__max_ongoing_fetch_events`` = 2 are pending, ``synchronize``s the
  oldest (partitioned_param_coordinator.py lines 119/294-295 at v0.10.0, 125/300-301 at v0.12.3, 132/331-332 at
  38327e07); ``__reduce_and_partition_ipg_grads`` does the same with the reduce-scatter events
  (``max_param_reduce_events`` = 2; stage3.py 289/1115-1116, 326/1192-1193, 372/1307-1308). Each gather and
  reduce-scatter is one NCCL collective over every rank of the shard group, which completes only when every rank
  has launched it, so no rank's host gets more than three gathers ahead of the slowest host of the group: where
  the host is the bottleneck the group advances at its slowest host's pace, as a TP group does at its TP
  collectives (cost_models.host_jitter: the expected maximum of n log-normal issue times over their mean, with
  the measured spread of a block pass). The block passes' issue time is taken at ``pace(tp x S)`` for a shard
  group of S ranks, in place of the TP group's ``pace(tp)`` (``host_issue.tp_paced``). It changes a step only
  where a pass is host-bound, e.g. at 1,024 ranks with one micro-batch of 4,096 tokens per rank. The hosts are
  coupled about once per submodule, more often than once per pass; the spread measured on whole block passes
  stands for each such interval's, and the maximum is taken once per pass (an assumption, not a measurement).
  DeepSpeed 2021's blocking fetch (deepspeed-2021, grad_sync._zero3_serialized_s) couples its hosts as tightly,
  but its serialized rank loops are not paced: at that pace SC21's 175B step would grow x1.26 from 768 to 1,536
  GPUs where the published one stays flat (Table 2: 88 -> 44 TFLOP/s per GPU, tests/test_validate_accuracy.py), so
  the spread of long loops over ranks is not established there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trainsim.cost_models import compute, host_issue, host_jitter, zero3_gathers
from trainsim.cost_models.eager import block_style
from trainsim.cost_models.grad_buffer import whole_tensor_buckets
from trainsim.cost_models.host_issue import PassIssue
from trainsim.cost_models.memory import shard_groups
from trainsim.cost_models.param_tensors import ParamTensor, chunk_tensors, rank_tensors
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import framework_behaviour, mics

from .exposures import _coll

if TYPE_CHECKING:
    from trainsim.cost_models.profile import CalibrationProfile
    from trainsim.specs import Scenario

    from .step_context import _Step

# The hook's copy into the contiguous bucket, then torch.cat and the in-place div_ of reduce_scatter_coalesced:
# each reads and writes the bucket once.
COALESCE_HBM_PASSES = 6
# AllGatherCoalescedHandle.wait's torch.cat of a parameter's per-rank pieces: one read, one write.
UNPACK_HBM_PASSES = 2
# Host aten ops per rank: reduce_scatter_coalesced's slice of each gradient; the coalesced wait's narrow +
# record_stream of each parameter it holds; the coalesced call's narrow of its flat output for every rank.
REDUCE_OPS_PER_RANK = 1
UNPACK_OPS_PER_RANK = 2
GATHER_OPS_PER_RANK = 1
# Host calls of ZeRO-3's module hooks (module doc): per module and forward the two autograd.Function detaches,
# per module and pass the stream wait; per gathered parameter and pass its wait and release; per gather call its
# output and view ops.
HOOK_FUNCTION_OPS = 2
WAIT_STREAM_CALLS = 3
PARAM_WAIT_CALLS = 3
RELEASE_OPS = 2
GATHER_CALL_OPS = 5
BLOCK_CONTAINERS = 3


def applies(scenario: Scenario) -> bool:
    """Whether the scenario's framework costs ZeRO-3 this way (ZeRO-3 over more than one data-parallel x
    context-parallel rank)."""
    tr = scenario.training
    return (framework_behaviour.behaviour(tr.framework).zero3_reduce_serialized and tr.effective_zero >= 3
            and scenario.dp * scenario.layout.cp > 1)


def _model_gathers(scenario) -> tuple[list[ParamTensor], zero3_gathers.PassGathers]:
    """One model replica's tensors (every pipeline stage's) and ZeRO-3's all-gathers of one pass over them: every
    tensor is reduced; the coalesced calls hold two or more gathered tensors (zero3_gathers.pass_gathers)."""
    tensors = [t for s in range(scenario.layout.pp) for t in rank_tensors(scenario, s)]
    return tensors, zero3_gathers.pass_gathers(tensors, scenario.training.framework)


def hook_ops(scenario: Scenario,
             model: tuple[list[ParamTensor], zero3_gathers.PassGathers] | None = None) -> tuple[int, int]:
    """(forward, backward) host calls of ZeRO-3's module hooks per pass over one model replica (module doc), from
    ``model`` (``_model_gathers``, built here where not given); a recomputed forward's hooks are in the caller's
    ``regather``."""
    tensors, gathers = model if model is not None else _model_gathers(scenario)
    modules = len({t.name.rsplit(".", 1)[0] for t in tensors}) + BLOCK_CONTAINERS * scenario.model.num_layers
    per_param = gathers.gathered * (PARAM_WAIT_CALLS + RELEASE_OPS)
    per_call = gathers.calls * GATHER_CALL_OPS
    fwd = modules * (HOOK_FUNCTION_OPS + WAIT_STREAM_CALLS) + per_param + per_call
    return fwd, modules * WAIT_STREAM_CALLS + per_param + per_call


def with_rank_loops(scenario: Scenario, issue: PassIssue | None,
                    profile: CalibrationProfile | None = None) -> PassIssue | None:
    """The block issue time with DeepSpeed ZeRO-3's host loops over ranks (module doc) added per block: each
    forward unpacks the parameters of its coalesced gathers, each backward unpacks them again (and once more for
    a recomputed forward) and slices the gradients; each coalesced all-gather narrows its flat output once per
    rank. Single-parameter gathers loop over no ranks. The module hooks' host calls (``hook_ops``) come with
    each pass. The model's tensors outside the blocks are spread evenly over its blocks. The result is taken at
    the pace of the slowest host of the ranks the gathers tie together (``shard_paced``)."""
    if issue is None or not applies(scenario):
        return issue
    return shard_paced(scenario, issue, rank_loops(scenario, issue), profile)


def rank_loops(scenario: Scenario, issue: PassIssue) -> PassIssue:
    """``issue`` with the host loops over ranks and the module hooks added per block (``with_rank_loops``)."""
    model = _model_gathers(scenario)
    tensors, gathers = model
    ranks, layers = max(1, round(shard_groups(scenario)[0])), scenario.model.num_layers  # the ZeRO-3 shard group
    cpu = scenario.cluster.host_cpu
    hook_f, hook_b = hook_ops(scenario, model)
    gather_ops = ranks * (gathers.coalesced_tensors * UNPACK_OPS_PER_RANK
                          + gathers.coalesced_calls * GATHER_OPS_PER_RANK)
    if mics.gathers_in_place(scenario):  # DeepSpeed-MiCS gathers into the parameters' buffers (specs/mics.py)
        gather_ops = 0
    regather = 2 if scenario.training.recompute == "full" else 1
    ops_f = gather_ops + hook_f
    ops_b = (regather - 1) * ops_f + gather_ops + hook_b + len(tensors) * REDUCE_OPS_PER_RANK * ranks
    fwd_s, bwd_s = host_issue.issue_s(ops_f, 0, cpu), host_issue.issue_s(ops_b, 0, cpu)  # aten dispatches
    return replace(issue, fwd_s=issue.fwd_s + fwd_s / layers, bwd_s=issue.bwd_s + bwd_s / layers,
                   fwd_ops=issue.fwd_ops + round(ops_f / layers), bwd_ops=issue.bwd_ops + round(ops_b / layers))


def shard_pace(scenario: Scenario,
               profile: CalibrationProfile | None = None) -> tuple[tuple[float, float], tuple[float, float]]:
    """((forward, backward) ``pace(tp x S)``, the same over ``pace(tp)``) for a shard group of S ranks at the
    measured spread of the forward and the backward pass (module doc): the first stretches host work no TP
    collective paced yet (the rank loops, the hooks), the second the block's issue that ``host_issue.tp_paced``
    already took at the TP group's pace. Ones outside eager issue."""
    if scenario.training.host_issue_mode != "eager":
        return (1.0, 1.0), (1.0, 1.0)
    tp, ranks = scenario.layout.tp, max(1, round(shard_groups(scenario)[0]))
    sigma = host_jitter.measured_sigma(profile, block_style(layer_shape(scenario)))
    whole = tuple(host_jitter.pace(tp * ranks, s) for s in sigma)
    return whole, tuple(w / host_jitter.pace(tp, s) for w, s in zip(whole, sigma))


def shard_paced(scenario: Scenario, base: PassIssue, looped: PassIssue,
                profile: CalibrationProfile | None = None) -> PassIssue:
    """``looped`` (``base`` with the rank loops and hooks added) at the pace of the slowest host of the shard group
    (module doc): the forward and a recomputed forward at the forward's factor, the backward's own issue at the
    backward's (``shard_pace``)."""
    (wf, wb), (rf, rb) = shard_pace(scenario, profile)
    full = scenario.training.recompute == "full"
    fwd = base.fwd_s * rf + (looped.fwd_s - base.fwd_s) * wf
    own_base = base.bwd_s - (base.fwd_s if full else 0.0)
    own_added = looped.bwd_s - base.bwd_s - ((looped.fwd_s - base.fwd_s) if full else 0.0)
    return replace(looped, fwd_s=fwd, bwd_s=(fwd if full else 0.0) + own_base * rb + own_added * wb)


def reduce_buckets(st: _Step, params: float, tensors: int) -> int:
    """Reduce-scatter calls DeepSpeed ZeRO-3 issues for ``params`` gradient elements in ``tensors`` whole tensors:
    one per ``reduce_bucket_size`` bucket of whole tensors (``_Step.reduce_bucket_params``; one bucket where
    unset)."""
    return whole_tensor_buckets(params, st.reduce_bucket_params or params, tensors)


def serialized_reduce_s(st: _Step, params: float, vstage: int) -> tuple[float, float]:
    """(forward, backward) GPU seconds per micro-batch that DeepSpeed ZeRO-3 adds to one chunk's passes on
    its ``params`` (module doc): the unpacking copies of the coalesced gathers' parameters (their share of the
    chunk's elements), and in the backward the reduce-scatter calls and the coalescing copies."""
    scenario, tr = st.scenario, st.scenario.training
    group = st.shard_group or st.dp_group
    if group is None or group.size <= 1 or params <= 0:
        return 0.0, 0.0
    chunk = chunk_tensors(scenario, vstage)
    tensors, total = len(chunk), sum(t.elems for t in chunk)
    share = zero3_gathers.coalesced(chunk, tr.framework)[2] / total if total > 0 else 0.0
    if mics.gathers_in_place(scenario):  # DeepSpeed-MiCS: nothing to unpack (specs/mics.py)
        share = 0.0
    calls = reduce_buckets(st, params, tensors)
    grad_bytes = params * tr.grad_bytes
    lat, bw = _coll("reduce_scatter", grad_bytes / calls, group, scenario, st.profile)
    hbm = st.slowest * compute.memory_time_s(COALESCE_HBM_PASSES * grad_bytes, st.hw, st.profile, "copy")
    unpack = st.slowest * compute.memory_time_s(UNPACK_HBM_PASSES * share * params * tr.param_bytes, st.hw,
                                                st.profile, "copy") if share > 0 else 0.0
    regather = 2 if tr.recompute == "full" else 1
    return unpack, regather * unpack + calls * (lat + bw) + hbm
