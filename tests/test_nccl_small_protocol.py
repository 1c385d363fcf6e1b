"""Which algorithm and protocol a small all-reduce on one 8-GPU node runs, against NCCL's own tuner.

NCCL's tuner (src/graph/tuning.cc, NCCL 2.18.5 and 2.20.5: the versions of the Azure curves in nccl_busbw.csv)
times each (algorithm, protocol) as ``latency + nBytes / algbw`` and runs the fastest. On 8 NVLink GPUs in one
node its latencies are (us): ring LL 6.6 + 2*7*0.6 = 15.0; tree LL 6.8 + 2*7*0.6 = 15.2; NVLS 23 (2.18.5
``baseLat``, 2.19+ ``hwLat[NVLINK][NVLS]``); tree LL128 14 + 2*7*1.25 = 31.5; ring LL128 14 + 14*1.9 = 40.6;
ring Simple 8.4 + 14*3.4 = 56.0. Ring LL's algbw is at most ``llMaxBws`` (87.7 GB/s single-node Ampere and Hopper)
x nRanks/nsteps = 87.7 x 8/14 = 50.1 GB/s, so up to 256 KiB ring LL takes at most 15.0 + 262144 B / 50.1 GB/s =
20.2 us < 23 us: NCCL picks ring LL whatever the graphs' bandwidths are (tree LL has the larger latency and at most
0.5 x 87.7 GB/s). trainsim must pick the same, with NCCL's latency as the fixed part.
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import collective_time
from trainsim.specs import load_cluster
from trainsim.topologies.shape import GroupShape

US = 1e-6
N = 8
RING_LL_US = 6.6 + 2 * (N - 1) * 0.6
TUNER_LAT_US = {"ring/LL": RING_LL_US, "tree/LL": 6.8 + 2 * (N - 1) * 0.6, "nvls/Simple": 23.0,
                "tree/LL128": 14.0 + 2 * (N - 1) * 1.25, "ring/LL128": 14.0 + 2 * (N - 1) * 1.9,
                "ring/Simple": 8.4 + 2 * (N - 1) * 3.4}
RING_LL_MAX_ALGBW = 87.7e9 * N / (2 * (N - 1))   # llMaxBws[Hopper|Ampere][N1] x nRanks / nsteps


def _tuner_ring_ll_upper_s(nbytes: int) -> float:
    return RING_LL_US * US + nbytes / RING_LL_MAX_ALGBW


def test_tuner_latencies_order_ring_ll_first():
    """The closed-form latencies above, in NCCL's order; ring LL is the cheapest fixed cost."""
    assert min(TUNER_LAT_US, key=TUNER_LAT_US.get) == "ring/LL"
    assert TUNER_LAT_US["ring/LL"] == pytest.approx(15.0) and TUNER_LAT_US["ring/LL128"] == pytest.approx(40.6)


@pytest.mark.parametrize("preset", ["dgx-h100", "hgx-h200", "dgx-a100"])
@pytest.mark.parametrize("kib", [1, 4, 16, 64, 256])
def test_small_all_reduce_runs_ring_ll_as_nccls_tuner(preset, kib):
    nbytes = kib * 1024
    assert _tuner_ring_ll_upper_s(nbytes) < TUNER_LAT_US["nvls/Simple"] * US  # NCCL cannot prefer NVLS here
    cluster = load_cluster(preset, N)
    r = collective_time("all_reduce", nbytes, GroupShape.contiguous(N, cluster), cluster)
    assert r.label == "ring/LL"
    # fixed part: NCCL's ring-LL latency over 2(n-1) steps plus the one launch per call
    assert r.latency_s == pytest.approx(RING_LL_US * US + nm.LAUNCH_OVERHEAD_S, rel=1e-9)


def test_one_mib_switches_to_nvls_where_nccls_tuner_does():
    """At 1 MiB ring LL's tuner time is at least 15.0 + 1 MiB / 50.1 GB/s = 35.9 us; NVLS (23 us + bytes at its
    algbw) wins once its algbw exceeds 1 MiB / 12.9 us = 81 GB/s, which trainsim's NVLS rate does on H100."""
    cluster = load_cluster("dgx-h100", N)
    g = GroupShape.contiguous(N, cluster)
    r = collective_time("all_reduce", 1 << 20, g, cluster)
    assert r.label == "nvls/Simple"
    assert r.rate_Bps > (1 << 20) / (_tuner_ring_ll_upper_s(1 << 20) - 23 * US)


@pytest.mark.parametrize("proto,nbytes,factor", [("Simple", 1 << 20, 0.5), ("LL128", 1 << 16, 0.6),
                                                  ("LL", 1 << 10, 0.9), ("Simple", 1 << 29, 1.0)])
def test_tree_bandwidth_takes_nccls_medium_size_correction(monkeypatch, proto, nbytes, factor):
    """NCCL scales tree bandwidth by ``treeCorrectionFactor[proto][log2(nBytes/64)]`` (tuning.cc v2.21.5): 1 MiB
    Simple -> index 14 = 0.5, 64 KiB LL128 -> index 10 = 0.6, 1 KiB LL -> index 4 = 0.9, 512 MiB -> past the
    table = 1. The bandwidth part of a two-node tree grows by exactly 1/factor."""
    from trainsim.cost_models import collectives as co
    cluster = load_cluster("dgx-h100", 16)
    g = GroupShape.contiguous(16, cluster)
    corrected = collective_time("all_reduce", nbytes, g, cluster, algo="tree", protocol=proto)
    monkeypatch.setattr(nm, "TREE_CORRECTION", {p: (1.0,) * 23 for p in nm.PROTOCOLS})
    co.clear_cache()
    plain = collective_time("all_reduce", nbytes, g, cluster, algo="tree", protocol=proto)
    co.clear_cache()
    assert corrected.latency_s == pytest.approx(plain.latency_s)
    assert corrected.time_s - corrected.latency_s == pytest.approx((plain.time_s - plain.latency_s) / factor)
