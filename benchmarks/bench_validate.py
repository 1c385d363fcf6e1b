"""Wall and CPU time of CI's validation gates: ``trainsim validate --dataset X --json`` in a fresh process each.

CI (.ci/run) spends most of its budget in the engine behind these commands and the tests that call them; this
prints each command's wall time and its CPU time (user + system of the child, steadier than wall on a shared
machine), the median of ``--repeats`` runs. Default: nemo (engine) and sc21 --fast (closed form).

    python benchmarks/bench_validate.py                       # nemo, sc21 --fast
    python benchmarks/bench_validate.py --datasets nemo korthikanti llama3 mosaic memory sc21:fast --repeats 3

Needs TRAINSIM_VALIDATION_DIR for the unbundled tables (nemo, mosaic), as the CLI does.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

DEFAULT = ("nemo", "sc21:fast")


def command(spec: str) -> list[str]:
    """``name`` or ``name:fast`` -> the validate command line."""
    name, _, mode = spec.partition(":")
    cmd = [sys.executable, "-m", "trainsim.cli.main", "validate", "--dataset", name, "--json"]
    return cmd + (["--fast"] if mode == "fast" else [])


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed_run(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run; exits on failure with its stderr."""
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd[2:])} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DEFAULT),
                    help="datasets to time; 'name:fast' adds --fast (default: nemo sc21:fast)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per dataset, median reported (1..20, default 1)")
    args = ap.parse_args()
    if not 1 <= args.repeats <= 20:
        ap.error("--repeats: must be in 1..20")
    env_note = os.environ.get("TRAINSIM_VALIDATION_DIR", "(unset: unbundled tables missing)")
    print(f"validate --json, fresh process each, median of {args.repeats}; TRAINSIM_VALIDATION_DIR={env_note}")
    print(f"{'dataset':>16} {'wall s':>9} {'cpu s':>9}")
    for spec in args.datasets:
        runs = [timed_run(command(spec)) for _ in range(args.repeats)]
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"{spec:>16} {wall:9.1f} {cpu:9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
