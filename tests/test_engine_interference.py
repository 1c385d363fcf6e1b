"""Compute slowed by concurrent bulk collectives (NCCL's SMs): the collectives an op overlaps are counted.

Truth: the closed form slowdown = comm_compute_slowdown x (collective time overlapping the op), for a
single-stage FSDP step whose ZeRO-3 gathers are prefetched and whose reduce-scatters leave mid-backward.
"""

from __future__ import annotations

import pytest

from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.engine import simulate
from trainsim.specs import build_scenario


def fsdp(recompute="none"):
    return build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"tp": 1, "pp": 1},
                           "training": {"seq_len": 2048, "global_batch": 16, "micro_batch": 2, "zero": 3,
                                        "recompute": recompute, "framework": "pytorch-fsdp"}})


def test_prefetched_gathers_and_mid_backward_reduce_scatters_slow_compute():
    table = build_cost_table(fsdp())
    ch = table.stages[0].chunks[0]
    m = table.num_microbatches
    res = simulate(table).stages[0]
    assert res.slowdown_s > 0
    # forward overlaps the rest of its own gathers (all but the first block) and the next op's prefetch;
    # backward overlaps its gathers and all but the last reduce-scatter bucket. Bounded by the closed form:
    g, rs = ch.param_gather.time_s, sum(b.time_s for b in ch.grad_buckets[:-1])
    upper = table.comm_compute_slowdown * m * (2 * g + rs)
    lower = table.comm_compute_slowdown * m * g * (1 - 1 / ch.layers)
    assert lower <= res.slowdown_s <= upper * (1 + 1e-9)


def test_no_overlap_means_no_slowdown():
    table = build_cost_table(fsdp())
    free = table.without_communication()
    assert simulate(free).stages[0].slowdown_s == pytest.approx(0.0, abs=1e-12)
