"""nccl-tests bus bandwidth curves as validation cases, predicted with the collective cost model; the one formula
of the source's metric (``cost_models.collectives.busbw_factor``) is nccl-tests' own."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from trainsim.data import validation_path
from trainsim.specs import SpecError, load_cluster
from trainsim.specs.memo import memoised
from trainsim.validation.cases import Case, CollectiveCase, Dataset, read_rows
from trainsim.validation.cells import cluster as _cluster
from trainsim.validation.cells import integer as _int
from trainsim.validation.cells import num as _num
from trainsim.validation.cells import optional_count
from trainsim.validation.settings import read_settings

# --- nccl-tests bus bandwidth ------------------------------------------------------------------------

NCCL_CITATION = ("nccl-tests all_reduce_perf curves published by Azure (ND A100 v4, ND H100 v5, ND H200 v5, "
                 "ND GB200 v6; Azure/AI-benchmarking-guide) -- nccl_busbw.csv")


@memoised(maxsize=64)
def nccl_systems() -> Mapping[str, str]:
    """system (as in the CSV) -> cluster preset, one per GPU type (settings/nccl_systems.csv, with sources), read
    on first use."""
    return MappingProxyType({s["system"]: s["cluster_preset"] for s in read_settings("nccl_systems.csv")})


@memoised(maxsize=64)
def nccl_host_cpus() -> Mapping[str, str]:
    """system -> host CPU family of the VM size (the thread that drives the node's GPUs; nccl_model.HOST_LAUNCH_S),
    read on first use."""
    return MappingProxyType({s["system"]: s["host_cpu"] for s in read_settings("nccl_systems.csv")})


@memoised(maxsize=64)
def nccl_forced_algos() -> Mapping[str, str | None]:
    """system -> the algorithm the runner forces (``NCCL_ALGO=NVLS`` on 8-GPU VMs with NVLink SHARP), None where
    the hardware lacks it and the cost model chooses; read on first use."""
    return MappingProxyType({s["system"]: (s.get("nccl_algo") or None)
                             for s in read_settings("nccl_systems.csv")})


_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
        "alltoall": "all_to_all", "broadcast": "broadcast", "reduce": "reduce"}


_NOTES = (
    ("metric: nccl-tests bus bandwidth (GB/s = 1e9 B/s), busbw = algbw x 2(n-1)/n for all-reduce; "
    "predicted busbw = nbytes / collective_time x the same factor."),
    ("hardware: one cluster preset per system (ND A100 v4 -> dgx-a100, ND H100 v5 -> dgx-h100 with NVLS, "
    "ND H200 v5 -> hgx-h200). Algorithm: the runner sets NCCL_ALGO=NVLS on 8-GPU VMs, so the H100 and H200 "
    "curves are NVLS at every size and are predicted with algo nvls; A100 has no NVLink SHARP, so its "
    "'NVLS' label cannot be what ran and the cost model chooses (settings/nccl_systems.csv)."),
    ("measurement: Azure's runner (AI-benchmarking-guide Benchmarks/NVIDIA/NCCLBandwidth.py) runs "
     "'NCCL_ALGO=NVLS all_reduce_perf -b 8 -e 8G -f 2 -g <num_gpus> -n 40': one thread enqueues the all-reduce on all of the "
     "node's GPUs in turn each iteration, so an iteration lasts at least that many launches at the VM's host "
     "CPU's per-launch cost (nccl_model.HOST_LAUNCH_S: AMD EPYC Rome 5 us on ND A100 v4, Intel Sapphire Rapids "
     "3.8 us on ND H100 v5 and ND H200 v5; settings/nccl_systems.csv), which bounds the small-message curve."),
    ("H100 v5 (NCCL 2.18.5) and H200 v5 (NCCL 2.20.5) run the same NVLink4 fabric, host CPU and forced "
     "algorithm; NCCL's tuner gives NVLS the same 23 us in both (2.18.5 baseLat, 2.20.5 hwLat; the model uses "
     "v2.21.5's 25). Their device code differs below 2 MiB: 2.20.3+ splits an NVLS all-reduce evenly over its 16 "
     "CTAs (enqueue.cc addTunedCollToPlan), 2.18.5 gives each CTA whole 8 x 16 KiB loops (all_reduce.h, "
     "enqueue.cc computeColl), so a 64 KiB - 1 MiB message sits on the first CTAs at 1/16 of the rate each. Each "
     "case carries its row's nccl_version and the model times the busiest CTA "
     "(nccl_model.nvls_busiest_channel_share). Where both put the same work on a CTA (8 heads x 16 KiB: H100 "
     "128 KiB - 2 MiB, H200 2 MiB) they measure alike, 42.0-44.8 and 41.3 us. H100's 25.6 us at 1-8 KiB lies "
     "below the model's 8 x 3.8 us single-thread issue floor (Sapphire Rapids, HOST_LAUNCH_S), which the 2.20.5 "
     "H200 curve (~30 us) meets."),
    ("not modelled: H100 (2.18.5) takes 42.2 us at 64 KiB (CTA 0 with 4 heads x 16 KiB), as long as at 128 KiB (8 "
     "heads, 42.5 us), while 32 KiB (2 heads) takes 33.5 us and H200's 1 MiB (64 KiB a CTA as 8 heads x 8 KiB) "
     "34.6 us; the model, linear in a CTA's bytes, gives 34.1 us (busbw +23.7 %). NCCL v2.18.5-1 has no term that "
     "separates 2 heads from 4 while 4 equals 8: the chunk is 16 KiB for every message below 8 MiB (enqueue.cc "
     "computeColl), an NVLS all-reduce gets 16 channels and NCCL_MAX_NTHREADS at every size (getAlgoInfo; the "
     "bytePerChannel cut applies to aggregated calls only), one step per chunk (all_reduce.h ProtoSimple<1, 1>), "
     "fixed 8 scatter / 7 gather / 5 reduce warps, a size-free tuner latency (tuning.cc baseLat 23 us) and no "
     "proxy inside a node; each head reduces 16 KiB at every size from 16 KiB to 2 MiB and only the local "
     "scatter and gather copies grow with the head count (prims_simple.h ScatterGatherOp), linearly."),
    ("GB200 NVL (4 GPUs per host) has no cluster preset and is skipped; single statements from issue "
    "threads (approximate, possibly mis-tuned systems) are listed as skipped."),
)


# The scale-up fabric an ``intra_node`` cell names, by keyword, and the preset kinds (ScaleUpSpec.kind) it can be:
# NVLink named without NVSwitch is either (HGX boards print 'NVLink4' for their NVSwitch fabric).
INTRA_NODE_KINDS = (("nvswitch", ("nvswitch",)), ("nvlink", ("nvswitch", "nvlink")),
                    ("infinity fabric|xgmi", ("infinity-fabric",)), ("pcie", ("pcie",)))


def check_intra_node(r: dict, kind: str) -> None:
    """SpecError naming ``intra_node`` when the cell names a scale-up fabric other than the preset's ``kind`` (a
    PCIe node is not costed on NVSwitch) or none trainsim knows; an empty cell is the preset's."""
    text = (r.get("intra_node") or "").strip()
    if not text:
        return
    kinds = next((ks for pattern, ks in INTRA_NODE_KINDS if re.search(pattern, text, re.IGNORECASE)), None)
    if kinds is None or kind not in kinds:
        raise SpecError("intra_node", f"{text!r} is not the preset's {kind} scale-up fabric")


def _row_disagreement(r: dict, size: float, busbw: float, n: int, link_Bps: float) -> str | None:
    """Why a row's redundant columns contradict one another, or None: the size label (nccl-tests prints powers of
    two rounded, '65K' for 64 KiB) more than 10 % from msg_size_bytes read as binary or as decimal units; algbw
    x 2(n-1)/n more than 2 % (plus the last printed digit) from busbw; a busbw above twice the GPU's NVLink rate
    (NVLink SHARP reduces in the switch, halving what each GPU sends: no all-reduce goes faster)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)i?B?\s*", r.get("msg_size_label") or "", re.IGNORECASE)
    if m and (r.get("msg_size_label") or "").strip():
        v, unit = float(m.group(1)), m.group(2).upper()
        power = "KMGT".find(unit) + 1  # '' (bytes) -> 0
        if not any(abs(v * base ** power / size - 1) <= 0.10 for base in (1024, 1000)):
            return f"msg_size_label {r.get('msg_size_label')!r} is not msg_size_bytes {size:g}"
    algbw = _num(r.get("algbw_GBps"))
    if algbw is not None and abs(algbw * 2 * (n - 1) / n - busbw) > 0.02 * busbw + 0.01:
        return f"busbw_GBps {busbw:g} is not algbw_GBps {algbw:g} x 2(n-1)/n for n={n}"
    if busbw * 1e9 > 2 * link_Bps:
        return f"busbw_GBps {busbw:g} exceeds twice the GPU's NVLink rate ({link_Bps / 1e9:g} GB/s): no all-reduce is that fast"
    return None


def load_nccl(path: Path | None = None, *, name: str = "nccl") -> Dataset:
    """nccl-tests all-reduce busbw-vs-size curves (single nodes), predicted with the collective cost model."""
    rows = read_rows(path or validation_path("nccl_busbw.csv"))
    cases: list[Case] = []
    for r in rows:
        rid = r.get("row_id", "?")
        kind = r.get("record_type")
        if kind == "definition":
            continue  # busbw definitions, not measurements
        busbw = _num(r.get("busbw_GBps"))
        size = _num(r.get("msg_size_bytes"))
        n = _int(r.get("num_gpus"))
        system = (r.get("system") or "").strip()
        label = f"{system.replace('Azure ND ', '')} {r.get('msg_size_label') or ''}".strip()
        if kind != "measured_curve" or busbw is None or size is None or n is None:
            cases.append(Case(rid, label[:48], busbw or float("nan"),
                              skip_reason=f"{kind}: a single statement without a full configuration (approximate or user-reported)"))
            continue
        if system not in nccl_systems():
            cases.append(Case(rid, label, busbw, skip_reason=f"no cluster preset for {system}"))
            continue
        op = _OPS.get(re.sub(r"[^a-z]", "", (r.get("collective") or "").split("(")[0].lower()), None)
        if op is None:
            cases.append(Case(rid, label, busbw, skip_reason=f"collective {r.get('collective')!r} not modelled"))
            continue
        try:
            nodes, gpn = optional_count(r, "num_nodes") or 1, optional_count(r, "gpus_per_node") or n
            cluster = load_cluster(_cluster(nccl_systems()[system], n, gpus_per_node=gpn))
            check_intra_node(r, cluster.scale_up.kind)
        except SpecError as e:
            cases.append(Case(rid, label, busbw, skip_reason=f"not representable: {e}"))
            continue
        if nodes * gpn != n:
            cases.append(Case(rid, label, busbw, skip_reason="inconsistent node count"))
            continue
        if why := _row_disagreement(r, size, busbw, n, cluster.scale_up.bw_per_gpu_Bps):
            cases.append(Case(rid, label, busbw, skip_reason=why))
            continue
        size_class = "< 1 MB" if size < 2**20 else ("1-64 MB" if size < 64 * 2**20 else ">= 64 MB")
        # Azure's runner drives every GPU of the node from one thread: ``all_reduce_perf ... -g <num_gpus>``
        # (Azure/AI-benchmarking-guide Benchmarks/NVIDIA/NCCLBandwidth.py).
        # ... with NCCL_ALGO=NVLS on 8-GPU VMs (the same file), which NCCL honours where the GPUs have NVLink SHARP.
        coll = CollectiveCase(op, size, n, cluster, algo=nccl_forced_algos()[system],
                              gpus_per_thread=gpn if nodes == 1 else 1, host_cpu=nccl_host_cpus()[system],
                              nccl_version=(r.get("nccl_version") or "").strip() or None)
        cases.append(Case(rid, label, busbw, collective=coll, group=system,
                          category=f"{system.replace('Azure ND ', '')} {size_class}"))
    return Dataset(name=name, title="nccl-tests all-reduce bus bandwidth", metric="busbw_GBps", unit="GB/s",
                   citation=NCCL_CITATION, notes=_NOTES, cases=tuple(cases), higher_is_better=True)
