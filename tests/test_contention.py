"""Max-min fair link sharing: closed forms (equal split, oversubscribed spine, bottleneck elsewhere)."""

from __future__ import annotations

import math

import pytest

from trainsim.cost_models.contention import Flow, completion_times, max_min_rates, slowdown
from trainsim.specs import SpecError, load_cluster
from trainsim.topologies import Fabric


def test_two_equal_flows_on_one_link_take_twice_as_long():
    cap = {"L": 10e9}
    alone = completion_times([Flow(("L",), 1e9)], cap)[0]
    both = completion_times([Flow(("L",), 1e9), Flow(("L",), 1e9)], cap)
    assert alone == pytest.approx(0.1)
    assert both == pytest.approx([0.2, 0.2])


def test_three_flows_one_bottlenecked_elsewhere_get_max_min_shares():
    # A uses link 1; B uses links 1 and 2; C uses link 2. Link 2 (2 GB/s) limits B and C to 1 each,
    # so A takes the rest of link 1: 10 - 1 = 9 GB/s (max-min fair, Bertsekas & Gallager 6.5.2).
    cap = {1: 10e9, 2: 2e9}
    rates = max_min_rates([(1,), (1, 2), (2,)], cap)
    assert rates == pytest.approx([9e9, 1e9, 1e9])


def test_flow_rate_limit_and_weights():
    cap = {"L": 10e9}
    rates = max_min_rates([Flow(("L",), max_rate_Bps=2e9), Flow(("L",))], cap)
    assert rates == pytest.approx([2e9, 8e9])           # the capped flow leaves its share to the other
    # a flow that crosses L twice (weight 2) counts double on it
    rates = max_min_rates([Flow(("L",), weights=(2.0,)), Flow(("L",))], cap)
    assert rates == pytest.approx([10e9 / 3, 10e9 / 3])


def test_completion_times_reshare_when_a_flow_ends_and_starts():
    cap = {"L": 1.0}
    # A (10 B) and B (30 B) share: both at 0.5 until A ends at t=20; B's last 20 B at 1.0 -> t=40.
    assert completion_times([Flow(("L",), 10), Flow(("L",), 30)], cap) == pytest.approx([20, 40])
    # C starts at t=5 alone until then: 5 B done, then 0.5 each
    t = completion_times([Flow(("L",), 10), Flow(("L",), 10, start_s=5.0)], cap)
    assert t == pytest.approx([15.0, 20.0])
    assert completion_times([Flow(("L",), 0, latency_s=1e-6)], cap) == pytest.approx([1e-6])


def _fat_tree(over: float):
    # 4 nodes of 1 GPU / 1 NIC, 2 nodes per leaf: leaf uplink = 2 NICs / oversubscription.
    return Fabric.of(load_cluster({"preset": "dgx-a100", "gpus_per_node": 1,
                                   "scale_out": {"nics_per_node": 1, "nic_bw_Bps": 25e9, "fabric": "fat-tree",
                                                 "nodes_per_leaf": 2, "oversubscription": over}}, 4))


def test_two_to_one_oversubscription_halves_cross_leaf_bandwidth():
    flat, over = _fat_tree(1.0), _fat_tree(2.0)
    nbytes = 1e9
    def cross(f):
        # both nodes of leaf 0 send to both nodes of leaf 1 at once
        flows = [Flow.between(f, 0, 2, nbytes), Flow.between(f, 1, 3, nbytes)]
        return max_min_rates(flows, f.capacity), completion_times(flows, f.capacity)
    r1, t1 = cross(flat)
    r2, t2 = cross(over)
    assert r1 == pytest.approx([24e9, 24e9])            # NIC-bound (25 Gb/s... 25 GB/s × 0.96)
    assert r2 == pytest.approx([12e9, 12e9])            # spine-bound: half
    assert t2 == pytest.approx([2 * x for x in t1])
    # traffic inside a leaf is unaffected by the spine
    inside = [Flow.between(over, 0, 1, nbytes), Flow.between(over, 2, 3, nbytes)]
    assert max_min_rates(inside, over.capacity) == pytest.approx([24e9, 24e9])


def test_pp_send_beside_dp_allreduce_on_one_nic():
    """A pipeline send and a DP ring flow leaving through the same NIC each get half of it."""
    f = Fabric.of(load_cluster("dgx-h100", 32))
    dp = Flow.between(f, 0, 8, 1e9)       # rail 0, node 0 -> node 1 (DP ring neighbour)
    pp = Flow.between(f, 0, 16, 1e9)      # rail 0, node 0 -> node 2 (next pipeline stage)
    other = Flow.between(f, 1, 9, 1e9)    # rail 1: its own NIC
    rates = max_min_rates([dp, pp, other], f.capacity)
    assert rates == pytest.approx([24e9, 24e9, 48e9])
    assert slowdown([dp, pp, other], f.capacity) == pytest.approx([0.5, 0.5, 1.0])


def test_bad_flows():
    with pytest.raises(SpecError):
        max_min_rates([("nowhere",)], {"L": 1.0})
    with pytest.raises(SpecError):
        max_min_rates([Flow(("L",), weights=(1.0, 2.0))], {"L": 1.0})
    with pytest.raises(SpecError):
        completion_times([Flow(("L",), 1.0)], {"L": 0.0})
    assert max_min_rates([Flow((), max_rate_Bps=5.0)], {}) == [5.0]
    assert math.isinf(max_min_rates([Flow(())], {})[0])
