"""Rank placement: which GPUs form each tp/cp/ep/dp/pp group of a layout, and the shape of those groups.

Ranks are GPU ids (node-major: GPU g sits on node g // gpus_per_node). A rank's coordinates are a
mixed-radix number in the order of ``Layout.placement``, innermost first (default tp, cp, ep, dp, pp):
with the default, TP peers are consecutive GPUs (inside a node), then CP, then DP, and pipeline stages
are the outermost, farthest-apart blocks.

Expert parallelism does not multiply the GPU count (Megatron carves EP out of the other ranks): with
expert tensor parallelism etp < tp (MoE parallel folding) a factor gcd(ep, tp/etp) of the EP group comes from
the TP ranks (inner part of tp); of the rest, the dp dimension gives an EP part of size gcd(rest, dp) placed
at ep's position in the order, with the remainder of dp at dp's position, and what is still missing comes
from cp (inner part). With etp = tp (the default) the EP group is a subset of the DP (×CP) ranks, as in
Megatron-Core.

`place(scenario).group("dp")` gives the GroupShape of the DP group containing rank 0 (all groups of a
dimension have the same shape in these regular placements); `group_ranks` lists its members.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from trainsim.specs import ClusterSpec, Layout, Scenario, SpecError
from trainsim.specs.memo import memoised

from .fabric import Fabric
from .shape import GroupShape

DIMS = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class _Atom:
    name: str
    size: int
    dims: frozenset[str]  # the parallel dimensions whose groups vary this atom
    stride: int


class Placement:
    """The rank layout of a (cluster, layout) pair. Cheap queries, O(group size) each, cached."""

    def __init__(self, cluster: ClusterSpec, layout: Layout):
        dp = layout.dp if layout.dp is not None else cluster.num_gpus // (layout.tp * layout.cp * layout.pp)
        tp, cp, pp, ep = layout.tp, layout.cp, layout.pp, layout.ep
        if tp * cp * pp * dp != cluster.num_gpus:
            raise SpecError("layout", f"tp*cp*pp*dp = {tp * cp * pp * dp} but the cluster has {cluster.num_gpus} GPUs")
        etp = layout.etp or tp
        ep_tp = math.gcd(ep, tp // etp) if tp % etp == 0 else 1  # MoE parallel folding: EP over tp/etp TP ranks
        rest = ep // ep_tp
        ep_dp = math.gcd(rest, dp)
        ep_cp = rest // ep_dp
        if cp % ep_cp:
            raise SpecError("layout.ep", f"ep={ep} must divide dp*cp*tp/etp = {dp * cp * tp // etp}")
        parts = {
            "tp": [("tp_e", ep_tp, {"tp", "ep"}), ("tp_r", tp // ep_tp, {"tp"})],
            "cp": [("cp_e", ep_cp, {"cp", "ep"}), ("cp_r", cp // ep_cp, {"cp"})],
            "ep": [("ep", ep_dp, {"ep", "dp"})],
            "dp": [("dp_r", dp // ep_dp, {"dp"})],
            "pp": [("pp", pp, {"pp"})],
        }
        atoms: list[_Atom] = []
        stride = 1
        for dim in layout.placement:
            for name, size, dims in parts[dim]:
                atoms.append(_Atom(name, size, frozenset(dims), stride))
                stride *= size
        self.cluster = cluster
        self.layout = layout
        self.fabric = Fabric.of(cluster)
        self.sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
        self._atoms = tuple(atoms)
        self._by_name = {a.name: a for a in atoms}

    # ---- coordinates -------------------------------------------------------------------------
    def coords(self, rank: int) -> dict[str, int]:
        """Index of ``rank`` along tp, cp, ep, dp (index within its DP group) and pp."""
        self._check(rank)
        a = {x.name: (rank // x.stride) % x.size for x in self._atoms}
        b = self._by_name
        return {
            "tp": a["tp_e"] + b["tp_e"].size * a["tp_r"],
            "cp": a["cp_e"] + b["cp_e"].size * a["cp_r"],
            "ep": a["tp_e"] + b["tp_e"].size * (a["ep"] + b["ep"].size * a["cp_e"]),
            "dp": a["ep"] + b["ep"].size * a["dp_r"],
            "pp": a["pp"],
        }

    def stage_of(self, rank: int) -> int:
        return self.coords(rank)["pp"]

    def group_ranks(self, dim: str, rank: int = 0) -> list[int]:
        """Members of the ``dim`` group that contains ``rank``, in group order."""
        if dim not in DIMS:
            raise SpecError("group", f"unknown parallel dimension {dim!r} (known: {', '.join(DIMS)})")
        return self._ranks_along(rank, self._axes({dim}))

    def _axes(self, dims: set[str]) -> list[tuple[int, int]]:
        """(size, stride) of the atoms that the groups of any of ``dims`` vary."""
        return [(x.size, x.stride) for x in self._atoms if x.dims & dims]

    def _ranks_along(self, rank: int, axes: list[tuple[int, int]]) -> list[int]:
        """The ranks whose coordinates equal ``rank``'s but along ``axes`` ((size, stride) each), sorted: every
        group of this placement is one such set."""
        self._check(rank)
        axes = [(n, stride) for n, stride in axes if n > 1]
        base = rank - sum(((rank // stride) % n) * stride for n, stride in axes)
        return sorted(base + sum(i * stride for i, (_, stride) in zip(idx, axes))
                      for idx in product(*(range(n) for n, _ in axes)))

    def _check_shard(self, shard: int) -> None:
        """HSDP's shard-group size must divide the DP size."""
        dp = self.sizes["dp"]
        if shard < 1 or dp % shard:
            raise SpecError("layout.dp_shard", f"shard group size {shard} must divide dp={dp}")

    def group(self, dim: str, rank: int = 0) -> GroupShape:
        """The GroupShape of the ``dim`` group containing ``rank``."""
        return _shape_cached(self.fabric, tuple(self.group_ranks(dim, rank)))

    def dp_cp_ranks(self, rank: int = 0) -> list[int]:
        """Members of the data-parallel x context-parallel group of ``rank``: the ranks that hold the same model
        shard (same tp and pp position), over which the frameworks reduce the dense gradients and shard ZeRO's
        states -- Megatron-Core's DDP buffers reduce over its intra_dp_cp_group, torchtitan's FSDP shards over the
        ``dp_shard_cp`` mesh, DeepSpeed's ZeRO optimizer over ``seq_data_parallel_group`` (dp x Ulysses sp)."""
        return self._ranks_along(rank, self._axes({"dp", "cp"}))

    def dp_cp_group(self, rank: int = 0) -> GroupShape:
        """The GroupShape of the data-parallel x context-parallel group containing ``rank`` (see dp_cp_ranks)."""
        return _shape_cached(self.fabric, tuple(self.dp_cp_ranks(rank)))

    def hsdp_ranks(self, shard: int, rank: int = 0) -> tuple[list[int], list[int]]:
        """HSDP's (shard group, replicate group) of ``rank`` for shard-group size ``shard``: the DP group split
        into dp/shard groups of consecutive DP indices -- the innermost, closest ranks, as torchtitan's mesh
        puts dp_shard inside dp_replicate -- each with all the context-parallel ranks of its members (torchtitan
        shards over the flattened ``dp_shard_cp`` mesh), and the ranks holding the same shard (same DP index
        modulo ``shard``, same CP index) in each of them."""
        self._check_shard(shard)
        members = self.dp_cp_ranks(rank)
        me = self.coords(rank)
        idx = {r: self.coords(r) for r in members}
        shard_g = [r for r in members if idx[r]["dp"] // shard == me["dp"] // shard]
        rep_g = [r for r in members if idx[r]["dp"] % shard == me["dp"] % shard and idx[r]["cp"] == me["cp"]]
        return shard_g, rep_g

    def hsdp_groups(self, shard: int, rank: int = 0) -> tuple[GroupShape, GroupShape]:
        """GroupShapes of HSDP's shard and replicate groups containing ``rank`` (see hsdp_ranks)."""
        shard_g, rep_g = self.hsdp_ranks(shard, rank)
        return _shape_cached(self.fabric, tuple(shard_g)), _shape_cached(self.fabric, tuple(rep_g))

    def mics_hierarchy_ranks(self, shard: int, rank: int = 0) -> tuple[list[int], list[int]]:
        """DeepSpeed-MiCS's hierarchical all-gather groups of ``rank`` for a shard group of ``shard`` ranks spanning
        whole nodes: (its part in ``rank``'s node, the ranks of the same position in each node it spans) --
        mics_utils.create_mics_comm_groups cuts the shard group into chunks of shard / span_nodes consecutive ranks
        (``param_intra_node_group``) and takes the i-th of every chunk (``param_inter_node_shard_group``)."""
        members, _ = self.hsdp_ranks(shard, rank)
        span = max(1, shard // self.cluster.gpus_per_node)
        per_node = shard // span
        i = members.index(rank)
        return members[i // per_node * per_node:(i // per_node + 1) * per_node], members[i % per_node::per_node]

    def mics_hierarchy_groups(self, shard: int, rank: int = 0) -> tuple[GroupShape, GroupShape]:
        """GroupShapes of MiCS's intra-node and inter-node gather groups of ``rank`` (see mics_hierarchy_ranks)."""
        intra, inter = self.mics_hierarchy_ranks(shard, rank)
        return _shape_cached(self.fabric, tuple(intra)), _shape_cached(self.fabric, tuple(inter))

    def expert_tp_ranks(self, rank: int = 0) -> list[int]:
        """Members of the expert-tensor-parallel group of ``rank``: the ``Layout.etp`` ranks one expert's MLP is
        split over -- the TP ranks not folded into the EP group (``tp_r``), its innermost ``etp`` when folding
        leaves more TP ranks than that (the rest then replicate the experts, as expert-data parallelism).
        Megatron-Core orders expert ranks tp-ep-dp-pp (expert TP innermost, consecutive) where this placement
        keeps the folded EP part innermost: the same GPUs' links while both fit in one node (tp <= gpus/node)."""
        self._check(rank)
        etp = self.layout.etp or self.sizes["tp"]
        x = self._by_name["tp_r"]
        base = rank - ((rank // x.stride) % x.size) * x.stride
        first = ((rank // x.stride) % x.size) // etp * etp
        return [base + (first + i) * x.stride for i in range(etp)]

    def expert_tp_group(self, rank: int = 0) -> GroupShape:
        """The GroupShape of the expert-tensor-parallel group containing ``rank`` (see expert_tp_ranks)."""
        return _shape_cached(self.fabric, tuple(self.expert_tp_ranks(rank)))

    def expert_tp_ep_group(self, rank: int = 0) -> GroupShape:
        """The GroupShape of the expert-tensor x expert-parallel group of ``rank``: every expert-TP rank of each EP
        rank of its group -- the ranks that hold different expert parameters of one stage, Megatron-Core's
        expert_tensor_and_model_parallel group (its tensor-model-pipeline group within one stage)."""
        ranks = {r for m in self.group_ranks("ep", rank) for r in self.expert_tp_ranks(m)}
        return _shape_cached(self.fabric, tuple(sorted(ranks)))

    def expert_dp_ranks(self, rank: int = 0) -> list[int]:
        """Members of the expert-data-parallel group of ``rank``: the ranks of its pipeline stage that hold the same
        experts' same expert-TP slice -- the same EP and expert-TP index, varying over the TP ranks beyond
        ``Layout.etp`` that folding leaves (``tp_r``'s outer part), the cp ranks not in the EP group (``cp_r``) and
        the DP ranks not in it (``dp_r``): tp*cp*dp/(ep*etp) ranks, Megatron-Core's expert-data-parallel group
        (parallel_state.get_expert_data_parallel_group), over which DDP reduces the expert gradients and the
        distributed optimizer shards the expert states."""
        etp = self.layout.etp or self.sizes["tp"]
        tp_r = self._by_name["tp_r"]
        axes = [(tp_r.size // etp, tp_r.stride * etp)] + [(self._by_name[n].size, self._by_name[n].stride)
                                                          for n in ("cp_r", "dp_r")]
        return self._ranks_along(rank, axes)

    def expert_dp_group(self, rank: int = 0) -> GroupShape:
        """The GroupShape of the expert-data-parallel group containing ``rank`` (see expert_dp_ranks)."""
        return _shape_cached(self.fabric, tuple(self.expert_dp_ranks(rank)))

    def expert_hsdp_ranks(self, shard: int, rank: int = 0) -> list[int]:
        """HSDP's expert shard group of ``rank`` for shard-group size ``shard``: the members of its
        expert-data-parallel group (expert_dp_ranks) in its HSDP shard (the same DP index divided by ``shard``,
        as hsdp_ranks splits the DP group), over which FSDP shards and reduce-scatters the experts; the replicate
        group is the dense one (the same shard position in every replica)."""
        self._check_shard(shard)
        mine = self.coords(rank)["dp"] // shard
        return [r for r in self.expert_dp_ranks(rank) if self.coords(r)["dp"] // shard == mine]

    def expert_hsdp_group(self, shard: int, rank: int = 0) -> GroupShape:
        """The GroupShape of HSDP's expert shard group containing ``rank`` (see expert_hsdp_ranks)."""
        return _shape_cached(self.fabric, tuple(self.expert_hsdp_ranks(shard, rank)))

    def groups(self) -> dict[str, GroupShape]:
        """Shapes of the tp, cp, ep, dp and pp groups containing rank 0."""
        return {d: self.group(d) for d in DIMS}

    def pp_peer(self, rank: int = 0, step: int = 1) -> int | None:
        """The rank holding the same tp/cp/dp position ``step`` stages later (None past the last stage)."""
        stage = self.stage_of(rank) + step
        if not 0 <= stage < self.sizes["pp"]:
            return None
        return rank + step * self._by_name["pp"].stride

    def p2p(self, src: int, dst: int) -> GroupShape:
        """The shape of a point-to-point pair (e.g. adjacent pipeline stages)."""
        self._check(src)
        self._check(dst)
        return _shape_cached(self.fabric, (min(src, dst), max(src, dst)))

    def pp_p2p(self, stage: int = 0) -> GroupShape:
        """Shape of the send/recv pair between pipeline stage ``stage`` and ``stage + 1`` (rank-0's column)."""
        src = stage * self._by_name["pp"].stride
        dst = self.pp_peer(src)
        if dst is None:
            raise SpecError("stage", f"stage {stage} has no next stage (pp={self.sizes['pp']})")
        return self.p2p(src, dst)

    def _check(self, rank: int) -> None:
        if not 0 <= rank < self.cluster.num_gpus:
            raise SpecError("rank", f"rank {rank} is outside 0..{self.cluster.num_gpus - 1}")


@memoised(maxsize=4096)
def _shape_cached(fabric: Fabric, ranks: tuple[int, ...]) -> GroupShape:
    return GroupShape.of_ranks(ranks, fabric)


@memoised(maxsize=256)
def _placement_cached(cluster_json: str, layout_json: str) -> Placement:
    return Placement(ClusterSpec.model_validate_json(cluster_json), Layout.model_validate_json(layout_json))


def place(scenario: Scenario | None = None, *, cluster: ClusterSpec | None = None,
          layout: Layout | None = None) -> Placement:
    """The Placement of a scenario (or of a cluster + layout), cached."""
    if scenario is not None:
        cluster, layout = scenario.cluster, scenario.layout
    if cluster is None or layout is None:
        raise SpecError("placement", "needs a scenario, or both cluster and layout")
    return _placement_cached(cluster.model_dump_json(), layout.model_dump_json())
