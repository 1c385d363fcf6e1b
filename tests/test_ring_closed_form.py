"""A ring over n ranks pays 2(n-1) steps of latency and moves 2(n-1)/n of the buffer per GPU: the collective
model reproduces that closed form for n = 2 .. 16,384, and `trainsim collective` prints the two parts apart."""

from __future__ import annotations

import pytest

from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import collective_time
from trainsim.specs import load_cluster
from trainsim.topologies.shape import GroupShape

# NCCL src/graph/tuning.cc (v2.20.5/v2.21.5), in us: ring baseLat LL 6.6 / Simple 8.4; hwLat NVLink ring LL 0.6 /
# Simple 3.4, NET ring LL 2.7 / Simple 14; llMaxBws Hopper one node 141 GB/s, two nodes 39, more 20.4; a 1 us
# network post per intra step (x3 Simple, getNetOverhead); multi-node ring Simple all-reduce latency x1.4. Written out
# here, not read from nccl_model, so the test holds the model against NCCL's own closed form. Launch: 5 us per call
# (nccl-tests#123). The preset's latencies are NCCL's defaults (3 us scale-up, 5 us network), so no scaling applies.
RING = {"LL": dict(base=6.6, nvl=0.6, net=2.7, post=1.0), "Simple": dict(base=8.4, nvl=3.4, net=14.0, post=3.0)}
LAUNCH_US = 5.0


def _ring_closed_form_us(n: int, N: int, proto: str) -> float:
    """NCCL's ring all-reduce latency over n ranks on N nodes: 2(n-1) steps, 2N of them across the network."""
    c = RING[proto]
    if N == 1:
        return c["base"] + 2 * (n - 1) * c["nvl"] + LAUNCH_US
    steps = (2 * (n - 1) - 2 * N) * max(c["nvl"], c["post"]) + 2 * N * c["net"]
    plateau = 1.4 if proto == "Simple" else 1.0
    return plateau * (c["base"] + steps) + LAUNCH_US


@pytest.mark.parametrize("proto", ["LL", "Simple"])
@pytest.mark.parametrize("n", [2, 8, 16, 64, 1024, 16384])
def test_all_reduce_ring_closed_form(n, proto):
    cluster = load_cluster("dgx-h100", n)
    g = GroupShape.contiguous(n, cluster)
    assert (g.intra_latency_s, g.net_latency_s) == (3e-6, 5e-6)
    S = 1 << 24
    r = collective_time("all_reduce", S, g, cluster, algo="ring", protocol=proto)
    N = g.nodes
    assert N == max(1, n // 8)
    assert r.latency_s == pytest.approx(_ring_closed_form_us(n, N, proto) * 1e-6, rel=1e-9)
    # Bandwidth: each GPU sends 2(n-1)/n S at the ring's slowest link (NVLink port, or the node's NICs shared by
    # its 8 ring members), plus one fill of NCCL's staging buffers (2 x 4 MiB Simple, 2 x 512 KiB LL).
    bus = min(g.intra_Bps, 8 * g.nic_Bps) if N > 1 else g.intra_Bps
    if proto == "LL":
        bus = min(0.5 * bus, 141e9 if N == 1 else 39e9 if N == 2 else 20.4e9)
    wire = 2 * (n - 1) / n * S
    fill = 2 * (4 << 20) if proto == "Simple" else 2 * 8 * 512 * 8 * 16
    assert r.time_s - r.latency_s == pytest.approx((wire + min(wire, fill)) / bus, rel=1e-9)
    if n == 16384:  # 32,766 steps: the fixed part alone is tens of milliseconds
        assert r.latency_s > (30e-3 if proto == "LL" else 0.1)


def test_collective_command_prints_latency_and_bandwidth_parts():
    from trainsim.cli.collective import rows
    cluster = load_cluster("dgx-a100", 8)
    for row in rows("all_reduce", cluster, 8, [4096, 1 << 26]):
        assert row["latency_s"] + row["bandwidth_s"] == pytest.approx(row["time_s"])
        assert row["latency_s"] > 0 and row["bandwidth_s"] > 0
    small, big = rows("all_reduce", cluster, 8, [4096, 1 << 26])
    assert small["bound"] == "latency" and big["bound"] == "bandwidth"  # 4 KiB: ring LL's 15 us + launch vs ~0.1 us


def test_one_thread_driving_many_gpus_bounds_small_collectives():
    """nccl-tests -g n: one thread launches the call on n GPUs in turn, n x LAUNCH_OVERHEAD_S per iteration."""
    from trainsim.cost_models.collectives import single_thread_issue_s
    from trainsim.validation.datasets import CollectiveCase
    from trainsim.validation.validate import default_collective_fn
    assert single_thread_issue_s(8) == pytest.approx(8 * nm.LAUNCH_OVERHEAD_S)
    assert single_thread_issue_s(1) == pytest.approx(nm.LAUNCH_OVERHEAD_S)
    cluster = load_cluster("dgx-a100", 8)
    fn = default_collective_fn()
    small = fn(CollectiveCase("all_reduce", 1024, 8, cluster, gpus_per_thread=8))
    assert small == pytest.approx(8 * nm.LAUNCH_OVERHEAD_S)  # 40 us: above the kernel's own ~20 us
    assert fn(CollectiveCase("all_reduce", 1024, 8, cluster)) < small
    big = 1 << 30  # a large message is unaffected: the GPU, not the host, sets the pace
    assert fn(CollectiveCase("all_reduce", big, 8, cluster, gpus_per_thread=8)) == pytest.approx(
        fn(CollectiveCase("all_reduce", big, 8, cluster)))


def test_host_cpu_sets_the_single_thread_floor():
    """The per-GPU issue of one NCCL call by the one driving thread is the host CPU's: 8 x 3.8 us = 30.4 us on
    Sapphire Rapids (the 2019 CUDA Graphs launch figure), 8 x 5 us = 40 us on AMD EPYC Rome (nccl-tests#123, a
    DGX-A100); an unknown host is refused by name."""
    from trainsim.cost_models.collectives import single_thread_issue_s
    from trainsim.specs import SpecError
    assert single_thread_issue_s(8, "intel-spr") == pytest.approx(8 * 3.8e-6)
    assert single_thread_issue_s(8, "amd-rome") == pytest.approx(40e-6)
    with pytest.raises(SpecError, match="host_cpu"):
        single_thread_issue_s(8, "pentium")


def test_nccl_cases_carry_their_vm_host_cpu():
    """Each Azure system's cases carry the VM size's host CPU (settings/nccl_systems.csv), and a 1 KiB all-reduce
    on 8 GPUs is bounded by 8 of its launches, not by the kernel (ring LL: 15 us + 5 us launch)."""
    from trainsim.validation.datasets import load_dataset
    from trainsim.validation.validate import default_collective_fn
    cases = {c.row_id: c.collective for c in load_dataset("nccl").cases if c.collective is not None}
    assert cases["azure_ND_A100_v4_1K"].host_cpu == "amd-rome"
    assert cases["azure_ND_H100_v5_1K"].host_cpu == cases["azure_ND_H200_v5_1K"].host_cpu == "intel-spr"
    fn = default_collective_fn()
    assert fn(cases["azure_ND_H200_v5_1K"]) == pytest.approx(8 * 3.8e-6)
    assert fn(cases["azure_ND_A100_v4_1K"]) == pytest.approx(8 * 5e-6)


def test_azure_8_gpu_curves_run_forced_nvls():
    """Azure's runner sets NCCL_ALGO=NVLS on its 8-GPU VMs (AI-benchmarking-guide Benchmarks/NVIDIA/
    NCCLBandwidth.py): the H100 and H200 cases are timed as NVLS at every size, whose fixed part is NCCL v2.21.5's
    hwLat[NVLINK][NVLS] = 25 us plus the one launch; A100 has no NVLink SHARP, so the model chooses there."""
    from trainsim.validation.datasets import load_dataset
    cases = {c.row_id: c.collective for c in load_dataset("nccl").cases if c.collective is not None}
    assert cases["azure_ND_H100_v5_1K"].algo == cases["azure_ND_H200_v5_65K"].algo == "nvls"
    assert cases["azure_ND_A100_v4_1K"].algo is None
    cluster = load_cluster("dgx-h100", 8)
    r = collective_time("all_reduce", 65536, GroupShape.contiguous(8, cluster), cluster, algo="nvls")
    assert r.label == "nvls/Simple"
    assert r.latency_s == pytest.approx(25e-6 + nm.LAUNCH_OVERHEAD_S, rel=1e-9)
