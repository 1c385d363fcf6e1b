"""Collective communication time: NCCL-like algorithms and protocols on a GroupShape, with algorithm choice.

``collective_time(op, nbytes, group, cluster=None, algo=None, profile=None)`` returns a `CollectiveTime`
(time_s, algo, protocol, algbw/busbw, latency, bottleneck rate, bytes per GPU per link class).
``nbytes`` is nccl-tests' "size": the buffer for all-reduce/broadcast/reduce/send-recv, the gathered
output of all-gather, the input of reduce-scatter, the per-rank send buffer of all-to-all. busbw uses
nccl-tests' PERFORMANCE.md factors (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
broadcast, reduce, send/recv 1).

Algorithms (``algo=``): ``ring``, ``tree`` (double binary tree, all-reduce across nodes), ``nvls``
(NVLink SHARP, single node, Hopper+), ``hierarchical`` (intra-node reduce-scatter, inter-node all-reduce
of 1/ppn of the data over ppn parallel rails, intra-node all-gather), ``direct`` and ``pairwise``
(all-to-all), ``p2p`` (send/recv), ``ps`` (parameter server, see `ps_exchange_time`). Each is timed under
NCCL's LL, LL128 and Simple protocols where NCCL offers them, as

    time = latency(algo, protocol) + (wire_bytes + min(wire_bytes, fill_bytes(protocol))) / rate(algo, protocol)
           + launch overhead (once per call: CUDA launch + NCCL enqueue, nccl_model.LAUNCH_OVERHEAD_S)

where wire_bytes are the bytes each GPU (or node, for the network) sends per direction, rate is the
bottleneck of the links the group uses (`GroupShape`: scale-up port, the group's NIC share, its share of
leaf uplinks) times the protocol efficiency; constants and sources are in `nccl_model`. With
``algo=None`` the fastest (algorithm, protocol) is chosen, as NCCL's tuner does by its own model.

A calibration profile (``profile``), when it holds a fit for (op, group size, nodes), replaces the model
(algo ``measured``). Results are cached on (op, nbytes, shape, algo, protocol): shapes are hashable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from trainsim.specs import ClusterSpec, SpecError
from trainsim.specs.memo import active_memo, memoised
from trainsim.topologies.shape import GroupShape

from . import nccl_model as nm

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "send_recv")
ALGOS = ("ring", "tree", "nvls", "hierarchical", "direct", "pairwise", "p2p", "ps")
_ALIASES = {
    "allreduce": "all_reduce", "all-reduce": "all_reduce", "all_reduce": "all_reduce", "ar": "all_reduce",
    "reducescatter": "reduce_scatter", "reduce-scatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "rs": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "allgather": "all_gather", "all-gather": "all_gather", "all_gather": "all_gather", "ag": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "alltoall": "all_to_all", "all-to-all": "all_to_all", "all_to_all": "all_to_all", "a2a": "all_to_all",
    "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce",
    "sendrecv": "send_recv", "send_recv": "send_recv", "send-recv": "send_recv", "send/recv": "send_recv",
    "p2p": "send_recv", "send": "send_recv", "recv": "send_recv",
}


def canonical_op(op: str) -> str:
    """Canonical op name for an alias (``allreduce``, ``all-reduce``, ``all_gather_into_tensor``...)."""
    key = str(op).strip().lower()
    key = key.removesuffix("_perf")
    if key not in _ALIASES:
        raise SpecError("op", f"unknown collective {op!r} (known: {', '.join(OPS)})")
    return _ALIASES[key]


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' busbw = algbw × factor (doc/PERFORMANCE.md)."""
    op = canonical_op(op)
    if n <= 1:
        return 1.0 if op in ("broadcast", "reduce", "send_recv") else 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class CollectiveTime:
    """One collective's predicted cost. Rates are bytes/s; ``link_bytes`` are per GPU per direction."""

    op: str
    nbytes: float
    group_size: int
    time_s: float
    algo: str
    protocol: str
    latency_s: float
    rate_Bps: float                       # bottleneck rate the bandwidth term ran at
    link_bytes: tuple[tuple[str, float], ...] = field(default=())  # ("scale_up"|"network", bytes per GPU)

    @property
    def algbw_Bps(self) -> float:
        return self.nbytes / self.time_s if self.time_s > 0 else math.inf

    @property
    def busbw_Bps(self) -> float:
        return self.algbw_Bps * busbw_factor(self.op, self.group_size) if self.time_s > 0 else math.inf

    @property
    def label(self) -> str:
        return self.algo if self.protocol in ("", "-") else f"{self.algo}/{self.protocol}"

    def bytes_on(self, link_class: str) -> float:
        return dict(self.link_bytes).get(link_class, 0.0)


def _zero(op: str, nbytes: float, n: int) -> CollectiveTime:
    return CollectiveTime(op, nbytes, n, 0.0, "none", "-", 0.0, math.inf, ())


# ---- helpers on a shape ------------------------------------------------------------------------

def _hw(g: GroupShape) -> str:
    return "net" if g.multi_node else nm.intra_hw(g.scale_up_kind)


def _lat(g: GroupShape, hw: str, algo: str, proto: str) -> float:
    return nm.hw_lat_s(hw, algo, proto, g.intra_latency_s, g.net_latency_s)


def _ring_bus_Bps(g: GroupShape) -> float:
    """Bottleneck per-direction rate of a ring over the group: scale-up port, NIC share, leaf share."""
    rate = math.inf
    if g.ranks_per_node > 1:
        rate = g.intra_Bps
    if g.multi_node:
        rate = min(rate, g.node_Bps)
        if g.cross_leaf:
            rate = min(rate, g.leaf_share_Bps)
    return rate


def _protocols(g: GroupShape, protocol: str | None) -> tuple[str, ...]:
    if protocol is not None:
        if protocol not in nm.PROTOCOLS:
            raise SpecError("protocol", f"unknown protocol {protocol!r} (known: {', '.join(nm.PROTOCOLS)})")
        if protocol == "LL128" and not nm.ll128_enabled(g.scale_up_kind, g.arch, g.multi_node):
            raise SpecError("protocol", "LL128 is not available on this fabric (NVLink only; across nodes Hopper+)")
        return (protocol,)
    out = ["LL", "Simple"]
    if nm.ll128_enabled(g.scale_up_kind, g.arch, g.multi_node):
        out.insert(1, "LL128")
    return tuple(out)


def _link_bytes(g: GroupShape, wire: float, net_wire_per_gpu: float | None = None) -> tuple[tuple[str, float], ...]:
    out = []
    if g.ranks_per_node > 1:
        out.append(("scale_up", wire))
    if g.multi_node:
        out.append(("network", wire if net_wire_per_gpu is None else net_wire_per_gpu))
    return tuple(out)


# ---- algorithms ----------------------------------------------------------------------------------

def _ring(op: str, S: float, g: GroupShape, proto: str) -> CollectiveTime | None:
    n, N = g.size, g.nodes
    if op == "all_reduce":
        wire, nsteps, ninter = 2.0 * (n - 1) / n * S, 2 * (n - 1), (2 * N if N > 1 else 0)
    elif op in ("reduce_scatter", "all_gather"):
        wire, nsteps, ninter = (n - 1) / n * S, n - 1, N - 1
    elif op in ("broadcast", "reduce"):
        wire, nsteps, ninter = S, n - 1, N - 1
    else:
        return None
    bus = nm.ring_protocol_Bps(_ring_bus_Bps(g), proto, g.arch, N, g.ranks_per_node)
    intra = _lat(g, nm.intra_hw(g.scale_up_kind), "ring", proto)
    lat = nm.base_lat_s("ring", proto)
    if N > 1:
        if op not in ("broadcast", "reduce"):
            # tuning.cc: "Inter-node rings still have to launch nsteps * net overhead" -- the floor of its
            # all-reduce / all-gather / reduce-scatter branch. Broadcast and reduce are a chain whose intra-node
            # hops post nothing to the network; tuning.cc's branch for them has no such floor.
            overhead = nm.NET_OVERHEAD_US * nm.US * (3 if proto == "Simple" else 1)
            intra = max(intra, overhead)
        # NCCL's tuner counts 2N inter-node steps for an all-reduce ring; with one rank per node that exceeds
        # the 2(N-1) steps there are, and its negative intra-node step count made a large intra-node latency
        # produce a negative collective time. There are no intra-node steps then, not fewer than none.
        lat += max(0, nsteps - ninter) * intra + ninter * _lat(g, "net", "ring", proto)
        if op == "all_reduce" and proto == "Simple":
            lat *= nm.RING_PLATEAU
    else:
        lat += nsteps * intra
    t = lat + (wire + min(wire, nm.fill_bytes(proto))) / bus
    # Network bytes per GPU: the ring crosses each node boundary once per ring, so a node's egress equals
    # one ring link's traffic, shared by its ranks_per_node members.
    return CollectiveTime(op, S, n, t, "ring", proto, lat, bus,
                          _link_bytes(g, wire, wire / g.ranks_per_node if N > 1 else None))


def _tree(op: str, S: float, g: GroupShape, proto: str) -> CollectiveTime | None:
    """NCCL double binary tree (all-reduce across nodes; intra-node chains)."""
    if op != "all_reduce" or not g.multi_node:
        return None
    N, ppn = g.nodes, g.ranks_per_node
    intra_wire = 2.0 * S if ppn > 1 else 0.0          # chain: S/2 up + S/2 down per tree, two trees
    net_wire = 2.0 * S * (N - 1) / N                   # per node per direction (2 nodes: S; many: -> 2S)
    t_bw = 0.0
    rates = []
    corr = nm.tree_correction(proto, S)
    if intra_wire:
        r = nm.tree_protocol_Bps(g.intra_Bps, proto, g.arch, N) * corr
        t_bw = max(t_bw, intra_wire / r)
        rates.append(r)
    r_net = nm.tree_protocol_Bps(min(g.node_Bps, g.leaf_share_Bps), proto, g.arch, N) * corr
    t_bw = max(t_bw, net_wire / r_net)
    rates.append(r_net)
    intra = _lat(g, nm.intra_hw(g.scale_up_kind), "tree", proto)
    lat = nm.base_lat_s("tree", proto) + 2 * ((ppn - 1) * intra + nm.log2i(N) * _lat(g, "net", "tree", proto))
    bottleneck = min(rates)
    t = lat + t_bw + min(net_wire, nm.fill_bytes(proto)) / bottleneck
    return CollectiveTime(op, S, g.size, t, "tree", proto, lat, S / max(t_bw, 1e-30),
                          _link_bytes(g, intra_wire, net_wire / ppn))


def _nvls(op: str, S: float, g: GroupShape, proto: str,
          version: tuple[int, int] | None = None) -> CollectiveTime | None:
    """NVLink SHARP inside one NVSwitch domain: the switch reduces (multimem ld_reduce) and multicasts.

    All-reduce: each GPU sends S (its operand, read by the switch) + S/n (its reduced shard) and receives
    S/n + S (multicast), so S·(1+1/n) per direction. All-gather / reduce-scatter: S·(n-1)/n. The bytes run on
    16 CTAs at 1/16 of the rate each; the busiest one's share sets the time (nccl_model.nvls_busiest_channel_share:
    1/16 from NCCL v2.20.3, whole per-head chunks on the first CTAs up to v2.19).
    """
    if not g.nvls or g.multi_node or proto != "Simple" or op not in ("all_reduce", "all_gather", "reduce_scatter"):
        return None
    n = g.size
    wire = S * (1 + 1 / n) if op == "all_reduce" else S * (n - 1) / n
    rate = g.intra_Bps * g.nvls_efficiency
    lat = _lat(g, "nvlink", "nvls", "Simple")
    # the busiest channel's share of an all-reduce's work sets its time; the others split evenly over the channels
    busiest = nm.NVLS_CHANNELS * nm.nvls_busiest_channel_share(S, n, version) if op == "all_reduce" else 1.0
    t = lat + (wire * busiest + min(wire, nm.fill_bytes("Simple"))) / rate
    return CollectiveTime(op, S, n, t, "nvls", "Simple", lat, rate, (("scale_up", wire),))


def _hierarchical(op: str, S: float, g: GroupShape, proto: str | None) -> CollectiveTime | None:
    """Intra-node reduce-scatter, inter-node all-reduce over ppn parallel rails, intra-node all-gather."""
    if op != "all_reduce" or not g.multi_node or g.ranks_per_node < 2:
        return None
    ppn, N = g.ranks_per_node, g.nodes
    node = g.with_(size=ppn, nodes=1, leaves=1, leaf_members=0, leaf_share_Bps=math.inf)
    rail = g.with_(size=N, ranks_per_node=1, nvls=False)
    rs = best("reduce_scatter", S, node, None, proto)
    ar = best("all_reduce", S / ppn, rail, ("ring", "tree"), proto)
    ag = best("all_gather", S, node, None, proto)
    t = rs.time_s + ar.time_s + ag.time_s
    parts = f"{rs.algo}+{ar.algo}+{ag.algo}"
    lb = (("scale_up", rs.bytes_on("scale_up") + ag.bytes_on("scale_up")), ("network", ar.bytes_on("network")))
    return CollectiveTime(op, S, g.size, t, "hierarchical", parts, rs.latency_s + ar.latency_s + ag.latency_s,
                          min(rs.rate_Bps, ar.rate_Bps, ag.rate_Bps), lb)


def _a2a_split(S: float, g: GroupShape) -> tuple[float, float]:
    """Bytes each rank sends to same-node peers and to other nodes in an all-to-all of S per rank."""
    n, ppn = g.size, g.ranks_per_node
    return S * (ppn - 1) / n, S * (n - ppn) / n


def _a2a_direct(op: str, S: float, g: GroupShape, proto: str) -> CollectiveTime | None:
    """All peers at once (NCCL grouped send/recv): links run in parallel, the slowest class decides."""
    if op != "all_to_all" or proto != "Simple":
        return None
    intra_b, net_b = _a2a_split(S, g)
    t_bw, rate = 0.0, math.inf
    if intra_b:
        t_bw, rate = intra_b / g.intra_Bps, g.intra_Bps
    if net_b:
        t_net = net_b / g.gpu_nic_Bps
        if g.cross_leaf and g.leaf_members:
            outside = S * (g.size - g.leaf_members) / g.size * g.leaf_members
            t_net = max(t_net, outside / g.leaf_share_Bps)
        if t_net > t_bw:
            t_bw, rate = t_net, g.gpu_nic_Bps
    hw = _hw(g)
    remote_peers = g.size - g.ranks_per_node
    lat = (nm.base_lat_s("ring", "Simple") + _lat(g, hw, "ring", "Simple")
           + remote_peers * nm.NET_OVERHEAD_US * nm.US)
    chunk = nm.P2P_CHUNK_NET if net_b else nm.P2P_CHUNK_NVL
    t = lat + t_bw + min(max(intra_b, net_b), chunk * nm.FILL_BUFFERS) / rate
    return CollectiveTime(op, S, g.size, t, "direct", "Simple", lat, (intra_b + net_b) / max(t_bw, 1e-30),
                          _link_bytes(g, intra_b, net_b))


def _a2a_pairwise(op: str, S: float, g: GroupShape, proto: str) -> CollectiveTime | None:
    """n-1 rounds, one peer per round (same-node peers over the scale-up port, others over the NIC share)."""
    if op != "all_to_all" or proto != "Simple":
        return None
    n, ppn = g.size, g.ranks_per_node
    chunk = S / n
    pair_intra = g.intra_Bps if g.scale_up_kind not in ("nvlink", "infinity-fabric") else g.intra_Bps / max(1, ppn - 1)
    step_intra = nm.base_lat_s("ring", "Simple") + _lat(g, nm.intra_hw(g.scale_up_kind), "ring", "Simple")
    step_net = nm.base_lat_s("ring", "Simple") + _lat(g, "net", "ring", "Simple")
    net_rate = min(g.gpu_nic_Bps, g.leaf_share_Bps / max(1, g.leaf_members)) if g.cross_leaf else g.gpu_nic_Bps
    t = (ppn - 1) * (step_intra + chunk / pair_intra) + (n - ppn) * (step_net + chunk / net_rate if n > ppn else 0)
    lat = (ppn - 1) * step_intra + (n - ppn) * step_net
    intra_b, net_b = _a2a_split(S, g)
    return CollectiveTime(op, S, n, t, "pairwise", "Simple", lat, (intra_b + net_b) / max(t - lat, 1e-30),
                          _link_bytes(g, intra_b, net_b))


def _p2p(op: str, S: float, g: GroupShape, proto: str) -> CollectiveTime | None:
    """Send/recv: each rank sends ``S`` to one peer (a pipeline pair, or ring neighbours of a CP group).

    One hop over the scale-up fabric, or over the sender's NIC share when the group spans nodes.
    """
    if op != "send_recv" or proto != "Simple":
        return None
    if g.multi_node:
        rate = min(g.gpu_nic_Bps, g.leaf_share_Bps / max(1, g.leaf_members)) if g.cross_leaf else g.gpu_nic_Bps
        chunk, hw = nm.P2P_CHUNK_NET, "net"
    else:
        mesh = g.scale_up_kind in ("nvlink", "infinity-fabric")
        rate = g.intra_Bps / max(1, g.ranks_per_node - 1) if mesh else g.intra_Bps
        chunk, hw = nm.P2P_CHUNK_NVL, nm.intra_hw(g.scale_up_kind)
    lat = nm.base_lat_s("ring", "Simple") + _lat(g, hw, "ring", "Simple")
    t = lat + (S + min(S, nm.FILL_BUFFERS * chunk)) / rate
    lb = (("network", S),) if g.multi_node else (("scale_up", S),)
    return CollectiveTime(op, S, g.size, t, "p2p", "Simple", lat, rate, lb)


_ALGO_FUNCS = {
    "ring": _ring, "tree": _tree, "nvls": _nvls, "direct": _a2a_direct, "pairwise": _a2a_pairwise, "p2p": _p2p,
}
_DEFAULT_ALGOS = {
    "all_reduce": ("ring", "tree", "nvls"),
    "reduce_scatter": ("ring", "nvls"), "all_gather": ("ring", "nvls"),
    "broadcast": ("ring",), "reduce": ("ring",),
    "all_to_all": ("direct",), "send_recv": ("p2p",),
}


def candidates(op: str, nbytes: float, group: GroupShape, algos: tuple[str, ...] | None = None,
               protocol: str | None = None, nccl_version: tuple[int, int] | None = None) -> list[CollectiveTime]:
    """Every applicable (algorithm, protocol) timing for this op on this group, unsorted."""
    op = canonical_op(op)
    if not algos:
        algos = _DEFAULT_ALGOS[op]
        if op == "all_reduce" and group.nvls and group.multi_node:
            algos = algos + ("hierarchical",)  # NCCL's NVLS-tree: NVLS inside nodes, tree/ring across
    out: list[CollectiveTime] = []
    for a in algos:
        if a == "hierarchical":
            r = _hierarchical(op, nbytes, group, protocol)
            if r is not None:
                out.append(r)
            continue
        if a == "ps":
            if op == "all_reduce":
                out.append(ps_exchange_time(nbytes, group))
            continue
        fn = _ALGO_FUNCS[a]
        for p in _protocols(group, protocol) if a not in ("nvls", "direct", "pairwise", "p2p") else ("Simple",):
            if protocol is not None and p != protocol:
                continue
            r = _nvls(op, nbytes, group, p, nccl_version) if a == "nvls" else fn(op, nbytes, group, p)
            if r is not None:
                out.append(r)
    return out


def best(op: str, nbytes: float, group: GroupShape, algos: tuple[str, ...] | None = None,
         protocol: str | None = None, nccl_version: tuple[int, int] | None = None) -> CollectiveTime:
    """The fastest candidate (NCCL-like selection); SpecError if none applies."""
    if protocol is not None and algos and "ps" in algos:
        raise SpecError("protocol", "the parameter-server exchange (ps) is not an NCCL kernel and has no protocol")
    c = candidates(op, nbytes, group, algos, protocol, nccl_version)
    if not c and protocol is not None and candidates(op, nbytes, group, algos, None):
        which = "/".join(algos) if algos else canonical_op(op)
        raise SpecError("protocol", f"{which} on {group.describe()} does not run under {protocol} "
                                    "(NCCL offers NVLS, all-to-all and send/recv under Simple only)")
    if not c:
        which = "/".join(algos) if algos else "no algorithm"
        raise SpecError("algo", f"{which} does not apply to {canonical_op(op)} on {group.describe()}")
    return min(c, key=lambda r: (r.time_s, r.algo, r.protocol))


@memoised(maxsize=131072)
def _cached(op: str, nbytes: float, group: GroupShape, algo: str | None, protocol: str | None,
            nccl_version: tuple[int, int] | None = None) -> CollectiveTime:
    if group.size <= 1 or nbytes <= 0:
        return _zero(op, nbytes, group.size)
    algos = None if algo is None else (algo,)
    r = best(op, nbytes, group, algos, protocol, nccl_version)
    # One kernel launch + NCCL enqueue per call (nccl_model.LAUNCH_OVERHEAD_S), counted as latency.
    return replace(r, time_s=r.time_s + nm.LAUNCH_OVERHEAD_S, latency_s=r.latency_s + nm.LAUNCH_OVERHEAD_S)


def chained_call_latency_s(res: CollectiveTime, group: GroupShape) -> float:
    """Latency of each further call of a burst of ring ``reduce`` / ``broadcast`` calls issued back to back on one
    communicator (``res``: one such call), or ``res.latency_s`` where the calls do not chain.

    NCCL's ring reduce and broadcast are a chain: every rank receives a chunk from its predecessor, (adds its own
    and) forwards it, and its kernel ends once it has forwarded the last chunk -- there is no barrier at the end of
    a call (NVIDIA/nccl src/device/reduce.h ``runRing``: ``send`` on the root's successor, ``recvReduceSend`` on
    the ranks after it, ``recvReduceCopy`` on the root; broadcast.h the mirror image; find_string id 68831102).
    Calls queued on the same stream therefore follow each other through the chain as a wavefront: a rank starts
    call k+1 as soon as it has passed on call k's last chunk, and when the next call's root is the next rank
    (DeepSpeed's per-owner reduces, owners in rank order) its chain starts one rank further on, so every rank is
    ready when call k+1's data reaches it. The chain's (n-1)-step
    latency is paid once per burst; each further call pays its kernel's base latency, one step over the slowest
    hop (the network where the group spans nodes) and its launch (nccl_model.LAUNCH_OVERHEAD_S). A measured
    (profile) or non-ring timing is returned unchanged."""
    if res.algo != "ring" or canonical_op(res.op) not in ("reduce", "broadcast") or group.size <= 1:
        return res.latency_s
    proto = res.protocol
    hop = _lat(group, "net", "ring", proto) if group.multi_node else _lat(group, nm.intra_hw(group.scale_up_kind),
                                                                         "ring", proto)
    return min(res.latency_s, nm.base_lat_s("ring", proto) + hop + nm.LAUNCH_OVERHEAD_S)


def single_thread_issue_s(gpus_per_thread: int, host_cpu: str | None = None) -> float:
    """Least time of one collective when one host thread drives ``gpus_per_thread`` GPUs (nccl-tests ``-g``, a
    single-process multi-GPU job): the thread enqueues the call on each GPU in turn, one launch each at the host
    CPU's per-launch cost (``nccl_model.HOST_LAUNCH_S``; ``LAUNCH_OVERHEAD_S`` for a host not listed there), so
    back-to-back calls cannot start faster than that."""
    if host_cpu is not None and host_cpu not in nm.HOST_LAUNCH_S:
        raise SpecError("host_cpu", f"unknown host CPU {host_cpu!r} (known: {', '.join(nm.HOST_LAUNCH_S)})")
    launch = nm.HOST_LAUNCH_S[host_cpu] if host_cpu is not None else nm.LAUNCH_OVERHEAD_S
    return max(1, int(gpus_per_thread)) * launch


def collective_time(op: str, nbytes: float, group: GroupShape | int, cluster: ClusterSpec | None = None,
                    algo: str | None = None, profile: Any = None, protocol: str | None = None,
                    nccl_version: str | None = None) -> CollectiveTime:
    """Time of one collective of ``nbytes`` (nccl-tests size) on ``group``.

    ``group`` is a GroupShape (from `trainsim.topologies.place(...).group(dim)`) or an int: that many
    consecutive GPUs of ``cluster`` (as nccl-tests on N GPUs). ``algo``/``protocol`` force a choice;
    ``profile`` (a CalibrationProfile) replaces the model where it has a fit for (op, size, nodes).
    ``nccl_version`` ("2.18.5") selects NCCL's work split where it changed between releases (NVLS all-reduce
    below 2 MiB, nccl_model.nvls_busiest_channel_share); None is the current release.
    """
    version = nm.nccl_version_tuple(nccl_version)
    op = canonical_op(op)
    if algo is not None and algo not in ALGOS:
        raise SpecError("algo", f"unknown algorithm {algo!r} (known: {', '.join(ALGOS)})")
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes) or nbytes < 0:
        raise SpecError("nbytes", f"must be a finite number of bytes >= 0, got {nbytes!r}")
    if isinstance(group, int) and not isinstance(group, bool):
        if cluster is None:
            raise SpecError("cluster", "a group given by size needs the cluster")
        group = GroupShape.contiguous(group, cluster)
    if not isinstance(group, GroupShape):
        raise SpecError("group", f"expected a GroupShape or a size, got {type(group).__name__}")
    if profile is not None and algo is None and protocol is None and group.size > 1 and nbytes > 0:
        _check_profile_on_shared_fabric(profile, op, group)
        measured = _from_profile(profile, op, float(nbytes), group)
        if measured is not None:
            return measured
    return _cached(op, float(nbytes), group, algo, protocol, version)


def _check_profile_on_shared_fabric(profile: Any, op: str, g: GroupShape) -> None:
    """Refuse a measured collective fit on a fabric other jobs share: the fit's one bandwidth term cannot be split
    into the scale-out part the background slows and the scale-up part it leaves alone."""
    if not g.shares_fabric or getattr(profile, "collective_fit", None) is None:
        return
    try:
        fit = profile.collective_fit(op, g.size, g.nodes)
    except SpecError:
        return
    if fit is not None:
        raise SpecError("cluster.scale_out.background_load",
                        f"the calibration profile's measured {op} fit on {g.size} GPUs ({g.nodes} nodes) cannot be "
                        "slowed by other jobs' traffic faithfully; drop the background load or the calibration")


def _from_profile(profile: Any, op: str, nbytes: float, g: GroupShape) -> CollectiveTime | None:
    fit_fn = getattr(profile, "collective_fit", None)
    if fit_fn is None:
        return None
    try:
        fit = fit_fn(op, g.size, g.nodes)
    except SpecError:  # the profile's vocabulary lacks this op (e.g. reduce)
        return None
    if fit is None:
        return None
    t = float(fit.time_s(nbytes))
    if not (t > 0 and math.isfinite(t)):
        return None
    return CollectiveTime(op, nbytes, g.size, t, "measured", "-", float(fit.alpha_s),
                          1.0 / float(fit.beta_s_per_byte), ())


def p2p_time(nbytes: float, group: GroupShape, profile: Any = None) -> CollectiveTime:
    """Send/recv of ``nbytes`` between the two ranks of ``group`` (e.g. `Placement.pp_p2p(stage)`)."""
    return collective_time("send_recv", nbytes, group, profile=profile)


def ps_exchange_time(nbytes: float, group: GroupShape, num_servers: int | None = None,
                     server_Bps: float | None = None) -> CollectiveTime:
    """Parameter-server synchronisation of ``nbytes`` of gradients among the group's workers.

    Each of W workers pushes its gradient, sharded over S servers, then pulls the updated parameters:
    per phase a worker moves ``nbytes`` over its own link and a server moves ``W·nbytes/S``. Servers
    default to one per node, each with one GPU's network share (co-located, as in BytePS). With S = W
    and equal links this equals the ring all-reduce's 2·nbytes per worker; fewer servers bottleneck.
    """
    W = group.size
    S = num_servers or max(1, group.nodes)
    if not isinstance(S, int) or S < 1:
        raise SpecError("num_servers", f"must be a positive integer, got {num_servers!r}")
    worker_Bps = group.gpu_nic_Bps if group.multi_node else group.intra_Bps
    srv = server_Bps or worker_Bps
    phase = max(nbytes / worker_Bps, W * nbytes / (S * srv))
    hw = _hw(group)
    lat = 2 * (nm.base_lat_s("ring", "Simple") + _lat(group, hw, "ring", "Simple"))
    t = lat + 2 * phase
    kind = "network" if group.multi_node else "scale_up"
    return CollectiveTime("all_reduce", nbytes, W, t, "ps", f"S={S}", lat, nbytes / phase, ((kind, 2 * nbytes),))


def clear_cache() -> None:
    """Drop the active memo scope's collective times (tests that monkeypatch constants)."""
    memo = active_memo()
    if memo is not None:
        memo.forget(_cached.memo_name)
