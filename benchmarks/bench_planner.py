"""Planner speed: the full layout space of Llama-3-405B on 16,384 H100 (global batch 2,048 x 8,192 tokens),
DeepSeek-V3 on 512 H100 (a fine-grained MoE space with uneven pipeline splits and expert-TP folding),
and the README's main job (`trainsim report examples/llama3-70b-h100.yaml`). Prints wall time, CPU time and
how many layouts each stage of the search handled. Target: the 405B plan in <= 30 s on this 2-core machine; its
space with ZeRO-2/3 beside pipeline stages takes 82.5 s with one worker (README, Speed), over the target.
``--tensors-only`` times just the per-tensor-heavy pair: Qwen3-30B-A3B (128 experts x 48 layers: tens of
thousands of parameter tensors per rank, param_tensors.py) and Llama 3 8B on 16 H100 at tp = 2 (the CLI's
``plan --model qwen3-30b-a3b --gpus 16 --global-batch 64 --seq-len 4096 --tp 2 --etp 2 --top 2``).

    python benchmarks/bench_planner.py [--workers N] [--skip-report] [--tensors-only]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time

from trainsim.simulator.planner import PlanRequest, plan
from trainsim.specs import load_cluster, load_model


def cpu_s() -> float:
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru_self.ru_utime + ru_self.ru_stime + ru_kids.ru_utime + ru_kids.ru_stime


def timed_plan(req: PlanRequest, workers: int):
    """(result, wall seconds, CPU seconds incl. worker processes) of one plan with ``workers`` processes."""
    c0, t0 = cpu_s(), time.perf_counter()
    if workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            res = plan(req, executor=ex)
    else:
        res = plan(req)
    return res, time.perf_counter() - t0, cpu_s() - c0


def bench_405b(workers: int, exhaustive: bool = False) -> None:
    req = PlanRequest(model=load_model("llama3-405b"), cluster=load_cluster("dgx-h100"), gpu_counts=(16384,),
                      global_batch=2048, seq_len=8192, tokens=15.6e12, top_k=10, prune_dominated=not exhaustive)
    res, wall, cpu = timed_plan(req, workers)
    c = res.counts
    best = res.rows[0]
    print(f"405B / 16,384 H100, workers={workers}{' exhaustive' if exhaustive else ''}: {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU; layouts enumerated {c['enumerated']}, invalid {c['invalid']}, out of memory "
          f"{c['oom']} (memory model), dominated {c['dominated']}, screened in closed form {c['screened']}, "
          f"confirmed by the engine {c['confirmed']}")
    print(f"  best: {best.candidate.label()}  step {best.step_time_s:.2f} s, MFU {100 * best.mfu:.1f}%, "
          f"{best.time_to_train_s / 86400:.1f} days for 15.6T tokens incl. failures (goodput {100 * best.goodput:.1f}%)")


def bench_deepseek(workers: int) -> None:
    """A fine-grained MoE space: DeepSeek-V3 (61 layers: every pipeline depth needs an uneven split; etp searched)."""
    req = PlanRequest(model=load_model("deepseek-v3"), cluster=load_cluster("dgx-h100"), gpu_counts=(512,),
                      global_batch=2048, seq_len=4096, top_k=3)
    res, wall, cpu = timed_plan(req, workers)
    c = res.counts
    print(f"DeepSeek-V3 / 512 H100, workers={workers}: {wall:.1f} s wall, {cpu:.1f} s CPU; layouts enumerated "
          f"{c['enumerated']}, out of memory {c['oom']}, dominated {c['dominated']}, screened {c['screened']}; "
          f"best: {res.rows[0].candidate.label()}")


def bench_tensor_heavy() -> None:
    """A fine-grained MoE plan whose candidates each read tens of thousands of per-expert tensors, and a dense
    plan of the same shape, through the CLI (output discarded)."""
    import contextlib
    import io

    from trainsim.cli.main import main

    for name, extra in (("qwen3-30b-a3b", ["--etp", "2"]), ("llama3-8b", [])):
        argv = ["plan", "--model", name, "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64",
                "--seq-len", "4096", "--tp", "2", *extra, "--top", "2", "--json"]
        c0, t0 = cpu_s(), time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        print(f"trainsim {' '.join(argv)}: exit {code}, {wall:.1f} s wall, {cpu:.1f} s CPU")


def bench_report() -> None:
    from trainsim.cli.main import main

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as out:
        c0, t0 = cpu_s(), time.perf_counter()
        code = main(["report", os.path.join(root, "examples", "llama3-70b-h100.yaml"), "--out", out])
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        size = os.path.getsize(os.path.join(out, "index.html"))
    print(f"report examples/llama3-70b-h100.yaml: exit {code}, {wall:.1f} s wall, {cpu:.1f} s CPU, "
          f"index.html {size / 1e6:.2f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=0, help="0 = run with 1 and with os.cpu_count() workers")
    ap.add_argument("--skip-report", action="store_true")
    ap.add_argument("--skip-moe", action="store_true", help="skip the DeepSeek-V3 space")
    ap.add_argument("--exhaustive", action="store_true", help="also time the search without dominance pruning")
    ap.add_argument("--tensors-only", action="store_true", help="time only the Qwen3-30B-A3B and Llama 3 8B plans")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    if args.tensors_only:
        bench_tensor_heavy()
        return 0
    for w in ([1, os.cpu_count() or 1] if args.workers == 0 else [args.workers]):
        bench_405b(w)
    if args.exhaustive:
        bench_405b(os.cpu_count() or 1, exhaustive=True)
    if not args.skip_moe:
        for w in ([1, os.cpu_count() or 1] if args.workers == 0 else [args.workers]):
            bench_deepseek(w)
    if not args.skip_report:
        bench_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
