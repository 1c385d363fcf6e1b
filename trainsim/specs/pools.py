"""Mixed GPU pools (``cluster.pools``): which pool runs which rank, and the single-node-type views the cost
models price each part on.

Two placements (``cluster.placement``):

* ``stages``: pipeline stages go to the pools in the order given, each stage wholly inside one pool (the pool's
  GPUs are a whole number of stages). A stage's compute, memory and its TP/CP/EP/DP groups are its pool's; the
  pipeline messages between two pools cross the scale-out fabric.
* ``dp``: each pool holds whole data-parallel replicas (tp·cp·pp GPUs each). A replica's pipeline runs at its
  pool's speed; the gradient reduction spans every pool, so the step is the slowest replica's.

Links between pools: a rank in one pool reaches a rank in another through both pools' NICs, so such a transfer
runs at the slower pool's scale-out (per node: NICs × line rate × efficiency). Under ``dp`` every scale-out
transfer of a view is priced at the slowest pool's scale-out (the DP ring passes through every pool).
"""

from __future__ import annotations

import math
from itertools import permutations

from .errors import SpecError
from .hardware import NIC_EFFICIENCY, ClusterSpec, PoolSpec, ScaleOutSpec, dtype_refusal
from .layout import Layout
from .memo import IdentityMemo
from .scenario import Scenario
from .training import TrainingSpec


def node_scale_out_Bps(so: ScaleOutSpec) -> float:
    """A node's achieved scale-out bandwidth, per direction: NICs × line rate × efficiency."""
    return so.nics_per_node * so.nic_bw_Bps * (so.efficiency or NIC_EFFICIENCY)


def slower_scale_out(pools: tuple[PoolSpec, ...]) -> ScaleOutSpec:
    """The scale-out of the pool whose nodes have the least bandwidth (first such pool on a tie)."""
    return min(pools, key=lambda p: node_scale_out_Bps(p.scale_out)).scale_out


def _view_cluster(cluster: ClusterSpec, pool: PoolSpec, scale_out: ScaleOutSpec) -> ClusterSpec:
    return cluster.model_copy(update={"gpu": pool.gpu, "scale_up": pool.scale_up, "scale_out": scale_out,
                                      "pools": None, "placement": "stages"})


def _views(scenario: Scenario) -> tuple[Scenario, ...]:
    c = scenario.cluster
    assert c.pools is not None
    out = []
    for pool in c.pools:
        so = slower_scale_out(c.pools) if c.placement == "dp" else pool.scale_out
        out.append(scenario.model_copy(update={"cluster": _view_cluster(c, pool, so)}))
    return tuple(out)


_VIEWS = IdentityMemo(_views)


def pool_views(scenario: Scenario) -> tuple[Scenario, ...]:
    """Per pool, ``scenario`` on that pool's node type alone (the job's GPU count and layout kept): what the cost
    models price the pool's ranks on."""
    return _VIEWS(scenario)


def _link_view(scenario: Scenario, a: int, b: int) -> Scenario:
    c = scenario.cluster
    assert c.pools is not None
    so = slower_scale_out((c.pools[a], c.pools[b]))
    return scenario.model_copy(update={"cluster": _view_cluster(c, c.pools[a], so)})


_LINKS = IdentityMemo(_link_view)


def link_view(scenario: Scenario, a: int, b: int) -> Scenario:
    """``scenario`` on pool ``a``'s node type with the slower scale-out of pools ``a`` and ``b``: what a transfer
    between the two pools is priced on."""
    return _LINKS(scenario, a, b)


def stage_pools(scenario: Scenario) -> tuple[int, ...]:
    """Pool index of each pipeline stage under ``placement: stages`` (all 0 without pools)."""
    c, pp = scenario.cluster, scenario.layout.pp
    if c.pools is None or c.placement != "stages":
        return (0,) * pp
    per_stage = c.num_gpus // pp
    out: list[int] = []
    for i, pool in enumerate(c.pools):
        out += [i] * (pool.nodes * c.gpus_per_node // per_stage)
    return tuple(out)


def pool_gpus(cluster: ClusterSpec) -> tuple[int, ...]:
    """GPUs of each of the cluster's pools (nodes × GPUs per node); () without pools."""
    return tuple(p.nodes * cluster.gpus_per_node for p in cluster.pools or ())


def gpus_label(cluster: ClusterSpec, num_gpus: int, *, times: str = "×", memory=None) -> str:
    """The job's GPUs in one label: '1024 × H100 SXM5 80GB' or, on GPU pools, each pool's GPUs joined by ' + '
    ('16 × A100 80GB SXM4 + 16 × H100 SXM5 80GB'). ``memory``, a formatter of bytes, adds each GPU's memory and,
    on pools, the pool's name ('16 × H100 SXM5 80GB (80.0 GiB, pool b)'). The one label of the CLI and the
    report."""
    if cluster.pools is None:
        parts = [(num_gpus, cluster.gpu, None)]
    else:
        parts = [(g, p.gpu, p.name) for p, g in zip(cluster.pools, pool_gpus(cluster))]

    def one(n: int, gpu, pool: str | None) -> str:
        note = [] if memory is None else [memory(gpu.memory_bytes)] + ([f"pool {pool}"] if pool else [])
        return f"{n} {times} {gpu.name}" + (f" ({', '.join(note)})" if note else "")
    return " + ".join(one(*p) for p in parts)


def check_pools(cluster: ClusterSpec, layout: Layout, training: TrainingSpec, dp: int) -> None:
    """A placement the pools can hold: every stage (or replica) inside one pool, every pool's GPU able to run the
    dtype; SpecError naming the field otherwise."""
    if cluster.pools is None:
        if cluster.placement != "stages":
            raise SpecError("cluster.placement", f"{cluster.placement} places work on pools; give cluster.pools")
        return
    for i, pool in enumerate(cluster.pools):
        if (why := dtype_refusal(pool.gpu, training.dtype)) is not None:
            raise SpecError(f"cluster.pools[{i}].gpu", why)
    gpus = pool_gpus(cluster)
    if cluster.placement == "stages":
        if layout.placement[-1] != "pp":
            raise SpecError("layout.placement", "placement: stages needs pp outermost (the default order), so that "
                                                "each pipeline stage is a block of whole nodes")
        unit = cluster.num_gpus // layout.pp
        what = f"a pipeline stage ({unit} GPUs)"
    else:
        if layout.ep > 1:
            raise SpecError("cluster.placement", "dp with ep > 1 would split expert-parallel groups over pools; "
                                                 "use placement: stages")
        unit = layout.tp * layout.cp * layout.pp
        what = f"a data-parallel replica (tp*cp*pp = {unit} GPUs)"
    for i, g in enumerate(gpus):
        if g % unit:
            raise SpecError(f"cluster.pools[{i}].nodes", f"the pool's {g} GPUs are not a whole number of {what}: "
                                                         f"one would straddle pools")


# Pool orders a plan tries under ``placement: stages``: every permutation up to this many (4 pools), beyond it the
# given order and its reverse.
MAX_ORDERS = 24


def placement_options(cluster: ClusterSpec, only: str | None = None) -> list[str]:
    """The placements a plan evaluates on ``cluster``'s pools: ``"stages I,J,..."`` (pipeline stages on the pools in
    that order) for every distinct order, and ``"dp"``; ``only`` keeps one kind. [None] without pools."""
    pools = cluster.pools
    if pools is None:
        return [None]  # type: ignore[list-item]
    n = len(pools)
    keys = [p.model_dump_json() for p in pools]
    orders = (list(permutations(range(n))) if math.factorial(n) <= MAX_ORDERS
              else [tuple(range(n)), tuple(reversed(range(n)))])
    seen, out = set(), []
    for order in orders:
        sig = tuple(keys[i] for i in order)
        if sig not in seen:
            seen.add(sig)
            out.append("stages " + ",".join(map(str, order)))
    if len(set(keys)) > 1:
        out.append("dp")
    return [o for o in out if only is None or o.split()[0] == only]


def arranged(cluster: ClusterSpec, option: str | None) -> ClusterSpec:
    """``cluster`` with its pools in the order and placement ``option`` names (placement_options); unchanged for
    None. The top-level GPU and fabrics follow the first pool."""
    if option is None or cluster.pools is None:
        return cluster
    if option == "dp":
        return cluster.model_copy(update={"placement": "dp"})
    kind, _, order_text = option.partition(" ")
    order = [int(i) for i in order_text.split(",")]
    if kind != "stages" or sorted(order) != list(range(len(cluster.pools))):
        raise SpecError("cluster.placement", f"unknown pool placement {option!r}")
    pools = tuple(cluster.pools[i] for i in order)
    first = pools[0]
    return cluster.model_copy(update={"pools": pools, "placement": "stages", "gpu": first.gpu,
                                      "scale_up": first.scale_up, "scale_out": first.scale_out})
