"""Megatron's interleaved schedule with blocking p2p exchanges once per steady-state iteration (schedules.batched_pairs,
megatron/schedules.py at 285068c8: forward, backward, then send_forward_backward_recv_forward_backward)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainsim.cost_models import framework
from trainsim.simulator.costtable import uniform_table
from trainsim.simulator.engine import simulate
from trainsim.simulator.schedules import BW, F, batched_pairs, interleaved, schedule_with_pairs
from trainsim.specs import build_scenario


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 3), (8, 16, 2)])
def test_pair_heads_are_the_steady_state_forwards(p, m, v):
    """Rank s warms up with (p-s-1)*2 + (v-1)*p forwards (Megatron's num_warmup_microbatches), then runs
    m*v - warm (forward, backward) iterations: their forwards are the pair heads."""
    ops = interleaved(p, m, v)
    heads = batched_pairs(ops)
    for s in range(p):
        warm = min((p - s - 1) * 2 + (v - 1) * p, m * v)
        assert heads[s] == frozenset(warm + 2 * k for k in range(m * v - warm))
        assert all(ops[s][i][0] == F and ops[s][i + 1][0] == BW for i in heads[s])
    assert schedule_with_pairs("interleaved", p, m, v, batched_p2p=True)[1] == heads
    assert schedule_with_pairs("interleaved", p, m, v)[1] == [frozenset()] * p
    assert schedule_with_pairs("1f1b", p, m, batched_p2p=True)[1] == [frozenset()] * p


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 3), (8, 16, 2)])
def test_deferred_sends_cost_nothing_without_communication(p, m, v):
    """Megatron's warm-up depth leaves room for the forward's output to leave after the backward: with free
    communication and equal stages the batched exchange keeps the textbook interleaved step,
    (m + (p - 1) / v) x (t_f + t_b)."""
    t = uniform_table(p, m, vpp=v, fwd_s=1.0, bwd_input_s=1.0, bwd_weight_s=1.0, schedule="interleaved")
    ideal = (m + (p - 1) / v) * 3.0
    assert simulate(t).step_time_s == pytest.approx(ideal)
    assert simulate(replace(t, blocking_p2p=True)).step_time_s == pytest.approx(ideal)


def test_all_warm_up_has_no_pairs():
    """m == p: every forward is warm-up (Megatron's all_warmup_microbatches), no steady-state exchange."""
    assert batched_pairs(interleaved(4, 4, 2)) == [frozenset()] * 4


def test_only_megatron_schedules_batch_their_exchange():
    """Megatron-LM's own blocking schedules batch it; Megatron-Core overlaps interleaved p2p by default; torch's
    pipelining is not Megatron's schedule."""
    def tr(framework, **kw):
        return build_scenario({"model": "gpt-1.7b", "cluster": "dgx-a100", "gpus": 16,
                               "layout": {"tp": 1, "pp": 4, "vpp": 2},
                               "training": {"seq_len": 1024, "global_batch": 64, "micro_batch": 1,
                                            "schedule": "interleaved", "framework": framework, **kw}}).training
    assert framework.p2p_batched(tr("megatron-2022")) and framework.p2p_batched(tr("megatron-2021"))
    assert not framework.p2p_batched(tr("megatron"))
    assert framework.p2p_batched(tr("megatron", overlap_p2p=False))
    assert not framework.p2p_batched(tr("torch"))
