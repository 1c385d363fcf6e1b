"""Agreement of the collective model with nccl-tests measurements (trainsim/data/validation/nccl_busbw.csv).

Every expectation cites its row_id. The model's constants are datasheet link rates, NCCL's own tuning
tables and maintainer-stated payload efficiencies (trainsim.cost_models.nccl_model, topologies.fabric);
nothing below is fitted to these rows.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from trainsim.cost_models.collectives import collective_time
from trainsim.data import validation_path
from trainsim.specs import load_cluster

MIB = 2**20


@pytest.fixture(scope="module")
def nccl() -> pd.DataFrame:
    return pd.read_csv(validation_path("nccl_busbw.csv"))


def _curve(df: pd.DataFrame, system: str) -> pd.DataFrame:
    c = df[(df.record_type == "measured_curve") & (df.system == system)].copy()
    c["busbw"] = c.busbw_GBps.astype(float) * 1e9
    return c.sort_values("msg_size_bytes")


def _num(text: str) -> float:
    return float(re.search(r"[0-9]+(?:\.[0-9]+)?", str(text)).group(0))


# (system in the CSV, cluster, GPUs): Azure ND A100 v4 / H100 v5 / H200 v5, all-reduce, 8 GPUs, one node.
CURVES = [
    ("Azure ND A100 v4", "dgx-a100"),   # rows azure_ND_A100_v4_1K .. azure_ND_A100_v4_8G
    ("Azure ND H100 v5", "dgx-h100"),   # rows azure_ND_H100_v5_1K .. azure_ND_H100_v5_8G
    ("Azure ND H200 v5", "hgx-h200"),   # rows azure_ND_H200_v5_1K .. azure_ND_H200_v5_8G
]


@pytest.mark.parametrize("system,preset", CURVES)
def test_allreduce_curve_mape_from_1MiB_and_largest_size(nccl, system, preset):
    curve = _curve(nccl, system)
    assert len(curve) == 24
    cluster = load_cluster(preset, 8)
    errs = []
    for row in curve.itertuples():
        pred = collective_time("all_reduce", row.msg_size_bytes, 8, cluster).busbw_Bps
        if row.msg_size_bytes >= MIB:
            errs.append(abs(pred / row.busbw - 1))
    mape = sum(errs) / len(errs)
    assert mape < 0.15, f"{system}: MAPE {mape:.1%}"
    assert errs[-1] < 0.10, f"{system}: {errs[-1]:.1%} at 8G"


def test_gb200_four_gpu_ring_curve(nccl):
    """azure_ND_GB200_v6_*: 4 GPUs of one host, Ring (NVLink5, 900 GB/s per direction)."""
    curve = _curve(nccl, "Azure ND GB200 v6")
    cluster = load_cluster({"preset": "dgx-b200", "name": "gb200-host", "gpus_per_node": 4,
                            "scale_up": {"kind": "nvswitch", "bw_per_gpu_Bps": 900e9, "nvls": False}}, 4)
    errs = [abs(collective_time("all_reduce", r.msg_size_bytes, 4, cluster, algo="ring").busbw_Bps / r.busbw - 1)
            for r in curve.itertuples() if r.msg_size_bytes >= MIB]
    assert sum(errs) / len(errs) < 0.15
    assert errs[-1] < 0.10


def test_single_node_peaks(nccl):
    rows = nccl.set_index("row_id")
    big = 8 * 2**30
    a100 = collective_time("all_reduce", big, 8, load_cluster("dgx-a100", 8))
    assert a100.busbw_Bps / 1e9 == pytest.approx(_num(rows.loc["a100_expected", "busbw_GBps"]), rel=0.05)
    assert a100.busbw_Bps / 1e9 == pytest.approx(_num(rows.loc["a100_user_232", "busbw_GBps"]), rel=0.05)
    h100 = load_cluster("dgx-h100", 8)
    ring = collective_time("all_reduce", big, 8, h100, algo="ring")
    assert ring.busbw_Bps / 1e9 == pytest.approx(_num(rows.loc["h100_ring_expected", "busbw_GBps"]), rel=0.05)
    nvls = collective_time("all_reduce", big, 8, h100)
    assert nvls.algo == "nvls"
    assert nvls.busbw_Bps / 1e9 == pytest.approx(_num(rows.loc["h100_nvls_expected", "busbw_GBps"]), rel=0.05)
    assert nvls.algbw_Bps / 1e9 == pytest.approx(_num(rows.loc["h100_nvls_expected", "algbw_GBps"]), rel=0.05)
    h200 = collective_time("all_reduce", 4 * 2**30, 8, load_cluster("hgx-h200", 8))
    assert h200.busbw_Bps / 1e9 == pytest.approx(_num(rows.loc["h200_user_475", "busbw_GBps"]), rel=0.05)


def test_h100_reduce_scatter_all_gather_ring_peaks(nccl):
    """h100_rs_ag_user: ReduceScatter ~360, AllGather ~350 GB/s busbw on 8 H100 (ring over NVLink)."""
    c = load_cluster("dgx-h100", 8)
    for op, ref in (("reduce_scatter", 360.0), ("all_gather", 350.0)):
        r = collective_time(op, 8 * 2**30, 8, c, algo="ring")
        assert r.busbw_Bps / 1e9 == pytest.approx(ref, rel=0.06)


@pytest.mark.parametrize("preset,nodes,nics,per_nic_lo,per_nic_hi,row", [
    ("dgx-h100", 4, 4, 46.0, 48.0, "ndr_per_nic"),     # NDR 400 Gb/s: 46-48 GB/s per NIC
    ("dgx-a100", 4, 8, 23.0, 24.5, "hdr_per_nic"),     # HDR 200 Gb/s: ~24 per NIC (3+ nodes ring)
    ("dgx-a100", 4, 4, 23.0, 24.5, "hdr_4nic_ring"),   # 4 HDR NICs: 95.3 busbw = ~24 per NIC
])
def test_multi_node_ring_bounded_by_nics(nccl, preset, nodes, nics, per_nic_lo, per_nic_hi, row):
    assert row in set(nccl.row_id)
    base = load_cluster(preset)
    cluster = load_cluster({**base.model_dump(), "scale_out": {**base.scale_out.model_dump(), "nics_per_node": nics}},
                           8 * nodes)
    r = collective_time("all_reduce", 8 * 2**30, 8 * nodes, cluster, algo="ring")
    per_nic = r.busbw_Bps / 1e9 / nics
    assert per_nic_lo <= per_nic <= per_nic_hi


def test_dgx_h100_multinode_ring_node_total(nccl):
    """ndr_per_nic: x8 NICs -> ~370-385 GB/s per node; NVLink ring (~370, h100_ring_expected) binds first."""
    r = collective_time("all_reduce", 8 * 2**30, 32, load_cluster("dgx-h100", 32), algo="ring")
    assert 0.95 * 370 <= r.busbw_Bps / 1e9 <= 385


def test_hdr_4nic_measured_busbw(nccl):
    rows = nccl.set_index("row_id")
    measured = _num(rows.loc["hdr_4nic_ring", "busbw_GBps"])  # 95.3 avg over 512M-8G
    base = load_cluster("dgx-a100")
    cluster = load_cluster({**base.model_dump(), "scale_out": {**base.scale_out.model_dump(), "nics_per_node": 4}}, 32)
    for size in (512 * MIB, 8 * 2**30):
        r = collective_time("all_reduce", size, 32, cluster, algo="ring")
        assert r.busbw_Bps / 1e9 == pytest.approx(measured, rel=0.10)


def test_edr_100g_per_nic(nccl):
    """edr_per_nic: 12.2 GB/s is as good as it gets for one 100 Gb/s card."""
    base = load_cluster("dgx-a100")
    c = load_cluster({**base.model_dump(), "scale_out": {**base.scale_out.model_dump(), "nics_per_node": 1,
                                                         "nic_bw_Bps": 12.5e9}}, 32)
    r = collective_time("all_reduce", 8 * 2**30, 32, c, algo="ring")
    assert r.busbw_Bps / 1e9 == pytest.approx(12.2, rel=0.03)


def test_tree_on_two_nodes_can_exceed_nic_bandwidth(nccl):
    """hdr_per_nic / ndr_per_nic notes: on 2 nodes NCCL's tree mixes NVLink and NIC, busbw > NIC total."""
    c = load_cluster("dgx-a100", 16)
    tree = collective_time("all_reduce", 8 * 2**30, 16, c, algo="tree")
    assert tree.busbw_Bps > 8 * 24e9
    ring = collective_time("all_reduce", 8 * 2**30, 16, c, algo="ring")
    assert ring.busbw_Bps <= 8 * 24e9 * 1.0001
