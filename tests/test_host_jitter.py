"""A TP group at its slowest host's pace (cost_models/host_jitter.py) and the per-block host/GPU overlap under a
framework's per-block host syncs (host_issue.chunk_idle_s): closed forms, a seeded Monte Carlo, and the builder."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from trainsim.cost_models import host_issue as hi
from trainsim.cost_models import host_jitter as hj
from trainsim.simulator.builder import build_cost_table
from trainsim.specs import build_scenario


def test_the_pace_of_one_rank_is_its_mean():
    assert hj.pace(1, 0.3) == 1.0 and hj.pace(8, 0.0) == 1.0


@pytest.mark.parametrize("sigma", [0.05, 0.12, 0.26, 0.6])
def test_two_ranks_closed_form(sigma):
    """E[max(X1, X2)] of two i.i.d. log-normals is 2 E[X] Phi(sigma / sqrt 2)."""
    assert hj.pace(2, sigma) == pytest.approx(2 * NormalDist().cdf(sigma / math.sqrt(2)), rel=1e-7)


@pytest.mark.parametrize("n", [4, 8, 64])
def test_many_ranks_against_a_seeded_monte_carlo(n):
    sigma = hj.DEFAULT_SIGMA[0]
    x = np.exp(sigma * np.random.default_rng(7).standard_normal((200_000, n)))
    assert hj.pace(n, sigma) == pytest.approx(x.max(axis=1).mean() / x.mean(), rel=3e-3)


def test_the_pace_grows_with_ranks_and_spread():
    sig = hj.DEFAULT_SIGMA[0]
    paces = [hj.pace(n, sig) for n in (1, 2, 4, 8, 16)]
    assert paces == sorted(paces) and paces[-1] > paces[0]
    assert hj.pace(8, 0.3) > hj.pace(8, 0.1)


def test_default_spread_is_the_measured_timings():
    """sigma = ln(p99 / median) / z of the calibrated H200 host's GPT block: forward 0.329 / 0.598 ms, backward
    1.722 / 2.280 ms, 30 timings each (benchmarks/data/profile_h200.json), z the normal score of the p99 of 30."""
    import json
    from pathlib import Path

    prof = json.loads((Path(__file__).parents[1] / "benchmarks/data/profile_h200.json").read_text())
    block = prof["host_issue"]["layernorm-gelu-learned"]
    z = hj.p99_z(30)
    for (median, p99), key in zip((hj.MEASURED_FWD, hj.MEASURED_BWD), ("fwd", "bwd")):
        assert (median, p99) == (block[key]["median_s"], block[key]["p99_s"])
        assert block[key]["reps"] == hj.MEASURED_REPS
    assert hj.DEFAULT_SIGMA == pytest.approx((math.log(0.0005984575879573823 / 0.0003289760053157806) / z,
                                              math.log(0.002280057990550995 / 0.001722416043281555) / z))
    assert hj.log_sigma(1.0, 0.9) == 0.0


@pytest.mark.parametrize("reps", [10, 30, 200])
def test_p99_score_against_a_seeded_monte_carlo(reps):
    """The normal score the p99 of ``reps`` timings stands for (numpy's linear percentile of standard-normal
    samples, averaged): Blom's scores within 1 %; z_0.99 where the sample size is unknown."""
    z = np.random.default_rng(3).standard_normal((100_000, reps))
    assert hj.p99_z(reps) == pytest.approx(np.percentile(z, 99, axis=1).mean(), rel=0.01)
    assert hj.p99_z(None) == pytest.approx(NormalDist().inv_cdf(0.99))


def test_chunk_idle_is_per_block_where_every_block_syncs():
    """Host 1.5 ms per block forward, 4 blocks of 1.0 ms GPU and 6 ms of logits/loss on the GPU: with a host sync
    in every block forward the host cannot bank the head's GPU time, so the idle is 4 x 0.5 ms plus the lead-ins;
    without syncs the chunk's 10 ms of GPU work hides the host's 6 ms."""
    synced = hi.PassIssue(fwd_s=1.5e-3, bwd_s=2.0e-3, fwd_ops=1, bwd_ops=1, sync_fwd_s=1e-5, sync_bwd_s=1e-5)
    blocks = ((4, 1.0e-3, 3.0e-3),)
    f, b = hi.chunk_idle_s(synced, 4, 10.0e-3, 20.0e-3, blocks=blocks)
    assert f == pytest.approx(4 * 0.5e-3 + 4 * 1e-5)
    assert b == pytest.approx(4 * 1e-5)   # each block's backward (3 ms) outlasts its host (2 ms)
    free = hi.PassIssue(fwd_s=1.5e-3, bwd_s=2.0e-3, fwd_ops=1, bwd_ops=1)
    assert hi.chunk_idle_s(free, 4, 10.0e-3, 20.0e-3, blocks=blocks) == (0.0, 0.0)


def test_a_block_forward_sync_waits_for_the_collective_past_the_host():
    """Host 1.5 ms per block forward against 1.0 ms of GPU, a 0.3 ms all-reduce drained by the sync of which the
    host's 0.1 ms issue after it hides a part: each host-bound block forward lasts 1.5 + 0.2 ms; a GPU-bound block
    (2.0 ms) is not stretched; without a per-block sync there is no tail."""
    synced = hi.PassIssue(fwd_s=1.5e-3, bwd_s=2.0e-3, fwd_ops=1, bwd_ops=1, sync_fwd_s=1e-5, sync_bwd_s=1e-5,
                          sync_overlap_s=0.1e-3)
    assert hi.sync_tail_s(synced, 0.3e-3) == pytest.approx(0.2e-3)
    assert hi.sync_tail_s(synced, 0.05e-3) == 0.0
    f, b = hi.chunk_idle_s(synced, 4, 10.0e-3, 20.0e-3, blocks=((4, 1.0e-3, 1.0e-3, 0.3e-3),))
    assert f == pytest.approx(4 * (0.7e-3 + 1e-5))
    assert b == pytest.approx(4 * (1.2e-3 + 1e-5))   # the recomputed forward's sync drains it too
    f, _ = hi.chunk_idle_s(synced, 4, 10.0e-3, 20.0e-3, blocks=((4, 2.0e-3, 3.0e-3, 0.3e-3),))
    assert f == pytest.approx(4 * 1e-5)
    free = hi.PassIssue(fwd_s=1.5e-3, bwd_s=2.0e-3, fwd_ops=1, bwd_ops=1, sync_overlap_s=0.1e-3)
    assert hi.sync_tail_s(free, 0.3e-3) == 0.0


def test_the_sync_overlap_is_the_counted_ops_after_the_collective():
    """megatron-deepspeed at TP 8: the bias-dropout-add, layer norm and scalar between the attention's all-reduce
    and the sync (7 dispatches, 5 launches) at the legacy layer's forward ratio and the 8 ranks' pace."""
    s = _scenario("megatron-deepspeed", 50304)
    issue = hi.scenario_block_issue(s)
    want = (7 * hi.ATEN_DISPATCH_S + 5 * hi.KERNEL_LAUNCH_S) * hi.MODULE_FRAME_RATIO * hj.pace(8, hj.DEFAULT_SIGMA[0])
    assert issue.sync_overlap_s == pytest.approx(want)
    assert hi.scenario_block_issue(_scenario("megatron-2021", 50304)).sync_overlap_s == 0.0


def _scenario(framework: str, vocab: int):
    model = {"name": "g", "num_layers": 4, "hidden": 512, "num_heads": 8, "ffn_hidden": 2048, "vocab_size": vocab,
             "max_seq_len": 1024}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 8, "layout": {"tp": 8},
                           "training": {"seq_len": 1024, "global_batch": 8, "micro_batch": 1, "dtype": "fp16",
                                        "recompute": "full", "flash_attention": False, "framework": framework}})


def _fwd_idle(framework: str, vocab: int) -> float:
    return build_cost_table(_scenario(framework, vocab)).stages[0].chunks[0].host_idle_fwd_s


def _head_own_idle(framework: str, vocab: int) -> float:
    """Forward GPU idle of the head's own host issue where every block syncs (cost_models.loss_issue)."""
    from trainsim.cost_models.loss_issue import head_idle_s
    from trainsim.simulator.step_context import _step_context

    st = _step_context(_scenario(framework, vocab), None)
    return head_idle_s(st.head_issue, (st.head.fwd_s + st.vocab_tp.head_fwd_s, 0.0))[0]


def test_the_head_hides_no_host_time_where_every_block_syncs():
    """Host-bound tiny blocks at TP 8: a 64x larger vocabulary (more logits and loss work on the GPU in the same
    forward pass) hides part of the blocks' host excess where the host runs ahead over the chunk (megatron-2021),
    none where every block forward syncs (megatron-deepspeed): there each block's excess is idle on its own, and the
    larger head hides only the head's own issue (idle at 4,096 entries, none at 262,144)."""
    assert _fwd_idle("megatron-2021", 262144) < _fwd_idle("megatron-2021", 4096) - 1e-4
    small_head = _head_own_idle("megatron-deepspeed", 4096)
    assert small_head > 0 and _head_own_idle("megatron-deepspeed", 262144) == 0.0
    assert _fwd_idle("megatron-deepspeed", 262144) == pytest.approx(_fwd_idle("megatron-deepspeed", 4096) - small_head)
    assert _fwd_idle("megatron-deepspeed", 4096) > 0
