"""DeepSpeed ZeRO-3's gradient reduction on the backward's critical path (simulator/zero3_reduce.py): the calls,
host slice views and copies that stage3.py / reduce_scatter_coalesced issue, checked against closed forms."""

from __future__ import annotations

import pytest

from trainsim.cost_models import collectives, framework, host_issue, host_jitter, zero3_gathers
from trainsim.cost_models.grad_buffer import whole_tensor_buckets
from trainsim.cost_models.param_tensors import chunk_tensors
from trainsim.simulator import zero3_reduce
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario, framework_behaviour
from trainsim.topologies.placement import place

LLAMA_13B = {"name": "llama-13b", "num_layers": 40, "hidden": 5120, "num_heads": 40, "ffn_hidden": 13824,
             "vocab_size": 32000, "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope",
             "max_seq_len": 4096, "bias": False, "tie_embeddings": False}


def scen(gpus: int, framework_name: str = "deepspeed"):
    return build_scenario({"model": LLAMA_13B, "cluster": "dgx-a100", "gpus": gpus, "layout": {"tp": 1, "pp": 1},
                           "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "zero": 3,
                                        "framework": framework_name}})


def test_llama_13b_holds_363_weight_tensors_and_needs_27_buckets():
    """40 blocks x (q, k, v, o, gate, up, down, 2 norms) + embedding, head, final norm = 363 tensors;
    13.0e9 gradient elements in 5e8-element buckets (stage3.py reduce_bucket_size) = 27 calls."""
    s = scen(1024)
    assert len(chunk_tensors(s, 0)) == 40 * 9 + 3
    params = s.model.total_params()
    assert whole_tensor_buckets(params, framework_behaviour.DEEPSPEED_REDUCE_BUCKET_PARAMS, 363) == 27
    assert whole_tensor_buckets(params, 1e12, 363) == 1
    assert whole_tensor_buckets(params, 1.0, 363) == 363  # a bucket holds whole tensors


def test_prefetch_groups_parameters_by_the_bucket_and_the_live_bound():
    """partitioned_param_coordinator.fetch_sub_module, traced by hand (bucket 50, elements of each submodule):
    the first submodule fetches its own parameter, then prefetches the 2nd and 3rd (30 < 50, 60 >= 50 stops);
    at the 2nd the queue head moves past its own and prefetches the 60; at the 3rd the 10. Under a live bound of
    40 each prefetch is limited to what is not yet gathered: one parameter per call."""
    assert zero3_gathers.prefetch_calls([[30], [30], [30], [60], [10]], 50, 1000) == [(30,), (30, 30), (60,), (10,)]
    assert zero3_gathers.prefetch_calls([[30]] * 4, 50, 1000) == [(30,), (30, 30), (30,)]
    assert zero3_gathers.prefetch_calls([[30]] * 4, 50, 40) == [(30,), (30,), (30,), (30,)]
    assert zero3_gathers.prefetch_calls([[20, 10], [30]], 50, 1000) == [(20, 10), (30,)]


def test_llama_block_gathers_in_five_calls():
    """One LLaMA-13B block, traced by hand with the 5e7-element bucket (q, k, v, o: 2.62e7 elements; fc1, gate,
    fc2: 7.08e7): (q) on demand, then prefetches (k, v), (o, fc1), (gate), (fc2) -- 5 calls, 2 of them coalesced
    over 4 tensors."""
    s = scen(1024)
    sq, mlp = 5120 * 5120, 5120 * 13824
    tensors = [t for t in chunk_tensors(s, 0) if t.name.startswith("layers.0.")]
    assert zero3_gathers.gather_calls(tensors, "deepspeed") == 5
    assert zero3_gathers.coalesced(tensors, "deepspeed") == (2, 4, 3 * sq + mlp)
    assert zero3_gathers.coalesced(tensors, "deepspeed-2021") == (0, 0, 0.0)


def test_block_issue_carries_the_loops_over_ranks():
    """A one-block LLaMA-13B: embedding (1.64e8), the block, head (1.64e8), traced by hand: (embedding), (q, k),
    (v, o), (fc1), (gate), (fc2), (head). Only the two coalesced calls loop over ranks (partition_parameters.py:
    a single-parameter all_gather_coalesced gathers straight into the parameter): per rank one narrow of each
    call's flat output and a narrow + record_stream of each of its 4 parameters, forward and backward; the
    backward adds 12 gradient slices per rank (9 block tensors + embedding, final norm, head). The module hooks
    add, per pass, over 12 parameter-owning modules + 3 block containers = 15 modules, 9 gathered parameters and 7
    calls: forward 15 x (2 detaches + 3 stream-wait calls) + 9 x (3 wait + 2 release) + 7 x 5 = 155, backward
    15 x 3 + 45 + 35 = 125."""
    s = build_scenario({"model": {**LLAMA_13B, "num_layers": 1}, "cluster": "dgx-a100", "gpus": 1024,
                        "layout": {"tp": 1, "pp": 1}, "training": {"seq_len": 4096, "global_batch": 1024,
                                                                    "micro_batch": 1, "zero": 3,
                                                                    "framework": "deepspeed"}})
    assert zero3_gathers.gather_calls(chunk_tensors(s, 0), "deepspeed") == 7
    base = host_issue.scenario_block_issue(s)
    issue = zero3_reduce.rank_loops(s, base)
    dispatch, _ = host_issue.op_seconds("x86")
    assert zero3_reduce.hook_ops(s) == (155, 125)
    gather = (4 * 2 + 2) * 1024 * dispatch
    assert issue.fwd_s - base.fwd_s == pytest.approx(gather + 155 * dispatch)
    assert issue.bwd_s - base.bwd_s == pytest.approx(gather + 125 * dispatch + 12 * 1024 * dispatch)
    assert zero3_reduce.with_rank_loops(scen(1024, "pytorch-fsdp"), base) is base


def _block(gpus: int, tp: int = 1, recompute: str = "none"):
    return build_scenario({"model": {**LLAMA_13B, "num_layers": 1}, "cluster": "dgx-a100", "gpus": gpus,
                           "layout": {"tp": tp, "pp": 1},
                           "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "zero": 3,
                                        "framework": "deepspeed", "recompute": recompute}})


@pytest.mark.parametrize("gpus", [8, 1024])
def test_block_issue_runs_at_the_pace_of_the_shard_groups_slowest_host(gpus):
    """Every ZeRO-3 gather and reduce-scatter spans the whole shard group and DeepSpeed's host synchronizes on the
    third-newest gather / reduce event, so a block pass's host time is the expected slowest of the group's S hosts:
    pace(S, sigma) (host_jitter) times one rank's, forward at the forward pass's measured spread, backward at the
    backward's; at TP 1 the block's own issue and the rank loops take the same factor."""
    s = _block(gpus)
    base = host_issue.scenario_block_issue(s)
    looped = zero3_reduce.rank_loops(s, base)
    paced = zero3_reduce.with_rank_loops(s, base)
    sf, sb = host_jitter.DEFAULT_SIGMA
    assert paced.fwd_s == pytest.approx(looped.fwd_s * host_jitter.pace(gpus, sf), rel=1e-12)
    assert paced.bwd_s == pytest.approx(looped.bwd_s * host_jitter.pace(gpus, sb), rel=1e-12)
    assert paced.fwd_ops == looped.fwd_ops and paced.bwd_ops == looped.bwd_ops


def test_shard_pace_replaces_the_tp_pace_and_carries_the_recomputed_forward():
    """TP 2 over 1,024 GPUs (a 512-rank shard group): the block's TP-paced issue moves from pace(2) to
    pace(1,024), the rank loops (not TP-paced) take pace(1,024) whole; under full recompute the backward's
    recomputed forward takes the forward's factor."""
    sf, sb = host_jitter.DEFAULT_SIGMA
    whole = (host_jitter.pace(1024, sf), host_jitter.pace(1024, sb))
    for recompute in ("none", "full"):
        s = _block(1024, tp=2, recompute=recompute)
        base = host_issue.scenario_block_issue(s)
        looped = zero3_reduce.rank_loops(s, base)
        paced = zero3_reduce.with_rank_loops(s, base)
        ratio = (whole[0] / host_jitter.pace(2, sf), whole[1] / host_jitter.pace(2, sb))
        fwd = base.fwd_s * ratio[0] + (looped.fwd_s - base.fwd_s) * whole[0]
        assert paced.fwd_s == pytest.approx(fwd, rel=1e-12)
        rec_b, rec_l = (base.fwd_s, looped.fwd_s) if recompute == "full" else (0.0, 0.0)
        own = (base.bwd_s - rec_b) * ratio[1] + (looped.bwd_s - base.bwd_s - (rec_l - rec_b)) * whole[1]
        assert paced.bwd_s == pytest.approx((fwd if recompute == "full" else 0.0) + own, rel=1e-12)


def test_chunk_backward_carries_the_reduction_closed_form():
    """The chunk's exposed DP backward is 27 x (one bucket's reduce-scatter over 1,024 ranks, its ring latency
    over 1,023 steps included) + the hook's copy into the bucket and the coalescing copies (6 passes over the
    gradients) + the unpacking copy (2 passes) of the coalesced gathers' parameters, forward and backward."""
    s = scen(1024)
    chunk = build_cost_table(s).stages[0].chunks[0]
    params = s.model.total_params()
    one = collectives.collective_time("reduce_scatter", params * 2 / 27, place(s).group("dp"), s.cluster)
    assert one.algo == "ring" and one.latency_s > 1023 * 3e-6  # ring-only reduce-scatter, n - 1 steps
    assert chunk.grad_buckets == ()
    # 2 bytes per element at the A100's effective HBM rate (2.039 TB/s x hbm_efficiency 0.83, GPUSpec),
    # paced by the slowest of 1,024 GPUs (a few per cent)
    hbm_pass = params * 2 / (2.039e12 * 0.83)
    _, _, held = zero3_gathers.coalesced(chunk_tensors(s, 0), "deepspeed")
    unpack = 2 * hbm_pass * held / params
    assert unpack < chunk.dp_fwd_s < 1.1 * unpack
    rest = chunk.dp_bwd_s - 27 * one.time_s
    assert 6 * hbm_pass + unpack < rest < 1.1 * (6 * hbm_pass + unpack)


def test_other_frameworks_keep_the_reduction_in_the_engine():
    chunk = build_cost_table(scen(64, "pytorch-fsdp")).stages[0].chunks[0]
    assert chunk.grad_buckets and chunk.dp_bwd_s == 0.0


def test_one_whole_tensor_bucket_rule_for_every_framework():
    """ZeRO-3's reduce-scatter buckets, DeepSpeed ZeRO-1/2's reduce buckets and the DDP-sized calls of grad_sync use one
    rule: ceil(params / bucket), at most one per tensor."""
    from trainsim.specs import build_scenario as bs
    assert whole_tensor_buckets(10.0, 3.0) == 4 and whole_tensor_buckets(10.0, 3.0, 2) == 2
    tr = bs({"model": LLAMA_13B, "cluster": "dgx-a100", "gpus": 64, "training": {
        "seq_len": 4096, "global_batch": 64, "zero": 2, "framework": "deepspeed"}}).training
    assert framework.zero12_reduce_calls(tr, 13e9, 64, 5e8, max_buckets=363) == whole_tensor_buckets(13e9, 5e8, 363)
