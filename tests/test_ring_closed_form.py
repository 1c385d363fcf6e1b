"""A ring over n ranks pays 2(n-1) steps of latency and moves 2(n-1)/n of the buffer per GPU: the collective
model reproduces that closed form for n = 2 .. 16,384, and `trainsim collective` prints the two parts apart."""

from __future__ import annotations

import pytest

from trainsim.cost_models import nccl_model as nm
from trainsim.cost_models.collectives import collective_time
from trainsim.specs import load_cluster
from trainsim.topologies.shape import GroupShape


@pytest.mark.parametrize("n", [2, 8, 16, 64, 1024, 16384])
def test_all_reduce_ring_closed_form(n):
    cluster = load_cluster("dgx-h100", n)
    g = GroupShape.contiguous(n, cluster)
    S = 1 << 20
    r = collective_time("all_reduce", S, g, cluster, algo="ring", protocol="LL")
    N, us = g.nodes, 1e-6
    scale_intra = g.intra_latency_s / nm.REF_SCALE_UP_LATENCY_S
    scale_net = g.net_latency_s / nm.REF_NET_LATENCY_S
    t_intra = nm.HW_LAT_US["nvlink"]["ring"]["LL"] * us * scale_intra
    if N == 1:
        steps_lat = 2 * (n - 1) * t_intra
    else:  # 2N of the 2(n-1) steps cross the network; each intra step costs at least one network post
        t_step = max(t_intra, nm.NET_OVERHEAD_US * us)
        steps_lat = (2 * (n - 1) - 2 * N) * t_step + 2 * N * nm.HW_LAT_US["net"]["ring"]["LL"] * us * scale_net
    latency = nm.LAUNCH_OVERHEAD_S + nm.BASE_LAT_US["ring"]["LL"] * us + steps_lat
    assert r.latency_s == pytest.approx(latency, rel=1e-9)
    wire = 2 * (n - 1) / n * S
    assert r.time_s - r.latency_s == pytest.approx((wire + min(wire, nm.fill_bytes("LL"))) / r.rate_Bps, rel=1e-9)
    if n == 16384:  # the latency part grows with the ring: ~2n steps, thousands of microseconds
        assert r.latency_s > 2 * N * nm.HW_LAT_US["net"]["ring"]["LL"] * us


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
