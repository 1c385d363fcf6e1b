"""NCCL's own cost-model constants (latencies, protocol efficiencies) and the pipeline-fill term.

Sources (all public NVIDIA code/statements; none is fitted to a measured curve):

* Latencies: NCCL ``src/graph/tuning.cc`` at one release, v2.21.5 (NVIDIA/nccl commit ab2b89c4), the release whose
  LL bandwidths (ring LL at half the bus rate, Hopper ``llMaxBws`` 141 GB/s) the model uses below; its NVLS
  NVLink hwLat is 25 us (23 in v2.18.5 ``baseLat`` and v2.19-2.20 ``hwLat``); the ring/tree LL and LL128, ring
  Simple and tree Simple (28) values are those of v2.20.x (v2.18.5's tree Simple NVLink hwLat is 4):
  per-call base latency ``baseLat[algo][proto]`` plus per-step hardware latency ``hwLat[NVLINK|PCI|NET][algo][proto]``
  in µs; ring: ``base + (nsteps - nInterSteps)·intra + nInterSteps·inter``; tree:
  ``base + 2·((ppn-1)·intra + log2(nNodes)·inter)``; NVLS: ``hwLat[NVLINK][NVLS]`` (+ NET for multi-node).
  Multi-node ring Simple all-reduce latency ×1.4 (NCCL's "plateau effect of ring", Ampere and later),
  and a 1 µs (×3 for Simple) network-post overhead floor per intra step (``getNetOverhead``).
* Protocol efficiency on top of link bandwidth: Simple 1.0; LL128 0.92 (120 B payload of each 128 B
  line, NCCL's ``0.92``; 0.7 with < 2 GPUs per node); LL 0.5 (4 B flag per 4 B data, NCCL maintainer:
  "LL maximum bandwidth 50% of the peak", NVIDIA/nccl#281) capped by ``llMaxBws`` (GB/s: single node by
  GPU generation Volta 39 / Ampere 87.7 / Hopper 141 (v2.21+; 87.7 up to v2.20) / Blackwell 282; 2 nodes 39,
  more 20.4); tree ×0.92
  (LL ÷3.8, LL128 ×120/128 multi-node, ×7/9 single node), times NCCL's measured medium-size tree
  correction ``treeCorrectionFactor`` (0.4-1 by protocol and log2 size, ``TREE_CORRECTION``). LL128 is used only over NVLink (and across
  nodes from Hopper on), as NCCL enables it.
* Pipeline fill: before a collective streams at its steady rate, NCCL's staging buffers fill once
  (sender and receiver side). We charge ``min(2 × buffer, wire bytes)`` at the bottleneck rate (a message
  smaller than the buffers is all fill), with NCCL's default
  buffer per protocol: Simple NCCL_BUFFSIZE = 4 MiB; LL128 = 120 elems × 640 threads × 8 steps × 8 B;
  LL = 8 lines × 512 threads × 8 steps × 16 B; point-to-point chunks NCCL_P2P_NVL_CHUNKSIZE 512 KiB /
  NCCL_P2P_NET_CHUNKSIZE 128 KiB. This one term (same constant for every GPU) is what makes the
  medium-size part of the nccl-tests curves agree (see tests/test_collectives_agreement.py).

* Per-call launch overhead: what nccl-tests (and a training step) sees per collective beyond the tuner's
  latency: the CUDA kernel launch and NCCL's host-side enqueue. NCCL's maintainer: "If you look at the total
  NCCL operation time, you also need to factor in the CUDA launch time and some overhead (~5us)"
  (NVIDIA/nccl-tests#123, sjeaugey 2022-12-14). The same thread's DGX-A100 measurement (8 GPUs, one
  thread per GPU, NCCL_PROTO=LL, 8-128 B) is ~21 us, against the tuner's ring LL 6.6 + 14 x 0.6 = 15 us.
  ``LAUNCH_OVERHEAD_S`` is added once to every modelled collective call (not to calibrated fits, which
  measured it).
* Per-GPU issue cost when one host thread drives several GPUs (nccl-tests ``-g``): inside one NCCL group the
  thread enqueues the call and launches its kernel on each GPU in turn, so an iteration lasts at least that many
  issues. ``HOST_LAUNCH_S`` holds that one quantity per host CPU family: the host time of one NCCL collective
  call on one GPU (the CUDA kernel launch plus NCCL's host-side enqueue).
  AMD EPYC Rome 5 us: the maintainer's "CUDA launch time and some overhead (~5us)" above, stated for a DGX-A100
  (two EPYC 7742 Rome); the same thread's own ``-g`` table (ring, 1 channel, 8-128 B) reaches 33.7 us at 8 GPUs
  where a thread per GPU takes ~21 us, so that iteration is issue-bound at 33.7 / 8 = 4.2 us per GPU (an older
  NCCL on bare metal). Intel Sapphire Rapids 3.8 us: the bare kernel launch only, NVIDIA's "Getting Started
  with CUDA Graphs" (A. Gray, 2019: 3.8 us per back-to-back stream launch), which the Transformer Engine issue
  #2053 measurement on a Xeon Platinum 8480C (Sapphire Rapids) bears out (see ``host_issue``). No published
  figure isolates NCCL's host-side enqueue on Sapphire Rapids, so this entry counts it as zero: a lower bound
  of the quantity, not the whole of it. The constant is NCCL's, independent of ``host_issue.KERNEL_LAUNCH_S``
  (the eager per-op launch), which shares the 2019 figure. Hosts of other kinds use ``LAUNCH_OVERHEAD_S``.

* NVLS work per channel (single-node all-reduce): NCCL runs an NVLS all-reduce on ``NCCL_NVLS_NCHANNELS`` = 16
  CTAs (src/transport/nvls.cc), each moving its share through its scatter, NVLink-SHARP reduce and gather warps at
  1/16 of the group's rate (NCCL's own model: bandwidth ∝ channels used, tuning.cc ``bw / nChannels *
  info->nChannels``). From v2.20.3 the message is split evenly over the channels (enqueue.cc
  ``addTunedCollToPlan``: ``countPerChannels``; device/all_reduce.h ``oneNode``), so the busiest CTA carries 1/16.
  Up to v2.19 each CTA takes whole loops of ``nHeads × chunk`` (collectives/device/all_reduce.h: ``offset =
  gridOffset + bid*nvls->nHeads*chunkSize``; nHeads = the node's 8 GPUs), with ``chunk`` from enqueue.cc
  ``computeColl`` (128 KiB, cut to 64/32/16 KiB below 64/8/2 x 16 x nHeads x chunk bytes): a message below one loop
  (2 MiB on 8 GPUs) sits on as few CTAs as it fills, the first carrying up to 8 x 16 KiB, and takes that CTA's time.

Latency scaling: the cluster's ``scale_up.latency_s`` and ``scale_out.latency_s`` scale NCCL's
intra-node and network hwLat tables relative to the preset defaults (3 µs and 5 µs), so a preset uses
NCCL's numbers as they are and a custom fabric with slower switches is slower in proportion.
"""

from __future__ import annotations

import math
import re

from trainsim.specs import SpecError

US = 1e-6
PROTOCOLS = ("LL", "LL128", "Simple")

BASE_LAT_US = {
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 0.0},
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"LL": 0.0, "LL128": 0.0, "Simple": 0.0},
}
HW_LAT_US = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 28.0},
               "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
               "nvls": {"Simple": 25.0}},
    "pci": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 28.0},
            "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
            "nvls": {"Simple": 0.0}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 28.0},
            "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
            "nvls": {"Simple": 18.0}},
}
REF_SCALE_UP_LATENCY_S = 3.0e-6   # preset default the hwLat tables correspond to
REF_NET_LATENCY_S = 5.0e-6
NET_OVERHEAD_US = 1.0             # per network post (NCCL getNetOverhead, Intel/other CPUs)
LAUNCH_OVERHEAD_S = 5.0e-6        # per collective call: CUDA launch + NCCL enqueue (nccl-tests#123)
# Host time of one NCCL collective call on one GPU (launch + enqueue), by host CPU family (module doc).
HOST_LAUNCH_S = {"amd-rome": LAUNCH_OVERHEAD_S, "intel-spr": 3.8e-6}
RING_PLATEAU = 1.4                # multi-node ring Simple all-reduce latency multiplier (Ampere+)

LL128_EFF = 0.92
LL128_EFF_1PPN = 0.7
LL_EFF = 0.5
TREE_EFF = 0.92
TREE_LL_DIV = 3.8
# NCCL's measured correction of tree bandwidth for medium sizes, by protocol, indexed by log2(nBytes / 64) for
# 64 B .. 256 MiB (tuning.cc v2.21.5 ``treeCorrectionFactor``: "Trees are not perfectly sticking to the model for
# medium sizes"); 1 from 512 MiB on.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}
LL_MAX_BUSBW_Bps = {"volta": 39.0e9, "ampere": 87.7e9, "hopper": 141.0e9, "blackwell": 282.0e9,
                    "cdna": 87.7e9, "other": 87.7e9}
LL_MAX_BUSBW_2NODES_Bps = 39.0e9
LL_MAX_BUSBW_NNODES_Bps = 20.4e9

NCCL_BUFFSIZE = 4 * 2**20
BUFFER_BYTES = {"Simple": NCCL_BUFFSIZE, "LL128": 120 * 640 * 8 * 8, "LL": 8 * 512 * 8 * 16}
FILL_BUFFERS = 2                  # sender + receiver staging buffers
P2P_CHUNK_NVL = 512 * 2**10
P2P_CHUNK_NET = 128 * 2**10


NVLS_CHANNELS = 16                # NCCL_NVLS_NCHANNELS default (src/transport/nvls.cc)
NVLS_MAX_CHUNK = 128 * 2**10      # enqueue.cc computeColl: NVLS maxChunkSize
NVLS_EVEN_SPLIT_FROM = (2, 20)    # v2.20.3: per-channel count split of single-node NVLS (enqueue.cc, all_reduce.h)


def nccl_version_tuple(version: str | None) -> tuple[int, int] | None:
    """'2.18.5' -> (2, 18); None stays None (the current release's behaviour)."""
    if version is None:
        return None
    # NCCL's packages print e.g. 2.18.5-1 or 2.21.5+cuda12.4: a build suffix after the patch is read past
    found = re.fullmatch(r"([0-9]+)\.([0-9]+)(\.[0-9]+([-+][0-9A-Za-z.]+)?)?", str(version).strip())
    if found is None:
        raise SpecError("nccl_version", f"expected MAJOR.MINOR[.PATCH] in digits 0-9 (a -BUILD or +cudaX.Y suffix "
                                        f"after the patch is allowed), got {version!r}")
    return int(found[1]), int(found[2])


def nvls_chunk_bytes(nbytes: float, n_heads: int) -> int:
    """NCCL's NVLS all-reduce chunk for a message of ``nbytes`` (enqueue.cc computeColl, v2.18.5)."""
    ops = NVLS_CHANNELS * n_heads
    chunk = NVLS_MAX_CHUNK
    for factor, size in ((64, 65536), (8, 32768), (2, 16384)):
        if nbytes < factor * ops * chunk and chunk > size:
            chunk = size
    return chunk


def nvls_busiest_channel_share(nbytes: float, n_heads: int, version: tuple[int, int] | None) -> float:
    """Share of the message the busiest of the 16 NVLS CTAs carries (module doc): 1/16 from v2.20.3 (and for an
    unstated version); up to v2.19 whole loops of ``nHeads × chunk`` per CTA, the first CTA the fullest."""
    if version is None or version >= NVLS_EVEN_SPLIT_FROM or nbytes <= 0:
        return 1.0 / NVLS_CHANNELS
    slot = n_heads * nvls_chunk_bytes(nbytes, n_heads)
    full_loops = int(nbytes // (NVLS_CHANNELS * slot))
    rest = nbytes - full_loops * NVLS_CHANNELS * slot
    return (full_loops * slot + min(slot, rest)) / nbytes


def fill_bytes(protocol: str) -> float:
    """Bytes charged once at the bottleneck rate for pipeline fill (2 × the protocol's NCCL buffer)."""
    return FILL_BUFFERS * BUFFER_BYTES[protocol]


def intra_hw(scale_up_kind: str) -> str:
    """The row of NCCL's hwLat table (HW_LAT_US) a node's scale-up fabric uses: PCIe or NVLink."""
    return "pci" if scale_up_kind == "pcie" else "nvlink"


def hw_lat_s(hw: str, algo: str, protocol: str, intra_latency_s: float, net_latency_s: float) -> float:
    """NCCL's per-step hardware latency, scaled by the cluster's latency relative to the preset default."""
    base = HW_LAT_US[hw][algo].get(protocol, 0.0) * US
    if hw == "net":
        return base * (net_latency_s / REF_NET_LATENCY_S)
    return base * (intra_latency_s / REF_SCALE_UP_LATENCY_S)


def base_lat_s(algo: str, protocol: str) -> float:
    """NCCL's base latency of one collective call (baseLat, BASE_LAT_US), seconds."""
    return BASE_LAT_US[algo][protocol] * US


def ll128_enabled(scale_up_kind: str, arch: str, multi_node: bool) -> bool:
    """NCCL enables LL128 over NVLink only, and across nodes only from Hopper on."""
    if scale_up_kind not in ("nvswitch", "nvlink"):
        return False
    if arch not in ("volta", "ampere", "hopper", "blackwell"):
        return False
    return not multi_node or arch in ("hopper", "blackwell")


def ll_max_Bps(arch: str, nodes: int) -> float:
    """The LL protocol's bus-rate ceiling (NCCL's llMaxBws): per GPU architecture on one node, else by node
    count."""
    if nodes <= 1:
        return LL_MAX_BUSBW_Bps.get(arch, LL_MAX_BUSBW_Bps["other"])
    return LL_MAX_BUSBW_2NODES_Bps if nodes == 2 else LL_MAX_BUSBW_NNODES_Bps


def ring_protocol_Bps(bus_Bps: float, protocol: str, arch: str, nodes: int, ppn: int) -> float:
    """The ring's bus rate under a protocol (NCCL tuning.cc refinements)."""
    if protocol == "Simple":
        return bus_Bps
    if protocol == "LL128":
        return bus_Bps * (LL128_EFF_1PPN if (nodes > 1 and ppn < 2) else LL128_EFF)
    return min(bus_Bps * LL_EFF, ll_max_Bps(arch, nodes))


def tree_protocol_Bps(bus_Bps: float, protocol: str, arch: str, nodes: int) -> float:
    """The tree's bus rate under a protocol (NCCL tuning.cc refinements): x TREE_EFF, LL / TREE_LL_DIV up to
    the LL ceiling, LL128 x 7/9 on one node and x 120/128 across nodes."""
    b = bus_Bps * TREE_EFF
    if protocol == "LL":
        return min(b / TREE_LL_DIV, ll_max_Bps(arch, nodes))
    if protocol == "LL128":
        return b * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0)
    return b


def tree_correction(protocol: str, nbytes: float) -> float:
    """NCCL's tree bandwidth factor for a message of ``nbytes`` (``TREE_CORRECTION``, NCCL's own integer log2)."""
    log_size = max(0, int(nbytes) >> 6).bit_length() - 1
    table = TREE_CORRECTION[protocol]
    return table[log_size] if 0 <= log_size < len(table) else 1.0  # below 64 B NCCL's log2i is -1: none


def log2i(n: int) -> int:
    """floor(log2(n)), 0 below 1: the depth NCCL's tree latency counts across ``n`` nodes."""
    return math.floor(math.log2(n)) if n >= 1 else 0
