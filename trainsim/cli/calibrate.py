"""`trainsim calibrate`: measure this machine (or import nccl-tests output) into a calibration profile.

Three modes:
  measure        trainsim calibrate --device cpu|cuda [--quick] --out PROFILE.json [--nproc N]
                 (starts torchrun itself unless already inside one; rank 0 writes the profile)
  sbatch script  trainsim calibrate --device cuda --out PROFILE.json --emit-slurm job.sbatch --nodes N --gpus-per-node G
  nccl-tests     trainsim calibrate --import-nccl-tests FILE [FILE ...] [--nccl-group-size N] [--nccl-nodes K]
                 --out PROFILE.json [--merge-into EXISTING.json]
torch is imported only by the measuring worker, never by this module.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from trainsim.cli import calibrate_runs
from trainsim.cli.common import float_range, int_range
from trainsim.cost_models.profile_limits import PROFILE_DTYPES
from trainsim.kernels.calibrate import SECTIONS  # the worker's own list (imports torch lazily)
from trainsim.kernels.launch import MAX_GPUS_PER_NODE, MAX_SLURM_NODES
from trainsim.kernels.shell_values import refuse_control_chars
from trainsim.specs import SpecError, preset_names
from trainsim.specs.safe_write import check_output_path, write_atomic

WORKER = "trainsim.kernels.calibrate"

EPILOG = """\
examples:
  trainsim calibrate --device cpu --quick --out cpu.json           # 2 gloo ranks on this host, < 1 min
  trainsim predict --model tiny-gpt --cluster cpu-host --calibration cpu.json
  trainsim calibrate --device cuda --out h100.json --nproc 8       # one node, NCCL
  trainsim calibrate --device cuda --out c.json --emit-slurm c.sbatch --nodes 4 --gpus-per-node 8
  trainsim calibrate --import-nccl-tests all_reduce.txt ag.json --nccl-group-size 16 --nccl-nodes 2 \\
                     --out c.json --merge-into h100.json
  trainsim calibrate --from-runs runs.csv megatron_64gpu.log --cluster dgx-h100 --out mine.json
  trainsim calibrate --from-runs titan.log --config llama3_8b.toml --cluster dgx-h100 --out mine.json

nccl-tests import: text tables and -J JSON are both read. The collective comes from the file
("# Collective test starting", the JSON args, or a file name like all_gather_perf*.txt) or --nccl-op;
the group size and node count from the "# Rank" lines (JSON config.devices) or the flags.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="microbenchmarks (or nccl-tests output) -> calibration profile",
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="what to measure (default cpu)")
    p.add_argument("--quick", action="store_true", help="fewer shapes, sizes and repetitions (CI: < 1 min on CPU)")
    p.add_argument("--dtype", action="append", choices=PROFILE_DTYPES,
                   help="GEMM/attention dtype, repeatable (default fp32 on cpu, bf16 on cuda; fp8: torch._scaled_mm "
                        "GEMMs on compute capability >= 8.9, bf16 attention, skipped with a note on older GPUs)")
    p.add_argument("--out", required=True, help="profile JSON to write")
    p.add_argument("--nproc", type=int_range(1, 1024),
                   help="processes torchrun starts on this host (default: 2 on cpu, all GPUs on cuda)")
    p.add_argument("--timeout", type=int_range(1, 7 * 86400), default=900, help="seconds before the run is killed")
    p.add_argument("--skip", default="", help=f"comma list of sections to skip: {','.join(SECTIONS)}")
    p.add_argument("--reps", type=int_range(1, 100_000), help="timed repetitions per point")
    p.add_argument("--warmup", type=int_range(0, 10_000), help="warm-up calls per point")
    p.add_argument("--peak-preset", help="GPU preset whose dense peaks efficiencies refer to (default: by device name)")
    p.add_argument("--fit-min-bytes", type=float_range(0, 2.0**40), help="fit collective alpha/beta on sizes >= this many bytes")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    calibrate_runs.add_args(p)
    slurm = p.add_argument_group("cluster runs (sbatch)")
    slurm.add_argument("--emit-slurm", metavar="FILE", help="write an sbatch script that runs calibration with srun")
    slurm.add_argument("--nodes", type=int_range(1, MAX_SLURM_NODES), help="nodes in the job (default 1)")
    slurm.add_argument("--gpus-per-node", type=int_range(1, MAX_GPUS_PER_NODE), help="torchrun processes per node (default 8)")
    slurm.add_argument("--partition", help="sbatch --partition")
    slurm.add_argument("--account", help="sbatch --account")
    slurm.add_argument("--time", help="sbatch --time (default 00:30:00)")
    nccl = p.add_argument_group("nccl-tests import")
    nccl.add_argument("--import-nccl-tests", nargs="+", metavar="FILE", help="nccl-tests outputs (text or -J JSON)")
    nccl.add_argument("--nccl-op", help="collective, if the files do not say (all_reduce, all_gather, ...)")
    nccl.add_argument("--nccl-group-size", type=int_range(1, 1_000_000), help="ranks in the test")
    nccl.add_argument("--nccl-nodes", type=int_range(1, 1_000_000), help="nodes the ranks spanned")
    nccl.add_argument("--nccl-prefer", choices=("out_of_place", "in_place"),
                      help="which nccl-tests column to use (default out_of_place)")
    nccl.add_argument("--merge-into", metavar="PROFILE", help="existing profile to merge the collectives into")
    p.set_defaults(func=run)


def _check_out(path: str, inputs: list | None = None) -> Path:
    """The profile's path: writable and none of the files the command reads (nccl-tests outputs, run logs and
    their configs; a --merge-into profile may be updated in place)."""
    return check_output_path(refuse_control_chars(path, "out"), "out", inputs=inputs or ())


def _check_skip(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    for s in items:
        if s not in SECTIONS:
            raise SpecError("skip", f"unknown section {s!r} (known: {', '.join(SECTIONS)})")
    return items


def worker_args(args: argparse.Namespace, device: str) -> list[str]:
    """The worker's command-line arguments mirroring the user's flags."""
    # --out=PATH keeps a path that starts with '-' one value, not a flag of the worker.
    path = str(Path(args.out).resolve()) if args.emit_slurm is None else args.out
    out = ["--device", device, f"--out={path}"]
    if args.quick:
        out.append("--quick")
    for d in args.dtype or []:
        out += ["--dtype", d]
    if args.skip:
        out += ["--skip", ",".join(_check_skip(args.skip))]
    if args.reps:
        out += ["--reps", str(args.reps)]
    if args.warmup is not None:
        if args.warmup < 0:
            raise SpecError("warmup", f"must be >= 0, got {args.warmup}")
        out += ["--warmup", str(args.warmup)]
    if args.peak_preset:
        if args.peak_preset not in preset_names("gpus"):
            raise SpecError("peak_preset", f"unknown GPU preset {args.peak_preset!r} (known: {', '.join(preset_names('gpus'))})")
        out += ["--peak-preset", args.peak_preset]
    if args.fit_min_bytes is not None:
        if not (args.fit_min_bytes >= 0):
            raise SpecError("fit_min_bytes", "must be >= 0")
        out += ["--fit-min-bytes", repr(float(args.fit_min_bytes))]
    out += ["--command", "python -m " + WORKER + " " + " ".join(shlex.quote(a) for a in out)]
    return out


# Flags that belong to one mode only: given in another, they would be silently ignored.
IMPORT_ONLY = ("nccl_op", "nccl_group_size", "nccl_nodes", "nccl_prefer")
SLURM_ONLY = ("nodes", "gpus_per_node", "partition", "account", "time")
MEASURE_ONLY = ("nproc",)
# what the measuring worker reads (a measuring run's and an sbatch script's): nothing to act on elsewhere
WORKER_FLAGS = ("quick", "dtype", "skip", "reps", "warmup", "peak_preset", "fit_min_bytes")
FROM_RUNS_ONLY = ("config", "cluster", "no_loo")


def _given(value) -> bool:
    """Whether a flag was given: its default is None (or False for a switch, "" for text); 0 is a value."""
    return not (value is None or value is False or value == "")


def _refuse_other_modes(args: argparse.Namespace) -> None:
    mode = ("from_runs" if args.from_runs else "import_nccl_tests" if args.import_nccl_tests
            else "emit_slurm" if args.emit_slurm is not None else "measure")
    foreign = {"import_nccl_tests": SLURM_ONLY + MEASURE_ONLY + WORKER_FLAGS + FROM_RUNS_ONLY,
               "emit_slurm": IMPORT_ONLY + ("merge_into",) + MEASURE_ONLY + FROM_RUNS_ONLY,
               "measure": IMPORT_ONLY + ("merge_into",) + SLURM_ONLY + FROM_RUNS_ONLY,
               "from_runs": IMPORT_ONLY + SLURM_ONLY + MEASURE_ONLY + WORKER_FLAGS}[mode]
    given = [f"--{k.replace('_', '-')}" for k in foreign if _given(getattr(args, k, None))]
    if given:
        where = {"import_nccl_tests": "--import-nccl-tests", "emit_slurm": "--emit-slurm",
                 "measure": "a measuring run", "from_runs": "--from-runs"}[mode]
        raise SpecError(given[0].lstrip("-").replace("-", "_"), f"not used by {where} ({', '.join(given)} given)")


def run(args: argparse.Namespace) -> int:
    out = _check_out(args.out, [*(args.import_nccl_tests or []), *(args.from_runs or []),
                                *(getattr(args, "config", None) or []), *(getattr(args, "cluster", None) or [])])
    _refuse_other_modes(args)
    if args.from_runs:
        return calibrate_runs.run_from_runs(args, out)
    if args.import_nccl_tests:
        if args.device or args.emit_slurm is not None:
            raise SpecError("import_nccl_tests", "cannot be combined with --device or --emit-slurm")
        return _run_import(args, out)
    device = args.device or "cpu"
    if device == "cpu" and "fp8" in (args.dtype or []):
        raise SpecError("dtype", "fp8 GEMMs need --device cuda (torch._scaled_mm on fp8 tensor cores)")
    if args.emit_slurm is not None:
        return _run_emit_slurm(args, device)
    return _run_measure(args, device, out)


# ---- nccl-tests import ----------------------------------------------------------------------------
def _run_import(args: argparse.Namespace, out: Path) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.cost_models.nccl_tests_import import import_nccl_tests
    from trainsim.cost_models.profile import canonical_op, load_profile, save_profile

    op = canonical_op(args.nccl_op) if args.nccl_op else None
    base = load_profile(args.merge_into) if args.merge_into else None
    profile = import_nccl_tests(args.import_nccl_tests, op=op, group_size=args.nccl_group_size,
                                nodes=args.nccl_nodes, merge_into=base, prefer=args.nccl_prefer or "out_of_place")
    save_profile(profile, out)
    profile = load_profile(out)
    _print_summary(profile, args.json, elapsed_s=None)
    return 0


# ---- sbatch -------------------------------------------------------------------------------------------
def _run_emit_slurm(args: argparse.Namespace, device: str) -> int:
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels.launch import slurm_script

    path = check_output_path(refuse_control_chars(args.emit_slurm, "emit_slurm"), "emit_slurm")
    nodes, per_node = args.nodes or 1, args.gpus_per_node or 8
    text = slurm_script(WORKER, worker_args(args, device), nodes=nodes, gpus_per_node=per_node,
                        job_name="trainsim-calibrate", time_limit=args.time or "00:30:00", partition=args.partition,
                        account=args.account)
    write_atomic(path, text, "emit_slurm", mode=0o755)
    print(f"wrote {path}: sbatch it to calibrate {nodes} node(s) x {per_node} GPU(s); "
          f"rank 0 writes {args.out}")
    return 0


# ---- measuring ---------------------------------------------------------------------------------------
def _run_measure(args: argparse.Namespace, device: str, out: Path) -> int:
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels.launch import in_torchrun, run_torchrun

    wargs = worker_args(args, device)
    t0 = time.time()
    if in_torchrun():
        from trainsim.kernels import calibrate as worker  # torch is imported here, inside kernels

        code = worker.main(wargs)
        if code == 0 and int(os.environ.get("RANK", "0")) == 0:
            from trainsim.cost_models.profile import load_profile
            _print_summary(load_profile(out), args.json, time.time() - t0)
        return code
    if device == "cuda":
        from trainsim.kernels.launch import cuda_device_count

        gpus = cuda_device_count()
        if gpus == 0:
            raise SpecError("device", "--device cuda but torch sees no CUDA device on this host")
        if args.nproc and args.nproc > gpus:
            raise SpecError("nproc", f"{args.nproc} processes but only {gpus} GPUs on this host")
    nproc: int | str = args.nproc or (2 if device == "cpu" else "gpu")
    res = run_torchrun(WORKER, wargs, nproc, timeout_s=float(args.timeout))
    if res.timed_out:
        print(f"error: calibration did not finish within {args.timeout} s (killed)", file=sys.stderr)
        return 1
    worker_error = next((ln for ln in res.stderr.splitlines() if ln.startswith("error: ")), None)
    written = out.exists() and out.stat().st_mtime >= t0 - 1
    if res.returncode != 0 or not written:
        if worker_error:
            field, _, reason = worker_error[len("error: "):].partition(": ")
            raise SpecError(field or "calibrate", reason or worker_error)
        tail = "\n".join(res.stderr.strip().splitlines()[-15:])
        print(f"error: calibration workers failed (torchrun exit {res.returncode}); last output:\n{tail}",
              file=sys.stderr)
        return 1
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.cost_models.profile import load_profile

    _print_summary(load_profile(out), args.json, res.elapsed_s)
    return 0


# ---- summary ---------------------------------------------------------------------------------------
def summarize(profile) -> dict:
    """The key fitted numbers of a profile, for people and for --json."""
    peaks = profile.reference_peak_flops
    gemm = {}
    for dtype, f in profile.gemm_fits.items():
        peak = peaks.get(dtype)
        gemm[dtype] = {"flops_per_s": f.flops_per_s, "overhead_s": f.overhead_s, "bytes_per_s": f.bytes_per_s,
                       "e_max": (f.flops_per_s / peak) if peak else None, "rms_rel_error": f.rms_rel_error,
                       "points": f.n_points}
    attn = {k: {"flops_per_s": f.flops_per_s, "overhead_s": f.overhead_s, "rms_rel_error": f.rms_rel_error}
            for k, f in profile.attention_fits.items()}
    mem = {op: profile.memory_bw_Bps(op) for op in profile.memory_ops_measured()}
    coll = [{"op": f.op, "group_size": f.group_size, "nodes": f.nodes, "alpha_s": f.alpha_s,
             "busbw_Bps": f.busbw_Bps, "rms_rel_error": f.rms_rel_error, "source": f.source}
            for f in profile.collective_fits]
    return {"profile": profile.describe(), "reference_preset": profile.reference_preset, "gemm": gemm,
            "attention": attn, "memory_bw_Bps": mem, "kernel_overhead_s": profile.kernel_overhead_s(),
            "eager_overhead_per_op_s": {k: {"fwd": v.per_op_s("fwd"), "bwd": v.per_op_s("bwd")}
                                        for k, v in profile.eager_overhead.items()},
            "optimizers": {k: {"per_tensor_s": f.per_tensor_s, "elements_per_s": f.elements_per_s,
                               "zero_grad_per_tensor_s": f.zero_grad_per_tensor_s}
                           for k, f in profile.optimizer_fits.items()},
            "dtensor_collective_overhead_s": dict(profile.dtensor_collective_overhead_s),
            "copy_bw_Bps": {k: f.bw_Bps for k, f in profile.copy_fits.items()}, "collectives": coll,
            "notes": list(profile.notes)}


def _print_summary(profile, as_json: bool, elapsed_s: float | None) -> None:
    s = summarize(profile)
    if elapsed_s is not None:
        s["elapsed_s"] = elapsed_s
    if as_json:
        print(json.dumps(s, indent=1))
        return
    print(f"calibration profile: {s['profile']}")
    for dtype, g in s["gemm"].items():
        eff = f" = {g['e_max']:.2f} of {s['reference_preset']} peak" if g["e_max"] else ""
        print(f"  GEMM {dtype}: {g['flops_per_s'] / 1e9:.1f} GFLOP/s asymptotic{eff}, overhead "
              f"{g['overhead_s'] * 1e6:.1f} us; fit rms {g['rms_rel_error']:.0%} over {g['points']} shapes")
    for key, a in s["attention"].items():
        print(f"  attention {key}: {a['flops_per_s'] / 1e9:.1f} GFLOP/s, overhead {a['overhead_s'] * 1e6:.1f} us; "
              f"fit rms {a['rms_rel_error']:.0%}")
    if s["memory_bw_Bps"]:
        bw = ", ".join(f"{op} {v / 1e9:.1f}" for op, v in s["memory_bw_Bps"].items() if v)
        print(f"  memory-bound ops (GB/s at the largest size): {bw}")
    if s["kernel_overhead_s"] is not None:
        print(f"  per-op dispatch: {s['kernel_overhead_s'] * 1e6:.1f} us")
    for style, v in s["eager_overhead_per_op_s"].items():
        print(f"  eager overhead per modelled op ({style} block): fwd {v['fwd'] * 1e6:.1f} us, "
              f"bwd {v['bwd'] * 1e6:.1f} us")
    for name, o in s["optimizers"].items():
        print(f"  optimizer {name}: {o['per_tensor_s'] * 1e6:.1f} us/tensor + {o['elements_per_s'] / 1e9:.2f} G elements/s, "
              f"zero_grad {o['zero_grad_per_tensor_s'] * 1e6:.2f} us/tensor")
    if s["dtensor_collective_overhead_s"]:
        ov = ", ".join(f"{k} +{v * 1e6:.0f} us" for k, v in s["dtensor_collective_overhead_s"].items())
        print(f"  DTensor redistribution beyond the raw collective: {ov}")
    for kind, v in s["copy_bw_Bps"].items():
        print(f"  copy {kind}: {v / 1e9:.1f} GB/s")
    for c in s["collectives"]:
        print(f"  {c['op']:<14} {c['group_size']} ranks/{c['nodes']} node(s): alpha {c['alpha_s'] * 1e6:.1f} us, "
              f"busbw {c['busbw_Bps'] / 1e9:.2f} GB/s (fit rms {c['rms_rel_error']:.0%}, {c['source']})")
    for n in s["notes"]:
        print(f"  note: {n}")
    if elapsed_s is not None:
        print(f"elapsed {elapsed_s:.1f} s")
