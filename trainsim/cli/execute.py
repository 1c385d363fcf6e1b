"""`trainsim execute`: run a scenario's layout for real with torch.distributed and compare with the prediction.

Launches itself under torchrun (tp·pp·dp·cp processes), or runs inside a torchrun/Slurm world that is
already set up (RANK and WORLD_SIZE in the environment; rank 0 prints). CPU defaults: the ``cpu-host``
cluster, fp32, the ``tiny-gpt`` model, seq_len 128, global batch 8 — each overridable like `predict`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainsim.cli.common import (
    OVERRIDE_FLAGS,
    add_scenario_args,
    float_range,
    imply_schedule,
    int_range,
    positive_int,
    warn_beyond_published,
)
from trainsim.specs import SpecError, build_scenario, load_scenario_file
from trainsim.specs.safe_write import check_output_dir

CPU_DEFAULTS = {"model": "tiny-gpt", "cluster": "cpu-host", "dtype": "fp32", "seq_len": 128, "global_batch": 8}


def register(sub) -> None:
    p = sub.add_parser("execute", help="run a plan for real (torchrun) and compare with the prediction",
                       description=__doc__)
    add_scenario_args(p, optimizer=False)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="run on CPU ranks (gloo) or one GPU per rank (NCCL); default cpu")
    p.add_argument("--steps", type=int_range(1, 100_000), default=5, help="timed optimizer steps")
    p.add_argument("--warmup", type=int_range(1, 10_000), default=1,
                   help="untimed steps first (the first also measures saved activations)")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                   help="adam (8 B/param of fp32 state) or sgd with momentum (4 B/param)")
    p.add_argument("--lr", type=float_range(0, 1000, lo_open=True), default=None, help="learning rate (adam 1e-3, sgd 0.05)")
    p.add_argument("--seed", type=int_range(0, 2**63 - 1), default=1234, help="seed of the synthetic data and weights")
    p.add_argument("--hsdp", type=positive_int, default=None, metavar="R",
                   help="with --zero 3: HSDP, R replicas x dp/R shards (default: dp / layout.dp_shard, else 1)")
    p.add_argument("--timeout-s", type=float_range(0, 86400, lo_open=True), default=30.0,
                   help="a rank with no progress for this long ends the run (dead or hung peer)")
    p.add_argument("--check", action="store_true", help="also run the single-process reference and compare losses")
    p.add_argument("--no-predict", action="store_true", help="skip the engine's step-time prediction")
    p.add_argument("--json", action="store_true", help="one JSON object: measured, predicted, errors")
    p.add_argument("--profile-trace", metavar="DIR", help="write a torch.profiler Chrome trace per rank to DIR")
    p.add_argument("--inject-fault", choices=("die", "hang"), help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def scenario_for_execute(args: argparse.Namespace):
    """The scenario from file and flags, with the CPU defaults filling what neither gives."""
    raw = load_scenario_file(args.scenario) if args.scenario else {}
    overrides = {key: getattr(args, attr, None) for attr, key in OVERRIDE_FLAGS.items()}
    imply_schedule(overrides, raw)
    training_raw = raw.get("training") or {}
    if args.device == "cpu":
        for key, value in CPU_DEFAULTS.items():
            given = overrides.get(key) is not None or key in raw or (isinstance(training_raw, dict) and key in training_raw)
            if not given:
                overrides[key] = value
    if overrides.get("gpus") is None and raw.get("gpus") is None:
        layout_raw = raw.get("layout") or {}
        dims = {d: overrides.get(d) or (layout_raw.get(d) if isinstance(layout_raw, dict) else None) or 1
                for d in ("tp", "pp", "cp", "dp")}
        if all(isinstance(v, int) for v in dims.values()):
            overrides["gpus"] = dims["tp"] * dims["pp"] * dims["cp"] * dims["dp"]
    scenario = build_scenario(raw, overrides)
    if scenario.cluster.pools is not None:  # its measurement would be compared with a mixed-pool prediction
        raise SpecError("cluster.pools", "execute runs on this machine's devices, one kind; predict mixed GPU "
                                         "pools with predict or plan")
    if (args.device == "cpu") != (scenario.cluster.gpu.kind == "cpu"):  # report refuses the pairing too
        raise SpecError("cluster", f"--device {args.device} runs on {'host CPU ranks' if args.device == 'cpu' else 'GPUs'}"
                                   f" but the cluster's device is {scenario.cluster.gpu.name} ({scenario.cluster.gpu.kind}):"
                                   " its measurement would be compared with another device's prediction; give a "
                                   + ("CPU cluster (cpu-host)" if args.device == "cpu" else "GPU cluster"))
    return scenario


FP32_LOSS_TOL = 1e-4  # fp32 against the fp32 reference: only summation order differs
LOW_PRECISION_LOSS_REL_TOL = 0.01  # bf16/fp16 autocast or FSDP2 param_dtype against the fp32 reference


def loss_tolerance(dtype: str, reference: list[float]) -> float:
    """Largest |loss - reference| accepted by --check: 1e-4 for fp32. With bf16/fp16 compute the reference
    (fp32, one process) rounds differently from the first GEMM on, so the equivalence test does not apply;
    1 % of the largest reference loss (about 2.5 bf16 unit roundoffs) is a loose sanity bound that a
    blown-up or NaN loss fails, not a proof of the layout (untested on a GPU: set from bf16's precision)."""
    if dtype == "fp32":
        return FP32_LOSS_TOL
    return LOW_PRECISION_LOSS_REL_TOL * max((abs(x) for x in reference), default=1.0)


def losses_match(losses: list[float], reference: list[float], tol: float) -> bool:
    """Every step's loss within ``tol`` of the reference; a NaN/inf loss never matches (max() of diffs would
    silently skip a NaN that is not first)."""
    return len(losses) == len(reference) and all(abs(a - b) <= tol for a, b in zip(losses, reference))


def replicas(scenario, hsdp: int | None) -> int:
    """HSDP replicas to run: ``--hsdp`` when given, else the ones ``layout.dp_shard`` implies (dp / shard group)."""
    return hsdp if hsdp is not None else scenario.dp_replicas


def run(args: argparse.Namespace) -> int:
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels.exec_config import make_job
    from trainsim.kernels.executor import ExecutionError, reference_losses, run_jobs
    from trainsim.reports.execution import compare, format_comparison

    scenario = scenario_for_execute(args)
    lr = args.lr if args.lr is not None else (0.05 if args.optimizer == "sgd" else 1e-3)
    if args.profile_trace:
        check_output_dir(args.profile_trace, "profile_trace")
    profile = None
    if args.calibration:  # read and checked before any process starts
        from trainsim.cost_models.profile import load_profile
        profile = load_profile(args.calibration)
    job = make_job(scenario, device=args.device, steps=args.steps, warmup=args.warmup, seed=args.seed,
                   optimizer=args.optimizer, lr=lr, hsdp=replicas(scenario, args.hsdp), profile_dir=args.profile_trace or "",
                   inject_fault=args.inject_fault or "", label="execute")
    # After every check that can refuse (exit 2 stays one line), before the run starts.
    warn_beyond_published(scenario.num_gpus, scenario.training.global_batch, scenario.training.seq_len)
    try:
        launch = run_jobs([job], timeout_s=args.timeout_s)
    except ExecutionError as e:
        print(f"error: execute: {e}", file=sys.stderr)
        return 1
    if launch.results is None:  # a non-zero rank of an external torchrun: rank 0 reports
        _exit_inside_torchrun(0)
    reference = reference_losses(job) if args.check else None
    comparison = compare(job, launch.results[0], calibration=profile, reference=reference,
                         with_prediction=not args.no_predict)
    if args.json:
        print(json.dumps(comparison, indent=2))
    else:
        print(format_comparison(comparison))
    code = 0
    if reference is not None:
        tol = loss_tolerance(scenario.training.dtype, reference)
        if not losses_match(launch.results[0]["losses"], reference, tol):
            print(f"error: execute: losses differ from the single-process reference by more than {tol:.3g}",
                  file=sys.stderr)
            code = 1
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels.launch import in_torchrun
    if in_torchrun():
        _exit_inside_torchrun(code)
    return code


def _exit_inside_torchrun(code: int) -> None:
    """Under an external torchrun, skip interpreter teardown after the group is destroyed (notes trap 5)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
