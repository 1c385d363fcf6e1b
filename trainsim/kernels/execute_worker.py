"""The torchrun entry point of `trainsim execute`: run each job's steps with its layout and measure them.

``python -m trainsim.kernels.execute_worker --jobs JOBS.json --out RESULT.json`` on every rank; rank 0
writes one result per job. Several jobs of the same world size share one launch (one process group).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .exec_config import ExecJob
from .measure import SavedActivationMeter, state_bytes, timing_stats
from .parallelize import build_parallel
from .torch_model import synthetic_batch

FAULT_EXIT_CODE = 17
WATCHDOG_EXIT_CODE = 3
WATCHDOG_GRACE_S = 15.0  # after the collective timeout, so gloo's own error is normally the one reported


class Watchdog:
    """Exits this rank when no progress is reported for ``timeout_s``: the backstop behind the process-group
    timeout (which DeviceMesh sub-groups inherit), for a rank stuck outside any collective."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.last = time.monotonic()
        self.what = "start-up"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainsim-watchdog", daemon=True)
        self._thread.start()

    def tick(self, what: str) -> None:
        self.last, self.what = time.monotonic(), what

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.timeout_s / 10)):
            idle = time.monotonic() - self.last
            if idle > self.timeout_s:
                rank = os.environ.get("RANK", "?")
                print(f"error: rank {rank}: no progress for {idle:.0f} s during {self.what} "
                      f"(a peer rank died or hung); exiting", file=sys.stderr, flush=True)
                os._exit(WATCHDOG_EXIT_CODE)


_WATCHDOG: Watchdog | None = None


def _tick(what: str) -> None:
    if _WATCHDOG is not None:
        _WATCHDOG.tick(what)


def _device(kind: str) -> torch.device:
    """This rank's device, made current before any process group or DeviceMesh exists.

    LOCAL_RANK (not RANK: on node 2 of 8-GPU nodes RANK is 8..15) picks the GPU; modulo the visible count,
    because a launcher that binds one GPU per task (srun --gpus-per-task, CUDA_VISIBLE_DEVICES per rank)
    leaves each rank exactly one visible device, index 0.
    """
    if kind == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        count = torch.cuda.device_count()
        if count < 1:
            raise RuntimeError("--device cuda but torch sees no CUDA device on this host")
        dev = torch.device("cuda", local % count)
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _reset_device_memory(device: torch.device) -> None:
    """Start a job's memory measurement afresh: without this, ``max_memory_allocated`` keeps the peak of the
    previous job of the same launch (or of start-up), not this job's."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _device_memory(device: torch.device) -> dict[str, int]:
    """Peak bytes the caching allocator handed out (tensors) and reserved from the driver, since the reset."""
    if device.type != "cuda":
        return {}
    return {"max_memory_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "max_memory_reserved_bytes": int(torch.cuda.max_memory_reserved(device))}


def _arm_fault(job: ExecJob, chunk: torch.nn.Module) -> None:
    """Test hook: rank 1 dies or hangs inside its first forward of the first timed step, i.e. while its
    peers wait in a TP/PP/DP collective of a DeviceMesh sub-group (not only in the default group)."""
    if not job.inject_fault or dist.get_rank() != 1:
        return
    handle = None

    def fault(module, args):
        handle.remove()
        print(f"[rank 1] injected fault: {job.inject_fault}", file=sys.stderr, flush=True)
        if job.inject_fault == "die":
            os._exit(FAULT_EXIT_CODE)
        time.sleep(3600)

    handle = chunk.register_forward_pre_hook(fault)


def run_job(job: ExecJob, device: torch.device) -> dict[str, Any] | None:
    """Train ``warmup + steps`` steps; the first is measured with the saved-tensor meter (never timed)."""
    s = job.spec
    torch.manual_seed(job.seed)
    _reset_device_memory(device)
    _tick(f"building {job.label or 'job'}")
    par = build_parallel(s, device=device, seed=job.seed, optimizer=job.optimizer, lr=job.lr, hsdp=job.hsdp)
    per_dp = s.training.global_batch // s.dp
    lo = par.dp_rank * per_dp
    losses, times = [], []
    phases: dict[str, list[float]] = {}
    host_phases: dict[str, list[float]] = {"host_issue_s": []}
    activations: dict[str, Any] = {}
    prof = None
    total = job.warmup + job.steps
    for step in range(total):
        ids, targets = synthetic_batch(job.seed, step, s.training.global_batch, s.training.seq_len,
                                       s.model.vocab_size, device)
        ids, targets = ids[lo:lo + per_dp], targets[lo:lo + per_dp]
        if step == job.warmup and job.profile_dir:
            prof = _start_profiler(device)
        _tick(f"{job.label or 'job'} step {step}")
        if step == job.warmup:
            _arm_fault(job, par.chunks[0])
        if step == 0 and job.measure_activations:
            with SavedActivationMeter(par.chunks, inputs=(ids, targets)) as meter:
                loss = par.train_step(ids, targets)
            activations = meter.summary()
            losses.append(float(loss))
            continue
        value, dt = _timed_step(par, ids, targets, device)
        losses.append(value)
        if step >= job.warmup:
            times.append(dt)
            for k, v in par.phases_s.items():
                phases.setdefault(k, []).append(v)
            for k, v in par.host_phases_s.items():
                host_phases.setdefault(k, []).append(v)
            host_phases["host_issue_s"].append(par.host_issue_s)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
        os.makedirs(job.profile_dir, exist_ok=True)
        prof.export_chrome_trace(os.path.join(job.profile_dir, f"{job.label or 'execute'}-rank{dist.get_rank()}.json"))
    mine = _rank_summary(par, device, activations, phases, host_phases)
    _tick(f"{job.label or 'job'} results")
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    mechanism = dict(par.mechanism)
    del par
    gc.collect()
    if dist.get_rank() != 0:
        return None
    return {"label": job.label, "world_size": dist.get_world_size(), "losses": losses, "step_times_s": times,
            "timing": timing_stats(times), "ranks": ranks, "mechanism": mechanism}


def _timed_step(par, ids: torch.Tensor, targets: torch.Tensor, device: torch.device) -> tuple[float, float]:
    """(loss, seconds) of one training step, timed from a barrier to the slowest rank's end."""
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = par.train_step(ids, targets)
    value = float(loss)  # the loss all-reduce already synchronised the ranks
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    dt = torch.tensor([elapsed], dtype=torch.float64, device=device)  # NCCL needs it on the GPU
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return value, float(dt.item())


def _rank_summary(par, device: torch.device, activations: dict[str, Any], phases: dict[str, list[float]],
                  host_phases: dict[str, list[float]]) -> dict[str, Any]:
    """What this rank reports: its coordinates, state and saved-activation bytes, median phase times, host and
    device memory."""
    mine = {"rank": dist.get_rank(), "pp_rank": par.pp_rank, "dp_rank": par.dp_rank, "tp_rank": par.tp_rank,
            "stage_ids": par.stage_ids, **state_bytes(par.chunks, par.optimizer), **activations,
            "phases_median_s": {k: statistics.median(v) for k, v in phases.items()},
            "host_phases_median_s": {k: statistics.median(v) for k, v in host_phases.items() if v},
            "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    mine.update(_device_memory(device))
    return mine


def _start_profiler(device: torch.device):
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = profile(activities=acts, record_shapes=False)
    prof.start()
    return prof


def run_jobs(jobs: list[ExecJob], timeout_s: float) -> list[dict[str, Any]] | None:
    """Run every job inside an already-started torchrun/Slurm world; rank 0 gets the results."""
    global _WATCHDOG
    if _WATCHDOG is None:
        _WATCHDOG = Watchdog(timeout_s + WATCHDOG_GRACE_S)
    device = _device(jobs[0].device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        # device_id binds the NCCL communicator to this rank's GPU (eager init; barriers use that GPU).
        kw = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **kw)
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    results = [run_job(job, device) for job in jobs]
    _tick("shutdown")
    return results if dist.get_rank() == 0 else None


def shutdown() -> None:
    """Wait for every rank, destroy the process group and stop the watchdog (trap 5: never skip this)."""
    global _WATCHDOG
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    if _WATCHDOG is not None:
        _WATCHDOG.stop()
        _WATCHDOG = None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="trainsim.kernels.execute_worker")
    ap.add_argument("--jobs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout-s", type=float, default=30.0)
    args = ap.parse_args(argv)
    with open(args.jobs) as f:
        jobs = [ExecJob.from_json(d) for d in json.load(f)]
    rank = int(os.environ.get("RANK", "0"))
    try:
        results = run_jobs(jobs, args.timeout_s)
        if results is not None:
            tmp = args.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(results, f)
            os.replace(tmp, args.out)
        shutdown()
    except Exception as e:  # noqa: BLE001 - any failure (collective timeout, crash): one line per rank, exit 1
        print(f"error: rank {rank}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              file=sys.stderr, flush=True)
        if os.environ.get("TRAINSIM_EXEC_TRACEBACK"):
            traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # Trap 5: skip interpreter teardown (gloo threads can abort it) once results are safely written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
