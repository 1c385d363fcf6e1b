"""Start a trainsim worker module under torchrun (or srun), or notice that we already are under one.

No torch import here: the parent process only builds a command line and waits, so `trainsim calibrate`
/ `trainsim execute` can launch workers without paying for `import torch` twice. Workers get
OMP_NUM_THREADS=1 (torchrun's own default for multi-process jobs), because on a shared CPU extra
intra-op threads make every rank slower (see shared notes, trap 6).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from trainsim.kernels.shell_values import safe_args, slurm_name, slurm_time
from trainsim.specs.errors import SpecError


def in_torchrun(env: dict[str, str] | None = None) -> bool:
    """True when this process was started by torchrun/srun-with-torchrun env (RANK and WORLD_SIZE set)."""
    e = os.environ if env is None else env
    return "RANK" in e and "WORLD_SIZE" in e


def cuda_device_count() -> int:
    """GPUs torch can see on this host (imports torch; 0 without CUDA)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def free_port() -> int:
    """An unused TCP port on localhost for a standalone rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_command(module: str, args: list[str], nproc: int | str, nnodes: int = 1,
                     standalone: bool = True, rdzv_endpoint: str | None = None) -> list[str]:
    """``python -m torch.distributed.run ... -m <module> <args>``; standalone uses a private localhost rendezvous."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if standalone and nnodes == 1:
        # --standalone picks port 29400 by default; a free port avoids clashes between concurrent jobs.
        cmd += ["--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                f"--rdzv-id=trainsim-{os.getpid()}"]
    else:
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d"]
        if rdzv_endpoint:
            cmd.append(f"--rdzv-endpoint={rdzv_endpoint}")
    cmd += ["-m", module, *args]
    return safe_args(cmd, "command line")  # an argv list (no shell), but no control character either


def worker_env(extra: dict[str, str] | None = None, threads: int = 1) -> dict[str, str]:
    """The environment for workers: ours, plus one intra-op thread per process unless already set."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env.setdefault("MKL_NUM_THREADS", env["OMP_NUM_THREADS"])
    # Make `python -m trainsim...` importable from a source checkout too.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if extra:
        env.update(extra)
    return env


@dataclass
class LaunchResult:
    returncode: int
    elapsed_s: float
    stdout: str
    stderr: str
    timed_out: bool = False


def run_torchrun(module: str, args: list[str], nproc: int | str, timeout_s: float = 600.0,
                 env: dict[str, str] | None = None, capture: bool = True) -> LaunchResult:
    """Run ``module`` on ``nproc`` local processes under torchrun and wait (bounded by ``timeout_s``).

    The whole process group is killed on timeout, so no orphaned ranks survive.
    """
    try:
        if importlib.util.find_spec("torch") is None:
            raise SpecError("device", "torch is not installed (pip install 'trainsim[torch]')")
    except ValueError:
        pass
    cmd = torchrun_command(module, args, nproc)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=worker_env(env), stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None, text=True, start_new_session=True)
    installed, previous = _sigterm_raises()
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return LaunchResult(proc.returncode, time.perf_counter() - t0, out or "", err or "")
    except subprocess.TimeoutExpired:
        out, err = _kill_group(proc)
        return LaunchResult(-1, time.perf_counter() - t0, out or "", err or "", timed_out=True)
    except BaseException:  # Ctrl-C or SIGTERM of this process: its ranks (their own session) go with it
        _kill_group(proc)
        raise
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _kill_group(proc: subprocess.Popen) -> tuple[str | None, str | None]:
    """SIGTERM the launch's process group, SIGKILL it after 10 s (at once on a second interrupt); its remaining
    output."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        return proc.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        _sigkill_group(proc)
        return proc.communicate()
    except BaseException:
        _sigkill_group(proc)
        raise


def _sigkill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _sigterm_raises() -> tuple[bool, object]:
    """In the main thread, make SIGTERM raise SystemExit (so the launch's cleanup runs): (installed, the previous
    handler); (False, None) in another thread, where signals cannot be set."""
    if threading.current_thread() is not threading.main_thread():
        return False, None

    def _exit(signum, _frame):
        raise SystemExit(128 + signum)
    return True, signal.signal(signal.SIGTERM, _exit)


MAX_SLURM_NODES = 100_000  # 10x the largest published training job's nodes (Llama 3: 16,384 GPUs = 2,048 nodes)
MAX_GPUS_PER_NODE = 72  # an NVL72 rack as one node is the largest scale-up domain sold (GB200 NVL72)


def check_script_values(nodes: int, gpus_per_node: int, job_name: str, time_limit: str, partition: str | None,
                        account: str | None) -> None:
    """SpecError naming the first value an sbatch script cannot take as it is."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_SLURM_NODES:
        raise SpecError("nodes", f"must be a whole number in 1..{MAX_SLURM_NODES}, got {nodes!r}")
    per_node = gpus_per_node
    if isinstance(per_node, bool) or not isinstance(per_node, int) or not 1 <= per_node <= MAX_GPUS_PER_NODE:
        raise SpecError("gpus_per_node", f"must be a whole number in 1..{MAX_GPUS_PER_NODE}, got {gpus_per_node!r}")
    slurm_name(job_name, "job_name")
    slurm_time(time_limit, "time")
    if partition is not None:
        slurm_name(partition, "partition", allow_list=True)
    if account is not None:
        slurm_name(account, "account")


def slurm_script(module: str, args: list[str], nodes: int, gpus_per_node: int, job_name: str = "trainsim",
                 time_limit: str = "00:30:00", partition: str | None = None, account: str | None = None,
                 python: str = "python") -> str:
    """An sbatch script: one srun task per node, each running torchrun over its GPUs with a c10d rendezvous.

    Every value is checked against its Slurm syntax (shell_values) and every argument is shell-quoted, so no
    value can add a line, a directive or a command to the script."""
    check_script_values(nodes, gpus_per_node, job_name, time_limit, partition, account)
    safe_args([module, python, *args], "calibrate")
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        "#SBATCH --exclusive",
        f"#SBATCH --time={time_limit}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if account:
        lines.append(f"#SBATCH --account={account}")
    worker_args = " ".join(shlex.quote(a) for a in args)
    lines += [
        "",
        "# Written by trainsim. One torchrun per node; rank 0 writes the result.",
        "set -euo pipefail",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_ADDR=$head_node",
        "export MASTER_PORT=${MASTER_PORT:-29500}",
        "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}",
        "# Report NCCL's choices in the log; the profile records NCCL_* variables too.",
        "export NCCL_DEBUG=${NCCL_DEBUG:-WARN}",
        "",
        "# One task per node, given the node's CPUs: a step's task otherwise gets Slurm's default of one CPU,",
        "# and every torchrun worker of the node would share that core (host-side timings would be wrong).",
        "srun --kill-on-bad-exit=1 --ntasks-per-node=1 \\",
        "  --cpus-per-task=\"$SLURM_CPUS_ON_NODE\" --cpu-bind=none \\",
        f"  {shlex.quote(python)} -m torch.distributed.run \\",
        f"    --nnodes={nodes} --nproc-per-node={gpus_per_node} \\",
        "    --rdzv-backend=c10d --rdzv-endpoint=\"$head_node:$MASTER_PORT\" --rdzv-id=\"$SLURM_JOB_ID\" \\",
        f"    -m {shlex.quote(module)} {worker_args}",
        "",
    ]
    return "\n".join(lines)
