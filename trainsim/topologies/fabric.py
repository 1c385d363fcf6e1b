"""The cluster fabric, described symbolically: link ids, capacities and GPU-to-GPU paths by arithmetic.

A 16,384-GPU cluster is never walked as a graph here: every query (which node/rail/leaf a GPU is on,
the links between two GPUs, a link's capacity) is O(1). `trainsim.topologies.graph` builds the same
fabric as an explicit networkx graph on demand (small clusters, figures, tests), and the tests check
that both agree.

Link ids (tuples, hashable; capacities are effective bytes/s in one direction):

* ``("gpu_out", g)`` / ``("gpu_in", g)``: GPU g's scale-up port (NVLink to the NVSwitch, or PCIe).
* ``("mesh", a, b)``: the direct link a -> b in a switchless full mesh (NVLink mesh, Infinity Fabric).
* ``("nic_out", node, k)`` / ``("nic_in", node, k)``: NIC k of a node (k is also the rail).
* ``("up", leaf)`` / ``("down", leaf)``: a leaf switch's uplinks to / downlinks from the spine layer,
  aggregated (capacity = the leaf's host-facing bandwidth / oversubscription).

Leaves: fat-tree: leaf = node // nodes_per_leaf; rail-optimized: one leaf per (rail, node group), so
``("leaf", rail, group)``; switch: a single non-blocking switch (no uplinks).

Effective bandwidths are line rate × payload efficiency (documented constants below, overridable per
cluster via ``scale_up.efficiency`` / ``scale_out.efficiency``).

Shared fabric (``scale_out.background_load``): other jobs' traffic occupies a fraction f of each NIC (tier
``nic``) and of each leaf's spine uplinks/downlinks (tier ``spine``). It is modelled as a flow of fixed
rate f·C on every such link (limited elsewhere, so max-min fair sharing, `trainsim.cost_models.contention`,
grants it f·C), and this job's flows get the remaining (1 - f)·C: every scale-out capacity below is the
quiet fabric's times (1 - f). Inter-job interference of this kind is what network-aware ML schedulers measure and avoid
(CASSINI, Rajasekaran et al., NSDI 2024: jobs sharing a link slow each other unless their communication
phases interleave; vClos, Han et al., Computer Networks 2025: ECMP hash collisions between tenants in a
leaf-spine cluster); elastic competitors are stated as the share they leave (``BackgroundLoadSpec``).
Scale-up links are private to a node's job and never carry background.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

from trainsim.specs import ClusterSpec, SpecError
from trainsim.specs.hardware import NIC_EFFICIENCY  # noqa: F401  (re-exported: run_factors reads it here)
from trainsim.specs.memo import memoised

LinkId = tuple[Hashable, ...]

# Achieved payload fraction of the scale-up line rate for SM-driven copies.
# NVLink: "the app-level bandwidth is [roughly] 80% of the peak" and "~20 GB/s effective [of 25] with a
# 128B SM payload" (NCCL maintainer: NVIDIA/nccl#1054, NVIDIA/nccl-tests#149 = hardware.csv
# a100_nccl_expect); NCCL's topo.h uses 20.0/25 (SM80), 20.6/25 (SM90), 40.1/50 (SM100) GB/s per link.
# PCIe: NCCL topo.h PCI_BW 12 GB/s for a 16 GB/s Gen3 x16 link (0.75). Infinity Fabric: no published
# SM-copy figure at hand; the NVLink value is assumed (documented assumption).
SCALE_UP_EFFICIENCY = {"nvswitch": 0.80, "nvlink": 0.80, "infinity-fabric": 0.80, "pcie": 0.75}
# NVLink SHARP reduction efficiency, NCCL tuning nvlsEfficiency: Hopper 0.85, Blackwell 0.74.
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}


def gpu_arch(gpu_name: str) -> str:
    """GPU generation from its name, for NCCL's per-architecture tables: volta|ampere|hopper|blackwell|cdna|other."""
    n = gpu_name.upper()
    if any(k in n for k in ("B200", "B300", "GB200", "GB300", "BLACKWELL")):
        return "blackwell"
    if any(k in n for k in ("H100", "H200", "H800", "H20", "GH200", "HOPPER")):
        return "hopper"
    if any(k in n for k in ("A100", "A800", "A30", "A40", "AMPERE")):
        return "ampere"
    if "V100" in n:
        return "volta"
    if "MI" in n and any(k in n for k in ("MI200", "MI250", "MI300", "MI325", "MI355")):
        return "cdna"
    return "other"


@dataclass(frozen=True)
class Fabric:
    """One cluster's links, symbolically. Build with `Fabric.of(cluster)` (cached)."""

    name: str
    num_gpus: int
    gpus_per_node: int
    arch: str
    scale_up_kind: str
    scale_up_line_Bps: float
    scale_up_efficiency: float
    scale_up_latency_s: float
    nvls: bool
    nvls_efficiency: float
    nics_per_node: int
    nic_line_Bps: float
    nic_efficiency: float
    net_latency_s: float
    kind: str
    oversubscription: float
    nodes_per_leaf: int
    background_nic: float = 0.0     # other jobs' fraction of each NIC (scale_out.background_load.nic)
    background_spine: float = 0.0   # other jobs' fraction of each leaf's spine links (...background_load.spine)

    @staticmethod
    def of(cluster: ClusterSpec) -> Fabric:
        """The fabric of a cluster (cached on the cluster's JSON, so repeated calls are cheap)."""
        return _fabric_cached(cluster.model_dump_json())

    # ---- sizes and effective rates ------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return max(1, math.ceil(self.num_gpus / self.gpus_per_node))

    @property
    def scale_up_Bps(self) -> float:
        """Effective scale-up bandwidth per GPU per direction."""
        return self.scale_up_line_Bps * self.scale_up_efficiency

    @property
    def nic_quiet_Bps(self) -> float:
        """Effective bandwidth of one NIC per direction on a fabric no other job uses."""
        return self.nic_line_Bps * self.nic_efficiency

    @property
    def nic_Bps(self) -> float:
        """Effective bandwidth of one NIC per direction left to this job (the rest carries other jobs' traffic)."""
        return self.nic_quiet_Bps * (1.0 - self.background_nic)

    @property
    def nics_per_gpu(self) -> float:
        return self.nics_per_node / self.gpus_per_node

    @property
    def is_mesh(self) -> bool:
        """Switchless full mesh inside a node: each GPU pair has its own link."""
        return self.scale_up_kind in ("nvlink", "infinity-fabric") and self.gpus_per_node > 2

    @property
    def mesh_link_Bps(self) -> float:
        return self.scale_up_Bps / max(1, self.gpus_per_node - 1)

    def leaf_uplink_Bps(self) -> float:
        """Aggregate spine-facing bandwidth of one leaf, per direction (host-facing bandwidth / oversubscription)."""
        hosts = self.nodes_per_leaf * (self.nics_per_node if self.kind == "fat-tree" else 1)
        return hosts * self.nic_quiet_Bps / self.oversubscription * (1.0 - self.background_spine)

    def node_group_uplink_Bps(self) -> float:
        """Spine-facing bandwidth of all leaves serving one group of ``nodes_per_leaf`` nodes (every rail)."""
        if self.kind == "switch":
            return math.inf
        return (self.nodes_per_leaf * self.nics_per_node * self.nic_quiet_Bps / self.oversubscription
                * (1.0 - self.background_spine))

    # ---- coordinates --------------------------------------------------------------------------
    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def local_of(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def rail_of(self, gpu: int) -> int:
        """The NIC (rail) a GPU uses: GPUs are spread evenly over the node's NICs."""
        if self.nics_per_node == 0:
            return 0
        return self.local_of(gpu) * self.nics_per_node // self.gpus_per_node

    def leaf_of(self, node: int, rail: int = 0) -> tuple:
        if self.kind == "switch":
            return ("leaf", 0)
        group = node // self.nodes_per_leaf
        if self.kind == "rail-optimized":
            return ("leaf", rail, group)
        return ("leaf", group)

    def gpu_on_rail(self, node: int, rail: int) -> int:
        """The first GPU of a node attached to NIC ``rail`` (the PXN relay in rail-optimized fabrics)."""
        local = -(-rail * self.gpus_per_node // self.nics_per_node)  # ceil
        return node * self.gpus_per_node + local

    # ---- paths and capacities -----------------------------------------------------------------
    def _intra(self, a: int, b: int) -> tuple[LinkId, ...]:
        if a == b:
            return ()
        if self.is_mesh:
            return (("mesh", a, b),)
        return (("gpu_out", a), ("gpu_in", b))

    def path(self, src: int, dst: int) -> tuple[LinkId, ...]:
        """The links a transfer src -> dst crosses, in order (O(1); no graph)."""
        for g in (src, dst):
            if not 0 <= g < self.num_gpus:
                raise SpecError("gpu", f"GPU {g} is outside the cluster's {self.num_gpus} GPUs")
        ns, nd = self.node_of(src), self.node_of(dst)
        if ns == nd:
            return self._intra(src, dst)
        rs, rd = self.rail_of(src), self.rail_of(dst)
        links: list[LinkId] = []
        same_group = ns // self.nodes_per_leaf == nd // self.nodes_per_leaf
        if self.kind == "rail-optimized" and rs != rd and same_group:
            # PXN: hop over NVLink to the local GPU on the destination's rail, then stay on that rail
            # (rails meet only at the spine). Across node groups the spine is crossed anyway.
            relay = self.gpu_on_rail(ns, rd)
            links += self._intra(src, relay)
            rs = rd
        links.append(("nic_out", ns, rs))
        ls, ld = self.leaf_of(ns, rs), self.leaf_of(nd, rd)
        if ls != ld:
            links += [("up", ls), ("down", ld)]
        links.append(("nic_in", nd, rd))
        return tuple(links)

    def capacity(self, link: LinkId) -> float:
        """Effective capacity of a link, bytes/s per direction."""
        kind = link[0]
        if kind in ("gpu_out", "gpu_in"):
            return self.scale_up_Bps
        if kind == "mesh":
            return self.mesh_link_Bps
        if kind in ("nic_out", "nic_in"):
            return self.nic_Bps
        if kind in ("up", "down"):
            return self.leaf_uplink_Bps()
        raise SpecError("link", f"unknown link id {link!r}")

    def latency_s(self, src: int, dst: int) -> float:
        """One-way hardware latency src -> dst: scale-up latency inside a node, network latency across."""
        if src == dst:
            return 0.0
        if self.node_of(src) == self.node_of(dst):
            return self.scale_up_latency_s
        return self.net_latency_s


@memoised(maxsize=64)
def _fabric_cached(cluster_json: str) -> Fabric:
    cluster = ClusterSpec.model_validate_json(cluster_json)
    su, so = cluster.scale_up, cluster.scale_out
    arch = gpu_arch(cluster.gpu.name)
    nvls_eff = su.nvls_efficiency or NVLS_EFFICIENCY.get(arch, NVLS_EFFICIENCY["hopper"])
    return Fabric(
        name=cluster.name,
        num_gpus=cluster.num_gpus,
        gpus_per_node=cluster.gpus_per_node,
        arch=arch,
        scale_up_kind=su.kind,
        scale_up_line_Bps=su.bw_per_gpu_Bps,
        scale_up_efficiency=su.efficiency or SCALE_UP_EFFICIENCY[su.kind],
        scale_up_latency_s=su.latency_s,
        nvls=bool(su.nvls and su.kind == "nvswitch"),
        nvls_efficiency=nvls_eff,
        nics_per_node=so.nics_per_node,
        nic_line_Bps=so.nic_bw_Bps,
        nic_efficiency=so.efficiency or NIC_EFFICIENCY,
        net_latency_s=so.latency_s,
        kind=so.fabric,
        oversubscription=so.oversubscription,
        nodes_per_leaf=so.nodes_per_leaf,
        background_nic=so.background_load.nic,
        background_spine=so.background_load.spine,
    )
