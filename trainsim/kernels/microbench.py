"""Microbenchmarks (torch): GEMMs, SDPA attention, memory-bound ops, copies and collectives.

Every point is warmed up, then timed ``reps`` times; the profile keeps min/median/p99. On CUDA each
repetition is bracketed by CUDA events and synchronised; on CPU ``time.perf_counter`` brackets the call
(PyTorch CPU ops are synchronous). Collective repetitions start after a barrier and each one's time is
the maximum over the group's ranks (the slowest rank finishes the collective), as nccl-tests reports.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainsim.cost_models.eager import modelled_ops
from trainsim.cost_models.profile import (
    AttentionPoint,
    BandwidthPoint,
    CollectivePoint,
    EagerBlockOverhead,
    GemmPoint,
    OptimizerFit,
    Stats,
    attention_flops,
    gemm_flops,
)
from trainsim.cost_models.profile_fit import collective_point, timing_stats
from trainsim.specs import build_scenario

from .parallelize import _make_optimizer, tp_plan_block
from .torch_model import Block, ModelOptions

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
FP8_ALIGN = 16  # torch._scaled_mm (cuBLASLt fp8): k and n multiples of 16


@dataclass(frozen=True)
class BenchConfig:
    """How hard to measure: warm-up calls, timed repetitions, and a per-point time budget."""

    device: torch.device
    warmup: int = 2
    reps: int = 10
    max_point_s: float = 1.0  # stop repeating a point after this much timed work (>= 3 reps kept)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def _sync(cfg: BenchConfig) -> None:
    if cfg.cuda:
        torch.cuda.synchronize(cfg.device)


def cpu_clock() -> Callable[[], float]:
    """The CPU timer: this thread's CPU time when torch computes on this one thread, else wall time.

    On a shared host a descheduled rank's wall time measures its neighbours, not the hardware; with
    one intra-op thread (torchrun's default) all the op's work runs on the calling thread, so its CPU
    time is the op's cost. With more threads, wall time is the only faithful clock.
    """
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def time_fn(fn: Callable[[], object], cfg: BenchConfig, setup: Callable[[], object] | None = None) -> list[float]:
    """Per-repetition seconds of ``fn()`` (``setup()`` runs untimed before each call)."""
    clock = cpu_clock()
    for _ in range(cfg.warmup):
        if setup:
            setup()
        fn()
    _sync(cfg)
    times: list[float] = []
    spent = 0.0
    for _ in range(cfg.reps):
        if setup:
            setup()
        if cfg.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            _sync(cfg)
            start.record()
            fn()
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        else:
            t0 = clock()
            fn()
            dt = clock() - t0
        times.append(dt)
        spent += dt
        if spent > cfg.max_point_s and len(times) >= 3:
            break
    return times


# ---- shapes --------------------------------------------------------------------------------------
def transformer_gemm_shapes(hiddens: Sequence[int], tokens: Sequence[int], tps: Sequence[int],
                            backward_tp1: bool = True) -> list[tuple[int, int, int, str]]:
    """(m, n, k, label) of a GPT block's GEMMs: QKV, attention out, MLP up/down, split over TP.

    Forward C[T×out] = X[T×in]·W[in×out]; backward adds dgrad (m=T, n=in, k=out) and wgrad
    (m=in, n=out, k=T) for the unsplit layer. ffn = 4h. Duplicate shapes are dropped.
    """
    seen: set[tuple[int, int, int]] = set()
    out: list[tuple[int, int, int, str]] = []

    def add(m: int, n: int, k: int, label: str) -> None:
        if (m, n, k) not in seen and min(m, n, k) > 0:
            seen.add((m, n, k))
            out.append((m, n, k, label))

    for h in hiddens:
        f = 4 * h
        for t in tokens:
            for tp in tps:
                if h % tp or f % tp:
                    continue
                layers = {"qkv": (h, 3 * h // tp), "proj": (h // tp, h), "fc1": (h, f // tp), "fc2": (f // tp, h)}
                for name, (k_in, n_out) in layers.items():
                    add(t, n_out, k_in, f"{name} h={h} T={t} tp={tp} fwd")
                    if backward_tp1 and tp == 1:
                        add(t, k_in, n_out, f"{name} h={h} T={t} dgrad")
                        add(k_in, n_out, t, f"{name} h={h} T={t} wgrad")
    return out


# ---- compute -------------------------------------------------------------------------------------
def gemm_dtype_unsupported(dtype: str, device: torch.device) -> str | None:
    """Why GEMMs of ``dtype`` cannot be measured on ``device`` (None when they can).

    fp8 needs torch._scaled_mm with float8_e4m3fn and fp8 tensor cores (compute capability >= 8.9: Ada,
    Hopper, Blackwell); bf16 and TF32 need Ampere (8.0) tensor cores — torch would otherwise emulate
    bf16 and time something no training run uses.
    """
    cuda = device.type == "cuda"
    if dtype == "fp8":
        if not cuda:
            return "fp8 GEMMs need a CUDA GPU (torch._scaled_mm on fp8 tensor cores)"
        if not (hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")):
            return f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < (8, 9):
            return f"fp8 tensor cores need compute capability >= 8.9 (Ada/Hopper), this GPU has {major}.{minor}"
        return None
    if dtype not in TORCH_DTYPES:
        return f"unknown GEMM dtype {dtype!r}"
    if cuda and dtype in ("bf16", "tf32"):
        major, minor = torch.cuda.get_device_capability(device)
        if major < 8:
            return f"{dtype} tensor cores need compute capability >= 8.0 (Ampere), this GPU has {major}.{minor}"
    return None


def bench_gemms(shapes: Sequence[tuple[int, int, int, str]], dtype: str, cfg: BenchConfig) -> list[GemmPoint]:
    """torch.mm over the shapes, one dtype. ``tf32`` enables TF32 tensor cores for fp32 on CUDA; ``fp8``
    runs torch._scaled_mm (e4m3 operands, bf16 output, per-tensor scales) on shapes it accepts."""
    if dtype == "fp8":
        reason = gemm_dtype_unsupported(dtype, cfg.device)
        if reason:
            raise ValueError(reason)
        return [_fp8_gemm_point(m, n, k, label, cfg) for m, n, k, label in shapes if fp8_shape_ok(m, n, k)]
    tdt = TORCH_DTYPES[dtype]
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32 if cfg.cuda else None
    if cfg.cuda:
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        return [_gemm_point(m, n, k, label, dtype, tdt, cfg) for m, n, k, label in shapes]
    finally:
        if cfg.cuda:
            torch.backends.cuda.matmul.allow_tf32 = bool(prev_tf32)


def _gemm_point(m: int, n: int, k: int, label: str, dtype: str, tdt: torch.dtype, cfg: BenchConfig) -> GemmPoint:
    a = torch.randn(m, k, device=cfg.device, dtype=tdt)
    b = torch.randn(k, n, device=cfg.device, dtype=tdt)
    c = torch.empty(m, n, device=cfg.device, dtype=tdt)
    st = timing_stats(time_fn(lambda: torch.mm(a, b, out=c), cfg))
    return GemmPoint(m=m, n=n, k=k, dtype=dtype, label=label, stats=st, achieved_flops=gemm_flops(m, n, k) / st.median_s)


def fp8_shape_ok(m: int, n: int, k: int) -> bool:
    """Shapes torch._scaled_mm accepts (k and n multiples of 16; m is free)."""
    return m > 0 and n % FP8_ALIGN == 0 and k % FP8_ALIGN == 0


def fp8_gemm_operands(m: int, n: int, k: int, device: torch.device):
    """A (m×k, row-major) and B (k×n, column-major) in float8_e4m3fn plus fp32 unit scales, as _scaled_mm wants."""
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major k×n
    one = torch.ones((), device=device, dtype=torch.float32)
    return a, b, one, one


def _fp8_gemm_point(m: int, n: int, k: int, label: str, cfg: BenchConfig) -> GemmPoint:
    a, b, sa, sb = fp8_gemm_operands(m, n, k, cfg.device)
    st = timing_stats(time_fn(lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16), cfg))
    return GemmPoint(m=m, n=n, k=k, dtype="fp8", label=label, stats=st, achieved_flops=gemm_flops(m, n, k) / st.median_s)


def bench_attention(shapes: Sequence[tuple[int, int, int, int]], dtype: str, cfg: BenchConfig,
                    causal: bool = True) -> list[AttentionPoint]:
    """scaled_dot_product_attention forward and backward for (batch, heads, seq, dhead) shapes."""
    tdt = TORCH_DTYPES[dtype]
    points: list[AttentionPoint] = []
    for b, hds, s, d in shapes:
        points += _attention_points(b, hds, s, d, dtype, tdt, cfg, causal)
    return points


def _attention_points(b: int, hds: int, s: int, d: int, dtype: str, tdt: torch.dtype, cfg: BenchConfig,
                      causal: bool) -> list[AttentionPoint]:
    """Forward, then backward (forward re-run untimed before each backward) of one SDPA shape."""
    def make(req: bool) -> list[torch.Tensor]:
        return [torch.randn(b, hds, s, d, device=cfg.device, dtype=tdt, requires_grad=req) for _ in range(3)]

    q, k, v = make(False)
    st_f = timing_stats(time_fn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), cfg))
    qg, kg, vg = make(True)
    go = torch.randn(b, hds, s, d, device=cfg.device, dtype=tdt)
    state: dict[str, torch.Tensor] = {}

    def fwd() -> None:
        state["o"] = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

    def bwd() -> None:
        torch.autograd.grad(state.pop("o"), (qg, kg, vg), go)

    st_b = timing_stats(time_fn(bwd, cfg, setup=fwd))
    out = []
    for pass_, st in (("fwd", st_f), ("bwd", st_b)):
        fl = attention_flops(b, hds, s, s, d, causal, pass_)
        out.append(AttentionPoint(batch=b, heads=hds, seq_q=s, seq_kv=s, dhead=d, dtype=dtype, causal=causal,
                                  pass_=pass_, stats=st, achieved_flops=fl / st.median_s))
    return out


def backward_memory_ops(hidden: int) -> dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int]]:
    """Backward of the normalisations, softmax and activation: fn(x) whose autograd backward is timed.

    Each reads x (or y) and dy and writes dx: 3 tensors touched per element.
    """
    return {
        "layernorm_bwd": (lambda x: F.layer_norm(x, (hidden,)), 3),
        "rmsnorm_bwd": (lambda x: F.rms_norm(x, (hidden,)), 3),
        "softmax_bwd": (lambda x: torch.softmax(x, dim=-1), 3),
        "gelu_bwd": (lambda x: F.gelu(x), 3),
    }


def memory_ops(hidden: int) -> dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], object], int]]:
    """Memory-bound ops of a transformer block: fn(x, y) and tensors touched per element (reads + writes)."""
    return {
        "layernorm": (lambda x, y: F.layer_norm(x, (hidden,)), 2),
        "rmsnorm": (lambda x, y: F.rms_norm(x, (hidden,)), 2),
        "softmax": (lambda x, y: torch.softmax(x, dim=-1), 2),
        "gelu": (lambda x, y: F.gelu(x), 2),
        "add": (lambda x, y: x + y, 3),
        "copy": (lambda x, y: y.copy_(x), 2),
    }


def bench_memory(numels: Sequence[int], dtype: str, cfg: BenchConfig, hidden: int = 1024) -> list[BandwidthPoint]:
    """Achieved bandwidth of norms, softmax, gelu, residual add and copy over tensors of ``numels`` elements."""
    tdt = TORCH_DTYPES[dtype]
    esize = torch.tensor([], dtype=tdt).element_size()
    points: list[BandwidthPoint] = []
    for numel in numels:
        points += _memory_points(max(1, numel // hidden), hidden, dtype, tdt, esize, cfg)
    return points


def _memory_points(rows: int, hidden: int, dtype: str, tdt: torch.dtype, esize: int,
                   cfg: BenchConfig) -> list[BandwidthPoint]:
    """Every forward memory-bound op, then every measured backward, on (rows, hidden) tensors."""
    x = torch.randn(rows, hidden, device=cfg.device, dtype=tdt)
    y = torch.randn(rows, hidden, device=cfg.device, dtype=tdt)
    xr = x.detach().clone().requires_grad_(True)
    state: dict[str, torch.Tensor] = {}
    out = []

    def point(name: str, touches: int, st: Stats) -> BandwidthPoint:
        nbytes = float(touches * rows * hidden * esize)
        return BandwidthPoint(op=name, nbytes=nbytes, dtype=dtype, stats=st, bw_Bps=nbytes / st.median_s)

    for name, (fn, touches) in memory_ops(hidden).items():
        out.append(point(name, touches, timing_stats(time_fn(functools.partial(fn, x, y), cfg))))
    for name, (fn, touches) in backward_memory_ops(hidden).items():
        def fwd(fn=fn) -> None:
            state["y"] = fn(xr)

        def bwd() -> None:
            torch.autograd.grad(state.pop("y"), (xr,), y)

        out.append(point(name, touches, timing_stats(time_fn(bwd, cfg, setup=fwd))))
    return out


def bench_dispatch(cfg: BenchConfig):
    """Per-op fixed cost: an in-place add on a one-element tensor (launch + dispatch, no data)."""
    x = torch.zeros(1, device=cfg.device)
    many = BenchConfig(device=cfg.device, warmup=max(cfg.warmup, 5), reps=max(cfg.reps, 50), max_point_s=0.05)
    return timing_stats(time_fn(lambda: x.add_(1.0), many))


def bench_copies(sizes_bytes: Sequence[int], cfg: BenchConfig) -> list[BandwidthPoint]:
    """Host->device (pinned), device->host and device->device copies; nbytes = bytes transferred. CUDA only."""
    if not cfg.cuda:
        return []
    points: list[BandwidthPoint] = []
    for size in sizes_bytes:
        points += _copy_points(size // 4, cfg)
    return points


def _copy_points(n: int, cfg: BenchConfig) -> list[BandwidthPoint]:
    host = torch.empty(n, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(n, dtype=torch.float32, device=cfg.device)
    dev2 = torch.empty(n, dtype=torch.float32, device=cfg.device)
    cases = {
        "h2d": lambda: dev.copy_(host, non_blocking=True),
        "d2h": lambda: host.copy_(dev, non_blocking=True),
        "d2d": lambda: dev2.copy_(dev),
    }
    out = []
    for kind, fn in cases.items():
        st = timing_stats(time_fn(fn, cfg))
        out.append(BandwidthPoint(op=kind, nbytes=float(n * 4), dtype="fp32", stats=st, bw_Bps=n * 4 / st.median_s))
    return out


# ---- collectives ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Group:
    """A process group to measure: global ranks (rank 0 always first), node count, torch handle (None = world)."""

    ranks: tuple[int, ...]
    nodes: int
    handle: object = None
    label: str = ""

    @property
    def size(self) -> int:
        return len(self.ranks)


def _collective_call(op: str, size_bytes: int, group: Group, device: torch.device):
    """A zero-argument callable doing one collective of nccl-tests ``size`` bytes (fp32) on this rank."""
    n = group.size
    me = dist.get_rank()
    idx = group.ranks.index(me)
    pg = group.handle
    elems = size_bytes // 4
    if op == "all_reduce":
        t = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(t, group=pg)
    if op == "all_gather":
        out = torch.empty(elems, device=device)
        inp = torch.ones(elems // n, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # newer name; older torch lacks it
        return lambda: gather(out, inp, group=pg)
    if op == "reduce_scatter":
        inp = torch.ones(elems, device=device)
        out = torch.empty(elems // n, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, inp, group=pg)
    if op == "all_to_all":
        inp = torch.ones(elems, device=device)
        out = torch.empty(elems, device=device)
        return lambda: dist.all_to_all_single(out, inp, group=pg)
    if op == "broadcast":
        t = torch.ones(elems, device=device)
        return lambda: dist.broadcast(t, src=group.ranks[0], group=pg)
    if op == "send_recv":
        # nccl-tests sendrecv: every rank sends to the next and receives from the previous (a ring shift).
        send = torch.ones(elems, device=device)
        recv = torch.empty(elems, device=device)
        nxt, prv = group.ranks[(idx + 1) % n], group.ranks[(idx - 1) % n]

        def run() -> None:
            ops = [dist.P2POp(dist.isend, send, nxt, pg), dist.P2POp(dist.irecv, recv, prv, pg)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        return run
    raise ValueError(op)


def bench_collective(op: str, size_bytes: int, group: Group, cfg: BenchConfig) -> CollectivePoint | None:
    """Time one collective point on the group's ranks; returns the point on the group's first rank only.

    Must be called by every rank of the group (others return None without communicating).
    """
    me = dist.get_rank()
    if me not in group.ranks:
        return None
    n = group.size
    size_bytes = max(4 * n, (size_bytes // (4 * n)) * 4 * n)  # whole fp32 elements per rank
    fn = _collective_call(op, size_bytes, group, cfg.device)
    pg = group.handle
    barrier_dev = [cfg.device.index] if cfg.cuda and cfg.device.index is not None else None

    def barrier() -> None:
        if barrier_dev is not None:
            dist.barrier(group=pg, device_ids=barrier_dev)
        else:
            dist.barrier(group=pg)

    for _ in range(cfg.warmup):
        fn()
    _sync(cfg)
    times: list[float] = []
    # A fixed repetition count on every rank (no early stop: ranks must agree on the number of calls).
    for _ in range(cfg.reps):
        barrier()
        _sync(cfg)
        if cfg.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    worst = torch.tensor(times, dtype=torch.float64, device=cfg.device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=pg)
    if me != group.ranks[0]:
        return None
    st = timing_stats(worst.cpu().tolist())
    return collective_point(op, n, group.nodes, size_bytes, st, dtype="float", source="measured")


def collective_reps(size_bytes: int, base_reps: int, est_bw_Bps: float, budget_s: float) -> int:
    """Repetitions for one size: ``base_reps`` unless that would exceed ``budget_s`` at ``est_bw_Bps``."""
    per_call = 1e-4 + size_bytes / est_bw_Bps
    return max(3, min(base_reps, int(budget_s / per_call)))


# ---- eager framework overhead (CPU eager PyTorch: dispatch + autograd + module calls) -------------
def eager_block_styles() -> dict[str, dict]:
    """Tiny blocks of both executor styles (``trainsim.cost_models.eager.block_style`` keys), sized so
    their kernels do ~no work: the time of their forward/backward is the eager framework's own."""
    base = {"num_layers": 1, "hidden": 8, "num_heads": 2, "ffn_hidden": 32, "vocab_size": 16, "max_seq_len": 8,
            "tie_embeddings": False}
    return {
        "layernorm-gelu-learned": dict(base, name="eager-gpt"),
        "rmsnorm-swiglu-rope": dict(base, name="eager-llama", norm="rmsnorm", activation="swiglu",
                                    position_embedding="rope", bias=False),
    }


WRAPPERS = ("plain", "tp", "tp-sp", "fsdp")


def _wrap_block(block, wrapper: str, mesh1, gated: bool) -> None:
    """Apply the executor's own wrapping of a block (parallelize.tp_plan_block / fully_shard) on a 1-rank mesh."""
    if wrapper in ("tp", "tp-sp"):
        from torch.distributed.tensor.parallel import parallelize_module

        plan = tp_plan_block(wrapper == "tp-sp")
        if not gated:
            plan.pop("mlp.gate")
        parallelize_module(block, mesh1, plan)
    elif wrapper == "fsdp":
        from torch.distributed.fsdp import fully_shard
        fully_shard(block, mesh=mesh1, reshard_after_forward=True)


def bench_eager_overhead(cfg: BenchConfig, mesh1=None):
    """Per modelled op, the eager framework's fixed cost beyond one bare op call, forward and backward.

    A tiny block of the executor (``torch_model.Block``) is run forward and forward+backward; its time
    divided by the number of ops the cost model lists for it (``cost_models.flops.layer_ops``, each op
    launching several aten ops, views and autograd nodes in eager torch) is the per-op cost of eager
    execution; the bare dispatch of one op call (``bench_dispatch``) is subtracted by the cost model,
    because every calibrated kernel time already contains one.
    """
    out = {}
    wrappers = WRAPPERS if mesh1 is not None else ("plain",)
    for (style, model), wrapper in itertools.product(eager_block_styles().items(), wrappers):
        sc = build_scenario({"model": model, "cluster": "cpu-host", "gpus": 1},
                            {"dtype": "fp32", "seq_len": 8, "global_batch": 1})
        n_fwd, n_bwd = modelled_ops(sc)
        torch.manual_seed(0)
        block = Block(sc.model, ModelOptions()).to(cfg.device)
        if wrapper != "plain":
            _wrap_block(block, wrapper, mesh1, sc.model.gated_mlp)
        key = style if wrapper == "plain" else f"{style}+{wrapper}"
        fwd, bwd = _time_block(block, cfg)
        out[key] = EagerBlockOverhead(fwd=fwd, bwd=bwd, fwd_ops=n_fwd, bwd_ops=n_bwd)
    return out


def _time_block(block, cfg: BenchConfig) -> tuple[Stats, Stats]:
    """Forward, and backward (forward re-run untimed before each), of a block on a (1, 8, hidden) input."""
    hidden = next(p for p in block.parameters()).shape[-1]
    x = torch.randn(1, 8, hidden, device=cfg.device, requires_grad=True)
    g = torch.randn_like(x)
    many = BenchConfig(device=cfg.device, warmup=max(cfg.warmup, 5), reps=max(cfg.reps, 30), max_point_s=0.2)
    fwd = timing_stats(time_fn(lambda: block(x), many))
    state: dict[str, torch.Tensor] = {}

    def run_fwd() -> None:
        state["y"] = block(x)

    def run_bwd() -> None:
        state.pop("y").backward(g)

    return fwd, timing_stats(time_fn(run_bwd, many, setup=run_fwd))


def bench_optimizer(cfg: BenchConfig, names: Sequence[str] = ("adam", "sgd"), mesh1=None):
    """torch.optim step and zero_grad time vs parameter tensors and elements: t = a·tensors + elements/rate.

    Two parameter sets: many one-element tensors (the per-tensor cost of torch's per-parameter loop: on
    CPU Adam/SGD run the single-tensor path, ~8 aten ops per tensor for Adam) and one large tensor (the
    per-element streaming cost). Optimizers as the executor builds them (Adam; SGD with momentum 0.9).
    """
    def make(name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return _make_optimizer(params, name, lr=1e-3)  # exactly what the executor builds

    big_n, small_count = 1 << 20, 200
    out = {}
    many = BenchConfig(device=cfg.device, warmup=max(cfg.warmup, 3), reps=max(cfg.reps, 10), max_point_s=0.3)

    def param(n: int, dtensor: bool) -> torch.Tensor:
        t = torch.zeros(n, device=cfg.device)
        if dtensor:  # FSDP2 / TP parameters are DTensors: every optimizer op goes through DTensor dispatch
            from torch.distributed.tensor import Shard, distribute_tensor
            t = distribute_tensor(t, mesh1, [Shard(0)])
        return torch.nn.Parameter(t)

    variants = [(n, False) for n in names] + ([(n, True) for n in names] if mesh1 is not None else [])
    for name, dtensor in variants:
        small = [param(1, dtensor) for _ in range(small_count)]
        big = [param(big_n, dtensor)]
        per = {}
        for label, params in (("small", small), ("big", big)):
            for p in params:
                p.grad = torch.full_like(p, 1e-3)
            opt = make(name, params)
            per[label] = timing_stats(time_fn(opt.step, many)).median_s
        per_tensor = per["small"] / small_count
        per_elem = max(per["big"] - per_tensor, 1e-12) / big_n
        zp = [param(1, dtensor) for _ in range(small_count)]
        zopt = make(name, zp)

        def grads(zp=zp) -> None:
            for p in zp:
                p.grad = torch.zeros_like(p)

        zero = timing_stats(time_fn(lambda zopt=zopt: zopt.zero_grad(set_to_none=True), many, setup=grads)).median_s
        out[f"{name}-dtensor" if dtensor else name] = OptimizerFit(per_tensor_s=per_tensor, elements_per_s=1.0 / per_elem,
                                 zero_grad_per_tensor_s=zero / small_count, big_elements=big_n,
                                 small_tensors=small_count)
    return out


def bench_dtensor_collectives(cfg: BenchConfig, mesh, size_bytes: int = 1 << 16) -> dict[str, float]:
    """Seconds per call that DTensor redistribution adds to the raw c10d collective, on ``mesh`` (all ranks).

    TP under ``parallelize_module`` communicates by redistributing DTensors (Partial -> Replicate is an
    all-reduce, Shard -> Replicate an all-gather, Partial -> Shard a reduce-scatter) through functional
    collectives; the sharding bookkeeping and the functional wrappers cost host time on top of the
    collective itself. Both are timed after a barrier (wall clock, this rank's median: robust to the
    multi-millisecond outliers a shared host adds); the difference is kept (>= 0). Every rank must call
    this; rank 0's numbers are returned (others get {}).
    """
    # torch loads on use only (tests/test_layering.py: predict and plan run without it)
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    n = mesh.size()
    elems = max(n, size_bytes // 4 // n * n)
    many = BenchConfig(device=cfg.device, warmup=max(cfg.warmup, 3), reps=max(cfg.reps, 30))

    def wall(fn) -> float:
        for _ in range(many.warmup):
            fn()
        times = []
        for _ in range(many.reps):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    full, part = torch.ones(elems, device=cfg.device), torch.ones(elems // n, device=cfg.device)
    out_full, out_part = torch.empty(elems, device=cfg.device), torch.empty(elems // n, device=cfg.device)
    partial = DTensor.from_local(torch.ones(elems, device=cfg.device), mesh, [Partial()], run_check=False)
    shard = DTensor.from_local(torch.ones(elems // n, device=cfg.device), mesh, [Shard(0)], run_check=False)
    cases = {
        "all_reduce": (lambda: dist.all_reduce(full),
                       lambda: partial.redistribute(mesh, [Replicate()]).to_local()),
        "all_gather": (lambda: dist.all_gather_into_tensor(out_full, part),
                       lambda: shard.redistribute(mesh, [Replicate()]).to_local()),
        "reduce_scatter": (lambda: dist.reduce_scatter_tensor(out_part, full),
                           lambda: partial.redistribute(mesh, [Shard(0)]).to_local()),
    }
    out = {op: max(0.0, wall(dt) - wall(raw)) for op, (raw, dt) in cases.items()}
    return out if dist.get_rank() == 0 else {}
