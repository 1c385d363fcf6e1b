"""Cluster fabrics as graphs, rank placement, and bandwidth/latency between rank groups.

* `Fabric` (fabric.py): the cluster's links symbolically (O(1) paths and capacities, any size).
* `build_graph` (graph.py): the same fabric as an explicit networkx graph, on demand.
* `Placement` / `place` (placement.py): which ranks form each tp/cp/ep/dp/pp group.
* `GroupShape` (shape.py): a group's spread and link rates, hashable, for the collective cost model.
"""

from .fabric import Fabric, LinkId, gpu_arch
from .graph import build_graph, graph_path_links
from .placement import DIMS, Placement, place
from .shape import GroupShape


def group_of_ranks(cluster, ranks) -> GroupShape:
    """The GroupShape of explicit global ranks (GPU ids) of a cluster."""
    return GroupShape.of_ranks(ranks, Fabric.of(cluster))

__all__ = [
    "DIMS",
    "Fabric",
    "GroupShape",
    "LinkId",
    "Placement",
    "build_graph",
    "gpu_arch",
    "graph_path_links",
    "group_of_ranks",
    "place",
]
