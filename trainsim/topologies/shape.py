"""GroupShape: what the collective cost model needs to know about a process group, as a hashable value.

A shape is computed from the group's member ranks in O(group size) and carries the effective
bandwidths and latencies of the links the group uses, so collective costs can be cached on it and
never look at the rest of the cluster.

Sharing assumption (documented, used by every group-level bandwidth): all groups of the same kind
(e.g. all DP groups) communicate at the same time, as they do in lock-step training. So a group with
``ranks_per_node`` members on a node owns ``ranks_per_node / gpus_per_node`` of that node's NICs, and
its share of a leaf's uplinks is proportional to its members under that leaf. Cross-traffic between
different kinds of groups is the contention model's job (`trainsim.cost_models.contention`). Other jobs'
traffic on a shared fabric (``scale_out.background_load``) is already taken out of the fabric's NIC and
spine capacities, so every rate here is what this job's group gets.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from trainsim.specs import ClusterSpec, SpecError

from .fabric import Fabric


@dataclass(frozen=True)
class GroupShape:
    """A process group's size and spread, with the effective rates of the links it uses (B/s per direction)."""

    size: int
    nodes: int
    ranks_per_node: int
    gpus_per_node: int
    leaves: int                 # distinct leaf groups (node // nodes_per_leaf) the members sit under
    rails: int                  # distinct NICs (rails) the members sit on
    arch: str                   # GPU generation, for NCCL's per-architecture tables
    scale_up_kind: str
    intra_Bps: float            # effective scale-up bandwidth one member can use inside its node
    intra_latency_s: float
    nvls: bool                  # NVLink SHARP usable (Hopper+ NVSwitch, group inside the NVLink domain)
    nvls_efficiency: float
    nic_Bps: float              # effective bandwidth of one NIC
    nics_per_gpu: float
    net_latency_s: float
    leaf_members: int           # fewest members under one crossed leaf (0 if no leaf boundary is crossed)
    leaf_share_Bps: float       # those members' share of that leaf's uplinks (inf if none crossed)
    oversubscription: float
    background_nic: float = 0.0     # other jobs' fraction of each NIC, already taken out of nic_Bps
    background_spine: float = 0.0   # other jobs' fraction of the spine links, already out of leaf_share_Bps

    # ---- derived -------------------------------------------------------------------------------
    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def node_Bps(self) -> float:
        """This group's share of one node's NIC bandwidth (its members' NICs), per direction."""
        return self.ranks_per_node * self.nics_per_gpu * self.nic_Bps

    @property
    def gpu_nic_Bps(self) -> float:
        """Network bandwidth available to one member (its share of the node's NICs)."""
        return self.nics_per_gpu * self.nic_Bps

    @property
    def cross_leaf(self) -> bool:
        return self.leaves > 1

    @property
    def shares_fabric(self) -> bool:
        """True when other jobs' traffic takes part of a scale-out link this group uses."""
        return self.multi_node and (self.background_nic > 0 or (self.cross_leaf and self.background_spine > 0))

    @property
    def profile_key(self) -> tuple[int, int]:
        """(group_size, nodes): the key calibration profiles use for collective fits."""
        return (self.size, self.nodes)

    def describe(self) -> str:
        where = f"{self.nodes} node(s) x {self.ranks_per_node}"
        if self.cross_leaf:
            where += f", {self.leaves} leaves"
        return f"{self.size} ranks on {where}"

    # ---- constructors --------------------------------------------------------------------------
    @staticmethod
    def of_ranks(ranks: Iterable[int], fabric: Fabric) -> GroupShape:
        """The shape of an explicit set of global ranks (= GPU ids) on a fabric; O(len(ranks))."""
        members = sorted(set(int(r) for r in ranks))
        if not members:
            raise SpecError("group", "a process group needs at least one rank")
        if members[0] < 0 or members[-1] >= fabric.num_gpus:
            raise SpecError("group", f"ranks must lie in 0..{fabric.num_gpus - 1}")
        per_node = Counter(fabric.node_of(g) for g in members)
        rpn = max(per_node.values())
        # Spine crossings: members under different leaf groups (node // nodes_per_leaf). In rail-optimized
        # fabrics each rail has its own leaf, but PXN keeps inter-node traffic on the destination's rail,
        # so only node groups matter; their uplinks together carry nics_per_node × nodes_per_leaf NICs.
        rails = {fabric.rail_of(g) for g in members}
        if fabric.kind == "switch" or len(per_node) == 1:
            leaf_count: Counter = Counter({0: len(members)})
        else:
            leaf_count = Counter(fabric.node_of(g) // fabric.nodes_per_leaf for g in members)
        leaves = len(leaf_count)
        if leaves > 1:
            leaf_members = min(leaf_count.values())
            leaf_share = fabric.node_group_uplink_Bps() * leaf_members / (fabric.nodes_per_leaf * fabric.gpus_per_node)
        else:
            leaf_members, leaf_share = 0, math.inf
        if fabric.is_mesh:
            intra = fabric.mesh_link_Bps * max(1, rpn - 1)
        else:
            intra = fabric.scale_up_Bps
        return GroupShape(
            size=len(members), nodes=len(per_node), ranks_per_node=rpn, gpus_per_node=fabric.gpus_per_node,
            leaves=leaves, rails=len(rails), arch=fabric.arch, scale_up_kind=fabric.scale_up_kind,
            intra_Bps=intra, intra_latency_s=fabric.scale_up_latency_s,
            nvls=fabric.nvls and rpn > 1, nvls_efficiency=fabric.nvls_efficiency,
            nic_Bps=fabric.nic_Bps, nics_per_gpu=fabric.nics_per_gpu, net_latency_s=fabric.net_latency_s,
            leaf_members=leaf_members, leaf_share_Bps=leaf_share, oversubscription=fabric.oversubscription,
            background_nic=fabric.background_nic, background_spine=fabric.background_spine,
        )

    @staticmethod
    def contiguous(size: int, cluster: ClusterSpec, first_rank: int = 0) -> GroupShape:
        """The shape of ``size`` consecutive GPUs (whole nodes first), as nccl-tests runs on ``size`` GPUs."""
        if size < 1:
            raise SpecError("gpus", f"group size must be >= 1, got {size}")
        fabric = Fabric.of(cluster if cluster.num_gpus >= first_rank + size else cluster.with_gpus(
            _whole_nodes(first_rank + size, cluster.gpus_per_node)))
        return GroupShape.of_ranks(range(first_rank, first_rank + size), fabric)

    def with_(self, **changes) -> GroupShape:
        """A copy with some fields replaced (what-if studies, sub-groups of hierarchical algorithms)."""
        return replace(self, **changes)


def _whole_nodes(n: int, per_node: int) -> int:
    return n if n <= per_node else -(-n // per_node) * per_node
