"""DeepSpeed ZeRO-3's gradient reduction on the backward's critical path (simulator/zero3_reduce.py): the calls,
host slice views and copies that stage3.py / reduce_scatter_coalesced issue, checked against closed forms."""

from __future__ import annotations

import pytest

from trainsim.cost_models import collectives, framework, host_issue
from trainsim.cost_models.param_tensors import chunk_tensors
from trainsim.simulator import zero3_reduce
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario
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
    assert zero3_reduce.reduce_calls(params, framework.DEEPSPEED_REDUCE_BUCKET_PARAMS, 363) == 27
    assert zero3_reduce.reduce_calls(params, 1e12, 363) == 1
    assert zero3_reduce.reduce_calls(params, 1.0, 363) == 363  # a bucket holds whole tensors


def test_host_slices_grow_with_ranks():
    """reduce_scatter_coalesced slices every gradient once per rank: 363 x 1,024 aten dispatches."""
    dispatch, _ = host_issue.op_seconds("x86")
    assert zero3_reduce.host_slice_s(363, 1024) == pytest.approx(363 * 1024 * dispatch)
    assert zero3_reduce.host_slice_s(363, 1024) == pytest.approx(128 * zero3_reduce.host_slice_s(363, 8))


def test_chunk_backward_carries_the_reduction_closed_form():
    """The chunk's exposed DP backward is 27 x (one bucket's reduce-scatter over 1,024 ranks, its ring latency
    over 1,023 steps included) + the host's slices + 4 HBM passes over the gradients."""
    s = scen(1024)
    chunk = build_cost_table(s).stages[0].chunks[0]
    params = s.model.total_params()
    one = collectives.collective_time("reduce_scatter", params * 2 / 27, place(s).group("dp"), s.cluster)
    host = zero3_reduce.host_slice_s(363, 1024)
    rest = chunk.dp_bwd_s - 27 * one.time_s - host
    assert chunk.grad_buckets == ()
    # the coalescing copies: 4 passes over the 26 GB of bf16 gradients at the A100's effective HBM rate
    # (2.039 TB/s x hbm_efficiency 0.83, GPUSpec), paced by the slowest of 1,024 GPUs (a few per cent)
    hbm = 4 * params * 2 / (2.039e12 * 0.83)
    assert hbm < rest < 1.1 * hbm

def test_other_frameworks_keep_the_reduction_in_the_engine():
    chunk = build_cost_table(scen(64, "pytorch-fsdp")).stages[0].chunks[0]
    assert chunk.grad_buckets and chunk.dp_bwd_s == 0.0
