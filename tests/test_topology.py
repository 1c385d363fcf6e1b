"""Topologies: symbolic Fabric vs explicit networkx graph, placement order, group shapes, lazy scale."""

from __future__ import annotations

import itertools
import math

import pytest

from trainsim.specs import Layout, SpecError, build_scenario, load_cluster
from trainsim.topologies import (
    Fabric,
    GroupShape,
    Placement,
    build_graph,
    graph_path_links,
    group_of_ranks,
    place,
)


def _cluster(preset: str, gpus: int, **scale_out):
    base = load_cluster(preset)
    raw = base.model_dump()
    raw["scale_out"] = {**raw["scale_out"], **scale_out}
    return load_cluster(raw, gpus)


@pytest.mark.parametrize("kind,npl,preset", [
    ("rail-optimized", 2, "dgx-h100"),
    ("fat-tree", 2, "dgx-a100"),
    ("switch", 2, "dgx-h100"),
    ("rail-optimized", 1, "mi300x"),   # Infinity Fabric full mesh inside the node
])
def test_fabric_paths_match_graph_shortest_paths(kind, npl, preset):
    """Every O(1) symbolic path equals the capacity-carrying links of networkx's cheapest route."""
    c = _cluster(preset, 32, fabric=kind, nodes_per_leaf=npl, oversubscription=2.0)
    f = Fabric.of(c)
    g = build_graph(c)
    for src, dst in itertools.product(range(0, 32, 3), range(1, 32, 5)):
        assert f.path(src, dst) == graph_path_links(g, src, dst), (src, dst)
    for u, v, data in g.edges(data=True):  # every capacitated edge has the fabric's capacity
        if data["link"] is not None:
            assert data["bw_Bps"] == pytest.approx(f.capacity(data["link"]))


def test_rail_optimized_uses_pxn_not_the_spine():
    c = _cluster("dgx-h100", 64, fabric="rail-optimized", nodes_per_leaf=4)
    f = Fabric.of(c)
    path = f.path(1, 8 + 5)  # GPU 1 of node 0 -> GPU 5 of node 1 (different rails, same node group)
    assert path == (("gpu_out", 1), ("gpu_in", 5), ("nic_out", 0, 5), ("nic_in", 1, 5))
    far = f.path(0, 8 * 5)  # node 0 -> node 5: different node groups -> through the spine
    assert ("up", ("leaf", 0, 0)) in far and ("down", ("leaf", 0, 1)) in far


def test_capacities_from_datasheet_rates_and_documented_efficiencies():
    f = Fabric.of(load_cluster("dgx-h100", 16))
    assert f.capacity(("gpu_out", 0)) == pytest.approx(450e9 * 0.80)   # NVLink4, 128 B payload
    assert f.capacity(("nic_out", 0, 0)) == pytest.approx(50e9 * 0.96)  # NDR 400 Gb/s, NCCL NET_BW
    a = Fabric.of(load_cluster("dgx-a100", 16))
    assert a.nic_Bps == pytest.approx(24e9)                              # ~24 GB/s per HDR NIC


def test_oversubscribed_leaf_uplinks():
    c = _cluster("dgx-a100", 64, fabric="fat-tree", nodes_per_leaf=4, oversubscription=2.0)
    f = Fabric.of(c)
    assert f.leaf_uplink_Bps() == pytest.approx(4 * 8 * 24e9 / 2)


def test_explicit_graph_refused_for_huge_clusters_but_fabric_answers():
    big = load_cluster("dgx-h100", 16384)
    with pytest.raises(SpecError):
        build_graph(big)
    f = Fabric.of(big)
    assert f.num_nodes == 2048
    assert f.path(0, 16383)[-1] == ("nic_in", 2047, 7)


def test_custom_yaml_cluster(tmp_path):
    y = tmp_path / "mine.yaml"
    y.write_text(
        "name: my-pcie-box\ngpu: a100-80gb\ngpus_per_node: 4\n"
        "scale_up: {kind: pcie, bw_per_gpu_Bps: 32.0e9, latency_s: 6.0e-6}\n"
        "scale_out: {nics_per_node: 1, nic_bw_Bps: 12.5e9, fabric: fat-tree, oversubscription: 3.0, nodes_per_leaf: 8}\n")
    c = load_cluster(str(y), 64)
    f = Fabric.of(c)
    assert (f.scale_up_kind, f.nics_per_node, f.kind, f.oversubscription) == ("pcie", 1, "fat-tree", 3.0)
    assert f.scale_up_Bps == pytest.approx(32e9 * 0.75)
    assert f.rail_of(3) == 0 and f.nics_per_gpu == 0.25
    dp = group_of_ranks(c, range(0, 64, 4))      # one rank per node, 16 nodes, 2 leaf groups
    assert (dp.nodes, dp.ranks_per_node, dp.leaves) == (16, 1, 2)
    assert dp.node_Bps == pytest.approx(0.25 * 12.5e9 * 0.96)


def test_default_placement_tp_innermost_pp_outermost():
    s = build_scenario({"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 128,
                        "layout": {"tp": 8, "pp": 4}})
    p = place(s)
    assert p.group_ranks("tp") == list(range(8))
    assert p.group_ranks("dp") == [0, 8, 16, 24]
    assert p.group_ranks("pp") == [0, 32, 64, 96]
    tp, dp, pp = p.group("tp"), p.group("dp"), p.group("pp")
    assert (tp.nodes, tp.ranks_per_node) == (1, 8)
    assert (dp.nodes, dp.ranks_per_node, dp.size) == (4, 1, 4)
    assert (pp.nodes, pp.ranks_per_node, pp.size) == (4, 1, 4)  # ranks 0, 32, 64, 96: nodes 0, 4, 8, 12
    assert p.pp_peer(5) == 37 and p.pp_peer(100) is None
    assert p.pp_p2p(0).size == 2 and p.pp_p2p(0).multi_node


def test_placement_is_a_bijection_and_respects_custom_order():
    c = load_cluster("dgx-h100", 64)
    lay = Layout(tp=2, cp=2, pp=2, dp=8, ep=4, placement=("dp", "tp", "cp", "ep", "pp"))
    p = Placement(c, lay)
    coords = {tuple(sorted(p.coords(r).items())) for r in range(64)}
    assert len(coords) == 64
    # dp is split into its EP part (placed at ep's position, after cp) and the rest (placed innermost).
    assert p.group_ranks("dp")[:2] == [0, 1]
    assert p.group_ranks("ep") == [0, 8, 16, 24]
    plain = Placement(c, Layout(tp=2, cp=2, pp=2, dp=8, placement=("dp", "tp", "cp", "ep", "pp")))
    assert plain.group_ranks("dp") == list(range(8))     # without EP, dp innermost = consecutive GPUs
    assert plain.group_ranks("tp") == [0, 8]
    for dim, size in (("tp", 2), ("cp", 2), ("dp", 8), ("pp", 2), ("ep", 4)):
        assert len(p.group_ranks(dim, 13)) == size
        assert 13 in p.group_ranks(dim, 13)
    # EP is carved out of the DP ranks (Megatron): every EP group lies inside a DP group.
    for r in range(64):
        assert set(p.group_ranks("ep", r)) <= set(p.group_ranks("dp", r))


def test_ep_larger_than_dp_takes_cp_ranks():
    c = load_cluster("dgx-h100", 16)
    p = Placement(c, Layout(tp=2, cp=4, dp=2, ep=8))
    ep = p.group_ranks("ep", 0)
    assert len(ep) == 8
    assert set(ep) <= set(p.group_ranks("dp", 0)) | set(r for d in p.group_ranks("dp", 0) for r in p.group_ranks("cp", d))


def test_group_shape_cost_does_not_depend_on_cluster_size(monkeypatch):
    """Building a DP group's shape on 16,384 GPUs touches only its members (no cluster walk)."""
    calls = {"n": 0}
    orig = Fabric.node_of

    def counting(self, gpu):
        calls["n"] += 1
        return orig(self, gpu)

    monkeypatch.setattr(Fabric, "node_of", counting)
    s = build_scenario({"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384,
                        "layout": {"tp": 8, "pp": 16}, "training": {"global_batch": 2048}})
    g = place(s).group("dp")
    assert g.size == 128
    assert calls["n"] <= 10 * g.size


def test_contiguous_shape_matches_nccl_tests_runs():
    c = load_cluster("dgx-a100")
    g = GroupShape.contiguous(32, c)
    assert (g.size, g.nodes, g.ranks_per_node) == (32, 4, 8)
    assert g.node_Bps == pytest.approx(8 * 24e9)
    assert math.isinf(GroupShape.contiguous(8, c).leaf_share_Bps)
