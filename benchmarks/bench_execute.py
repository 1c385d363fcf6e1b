"""Predicted vs measured step time of `trainsim execute` on this machine (1 and 2 processes, CPU, gloo).

    python benchmarks/bench_execute.py [--profile p.json] [--steps 8] [--seq-len 128]

Without ``--profile`` it first runs ``trainsim calibrate --device cpu --quick`` into a temporary file.
Each layout is executed for real (tiny-gpt, fp32, Adam) and predicted twice: with the cpu preset's
datasheet defaults and with the calibration profile. Timing on a shared 2-core machine is noisy; the
figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from trainsim.kernels.exec_config import make_job
from trainsim.kernels.executor import run_jobs
from trainsim.reports.execution import compare, predict_step
from trainsim.specs import build_scenario

LAYOUTS = {  # label -> (processes, layout/training overrides)
    "1 process": (1, {}),
    "dp2 DDP": (2, {"dp": 2}),
    "dp2 FSDP2": (2, {"dp": 2, "zero": 3}),
    "tp2": (2, {"tp": 2}),
    "tp2 + SP": (2, {"tp": 2, "sequence_parallel": True}),
    "pp2 1f1b": (2, {"pp": 2, "schedule": "1f1b"}),
    "pp2 gpipe": (2, {"pp": 2, "schedule": "gpipe"}),
}


def calibrate(out: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainsim.cli.main", "calibrate", "--device", "cpu", "--quick",
                    "--out", out], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="calibration profile (default: run calibrate --quick first)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=8)
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="bench-execute-")
    profile = args.profile
    if not profile:
        profile = os.path.join(tmp.name, "p.json")
        print(f"calibrate --device cpu --quick: {calibrate(profile):.1f} s -> {profile}")

    jobs_by_n: dict[int, list] = {}
    for label, (n, overrides) in LAYOUTS.items():
        scn = build_scenario({"model": "tiny-gpt", "cluster": "cpu-host", "gpus": n},
                             {"dtype": "fp32", "seq_len": args.seq_len, "global_batch": args.global_batch, **overrides})
        jobs_by_n.setdefault(n, []).append(make_job(scn, steps=args.steps, warmup=2, optimizer="adam", label=label))

    rows = []
    for n, jobs in jobs_by_n.items():
        launch = run_jobs(jobs, timeout_s=60.0)
        for job, result in zip(jobs, launch.results):
            c = compare(job, result, calibration=profile)
            default = predict_step(job, None)
            rows.append((job.label, n, c["measured"], default["step_time_s"], c["predicted"]["step_time_s"]))

    load = os.getloadavg()[0]
    print(f"\ntiny-gpt, fp32, Adam, seq {args.seq_len}, global batch {args.global_batch} (micro-batch 1), "
          f"{args.steps} timed steps after 2 warm-up; load average {load:.2f} on {os.cpu_count()} cores")
    print(f"{'layout':12s} {'procs':>5s} {'measured median':>16s} {'min':>8s} {'p99':>8s} "
          f"{'pred default':>13s} {'error':>8s} {'pred calibrated':>16s} {'error':>8s}")
    for label, n, m, pd, pc in rows:
        med = m["step_time_s"]
        print(f"{label:12s} {n:5d} {med * 1e3:13.1f} ms {m['step_time_min_s'] * 1e3:5.1f} ms "
              f"{m['step_time_p99_s'] * 1e3:5.1f} ms {pd * 1e3:10.1f} ms {100 * (pd - med) / med:+7.1f}% "
              f"{pc * 1e3:13.1f} ms {100 * (pc - med) / med:+7.1f}%")
    tmp.cleanup()


if __name__ == "__main__":
    main()
