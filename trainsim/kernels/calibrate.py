"""The calibration worker: run the microbenchmark suite on every rank, fit, and (rank 0) write the profile.

Started by ``trainsim calibrate`` through torchrun (``python -m torch.distributed.run ... -m
trainsim.kernels.calibrate ...``), by the sbatch script of ``--emit-slurm``, or directly (one process:
no collectives). Compute microbenchmarks run on all ranks at once (as in training, where every rank
computes together) and rank 0's numbers are kept; collectives run on every group shape the world
allows. Backends: NCCL on cuda, gloo on cpu.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field

from trainsim.cost_models.kernel_work import attention_bytes, attention_flops, gemm_bytes, gemm_flops
from trainsim.cost_models.profile import CalibrationProfile, Fingerprint, LinearFit, save_profile
from trainsim.cost_models.profile_fit import fit_all_collectives, fit_linear, fit_three_term
from trainsim.specs import load_gpu, preset_names
from trainsim.specs.gpu_names import gpu_preset_for

SECTIONS = ("gemm", "attention", "memory", "eager", "copy", "collectives")


@dataclass
class SuitePlan:
    """What to measure. ``quick`` plans finish in well under a minute on one CPU core per rank."""

    hiddens: list[int]
    tokens: list[int]
    tps: list[int]
    attention: list[tuple[int, int, int, int]]  # (batch, heads, seq, dhead)
    mem_numels: list[int]
    copy_bytes: list[int]
    coll_bytes: list[int]
    warmup: int
    reps: int
    coll_reps: int
    max_point_s: float
    coll_budget_s: float  # per collective point
    coll_ops: list[str] = field(default_factory=lambda: ["all_reduce", "all_gather", "reduce_scatter",
                                                         "all_to_all", "broadcast", "send_recv"])


def suite_plan(device: str, quick: bool) -> SuitePlan:
    """Shapes and sizes per device class: transformer-layer GEMMs, SDPA, nccl-tests-like message sizes."""
    if device == "cuda":
        if quick:
            return SuitePlan(hiddens=[1024, 4096], tokens=[1024, 4096], tps=[1, 2, 8],
                             attention=[(1, 16, 1024, 128), (1, 32, 2048, 128), (2, 16, 4096, 128), (1, 8, 8192, 128)],
                             mem_numels=[1 << 20, 1 << 24, 1 << 27], copy_bytes=[1 << 20, 1 << 26, 1 << 28],
                             coll_bytes=[1 << s for s in range(10, 29, 3)], warmup=5, reps=20, coll_reps=20,
                             max_point_s=0.5, coll_budget_s=1.0)
        return SuitePlan(hiddens=[1024, 2048, 4096, 8192], tokens=[512, 2048, 8192], tps=[1, 2, 4, 8],
                         attention=[(b, h, s, d) for (b, h, s) in ((4, 16, 1024), (2, 32, 2048), (1, 32, 4096),
                                                                    (1, 16, 8192), (1, 8, 16384)) for d in (64, 128)],
                         mem_numels=[1 << s for s in range(18, 29, 2)], copy_bytes=[1 << s for s in range(16, 31, 2)],
                         coll_bytes=[1 << s for s in range(10, 31)], warmup=10, reps=50, coll_reps=30,
                         max_point_s=1.0, coll_budget_s=2.0)
    if quick:
        return SuitePlan(hiddens=[256, 1024], tokens=[128, 512], tps=[1, 2],
                         attention=[(1, 4, 128, 64), (1, 4, 256, 64), (1, 4, 512, 64), (1, 8, 256, 32), (2, 4, 1024, 64)],
                         mem_numels=[1 << 14, 1 << 17, 1 << 20, 1 << 22], copy_bytes=[],
                         coll_bytes=[1 << s for s in (12, 15, 18, 21, 24)], warmup=1, reps=5, coll_reps=11,
                         max_point_s=0.15, coll_budget_s=0.4)
    return SuitePlan(hiddens=[128, 256, 512, 1024, 2048], tokens=[64, 256, 1024], tps=[1, 2, 4],
                     attention=[(b, h, s, d) for (b, h, s) in ((1, 4, 128), (1, 4, 512), (2, 8, 256), (1, 4, 1024),
                                                               (1, 8, 2048)) for d in (32, 64)],
                     mem_numels=[1 << s for s in range(12, 25, 2)], copy_bytes=[],
                     coll_bytes=[1 << s for s in range(10, 27, 2)], warmup=3, reps=20, coll_reps=10,
                     max_point_s=1.0, coll_budget_s=2.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainsim.kernels.calibrate",
                                description="calibration worker (normally started by `trainsim calibrate`)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dtype", action="append", default=None, help="fp32|bf16|fp16|tf32 (repeatable)")
    p.add_argument("--out", required=True)
    p.add_argument("--skip", default="", help=f"comma list of {','.join(SECTIONS)}")
    p.add_argument("--reps", type=int)
    p.add_argument("--warmup", type=int)
    p.add_argument("--peak-preset", default=None, help="GPU preset whose peaks the efficiencies refer to")
    p.add_argument("--fit-min-bytes", type=float, default=None,
                   help="fit collectives on sizes >= this (default: 0, or 1 MiB when ranks outnumber CPU cores)")
    p.add_argument("--command", default="", help="the user's command line, recorded in the fingerprint")
    return p.parse_args(argv)


def _log(rank: int, msg: str) -> None:
    if rank == 0:
        print(f"[calibrate] {msg}", file=sys.stderr, flush=True)


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def preset_for_device(device_name: str) -> str | None:
    """The GPU preset whose datasheet peaks this device (torch.cuda.get_device_name) has, or None
    (specs.gpu_names: most specific name first; H100 PCIe/NVL have lower peaks than any preset)."""
    return gpu_preset_for(device_name)


def reference_peaks(device: str, device_name: str, override: str | None) -> tuple[str | None, dict[str, float]]:
    """The GPU preset matching the device (or ``override``) and its dense peaks per dtype."""
    name = override
    if name is None:
        if device == "cpu":
            name = "cpu"
        else:
            name = preset_for_device(device_name)
    if name is None or name not in preset_names("gpus"):
        return None, {}
    gpu = load_gpu(name)
    peaks = {str(k): float(v) for k, v in gpu.peak_flops.items()}
    return name, peaks


def fingerprint(device: str, world: int, nodes: int, backend: str, command: str):
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch

    if device == "cuda":
        dev_name = torch.cuda.get_device_name(torch.cuda.current_device())
        count = torch.cuda.device_count()
    else:
        dev_name = cpu_name()
        count = os.cpu_count() or 1
    nccl = None
    if device == "cuda":
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - NCCL missing on this build: report none
            nccl = None
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("NCCL_", "TORCH_NCCL_", "OMP_", "MKL_", "CUDA_VISIBLE", "GLOO_"))
           or k in ("LOCAL_WORLD_SIZE", "CUDA_DEVICE_MAX_CONNECTIONS", "NVIDIA_TF32_OVERRIDE", "PYTORCH_CUDA_ALLOC_CONF")}
    return Fingerprint(device=device, device_name=dev_name, device_count=count, world_size=world, nodes=nodes,
                       backend=backend, torch_version=torch.__version__, cuda_version=torch.version.cuda,
                       nccl_version=nccl, hostname=socket.gethostname(),
                       date=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
                       threads_per_process=torch.get_num_threads(), env=env, command=command)


def groups_to_measure(world: int, hosts: list[str]):
    """Group shapes (all containing rank 0): the world, one node, one rank per node, power-of-two prefixes."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels.microbench import Group

    def nodes_of(ranks: tuple[int, ...]) -> int:
        return len({hosts[r] for r in ranks})

    shapes: list[tuple[tuple[int, ...], str]] = [(tuple(range(world)), "world")]
    node0 = tuple(r for r in range(world) if hosts[r] == hosts[0])
    if 1 < len(node0) < world:
        shapes.append((node0, "one node"))
    firsts: dict[str, int] = {}
    for r in range(world):
        firsts.setdefault(hosts[r], r)
    per_node = tuple(sorted(firsts.values()))
    if len(per_node) > 1 and per_node != tuple(range(world)):
        shapes.append((per_node, "one rank per node"))
    k = 2
    while k < len(node0):
        shapes.append((tuple(range(k)), f"{k} ranks in a node"))
        k *= 2
    seen, out = set(), []
    for ranks, label in shapes:
        if ranks not in seen and len(ranks) > 1:
            seen.add(ranks)
            out.append((ranks, nodes_of(ranks), label))
    return [Group(ranks=r, nodes=n, label=lab) for r, n, lab in out]


def one_rank_mesh(rank: int, world: int):
    """A DeviceMesh of this rank alone (every rank creates every singleton group, as new_group requires):
    the executor's TP/FSDP2 wrapping runs on it with trivial collectives, so its DTensor/FSDP2 framework
    cost is measured apart from the gloo collectives, which have their own fits."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    groups = [dist.new_group(ranks=[r]) for r in range(world)]
    return DeviceMesh.from_group(groups[rank], "cpu", mesh_dim_names=("one",))


def attention_dtypes(measured: list[str]) -> list[str]:
    """SDPA dtypes: the measured 16/32-bit GEMM dtypes (TF32 is a GEMM mode, not an attention dtype); fp8
    training runs attention in bf16 (compute.py looks up the bf16 fit), so fp8 asks for bf16 attention
    (every fp8-capable GPU has bf16 tensor cores)."""
    out = [d for d in measured if d in ("fp32", "bf16", "fp16")]
    if "fp8" in measured and "bf16" not in out:
        out.append("bf16")
    return out


def memory_dtype(measured: list[str]) -> str:
    """Element type of the memory-bound ops: the first measured storage dtype; bf16 for fp8 training
    (its norms/activations run in bf16); fp32 for TF32 alone or when nothing else is measurable."""
    for d in measured:
        if d in ("fp32", "bf16", "fp16"):
            return d
    return "bf16" if "fp8" in measured else "fp32"


def build_profile(fp: Fingerprint, peak_preset: str | None, peaks: dict[str, float], gemm, attn, mem, copies,
                  colls, fit_min_bytes: float, notes: list[str]) -> CalibrationProfile:
    """Fit every section and assemble the profile (pure: no torch)."""
    gemm_fits = {}
    for dtype in sorted({p.dtype for p in gemm}):
        pts = [p for p in gemm if p.dtype == dtype]
        gemm_fits[dtype] = fit_three_term([gemm_flops(p.m, p.n, p.k) for p in pts],
                                          [gemm_bytes(p.m, p.n, p.k, dtype) for p in pts],
                                          [p.stats.median_s for p in pts])
    attn_fits = {}
    for dtype, pass_ in sorted({(p.dtype, p.pass_) for p in attn}):
        pts = [p for p in attn if p.dtype == dtype and p.pass_ == pass_]
        attn_fits[f"{dtype}/{pass_}"] = fit_three_term(
            [attention_flops(p.batch, p.heads, p.seq_q, p.seq_kv, p.dhead, p.causal, pass_) for p in pts],
            [attention_bytes(p.batch, p.heads, p.seq_q, p.seq_kv, p.dhead, dtype, pass_) for p in pts],
            [p.stats.median_s for p in pts])
    mem_fits: dict[str, LinearFit] = {}
    for op in sorted({p.op for p in mem}):
        pts = [p for p in mem if p.op == op]
        if len({p.nbytes for p in pts}) >= 2:
            mem_fits[op] = fit_linear([p.nbytes for p in pts], [p.stats.median_s for p in pts])
    if len({p.nbytes for p in mem}) >= 2:
        mem_fits["all"] = fit_linear([p.nbytes for p in mem], [p.stats.median_s for p in mem])
    copy_fits = {}
    for kind in sorted({p.op for p in copies}):
        pts = [p for p in copies if p.op == kind]
        if len({p.nbytes for p in pts}) >= 2:
            copy_fits[kind] = fit_linear([p.nbytes for p in pts], [p.stats.median_s for p in pts])
    coll_fits = fit_all_collectives(colls, min_size_bytes=fit_min_bytes, backend=fp.backend) if colls else []
    return CalibrationProfile(
        fingerprint=fp, reference_peak_flops=peaks, reference_preset=peak_preset,
        gemm_points=list(gemm), gemm_fits=gemm_fits, attention_points=list(attn), attention_fits=attn_fits,
        memory_points=list(mem), memory_fits=mem_fits, copy_points=list(copies), copy_fits=copy_fits,
        collective_points=list(colls), collective_fits=coll_fits, notes=notes,
    )


@dataclass
class _Run:
    """One rank's calibration run: its arguments, place in the world, device, plan, and what it measured."""

    args: argparse.Namespace
    rank: int
    world: int
    device: object                  # torch.device
    backend: str
    plan: SuitePlan
    cfg: object                     # microbench.BenchConfig
    hosts: list[str]
    notes: list[str]
    gemm: list = field(default_factory=list)
    attn: list = field(default_factory=list)
    mem: list = field(default_factory=list)
    copies: list = field(default_factory=list)
    colls: list = field(default_factory=list)
    dispatch: object = None
    eager: dict = field(default_factory=dict)
    optim: dict = field(default_factory=dict)
    dtensor_coll: dict = field(default_factory=dict)
    host_issue: dict = field(default_factory=dict)
    host_issue_chunk: dict = field(default_factory=dict)
    host_wrappers: dict = field(default_factory=dict)
    rank_rates: list[float] = field(default_factory=list)

    @property
    def distributed(self) -> bool:
        return self.world > 1


def _open_device(args: argparse.Namespace, local_rank: int):
    """(torch device, collective backend) of this rank, or None when --device cuda finds no CUDA device."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("error: device: --device cuda but torch sees no CUDA device", file=sys.stderr)
            return None
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def _gemm_dtypes(run: _Run, requested: list[str]) -> list[str]:
    """The requested GEMM dtypes this device runs; the others are noted and skipped."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels import microbench as mb

    dtypes = []
    for d in requested:
        reason = mb.gemm_dtype_unsupported(d, run.device)
        if reason:
            run.notes.append(f"{d} GEMMs not measured: {reason}")
            _log(run.rank, f"skipping {d}: {reason}")
        else:
            dtypes.append(d)
    return dtypes


def _measure_gemms(run: _Run, dtypes: list[str], skip: set[str]) -> None:
    """Transformer-layer GEMMs per dtype, then (distributed) every rank's overall GEMM rate.

    Every rank runs the same GEMM suite at once: its overall rate is this device's speed, and the ranks'
    spread is the part-to-part spread the simulator's slowest-GPU pace needs. Every rank joins the gather
    (a rank that measured no GEMM reports 0, which the spread leaves out).
    """
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch.distributed as dist

    from trainsim.kernels import microbench as mb

    plan = run.plan
    if "gemm" not in skip:
        shapes = mb.transformer_gemm_shapes(plan.hiddens, plan.tokens, plan.tps)
        for dtype in dtypes:
            t0 = time.perf_counter()
            run.gemm += mb.bench_gemms(shapes, dtype, run.cfg)
            _log(run.rank, f"gemm {dtype}: {len(shapes)} shapes in {time.perf_counter() - t0:.1f} s")
    if run.distributed:
        rate = 0.0
        if run.gemm:
            rate = sum(gemm_flops(p.m, p.n, p.k) for p in run.gemm) / sum(p.stats.median_s for p in run.gemm)
        run.rank_rates = [0.0] * run.world
        dist.all_gather_object(run.rank_rates, rate)


def _measure_attention_memory(run: _Run, dtypes: list[str], skip: set[str]) -> None:
    """SDPA shapes per dtype, memory-bound ops and the dispatch overhead."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels import microbench as mb

    plan, cfg = run.plan, run.cfg
    if "attention" not in skip:
        for dtype in attention_dtypes(dtypes):
            t0 = time.perf_counter()
            run.attn += mb.bench_attention(plan.attention, dtype, cfg)
            _log(run.rank, f"attention {dtype}: {len(plan.attention)} shapes in {time.perf_counter() - t0:.1f} s")
    if "memory" not in skip:
        t0 = time.perf_counter()
        run.mem += mb.bench_memory(plan.mem_numels, memory_dtype(dtypes), cfg)
        run.dispatch = mb.bench_dispatch(cfg)
        _log(run.rank, f"memory-bound ops: {len(run.mem)} points in {time.perf_counter() - t0:.1f} s")


def _measure_eager(run: _Run, skip: set[str]) -> None:
    """Eager-execution costs: on CPU the framework's per-op cost (on the critical path there; on CUDA it overlaps
    the asynchronous kernels), torch.optim's per-parameter loop and DTensor collectives (eager.py, compute.py);
    on a GPU the same tiny blocks (kernels with ~no work) time the host's eager issue of a block pass, which
    bounds every pass whose kernels are shorter (cost_models/host_issue.py)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels import microbench as mb

    if "eager" in skip:
        return
    t0 = time.perf_counter()
    if run.args.device == "cpu":
        mesh1 = one_rank_mesh(run.rank, run.world) if run.distributed else None
        run.eager = mb.bench_eager_overhead(run.cfg, mesh1)
        run.optim = mb.bench_optimizer(run.cfg, mesh1=mesh1)
        if run.distributed:
            from torch.distributed.device_mesh import init_device_mesh
            run.dtensor_coll = mb.bench_dtensor_collectives(run.cfg, init_device_mesh("cpu", (run.world,)))
        _log(run.rank, f"eager overhead and optimizers in {time.perf_counter() - t0:.1f} s")
    elif run.args.device == "cuda":
        from trainsim.kernels.host_issue_bench import bench_chunk_issue
        from trainsim.kernels.host_wrappers_bench import bench_host_wrappers

        run.host_issue = mb.bench_eager_overhead(run.cfg)
        run.host_issue_chunk = bench_chunk_issue(run.cfg)
        run.host_wrappers = bench_host_wrappers(run.cfg.device)
        _log(run.rank, f"host issue time of eager blocks in {time.perf_counter() - t0:.1f} s")


def _measure_copies(run: _Run, skip: set[str]) -> None:
    """Host<->device copies (devices only)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from trainsim.kernels import microbench as mb

    if "copy" not in skip and run.args.device == "cuda":
        t0 = time.perf_counter()
        run.copies += mb.bench_copies(run.plan.copy_bytes, run.cfg)
        _log(run.rank, f"copies: {len(run.copies)} points in {time.perf_counter() - t0:.1f} s")
    elif run.args.device == "cpu":
        run.notes.append("host<->device copies not measured: no device (cpu)")


def _measure_collectives(run: _Run, skip: set[str]) -> None:
    """Every collective op and size of the plan on every group shape the world allows (one process: none)."""
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch.distributed as dist

    from trainsim.kernels import microbench as mb

    if "collectives" in skip:
        return
    if not run.distributed:
        run.notes.append("collectives not measured: one process (run under torchrun with --nproc >= 2)")
        return
    plan, cfg = run.plan, run.cfg
    dist.barrier()
    for g in groups_to_measure(run.world, run.hosts):
        handle = None if len(g.ranks) == run.world else dist.new_group(ranks=list(g.ranks))
        g = mb.Group(ranks=g.ranks, nodes=g.nodes, handle=handle, label=g.label)
        t0 = time.perf_counter()
        est_bw = 1e9 if run.args.device == "cpu" else 20e9
        for op in plan.coll_ops:
            for size in plan.coll_bytes:
                reps = mb.collective_reps(size, plan.coll_reps, est_bw, plan.coll_budget_s)
                gcfg = mb.BenchConfig(device=run.device, warmup=max(1, min(cfg.warmup, 3)), reps=reps)
                pt = mb.bench_collective(op, size, g, gcfg)
                if pt is not None:
                    run.colls.append(pt)
            dist.barrier()
        _log(run.rank, f"collectives on {g.label} ({g.size} ranks, {g.nodes} node(s)): "
                       f"{time.perf_counter() - t0:.1f} s")


def _write_profile(run: _Run, t_start: float) -> None:
    """Fit what rank 0 measured and save the CalibrationProfile to --out."""
    args, notes = run.args, run.notes
    fit_min = args.fit_min_bytes
    if fit_min is None:
        oversubscribed = args.device == "cpu" and run.world > (os.cpu_count() or 1)
        fit_min = float(1 << 20) if oversubscribed else 0.0
        if oversubscribed:
            notes.append(f"{run.world} ranks on {os.cpu_count()} cores: collective fits use sizes >= 1 MiB "
                         "(scheduling floor below)")
    fp = fingerprint(args.device, run.world, len(set(run.hosts)), run.backend if run.distributed else "",
                     args.command)
    preset_name, peaks = reference_peaks(args.device, fp.device_name, args.peak_preset)
    if preset_name is None:
        notes.append("no GPU preset matches this device: efficiencies are absent, times are absolute")
    profile = build_profile(fp, preset_name, peaks, run.gemm, run.attn, run.mem, run.copies, run.colls, fit_min, notes)
    profile = profile.model_copy(update={"dispatch_overhead": run.dispatch, "eager_overhead": run.eager,
                                         "host_issue": run.host_issue, "host_issue_chunk": run.host_issue_chunk,
                                         "host_wrappers_s": run.host_wrappers,
                                         "optimizer_fits": run.optim, "rank_gemm_flops": run.rank_rates,
                                         "dtensor_collective_overhead_s": run.dtensor_coll})
    save_profile(profile, args.out)
    _log(run.rank, f"wrote {args.out} in {time.perf_counter() - t_start:.1f} s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    import torch
    import torch.distributed as dist

    from trainsim.kernels import microbench as mb

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    opened = _open_device(args, int(os.environ.get("LOCAL_RANK", "0")))
    if opened is None:
        return 2
    device, backend = opened
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    distributed = world > 1
    if distributed:
        kw = {"device_id": device} if args.device == "cuda" else {}
        dist.init_process_group(backend=backend, **kw)
    try:
        hosts = [socket.gethostname()] * world
        if distributed:
            dist.all_gather_object(hosts, socket.gethostname())
        plan = suite_plan(args.device, args.quick)
        cfg = mb.BenchConfig(device=device, warmup=args.warmup if args.warmup is not None else plan.warmup,
                             reps=args.reps or plan.reps, max_point_s=plan.max_point_s)
        run = _Run(args=args, rank=rank, world=world, device=device, backend=backend, plan=plan, cfg=cfg,
                   hosts=hosts, notes=[f"{'quick' if args.quick else 'full'} suite; times are per call, median used for fits"])
        requested = list(dict.fromkeys(args.dtype or (["bf16"] if args.device == "cuda" else ["fp32"])))
        dtypes = _gemm_dtypes(run, requested)
        torch.manual_seed(1234 + rank)
        _measure_gemms(run, dtypes, skip)
        _measure_attention_memory(run, dtypes, skip)
        _measure_eager(run, skip)
        _measure_copies(run, skip)
        _measure_collectives(run, skip)
        if rank == 0:
            _write_profile(run, t_start)
        if distributed:
            dist.barrier()
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: gloo occasionally aborts in its destructors at exit after a correct
    # run ("terminate called without an active exception"); the work is done and flushed.
    os._exit(code)
