"""Regenerate the nccl-tests fixtures from the published curves in trainsim's bundled nccl_busbw.csv.

The files reproduce nccl-tests' exact output layout (src/util.cu: "%12li  %12li  %8s  %6s  %6s" row
preamble, "  %7s  %6s  %6s  %6g" per out-of-place/in-place block, getFloatStr widths 7/6; ``-J`` JSON
file version 2). Numbers: busbw read from the CSV rows named in each file's header (Azure's published
in-place AllReduce curves); algbw = busbw / (2(n-1)/n); time = size / algbw. The source printed one
(in-place) curve, so the out-of-place columns repeat it. Host names, PIDs and PCI ids are invented.

Run: python tests/data/nccl_tests/make_fixtures.py
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from trainsim.data import validation_path

HERE = Path(__file__).parent


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr (2.13 series)."""
    power, val = 0, 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def curve(prefix: str) -> list[tuple[str, int, float]]:
    rows = []
    with open(validation_path("nccl_busbw.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r["row_id"].startswith(prefix) and r["record_type"] == "measured_curve":
                rows.append((r["row_id"], int(float(r["msg_size_bytes"])), float(r["busbw_GBps"])))
    return sorted(rows, key=lambda t: t[1])


def table_rows(rows, n: int, dtype="float", redop="sum", root=-1, elem=4):
    out = []
    factor = 2 * (n - 1) / n
    for _rid, size, busbw in rows:
        algbw = busbw / factor
        time_us = size / (algbw * 1e3)
        out.append((size, size // elem, dtype, redop, root, time_us, algbw, busbw))
    return out


def write_text(path: Path, rows, hosts, device: str, nccl_code: int | None, prog: str, ngpus=1):
    n = len(hosts)
    lines = []
    if nccl_code:
        lines.append(f"# nccl-tests version 2.13.11 nccl-headers={nccl_code} nccl-library={nccl_code}")
        lines.append(f"# Collective test starting: {prog}")
    lines.append(f"# nThread 1 nGpus {ngpus} minBytes {rows[0][0]} maxBytes {rows[-1][0]} step: 2(factor) "
                 "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0")
    lines.append("#")
    lines.append("# Using devices")
    for rank, host in enumerate(hosts):
        dev = rank % 8
        pid = 48211 + (rank if ngpus == 1 else 0)
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10s} device {dev:2d} "
                     f"[0x{0x18 + 0x12 * dev:02x}] {device}")
    lines.append("#")
    lines.append(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place                       in-place          ")
    lines.append(f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s} ")
    lines.append(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s} ")
    total = 0.0
    for size, count, dtype, redop, root, t, alg, bus in rows:
        block = f"  {float_str(t, 7)}  {float_str(alg, 6)}  {float_str(bus, 6)}  {0:6g}"
        lines.append(f"{size:12d}  {count:12d}  {dtype:>8s}  {redop:>6s}  {root:6d}{block}{block}")
        total += bus
    lines.append("# Out of bounds values : 0 OK")
    lines.append(f"# Avg bus bandwidth    : {total / len(rows):g} ")
    lines.append("#")
    if nccl_code:
        lines.append(f"# Collective test concluded: {prog}")
    lines.append("")
    path.write_text("\n".join(lines))
    return n


def write_json(path: Path, rows, hosts, device: str, nccl_code: int, prog: str):
    doc = {
        "version": 2,
        "start_time": "2024-05-14 09:12:41",
        "args": [f"./build/{prog}", "-b", str(rows[0][0]), "-e", str(rows[-1][0]), "-f", "2", "-g", "1", "-J", path.name],
        "env": ["NCCL_DEBUG=WARN", "NCCL_IB_PCI_RELAXED_ORDERING=1"],
        "nccl_version": nccl_code,
        "config": {
            "nthreads": 1, "ngpus": 1, "minimum_bytes": rows[0][0], "maximum_bytes": rows[-1][0], "step_factor": 2,
            "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
            "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
            "devices": [
                {"rank": r, "group": 0, "pid": 30117 + r, "hostname": h, "device": r % 8,
                 "device_hex": f"{0x07 + 0x20 * (r % 8):04x}:{0x10:02x}:00", "device_info": device}
                for r, h in enumerate(hosts)
            ],
        },
        "results": [],
    }
    for size, count, dtype, redop, root, t, alg, bus in rows:
        block = {"time": round(t, 6), "alg_bw": round(alg, 6), "bus_bw": round(bus, 6), "nwrong": 0.0}
        doc["results"].append({"size": size, "count": count, "type": dtype, "redop": redop, "root": f"{root:6d}",
                               "out_of_place": dict(block), "in_place": dict(block),
                               "actual_iterations": 20, "experiment_name": ""})
    total = sum(r[7] for r in rows) / len(rows)
    doc["out_of_bounds"] = {"count": 0, "okay": "true"}
    doc["average_bus_bandwidth"] = {"bandwidth": round(total, 6), "okay": "unchecked"}
    doc["errors"] = []
    doc["end_time"] = "2024-05-14 09:13:58"
    path.write_text(json.dumps(doc, separators=(",", ":")))


def main() -> None:
    h100 = curve("azure_ND_H100_v5_")
    write_text(HERE / "all_reduce_perf_8xH100.txt", table_rows(h100, 8), ["ndh100v5-0"] * 8,
               "NVIDIA H100 80GB HBM3", 21805, "all_reduce_perf")
    a100 = curve("azure_ND_A100_v4_")
    write_json(HERE / "all_reduce_perf_8xA100.json", table_rows(a100, 8), ["ndasrv4-0"] * 8,
               "NVIDIA A100-SXM4-80GB", 21805, "all_reduce_perf")
    gb200 = curve("azure_ND_GB200_v6_")
    # One process driving 4 GPUs (-g 4), older nccl-tests without the version/program lines.
    write_text(HERE / "4xGB200_allreduce_g4.txt", table_rows(gb200, 4), ["ndgb200v6-0"] * 4,
               "NVIDIA GB200", None, "all_reduce_perf", ngpus=4)


if __name__ == "__main__":
    main()
