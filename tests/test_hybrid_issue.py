"""A hybrid Mamba stack's host issue in the step (cost_models.hybrid_issue): each layer kind's op counts against
Megatron-Core's hybrid stack spec and mamba_ssm's SSD combined op, and the span rule of the MoE dispatcher's host
sync (the host runs ahead over Mamba and attention layers only up to the next MoE layer's sync)."""

from __future__ import annotations

import pytest

from trainsim.cost_models.host import HOST_LOOP_OP_S, HOST_OP_S
from trainsim.cost_models.hybrid_issue import HybridIssue, hybrid_chunk_idle_s, hybrid_issue, sync_spans
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario

NANO = "nemotron-3-nano-30b-a3b"
SUPER = "nemotron-3-super-120b-a12b"


def scen(model=NANO, cluster="gb200-nvl72", gpus=8, layout=None, **training):
    training.setdefault("seq_len", 8192)
    training.setdefault("global_batch", 64)
    training.setdefault("micro_batch", 1)
    return build_scenario({"model": {"preset": model} if isinstance(model, str) else model, "cluster": cluster,
                           "gpus": gpus, "layout": {"ep": 8} if layout is None else layout, "training": training})


def test_mamba_layer_ops_closed_form():
    """MambaLayer with MambaMixer's memory-efficient training path: in_proj 1, A = -exp(A_log.float()) 3, dt_bias
    cast 1, causal_conv1d_fwd 1 + the SSD forward's 5 Triton kernels, gated RMSNorm 1, out_proj 1, bias-dropout-add
    1 = 14; backward 1 + 2 + 3 + 6 (conv) + 15 + 12 (SSD) + 4 + 3 = 46; at micro-batch 2 the two layout copies each
    pass (module doc)."""
    issue = hybrid_issue(scen())
    assert issue.ops["M"] == (1 + 3 + 1 + (1 + 5) + 1 + 1 + 1, 0, 1 + 2 + 3 + 6 + (15 + 12) + 4 + 3, 0)
    assert issue.fwd_s["M"] == pytest.approx(14 * HOST_OP_S["grace"])
    assert hybrid_issue(scen(micro_batch=2)).ops["M"] == (14 + 2, 0, 46 + 2, 0)
    assert issue.ops["*"] == (15, 0, 25, 0)  # the attention half of a transformer block (cost_models.host)


def test_moe_layer_ops_closed_form():
    """Nemotron 3 Nano, MXFP8, 128 experts over ep 8 (16 local): own norm + residual 2, MoE layer 45, shared expert 6
    forward; each local expert 2 GEMMs + 2 quantize kernels (64 launches). Super adds LatentMoE's two projections
    (1 + 1 forward, 2 + 2 backward) at 512 / 64 = 8 local experts. x86 at its own per-op seconds."""
    nano = hybrid_issue(scen(dtype="fp8", fp8_recipe="mxfp8"))
    assert nano.ops["E"] == (2 + 45 + 6, 16 * 4, 2 + 40 + 10, 16 * 6)
    assert nano.fwd_s["E"] == pytest.approx(53 * HOST_OP_S["grace"] + 64 * HOST_LOOP_OP_S["grace"])
    sup = hybrid_issue(scen(SUPER, "dgx-b200", 64, {"ep": 64}, dtype="fp8", fp8_recipe="mxfp8", global_batch=128))
    assert sup.ops["E"] == (2 + 45 + 6 + 2, 8 * 4, 2 + 40 + 10 + 4, 8 * 6)
    assert sup.bwd_s["E"] == pytest.approx(56 * HOST_OP_S["x86"] + 48 * HOST_LOOP_OP_S["x86"])
    assert not nano.resync


def test_recomputed_moe_forward_reissues_and_resyncs():
    """The 'moe' module re-runs the MoE layer (and its shared expert) in the backward: 45 + 6 more ops, each local
    expert's forward launches again, and the dispatcher syncs there; full recompute re-runs every layer."""
    base = hybrid_issue(scen())
    rc = hybrid_issue(scen(recompute="selective", recompute_modules=["moe"]))
    assert rc.resync and rc.ops["E"][2] == base.ops["E"][2] + 45 + 6
    assert rc.ops["E"][3] == base.ops["E"][3] + 16 * 2 and rc.ops["M"] == base.ops["M"]
    full = hybrid_issue(scen(recompute="full"))
    assert full.resync and full.ops["M"][2] == 46 + 14 and full.ops["*"][2] == 25 + 15


def test_sync_spans():
    """Forward: each E layer with the layers after it, the leading layers joining the last span; backward (a
    recomputed MoE forward): each E layer with the layers before it; no E layer: one span."""
    assert sync_spans("MEMEM*E") == ["EM", "EM*", "EM"]
    assert sync_spans("MEMEM*E", forward=False) == ["ME", "M*E", "ME"]
    assert sync_spans("EE") == ["E", "E"]
    assert sync_spans("MM*") == ["MM*"]


ISSUE = HybridIssue(pattern="MEMEME", fwd_s={"M": 0.5e-3, "E": 3e-3}, bwd_s={"M": 1e-3, "E": 4e-3}, ops={},
                    lead_s=1e-5, resync=False)


def test_host_runs_ahead_over_mamba_layers_up_to_the_next_sync():
    """E: 3 ms host against 2 ms GPU; M: 0.5 ms host against 2 ms GPU. Each span "EM" (3.5 ms host, 4 ms GPU) hides
    the E layer's excess: only the lead-ins idle -- where a block-by-block rule would idle 3 x 1 ms. With M at
    0.1 ms GPU a span idles 3.5 - 2.1 ms."""
    idle_f, _ = hybrid_chunk_idle_s(ISSUE, {"M": 2e-3, "E": 2e-3}, {"M": 9e-3, "E": 9e-3}, 1.0)
    assert idle_f == pytest.approx(3 * 1e-5)
    idle_f, _ = hybrid_chunk_idle_s(ISSUE, {"M": 0.1e-3, "E": 2e-3}, {"M": 9e-3, "E": 9e-3}, 1.0)
    assert idle_f == pytest.approx(3 * (1.4e-3 + 1e-5))


def test_backward_runs_ahead_over_the_chunk_unless_recomputed():
    """No sync in the backward: 3 x (4 + 1) ms of host against a 12 ms chunk backward idles 3 ms; with the MoE
    forward recomputed each span "ME" (5 ms host) idles its excess over its own GPU time (1 + 3 ms) and the lead-in."""
    _, idle_b = hybrid_chunk_idle_s(ISSUE, {"M": 2e-3, "E": 2e-3}, {"M": 1e-3, "E": 3e-3}, 12e-3)
    assert idle_b == pytest.approx(3e-3)
    resync = HybridIssue(**{**ISSUE.__dict__, "resync": True})
    _, idle_b = hybrid_chunk_idle_s(resync, {"M": 2e-3, "E": 2e-3}, {"M": 1e-3, "E": 3e-3}, 1.0)
    assert idle_b == pytest.approx(3 * (1e-3 + 1e-5))


def test_cost_table_and_predict_carry_the_host():
    """Nemotron 3 Nano on GB200: the chunk's host issue is the pattern's layers' (23 M, 23 E, 6 *), its forward idle
    at least the 23 lead-ins, and predict warns of no host-bound risk left out of the step."""
    s = scen(dtype="fp8", fp8_recipe="mxfp8")
    issue = hybrid_issue(s)
    c = build_cost_table(s).stages[0].chunks[0]
    assert c.host_issue_fwd_s == pytest.approx(23 * issue.fwd_s["M"] + 23 * issue.fwd_s["E"] + 6 * issue.fwd_s["*"])
    assert c.host_issue_bwd_s == pytest.approx(23 * issue.bwd_s["M"] + 23 * issue.bwd_s["E"] + 6 * issue.bwd_s["*"])
    assert c.host_idle_fwd_s >= 23 * issue.lead_s
    p = predict(s, fast=True)
    assert p.breakdown_s["host_issue"] > 0 and not any("host-bound risk" in w for w in p.warnings)


def test_stack_without_moe_layers_has_no_sync_term():
    """A hybrid stack without E layers (Nemotron-H style "M*-") has no dispatcher sync: no hybrid host term."""
    m = {"name": "tiny-h", "num_layers": 3, "hidden": 256, "num_heads": 4, "ffn_hidden": 512, "vocab_size": 1024,
         "max_seq_len": 256, "position_embedding": "none", "mamba_heads": 8, "mamba_head_dim": 32, "mamba_groups": 1,
         "mamba_state_dim": 16, "block_norms": 1, "hybrid_pattern": "M*-"}
    assert hybrid_issue(scen(m, layout={}, seq_len=256, global_batch=8)) is None


def test_paired_spans_expose_their_joint_excess():
    """Under EP overlap a paired span issues a forward and a backward: "EM" is (3 + 4) + (0.5 + 1) ms of host against
    3 + 4 ms of paired GPU time, 1.5 ms each of the three spans (charged to the forward), no separate backward idle."""
    idle_f, idle_b = hybrid_chunk_idle_s(ISSUE, {"M": 2e-3, "E": 2e-3}, {"M": 1e-3, "E": 3e-3}, 0.0, pair=1.0,
                                         paired={"M": 4e-3, "E": 3e-3})
    assert idle_f == pytest.approx(3 * (1.5e-3 + 1e-5)) and idle_b == 0.0
