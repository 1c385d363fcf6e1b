"""Host side of `trainsim execute`: launch the worker under torchrun (or run inside an existing one),
run the single-process reference, and line the measurement up against the prediction.

No torch import at module level: the parent only validates, launches and compares.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from trainsim.cost_models import memory
from trainsim.specs import Scenario, SpecError, resolve

from .exec_config import ExecJob, check_job, dp_mode, world_size
from .launch import in_torchrun, run_torchrun

WORKER_MODULE = "trainsim.kernels.execute_worker"
OPTIMIZER_STATE_BYTES = {"adam": 8, "sgd": 4}  # fp32 Adam m+v; fp32 SGD momentum buffer
EXECUTOR_IMPL = "eager"  # the cost model's activation switch for plain torch autograd (no fused kernels)


class ExecutionError(RuntimeError):
    """The distributed run failed (a rank died, hung or raised); the message says which and why."""


@dataclass
class Launch:
    """Results of one launch (rank 0's view), or None on non-zero ranks of an external torchrun."""

    results: list[dict[str, Any]] | None
    elapsed_s: float


def run_jobs(jobs: list[ExecJob], *, timeout_s: float = 30.0, launch_timeout_s: float | None = None) -> Launch:
    """Run jobs of one world size: inside the current torchrun/Slurm world if there is one, else under a new torchrun.

    ``timeout_s`` bounds every collective and the per-rank watchdog (a hung rank makes all exit);
    ``launch_timeout_s`` bounds the whole launch (the process group is killed, no orphans).
    """
    if not jobs:
        return Launch([], 0.0)
    sizes = {world_size(j.spec) for j in jobs}
    if len(sizes) != 1:
        raise ValueError(f"jobs of one launch must share a world size, got {sorted(sizes)}")
    for j in jobs:
        check_job(j)
    n = sizes.pop()
    if in_torchrun():
        from . import execute_worker
        if int(os.environ["WORLD_SIZE"]) != n:
            raise SpecError("layout", f"the layout needs {n} processes but WORLD_SIZE={os.environ['WORLD_SIZE']}")
        t0 = time.perf_counter()
        results = execute_worker.run_jobs(jobs, timeout_s)
        execute_worker.shutdown()
        return Launch(results, time.perf_counter() - t0)
    if jobs[0].device == "cuda":
        import torch
        if torch.cuda.device_count() < n:
            raise SpecError("layout", f"needs {n} GPUs on this host, torch sees {torch.cuda.device_count()} "
                                      "(across nodes: start `trainsim execute` under torchrun/srun on every node)")
    with tempfile.TemporaryDirectory(prefix="trainsim-exec-") as tmp:
        jobs_path, out_path = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "result.json")
        with open(jobs_path, "w") as f:
            json.dump([j.to_json() for j in jobs], f)
        budget = launch_timeout_s or default_launch_timeout_s(jobs, timeout_s)
        res = run_torchrun(WORKER_MODULE, ["--jobs", jobs_path, "--out", out_path, "--timeout-s", str(timeout_s)],
                           n, timeout_s=budget, env={"TORCH_SHOW_CPP_STACKTRACES": "0"})
        if res.timed_out:
            raise ExecutionError(f"the {n}-process run did not finish within {budget:.0f} s and was killed")
        if res.returncode != 0 or not os.path.exists(out_path):
            raise ExecutionError(failure_message(res.stderr, res.returncode, n))
        with open(out_path) as f:
            return Launch(json.load(f), res.elapsed_s)


def default_launch_timeout_s(jobs: list[ExecJob], timeout_s: float) -> float:
    """Start-up and build allowance plus a generous bound per step."""
    steps = sum(j.steps + j.warmup for j in jobs)
    return 60.0 + 20.0 * len(jobs) + 2.0 * timeout_s + 10.0 * steps


def failure_message(stderr: str, returncode: int, n: int) -> str:
    """One line from the workers' own error lines, or from torchrun's root-cause report."""
    lines = [ln.strip() for ln in stderr.splitlines()]
    ours = [ln for ln in lines if ln.startswith("error: rank") or "injected fault" in ln]
    root = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", stderr, re.DOTALL)
    parts = []
    if root:
        parts.append(f"rank {root.group(1)} failed first (exit code {root.group(2)})")
    parts.extend(dict.fromkeys(_tidy(x.removeprefix("error: ")) for x in ours))
    if not parts:
        tail = [ln for ln in lines if ln][-1:] or ["no output"]
        parts.append(f"torchrun exited with {returncode}: {tail[0][:300]}")
    return f"{n}-process run failed: " + "; ".join(parts[:4])


def _tidy(line: str) -> str:
    """Drop gloo's source-path prefix and chatter: 'rank 0: RuntimeError: [.../pair.cc:553] Connection closed
    by peer [127.0.0.1]:4776. This is typically...' -> 'rank 0: RuntimeError: Connection closed by peer'."""
    line = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", line)
    line = re.sub(r"\s*\[[\d.]+\]:\d+", "", line)
    return line.split(". ")[0].rstrip(".")


# --- the single-process reference -------------------------------------------------------------------------

def reference_losses(job: ExecJob) -> list[float]:
    """Loss per step of the same model, seed, data and global batch in one process, no parallelism (fp32)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch

    from .parallelize import _make_optimizer, cross_entropy
    from .torch_model import ModelOptions, build_chunk, synthetic_batch

    s = job.spec
    m, t = s.model, s.training
    torch.manual_seed(job.seed)
    model = build_chunk(m, list(range(m.num_layers)), True, True, ModelOptions(), job.seed, torch.device("cpu"))
    opt = _make_optimizer(list(model.parameters()), job.optimizer, job.lr)
    n = t.global_batch // t.micro_batch
    out = []
    for step in range(job.warmup + job.steps):
        ids, targets = synthetic_batch(job.seed, step, t.global_batch, t.seq_len, m.vocab_size)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in zip(ids.chunk(n), targets.chunk(n)):
            loss = cross_entropy(model(x), y)
            (loss / n).backward()
            total += loss.detach().item()
        opt.step()
        out.append(total / n)
    return out


# --- prediction --------------------------------------------------------------------------------------------

def prediction_scenario(job: ExecJob) -> Scenario:
    """The scenario as executed: the executor's optimizer state size, torch's own framework behaviours, and HSDP's
    shard group (R replicas x S shards: Layout.dp_shard = dp / R, the layout the simulator costs as HSDP)."""
    s = job.spec
    # framework "torch": torch.distributed's own TP/FSDP2/DDP/pipelining behaviours (cost_models/framework.py).
    update = {"optimizer_bytes_per_param": OPTIMIZER_STATE_BYTES[job.optimizer], "framework": "torch"}
    if s.training.dtype != "fp32":
        # torch mixed precision (autocast / FSDP2 MixedPrecisionPolicy) keeps fp32 weights and fp32 gradients;
        # the low-precision copies are transient. Adam's state is then m and v only (no separate master copy).
        update.update(param_dtype_bytes=4, grad_dtype_bytes=4)
        # FSDP2 layouts cast through MixedPrecisionPolicy; the others run the step under torch.autocast
        # (parallelize.build: autocast_dtype), whose weight-cast cache and fp32 residual stream the memory
        # model then counts (cost_models/autocast.py).
        fsdp = dp_mode(s).startswith("fsdp")
        update["mixed_precision"] = "param_dtype" if fsdp else "autocast"
    training = s.training.model_copy(update=update)
    layout = s.layout
    if job.hsdp > 1:
        layout = layout.model_copy(update={"dp_shard": s.dp // job.hsdp})
    return resolve(s.model, s.cluster, layout, training, name=s.name)


def predicted_memory(job: ExecJob) -> list[dict[str, float]]:
    """Per pipeline stage: model-state bytes, saved activations per micro-batch and at the schedule's peak.

    Activations use the cost model's ``impl="eager"`` switch: the executor runs plain torch autograd
    (eager RMSNorm and SwiGLU, torch SequenceParallel saving gathered GEMM inputs), not fused kernels.
    Under torch.autocast the linears save the cached 16-bit weight copies, which the saved-tensor meter counts in
    every micro-batch (they are not parameter storages): ``saved_weight_casts`` is added to both activation
    figures; the cache itself is held once, in ``other`` (memory.autocast_cast_params).
    """
    scn = prediction_scenario(job)
    out = []
    for stage in range(scn.layout.pp):
        sm = memory.stage_memory(scn, stage, impl=EXECUTOR_IMPL)
        casts = memory.autocast_saved_weight_bytes(scn, stage)
        per_mb = memory.activation_bytes_per_microbatch(scn, stage, impl=EXECUTOR_IMPL)
        out.append({"params": sm.weights, "grads": sm.grads, "optimizer": sm.optimizer,
                    "activations_per_microbatch": per_mb + casts, "activations_peak": sm.activations + casts,
                    "saved_weight_casts": casts, "inflight_microbatches": sm.inflight_microbatches,
                    "other": sm.other, "total": sm.total, "allocated": sm.allocated})
    return out
