"""`trainsim collective`: predicted nccl-tests table (size, time, algbw, busbw, algorithm) for one collective.

    trainsim collective --op all_reduce --cluster dgx-h100 --gpus 8 --sizes 1K:8G [--algo ring] [--json]

``--sizes`` takes a comma list (``1K,4M,1G``; K/M/G/T are powers of 1024 as in nccl-tests) or a range
``START:END`` doubling each row (``START:END:FACTOR`` for another factor). The group is ``--gpus``
consecutive GPUs (whole nodes first), as nccl-tests runs on that many GPUs. Each row splits the time into its
latency part (the call's launch, NCCL's base and per-step latency) and its bandwidth part, and says which bounds
it. ``--nccl-version`` models a release whose work split differs (nccl_model.nvls_busiest_channel_share).
``--json`` prints a list of rows with keys size_bytes, time_s, latency_s, bandwidth_s, bound, algbw_GBps,
busbw_GBps, algo (GB = 1e9 B, as nccl-tests prints) and background_load (other jobs' share of the NIC and spine
tiers assumed, ``--background-load``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys

from trainsim.cli.common import add_background_arg, int_range
from trainsim.specs import SpecError, load_cluster
from trainsim.specs.loaders import with_background_load

MAX_ROWS = 512
MAX_SIZE = 2**50                # 1 PiB: past any buffer one GPU holds
MAX_GPUS = 10_000_000           # the cluster spec's own bound on num_gpus (specs/hardware.py)
_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """``4M`` -> 4194304 bytes (binary units, as nccl-tests' -b/-e); SpecError naming --sizes otherwise."""
    m = _SIZE.match(text)
    if not m or m.group(2).upper() not in _UNITS:
        raise SpecError("sizes", f"cannot read size {text!r} (use e.g. 1024, 64K, 4M, 1G)")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not math.isfinite(value) or value < 1 or value > MAX_SIZE:
        raise SpecError("sizes", f"size {text!r} must be between 1 B and 1 PiB")
    if value != int(value):
        raise SpecError("sizes", f"size {text!r} is {value:g} B, not a whole number of bytes")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A comma list of sizes, or ``START:END[:FACTOR]`` (geometric, factor 2 by default)."""
    text = (text or "").strip()
    if not text:
        raise SpecError("sizes", "no sizes given")
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise SpecError("sizes", f"range {text!r} must be START:END or START:END:FACTOR")
        start, end = parse_size(parts[0]), parse_size(parts[1])
        try:
            factor = float(parts[2]) if len(parts) == 3 else 2.0
        except ValueError:
            raise SpecError("sizes", f"factor {parts[2]!r} is not a number") from None
        if not math.isfinite(factor) or factor <= 1:
            raise SpecError("sizes", f"factor must be > 1, got {parts[2]}")
        if end < start:
            raise SpecError("sizes", f"range end {parts[1]} is below its start {parts[0]}")
        out, s = [], float(start)
        while s <= end * (1 + 1e-9):
            out.append(round(s))
            if len(out) > MAX_ROWS:
                raise SpecError("sizes", f"more than {MAX_ROWS} sizes; use a larger factor")
            s *= factor
        return out
    out = [parse_size(x) for x in text.split(",") if x.strip()]
    if not out:
        raise SpecError("sizes", "no sizes given")
    if len(out) > MAX_ROWS:
        raise SpecError("sizes", f"more than {MAX_ROWS} sizes")
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "collective", help="predicted nccl-tests table for one collective",
        description="Predict a collective's time, algbw and busbw over a range of sizes, in nccl-tests' "
                    "vocabulary (busbw factors from nccl-tests doc/PERFORMANCE.md).")
    p.add_argument("--op", default="all_reduce",
                   help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, send_recv")
    p.add_argument("--cluster", required=True, help="preset name or YAML file")
    p.add_argument("--gpus", type=int_range(2, MAX_GPUS),
                   help="group size; whole nodes beyond one node (default: one node)")
    p.add_argument("--sizes", default="1K:8G",
                   help="list (1K,4M,1G) or range START:END[:FACTOR] (default 1K:8G); each size a whole number of "
                        f"bytes from 1 B to 1 PiB (K/M/G/T = powers of 1024), FACTOR > 1, at most {MAX_ROWS} sizes")
    p.add_argument("--algo", help="force an algorithm: ring, tree, nvls, hierarchical, direct, pairwise, p2p, ps")
    p.add_argument("--protocol", choices=("LL", "LL128", "Simple"), help="force an NCCL protocol")
    p.add_argument("--nccl-version", metavar="MAJOR.MINOR[.PATCH]",
                   help="NCCL release to model where its work split differs (up to 2.19: an NVLS all-reduce below "
                        "2 MiB runs on its first CTAs only); default: the current release")
    p.add_argument("--calibration", help="calibration profile JSON (measured collective fits replace the model)")
    add_background_arg(p)
    p.add_argument("--json", action="store_true", help="print a JSON list of rows")
    p.set_defaults(func=run)


def rows(op: str, cluster, gpus: int, sizes: list[int], algo: str | None = None,
         protocol: str | None = None, profile=None, nccl_version: str | None = None) -> list[dict]:
    """The table as dicts: size_bytes, time_s (= latency_s + bandwidth_s: the fixed cost -- NCCL's per-step
    latency over the algorithm's steps and the call's launch -- and the bytes' time), bound ("latency" where the
    fixed cost is the larger part, else "bandwidth"), algbw_GBps, busbw_GBps, algo."""
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.cost_models.collectives import canonical_op, collective_time
    from trainsim.topologies.shape import GroupShape

    op = canonical_op(op)
    group = GroupShape.contiguous(gpus, cluster)
    if op == "send_recv" and group.size != 2:
        raise SpecError("gpus", f"send_recv runs between 2 GPUs, got --gpus {gpus}")
    out = []
    for s in sizes:
        r = collective_time(op, s, group, cluster, algo=algo, profile=profile, protocol=protocol,
                            nccl_version=nccl_version)
        lat = min(r.latency_s, r.time_s)
        out.append({"size_bytes": s, "time_s": r.time_s, "latency_s": lat, "bandwidth_s": r.time_s - lat,
                    "bound": "latency" if lat >= r.time_s - lat else "bandwidth",
                    "algbw_GBps": r.algbw_Bps / 1e9,
                    "busbw_GBps": r.busbw_Bps / 1e9, "algo": r.label,
                    "background_load": cluster.scale_out.background_load.model_dump()})
    return out


def run(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.sizes)
    base = load_cluster(args.cluster)
    if base.pools:
        # the table prices one fabric (the cluster's top-level one, which is the first pool's): a group over
        # several node types would be priced as the first pool alone, whatever the others are
        raise SpecError("cluster.pools", "collective prices one node type's fabric; give the cluster of one pool "
                                         f"({', '.join(p.node or p.name for p in base.pools)}) without pools")
    gpus = args.gpus or base.gpus_per_node
    if gpus < 2:
        # A one-GPU group moves no data (the model prices it at 0 s, so algbw would be infinite).
        raise SpecError("gpus", f"a collective needs a group of at least 2 GPUs, got {gpus}")
    if gpus > base.gpus_per_node and gpus % base.gpus_per_node:
        raise SpecError("gpus", f"{gpus} GPUs is not a whole number of {base.gpus_per_node}-GPU nodes")
    cluster = load_cluster(args.cluster, gpus)
    if args.background_load is not None:
        cluster = with_background_load(cluster, args.background_load)
    profile = None
    if args.calibration and (args.algo or args.protocol or args.nccl_version):
        raise SpecError("calibration", "a measured fit has no algorithm, protocol or NCCL release to choose: give "
                                       "--calibration or --algo/--protocol/--nccl-version, not both")
    if args.calibration:
        from trainsim.cost_models.profile import load_profile
        from trainsim.simulator.calibration_notes import cluster_devices, device_class_refusal, device_notes
        profile = load_profile(args.calibration)
        if (why := device_class_refusal(cluster_devices(cluster), profile)) is not None:
            raise SpecError("calibration", why)
    table = rows(args.op, cluster, gpus, sizes, args.algo, args.protocol, profile, args.nccl_version)
    if profile is not None and any(r.get("algo") == "measured" for r in table):
        for note in device_notes(cluster, profile):  # on stderr: --json keeps its list of rows
            print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    _print_table(args.op, cluster, gpus, table)
    return 0


def _fmt_size(n: int) -> str:
    for unit, k in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def _print_table(op: str, cluster, gpus: int, table: list[dict]) -> None:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from rich.table import Table

    from trainsim.cost_models.collectives import canonical_op
    from trainsim.reports.console import text_console

    nodes = max(1, -(-gpus // cluster.gpus_per_node))
    t = Table(title=f"{canonical_op(op)} on {gpus} GPU(s) of {cluster.name} ({nodes} node(s)), predicted",
              caption="GB/s = 1e9 B/s; busbw factors as nccl-tests doc/PERFORMANCE.md"
              + (f"\n{shared}" if (shared := cluster.scale_out.background_load.sentence()) else ""))
    for col in ("size", "bytes", "time (us)", "latency (us)", "bandwidth (us)", "bound", "algbw (GB/s)",
                "busbw (GB/s)", "algo"):
        t.add_column(col, justify="left" if col in ("algo", "size", "bound") else "right")
    for r in table:
        t.add_row(_fmt_size(r["size_bytes"]), str(r["size_bytes"]), f"{r['time_s'] * 1e6:.2f}",
                  f"{r['latency_s'] * 1e6:.2f}", f"{r['bandwidth_s'] * 1e6:.2f}", r["bound"], f"{r['algbw_GBps']:.2f}",
                  f"{r['busbw_GBps']:.2f}", r["algo"])
    text_console(width=130).print(t)
