"""Regenerate trainsim/data/host_lease_pairs.csv: the untraced lines that both H200 leases ran, one row each.

    python benchmarks/host_lease_pairs.py [--out PATH]

Reads benchmarks/data/executed_h200.jsonl (lease 1) and executed_h200_host.jsonl (lease 2, whose records carry
the host's issue time per phase, ``host_phases_median_s``), keeps the records not run under torch.profiler
(bench_executed_h200.untraced_records) whose sweep line both leases ran, and writes per line where each lease's
record lies (file and 1-based line), each lease's measured median step, and lease 2's host issue and device time of
the forward and backward phases: the facts validation.host_band derives the host's speed spread from. Prints
each line's log ratio and whether lease 2 measured it host-bound.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
from pathlib import Path

from trainsim.validation.host_band import HOST_BOUND_RATIO, LEASE_COLUMNS, host_bound, lease_pairs_path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_executed_h200", ROOT / "benchmarks" / "bench_executed_h200.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _located(path: Path) -> dict[str, tuple[int, dict]]:
    """Untraced records of one lease by sweep line, with their 1-based line number in ``path``."""
    out = {}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if not rec.get("traced") and rec.get("measured", {}).get("step_time_s"):
            out[rec["sweep_name"]] = (i, rec)
    assert len(out) == len(bench.untraced_records(path)), path  # the same filter as the lease benchmark's
    return out


def pair_rows() -> list[dict[str, object]]:
    """One row per sweep line both leases ran untraced, in the columns of ``LEASE_COLUMNS``."""
    p1, p2 = bench.LEASES["lease 1"], bench.LEASES["lease 2"]
    one, two = _located(p1), _located(p2)
    rows = []
    for name in sorted(set(one) & set(two)):
        (l1, r1), (l2, r2) = one[name], two[name]
        host, dev = r2["measured"]["ranks"][0]["host_phases_median_s"], r2["measured"]["phases_s"]
        rows.append({
            "sweep_name": name, "machine_kind": "HGX H200 (1 GPU used), 16-core Xeon host",
            "lease1_record": f"benchmarks/data/{p1.name}:{l1}",
            "lease1_step_time_s": r1["measured"]["step_time_s"],
            "lease2_record": f"benchmarks/data/{p2.name}:{l2}",
            "lease2_step_time_s": r2["measured"]["step_time_s"],
            "lease2_host_forward_s": host["forward_s"], "lease2_device_forward_s": dev["forward_s"],
            "lease2_host_backward_s": host["backward_s"], "lease2_device_backward_s": dev["backward_s"],
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(lease_pairs_path()))
    args = ap.parse_args()
    rows = pair_rows()
    with open(args.out, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LEASE_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} lines both leases ran; host-bound on lease 2: host >= {HOST_BOUND_RATIO:.0%} of device")
    for r in rows:
        ratio = math.log(float(r["lease2_step_time_s"]) / float(r["lease1_step_time_s"]))
        print(f"  {r['sweep_name']:18} ln(lease 2 / lease 1) {ratio:+.4f}  host-bound {host_bound(r)}")


if __name__ == "__main__":
    main()
