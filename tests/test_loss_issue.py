"""Megatron's work outside the blocks per micro-batch: the fused causal softmax's bytes (cost_models/flops.py), the
vocabulary-parallel layers' TP collectives (simulator/vocab_tp.py) and the host's issue of the head and loss
(cost_models/loss_issue.py): closed forms, the dispatch counter, and where the builder charges them."""

from __future__ import annotations

import pytest

from trainsim.cost_models import host_issue as hi
from trainsim.cost_models import loss_issue as li
from trainsim.cost_models.collectives import collective_time
from trainsim.cost_models.flops import layer_ops
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.step_context import _step_context
from trainsim.specs import build_scenario


def gpt(tp=4, mb=1, seq=1024, framework="megatron-deepspeed", layers=4, **training):
    model = {"name": "gpt-h2048", "num_layers": layers, "hidden": 2048, "num_heads": 16, "ffn_hidden": 8192,
             "vocab_size": 51200, "max_seq_len": seq}
    training = {"seq_len": seq, "global_batch": 2 * mb, "micro_batch": mb, "framework": framework,
                "flash_attention": False, "dropout": True, "recompute": "full", "dtype": "fp16", **training}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": tp, "layout": {"tp": tp},
                           "training": training})


def _softmax(scenario):
    return next(o for o in layer_ops(scenario) if o.name == "softmax")


def test_causal_fused_softmax_reads_the_lower_triangle():
    """Megatron's upper-triangular softmax kernel reads row i's i + 1 unmasked scores and writes all s: forward
    e (s + 1) / (2 s) + e bytes per score, backward 2 e (s + 1) / (2 s) + e (closed form over the rows)."""
    s, e = 1024, 2
    op = _softmax(gpt(tp=4, mb=1, seq=s))
    scores = 1 * (16 // 4) * s * s
    kept = sum(i + 1 for i in range(s)) / (s * s)  # the rows' unmasked share, summed row by row
    assert op.fwd_bytes == pytest.approx(scores * (e * kept + e))
    assert op.bwd_input_bytes == pytest.approx(scores * (2 * e * kept + e))


def test_full_matrix_softmax_where_the_fused_causal_kernel_does_not_run():
    """torch's own attention (framework torch), attention batches not a multiple of 4 (TP 8, micro-batch 1: 2) and
    more keys than the kernel takes (4,096 > 2,048) read every score: 2 e forward, 3 e backward."""
    for scenario in (gpt(framework="torch"), gpt(tp=8, mb=1), gpt(seq=4096)):
        op = _softmax(scenario)
        n = op.fwd_flops / 5.0
        assert (op.fwd_bytes / n, op.bwd_input_bytes / n) == pytest.approx((4.0, 6.0))


def test_vocab_parallel_collectives_per_microbatch():
    """Under TP the embedding all-reduces one [s, b, h] activation forward, the logits' input gradient one
    backward (Megatron-DeepSpeed waits for it), the cross-entropy three [s, b] fp32 vectors forward; none at TP 1
    or for frameworks without Megatron's vocabulary-parallel layers."""
    sc = gpt(tp=4, mb=2)
    st = _step_context(sc, None)
    group = st.groups["tp"]
    act = 2 * 1024 * 2048 * 2
    ar = collective_time("all_reduce", act, group, sc.cluster).time_s
    ce = collective_time("all_reduce", 4 * 2 * 1024, group, sc.cluster).time_s
    assert st.vocab_tp.emb_fwd_s == pytest.approx(ar)
    assert st.vocab_tp.head_bwd_s == pytest.approx(ar)
    assert st.vocab_tp.head_fwd_s == pytest.approx(3 * ce)
    assert _step_context(gpt(tp=1), None).vocab_tp == type(st.vocab_tp)()
    assert _step_context(gpt(framework="torch"), None).vocab_tp == type(st.vocab_tp)()


def test_vocab_parallel_collectives_reach_the_chunks():
    """The embedding's collective is on the chunk that starts the model, the head's on the one that ends it."""
    sc = gpt(tp=4, mb=1)
    st = _step_context(sc, None)
    ct = build_cost_table(sc)
    chunk = ct.stages[0].chunks[0]
    blocks = _step_context(sc, None).main
    assert chunk.tp_fwd_s == pytest.approx(4 * blocks.tp_f + st.vocab_tp.emb_fwd_s + st.vocab_tp.head_fwd_s)
    assert chunk.tp_bwd_s == pytest.approx(4 * blocks.tp_b + st.vocab_tp.head_bwd_s)


@pytest.mark.torch
def test_head_counts_match_the_dispatch_counter():
    """HEAD_LOSS_OPS is what the op-for-op replica of Megatron's head and loss (kernels/megatron_head.py)
    dispatches, at any width, vocabulary, sequence and micro-batch."""
    pytest.importorskip("torch")
    from trainsim.kernels.op_count import count_megatron_head_ops
    for hidden, vocab, seq, mb in ((64, 500, 32, 1), (256, 3000, 64, 4)):
        assert count_megatron_head_ops(hidden, vocab, seq_len=seq, micro_batch=mb).as_tuple() == li.HEAD_LOSS_OPS


def test_head_issue_closed_form():
    """At TP 1: (36 + 3) dispatches and (26 + 3) launches forward (the cross-entropy's three all-reduce calls) at
    the forward frame ratio; 29 and 14 backward at the backward ratio. Under TP the logits' input-gradient
    all-reduce adds one of each backward and the slowest of the TP hosts sets the pace."""
    d, k = hi.ATEN_DISPATCH_S, hi.KERNEL_LAUNCH_S
    f, b = li.head_loss_issue_s(gpt(tp=1))
    assert f == pytest.approx((39 * d + 29 * k) * hi.MODULE_FRAME_RATIO)
    assert b == pytest.approx((29 * d + 14 * k) * hi.BACKWARD_FRAME_RATIO)
    from trainsim.cost_models.host_jitter import DEFAULT_SIGMA, pace
    f8, b8 = li.head_loss_issue_s(gpt(tp=8))
    assert f8 == pytest.approx(f * pace(8, DEFAULT_SIGMA[0]))
    assert b8 == pytest.approx((30 * d + 15 * k) * hi.BACKWARD_FRAME_RATIO * pace(8, DEFAULT_SIGMA[1]))
    assert li.head_loss_issue_s(gpt(framework="megatron")) == (0.0, 0.0)  # Megatron-Core: TE's layers
    assert li.head_loss_issue_s(gpt(host_issue="cuda_graphs")) == (0.0, 0.0)


def test_head_idle_is_the_issue_beyond_the_gpu_time():
    assert li.head_idle_s((1.0e-3, 0.5e-3), (0.4e-3, 2.0e-3)) == pytest.approx((0.6e-3, 0.0))


def test_head_issue_shows_where_the_head_runs_shorter_than_its_issue():
    """TP 8, one sequence of 1,024 tokens: the head's GPU time is below its issue, so the last chunk idles for the
    difference; at TP 1 the 50k-vocabulary head runs milliseconds and hides its issue."""
    for tp, idles in ((8, True), (1, False)):
        sc = gpt(tp=tp, mb=1)
        st = _step_context(sc, None)
        gpu = (st.head.fwd_s + st.vocab_tp.head_fwd_s,
               st.head.bwd_input_s + st.head.bwd_weight_s + st.vocab_tp.head_bwd_s)
        idle = li.head_idle_s(st.head_issue, gpu)
        assert (sum(idle) > 0) == idles
