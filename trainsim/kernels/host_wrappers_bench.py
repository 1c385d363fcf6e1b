"""Host seconds of the Python-level wrappers Megatron's legacy layer runs around its aten ops, per call.

Megatron's ``ParallelTransformerLayer`` (Megatron-LM 2021-2022, Megatron-DeepSpeed) reaches many of its kernels
through Python ``torch.autograd.Function`` subclasses (the tensor-parallel region mappings, apex's fused layer
norm, the fused softmax, the bias-GeLU function), TorchScript-compiled functions (bias-dropout-add, bias-GeLU) and,
under activation checkpointing, its reentrant ``CheckpointFunction``, whose backward recomputes the block and calls
``torch.autograd.backward`` again. A dispatch counter sees the aten ops inside them, not the wrappers: each
``Function.apply`` builds a context and a Python graph node that the autograd engine calls back in backward, each
TorchScript call runs its graph executor, and each checkpoint saves and restores the RNG states and starts a
nested backward.

Each wrapper is timed here in a chain of ``CHAIN`` = (10, 40) calls on tiny tensors, forward and backward apart;
the slope between the two chain lengths is its per-call time, free of the chain's fixed start. The unit is one
plain aten op dispatched from Python with autograd recording (``y * 1.0``, a ``MulBackward0`` node), the same
unit ``cost_models.host_issue.ATEN_DISPATCH_S`` prices, so the results are ratios that carry to another host:

* ``function_identity``: a Function whose forward returns its input and whose backward returns the gradient
  (Megatron's ``copy_to_tensor_model_parallel_region`` / ``reduce_from_tensor_model_parallel_region`` at their
  identity halves), forward and backward;
* ``function_wrap``: a Function around one aten op each way (``torch.mul``; apex's ``FusedLayerNormAffineFunction``
  calls one extension kernel each way) less the same op called bare with autograd recording its backward;
* ``script_call``: a ``torch.jit.script`` bias-dropout-add less the same function eager;
* ``reentrant_checkpoint``: ``torch.utils.checkpoint(use_reentrant=True)`` around a one-op module less the module
  called plain, per call; its backward less the plain backward and the recomputed forward (DeepSpeed's
  ``CheckpointFunction`` is "adapted from torch.utils.checkpoint", its docstring says, as Megatron's is);
* ``rng_fork``: Megatron's ``get_cuda_rng_tracker().fork()`` around attention dropout: two gets and two sets of
  the device's RNG state in a context manager.

``python -m trainsim.kernels.host_wrappers_bench --out FILE`` writes them as JSON (benchmarks/data holds a run).
With ``--deepspeed`` (DeepSpeed installed; not a trainsim dependency) it also times DeepSpeed's own
``checkpointing.checkpoint``, the function Megatron-DeepSpeed's pipeline module calls per layer, the same way as the
reentrant checkpoint (``deepspeed_checkpoint``), in a one-rank gloo group on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from trainsim.kernels.calibrate import cpu_name

CHAIN = (10, 40)
WIDTH = 16


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class _Scale(torch.autograd.Function):
    """A Function around one aten op each way (``torch.mul``), called through the same binding as the bare op it
    is compared with, so the difference is the Function's own cost."""

    @staticmethod
    def forward(ctx, x):
        return torch.mul(x, 2.0)

    @staticmethod
    def backward(ctx, g):
        return torch.mul(g, 2.0)


def _bias_dropout_add(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, prob: float) -> torch.Tensor:
    return residual + F.dropout(x + bias, p=prob, training=True)


@functools.cache
def scripted_bias_dropout_add():
    """``_bias_dropout_add`` compiled by TorchScript, as Megatron's ``bias_dropout_add_fused_train`` is (TorchScript
    is deprecated in recent torch, which warns; Megatron's layer uses it, so it is what is timed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(_bias_dropout_add)


class _OneOp(torch.nn.Module):
    def forward(self, x):
        return x * 1.0


def _rng_fork(device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    get, put = ((torch.cuda.get_rng_state, torch.cuda.set_rng_state) if device.type == "cuda"
                else (torch.get_rng_state, torch.set_rng_state))
    tracked = get()

    @contextlib.contextmanager
    def fork():
        nonlocal tracked
        orig = get()
        put(tracked)
        try:
            yield
        finally:
            tracked = get()
            put(orig)
    return fork


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _chain_slope(step: Callable, x: torch.Tensor, reps: int) -> tuple[float, float]:
    """(forward, backward) host seconds per call of ``step`` from chains of ``CHAIN`` calls (module doc)."""
    med = {}
    for n in CHAIN:
        fwd, bwd = [], []
        for r in range(reps + 10):
            _sync(x.device)
            t0 = time.perf_counter()
            y = x
            for _ in range(n):
                y = step(y)
            y = y.sum()
            t1 = time.perf_counter()
            y.backward()
            t2 = time.perf_counter()
            if r >= 10:
                fwd.append(t1 - t0)
                bwd.append(t2 - t1)
        med[n] = (statistics.median(fwd), statistics.median(bwd))
    lo, hi = CHAIN
    return tuple((med[hi][i] - med[lo][i]) / (hi - lo) for i in range(2))


def _deepspeed_checkpoint() -> Callable:
    """DeepSpeed's activation checkpoint in a one-rank gloo group (its CPU accelerator has no streams, so the
    module's device and transport stream are set up front, which its first call would otherwise do)."""
    import os

    import deepspeed
    from deepspeed.runtime.activation_checkpointing import checkpointing

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, rank=0, world_size=1)
    checkpointing.cuda_device, checkpointing.transport_stream = torch.device("cpu"), None
    return checkpointing.checkpoint


def measure(device: torch.device, reps: int = 300, deepspeed: bool = False) -> dict:
    """Per-call (forward, backward) seconds of each wrapper and of the unit aten op on ``device`` (module doc)."""
    x = torch.randn(8, 1, WIDTH, device=device, requires_grad=True)
    b = torch.zeros(WIDTH, device=device, requires_grad=True)
    one = _OneOp()
    fork = _rng_fork(device)
    scripted = scripted_bias_dropout_add()

    def forked(y):
        with fork():
            return y * 1.0

    steps = {
        "unit_aten_op": lambda y: y * 1.0,
        "identity_function": _Identity.apply,
        "scale": lambda y: torch.mul(y, 2.0),
        "scale_function": _Scale.apply,
        "bias_dropout_add_eager": lambda y: _bias_dropout_add(y, b, y, 0.1),
        "bias_dropout_add_script": lambda y: scripted(y, b, y, 0.1),
        "one_op_checkpointed": lambda y: checkpoint(one, y, use_reentrant=True),
        "one_op_forked": forked,
    }
    if deepspeed:
        ds_checkpoint = _deepspeed_checkpoint()
        steps["one_op_deepspeed_checkpointed"] = lambda y: ds_checkpoint(one, y)
    return {name: _chain_slope(step, x, reps) for name, step in steps.items()}


def extras(times: dict) -> dict[str, tuple[float, float]]:
    """Each wrapper's (forward, backward) host seconds per call (module doc): what it adds to the ops it wraps."""
    unit_f, unit_b = times["unit_aten_op"]

    def extra(a: str, base: str) -> tuple[float, float]:
        return times[a][0] - times[base][0], times[a][1] - times[base][1]

    def checkpointed(a: str) -> tuple[float, float]:
        # the checkpoint's backward recomputes the op and runs its backward: both are the plain op's
        return times[a][0] - unit_f, times[a][1] - unit_b - unit_f

    out = {
        "function_identity": tuple(times["identity_function"]),
        "function_wrap": extra("scale_function", "scale"),
        "script_call": extra("bias_dropout_add_script", "bias_dropout_add_eager"),
        "reentrant_checkpoint": checkpointed("one_op_checkpointed"),
        "rng_fork": extra("one_op_forked", "unit_aten_op"),
    }
    if "one_op_deepspeed_checkpointed" in times:
        out["deepspeed_checkpoint"] = checkpointed("one_op_deepspeed_checkpointed")
    return out


def ratios(times: dict) -> dict:
    """``extras`` in unit aten ops (the unit op's forward seconds), rounded to 3 decimals."""
    unit_f = times["unit_aten_op"][0]
    return {k: [round(f / unit_f, 3), round(b / unit_f, 3)] for k, (f, b) in extras(times).items()}


def bench_host_wrappers(device: torch.device, reps: int = 100, trials: int = 3) -> dict[str, tuple[float, float]]:
    """``trainsim calibrate``'s measurement of the wrappers on its device's host: (forward, backward) seconds per
    call (``extras``), the median of ``trials``, a negative difference (timing noise around nothing) stored as 0."""
    runs = [extras(measure(device, reps)) for _ in range(trials)]
    return {k: tuple(max(0.0, statistics.median(r[k][i] for r in runs)) for i in range(2)) for k in runs[0]}


def fingerprint(device: torch.device) -> dict:
    """Where the timings were taken: device, CPU, torch and Python versions."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = {"device": name, "processor": platform.processor() or platform.machine(), "cpu": cpu_name(),
           "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads()}
    from importlib.metadata import PackageNotFoundError, version

    try:
        out["deepspeed"] = version("deepspeed")
    except PackageNotFoundError:
        out["deepspeed"] = None
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--trials", type=int, default=3, help="independent measurements; the median ratio is kept")
    p.add_argument("--out", help="write JSON here (default: print)")
    p.add_argument("--deepspeed", action="store_true", help="also time DeepSpeed's checkpoint (DeepSpeed installed)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    trials = [ratios(measure(device, args.reps, args.deepspeed)) for _ in range(args.trials)]
    units = {k: [statistics.median(t[k][i] for t in trials) for i in range(2)] for k in trials[0]}
    out = {"fingerprint": fingerprint(device), "chain": list(CHAIN), "reps": args.reps, "trials": trials,
           "units_per_call": units,
           "note": "(forward, backward) cost per call in unit aten ops (y * 1.0 with autograd), median of trials"}
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
