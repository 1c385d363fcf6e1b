"""A Megatron-Core MoE block's host issue in the step (cost_models.moe_issue): its seconds against ops x per-op
seconds (cost_models.host's counts, TE issue #2053's constants), the exposure rule of the dispatcher's per-layer
host sync, and the idle the assembled cost table and predict carry."""

from __future__ import annotations

import pytest

from trainsim.cost_models.host import HOST_LOOP_OP_S, HOST_OP_S
from trainsim.cost_models.moe_issue import MoeIssue, moe_block_issue, moe_chunk_idle_s
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario

TINY = {"name": "tiny-moe", "num_layers": 4, "hidden": 256, "num_heads": 4, "ffn_hidden": 512, "vocab_size": 1024,
        "num_experts": 64, "top_k": 2, "max_seq_len": 256}


def scen(model="qwen3-30b-a3b", cluster="dgx-b200", gpus=8, layout=None, **training):
    training.setdefault("seq_len", 4096)
    training.setdefault("global_batch", 512)
    training.setdefault("micro_batch", 1)
    return build_scenario({"model": {"preset": model} if isinstance(model, str) else model, "cluster": cluster,
                           "gpus": gpus, "layout": {"ep": 8} if layout is None else layout, "training": training})


def tiny(cluster="gb200-nvl72", **training):
    """64 experts on one GPU at 128 tokens: ~1.6 ms of host work per block forward against microseconds of GPU."""
    training.setdefault("seq_len", 128)
    training.setdefault("global_batch", 4)
    return scen(TINY, cluster, 1, {}, **training)


def test_block_seconds_closed_form():
    """Qwen3-30B-A3B, ep 8 (16 local experts), bf16 on x86: forward 15 + 45 eager ops and 16 x 2 GEMM launches,
    backward 25 + 40 ops and 16 x 4 launches; one eager op (the all-to-all) after each sync; Grace at its own
    per-op seconds."""
    x86 = moe_block_issue(scen())
    assert x86.fwd_s == pytest.approx(60 * 13.5e-6 + 32 * 5e-6)
    assert x86.bwd_s == pytest.approx(65 * 13.5e-6 + 64 * 5e-6)
    assert x86.lead_s == pytest.approx(13.5e-6) and not x86.resync
    grace = moe_block_issue(scen(cluster="gb200-nvl72"))
    assert grace.fwd_s == pytest.approx(60 * HOST_OP_S["grace"] + 32 * HOST_LOOP_OP_S["grace"])
    moe_rc = moe_block_issue(scen(recompute="selective", recompute_modules=["moe"]))
    assert moe_rc.resync and moe_rc.bwd_s == pytest.approx(x86.bwd_s + 45 * 13.5e-6 + 32 * 5e-6)


def test_only_eager_megatron_moe_on_gpus():
    assert moe_block_issue(scen("llama3-8b", layout={}, global_batch=64)) is None
    assert moe_block_issue(scen(framework="torch")) is None
    assert moe_block_issue(scen("nemotron-3-nano-30b-a3b")) is None  # hybrid: predict warns instead


ISSUE = MoeIssue(fwd_s=3e-3, bwd_s=4e-3, dense_fwd_s=0.4e-3, dense_bwd_s=0.5e-3, lead_s=1e-5, resync=False,
                 ops=(0, 0, 0, 0))


def test_forward_excess_is_exposed_block_by_block():
    """The sync bounds the host's lead to one block: 10 blocks of 2 ms GPU and 3 ms host idle 10 x (1 ms + lead),
    though 10 other blocks' worth of GPU time elsewhere in the chunk could have hidden it; a block whose GPU
    outlasts the host idles only the lead-in."""
    idle_f, _ = moe_chunk_idle_s(ISSUE, ((10, 2e-3, 9e-3, 0.0, 0.0),), (0, 0.0, 0.0), 0.0)
    assert idle_f == pytest.approx(10 * (1e-3 + 1e-5))
    idle_f, _ = moe_chunk_idle_s(ISSUE, ((10, 5e-3, 9e-3, 0.0, 0.0),), (2, 1e-4, 1e-4), 0.0)
    assert idle_f == pytest.approx(10 * 1e-5 + 2 * (0.4e-3 - 1e-4))


def test_each_block_kind_against_its_own_gpu_time():
    """Sliding-window and full-attention MoE blocks (GPT-OSS) differ in GPU time: 3 ms of host against 2 ms and
    4 ms idles 1 ms on each of the first kind, none on the second -- not the none their 3 ms mean would give."""
    idle_f, _ = moe_chunk_idle_s(ISSUE, ((5, 2e-3, 9e-3, 0.0, 0.0), (5, 4e-3, 9e-3, 0.0, 0.0)), (0, 0.0, 0.0), 0.0)
    assert idle_f == pytest.approx(5 * 1e-3 + 10 * 1e-5)


def test_backward_runs_ahead_over_the_chunk_unless_recomputed():
    """No sync in the backward: 10 blocks x 4 ms of host against a chunk backward of 35 ms of GPU idle 5 ms in all,
    whatever each block's own GPU time; with the MoE forward recomputed the dispatcher syncs there too, so each
    block idles its own excess (4 - 3 ms) and the lead-in."""
    _, idle_b = moe_chunk_idle_s(ISSUE, ((10, 2e-3, 3e-3, 0.0, 0.0),), (0, 0.0, 0.0), 35e-3)
    assert idle_b == pytest.approx(5e-3)
    _, idle_b = moe_chunk_idle_s(ISSUE, ((10, 2e-3, 3e-3, 0.0, 0.0),), (0, 0.0, 0.0), 45e-3)
    assert idle_b == 0.0
    resync = MoeIssue(**{**ISSUE.__dict__, "resync": True})
    _, idle_b = moe_chunk_idle_s(resync, ((10, 2e-3, 3e-3, 0.0, 0.0),), (0, 0.0, 0.0), 45e-3)
    assert idle_b == pytest.approx(10 * (1e-3 + 1e-5))


def test_paired_layers_expose_their_joint_excess():
    """Under EP overlap a paired layer's host issues a forward and a backward (7 ms) against their joint GPU time
    (2 + 3 ms): 2 ms each, charged to the forward; no separate backward idle for the paired share."""
    idle_f, idle_b = moe_chunk_idle_s(ISSUE, ((10, 2e-3, 3e-3, 2e-3, 3e-3),), (0, 0.0, 0.0), 0.0, pair=1.0)
    assert idle_f == pytest.approx(10 * (2e-3 + 1e-5)) and idle_b == 0.0


def test_cost_table_carries_the_idle():
    """One chunk of 4 tiny MoE blocks on a Grace host: forward idle at least 4 x (host + lead) less the chunk's whole
    forward GPU time, backward idle exactly the blocks' host less the chunk's backward GPU time (compute and
    communication on the stream), and the chunk's host issue 4 x the block's."""
    s = tiny()
    issue = moe_block_issue(s)
    c = build_cost_table(s).stages[0].chunks[0]
    assert c.layers == 4
    assert c.host_issue_fwd_s == pytest.approx(4 * issue.fwd_s) and c.host_issue_bwd_s == pytest.approx(4 * issue.bwd_s)
    gpu_f = c.fwd_s - c.host_idle_fwd_s + c.tp_fwd_s + c.cp_fwd_s + c.ep_fwd_s + c.dp_fwd_s
    assert 4 * (issue.fwd_s + issue.lead_s) - gpu_f <= c.host_idle_fwd_s <= 4 * (issue.fwd_s + issue.lead_s)
    gpu_b = (c.bwd_input_s - c.host_idle_bwd_s + c.bwd_weight_s + c.recompute_s + c.tp_bwd_s + c.cp_bwd_s
             + c.ep_bwd_s + c.dp_bwd_s)
    assert c.host_idle_bwd_s == pytest.approx(4 * issue.bwd_s - gpu_b)
    assert c.host_idle_fwd_s > 0.5 * 4 * issue.fwd_s


def test_predict_reports_the_idle_and_x86_idles_less():
    """The step carries the idle ('GPU idle waiting for the host: N %', breakdown host_idle = micro-batches x the
    chunk's idle); an x86 host, 2.6x faster per op, idles less."""
    grace = predict(tiny(), fast=True)
    c = build_cost_table(tiny()).stages[0].chunks[0]
    assert grace.breakdown_s["host_idle"] == pytest.approx(4 * (c.host_idle_fwd_s + c.host_idle_bwd_s))
    assert any("GPU idle waiting for the host" in w and "MoE" in w for w in grace.warnings)
    x86 = predict(tiny("dgx-b200"), fast=True)
    assert 0 < x86.breakdown_s["host_idle"] < grace.breakdown_s["host_idle"]


def test_eager_host_hidden_where_graphs_did_not_help():
    """Megatron-Bridge timed Qwen3 30B-A3B BF16 on 16 H100 (alltoall dispatcher, EP 16 over two nodes, mbs 1, GBS
    1024) at 41.36 s per step eager and 42.00 s with TE graphs of attn + moe_router + moe_preprocess
    (docs/training/cuda-graphs.md @ 067f987df03b8355b03192d88d70f1709fedf51a): capturing the host's work did not
    shorten the step, so its eager host issue hid behind the GPU. The step here has under 1 % idle."""
    s = scen(cluster="dgx-h100", gpus=16, layout={"ep": 16}, global_batch=1024, dtype="bf16")
    p = predict(s, fast=True)
    assert p.breakdown_s["host_issue"] > 0.1 * p.step_time_s  # the host works, and it is costed ...
    assert p.breakdown_s["host_idle"] < 0.01 * p.step_time_s  # ... but the GPU barely waits for it
