"""The cluster as an explicit networkx graph (on demand: figures, tests, small what-ifs).

Vertices: ``("gpu", g)``, ``("nvswitch", node)``, ``("nic", node, k)``, ``("leaf", ...)`` and one
aggregated ``("spine",)`` vertex. Directed edges carry ``link`` (the `Fabric` link id whose capacity the
edge consumes, or None for edges not modelled as a bottleneck, e.g. GPU-NIC PCIe), ``bw_Bps`` (effective),
``latency_s`` and ``cost`` (routing weight: PXN over NVLink is preferred to a spine crossing, as NCCL does).

Large clusters are described symbolically by `Fabric`; building a graph is refused above ``max_gpus``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trainsim.specs import ClusterSpec, SpecError

from .fabric import Fabric, LinkId

if TYPE_CHECKING:  # networkx is imported lazily: `trainsim predict` never needs it
    import networkx as nx

DEFAULT_MAX_GPUS = 4096


def build_graph(cluster: ClusterSpec | Fabric, max_gpus: int = DEFAULT_MAX_GPUS) -> nx.DiGraph:
    """A directed graph of GPUs, scale-up fabric, NICs, leaves and spine, with effective link rates."""
    import networkx as nx  # slow import (0.4-4 s), loaded on use

    f = cluster if isinstance(cluster, Fabric) else Fabric.of(cluster)
    if f.num_gpus > max_gpus:
        raise SpecError("cluster.num_gpus", f"{f.num_gpus} GPUs is too many for an explicit graph "
                                            f"(limit {max_gpus}); use trainsim.topologies.Fabric")
    g = nx.DiGraph(name=f.name, kind=f.kind)

    def link(u, v, lid: LinkId | None, bw: float, lat: float, cost: float = 1.0) -> None:
        g.add_edge(u, v, link=lid, bw_Bps=bw, latency_s=lat, cost=cost)

    for node in range(f.num_nodes):
        gpus = [x for x in range(node * f.gpus_per_node, (node + 1) * f.gpus_per_node) if x < f.num_gpus]
        for x in gpus:
            g.add_node(("gpu", x), node=node, rail=f.rail_of(x))
        if f.is_mesh:
            for a in gpus:
                for b in gpus:
                    if a != b:
                        link(("gpu", a), ("gpu", b), ("mesh", a, b), f.mesh_link_Bps, f.scale_up_latency_s)
        elif len(gpus) > 1:
            sw = ("nvswitch", node)
            g.add_node(sw, node=node)
            for x in gpus:
                link(("gpu", x), sw, ("gpu_out", x), f.scale_up_Bps, f.scale_up_latency_s / 2)
                link(sw, ("gpu", x), ("gpu_in", x), f.scale_up_Bps, f.scale_up_latency_s / 2)
        if f.num_nodes == 1 or f.nics_per_node == 0:
            continue
        for k in range(f.nics_per_node):
            nic = ("nic", node, k)
            leaf = f.leaf_of(node, k)
            g.add_node(nic, node=node)
            g.add_node(leaf)
            for x in gpus:
                if f.rail_of(x) == k:  # GPU <-> its NIC over PCIe (not a modelled bottleneck)
                    link(("gpu", x), nic, None, math.inf, 0.0)
                    link(nic, ("gpu", x), None, math.inf, 0.0)
            link(nic, leaf, ("nic_out", node, k), f.nic_Bps, f.net_latency_s / 2)
            link(leaf, nic, ("nic_in", node, k), f.nic_Bps, f.net_latency_s / 2)
    leaves = [v for v in g.nodes if v[0] == "leaf"]
    if len(leaves) > 1:
        spine = ("spine",)
        for leaf in leaves:
            link(leaf, spine, ("up", leaf), f.leaf_uplink_Bps(), 0.0, cost=3.0)
            link(spine, leaf, ("down", leaf), f.leaf_uplink_Bps(), 0.0, cost=3.0)
    return g


def graph_path_links(g: nx.DiGraph, src: int, dst: int) -> tuple[LinkId, ...]:
    """The capacity-carrying link ids on the cheapest route src -> dst in the graph."""
    if src == dst:
        return ()
    import networkx as nx  # slow import (0.4-4 s), loaded on use

    src_node = g.nodes[("gpu", src)]["node"]

    def cost(u, v, data) -> float:
        # NCCL's PXN relays on the sender's node: a detour through the receiver's NVSwitch costs more.
        extra = 0.5 if u[0] == "nvswitch" and u[1] != src_node else 0.0
        return data["cost"] + extra

    nodes = nx.shortest_path(g, ("gpu", src), ("gpu", dst), weight=cost)
    out = []
    for u, v in zip(nodes, nodes[1:]):
        lid = g.edges[u, v]["link"]
        if lid is not None:
            out.append(lid)
    return tuple(out)
