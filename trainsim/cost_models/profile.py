"""The calibration profile: measured hardware behaviour that replaces datasheet defaults (pure, no torch).

A profile is one schema-versioned JSON file written by ``trainsim calibrate`` (or imported from
nccl-tests). It holds the device fingerprint, the raw measured points (min/median/p99 per point) and
small fitted models the cost functions query:

* GEMM:       t(m,n,k) = c0 + F/P + B/W  (F = 2mnk FLOPs, B = bytes of A, B and C) per dtype, so
              efficiency = F / (t · peak) rises with arithmetic intensity and size to e_max = P/peak.
* attention:  the same three-term model for SDPA forward and backward (FLOPs counted as below).
* memory:     t(bytes) = alpha + bytes/bw for memory-bound ops (norms, softmax, activations, adds, copies).
* copies:     the same for host->device, device->host, device->device (when a device exists).
* eager overhead (CPU): per modelled op, the eager framework's fixed cost (module calls, views, autograd
  recording and backward nodes) measured on tiny executor blocks of each style, forward and backward.
* DTensor collectives (CPU): seconds a DTensor redistribution adds to the raw c10d collective, per op.
* optimizers: torch.optim step time = (per_tensor_s + zero_grad_per_tensor_s) · tensors + elements /
  elements_per_s (Adam, SGD; zero_grad per tensor included).
* collectives per (op, group_size, nodes): t(size) = alpha + beta·size, where ``size`` is nccl-tests'
  "size" column (bytes): the buffer for all_reduce/broadcast/send_recv, the gathered output for
  all_gather, the full input for reduce_scatter, the per-rank send buffer for all_to_all.
  algbw = size / t; busbw = algbw · factor (nccl-tests' PERFORMANCE.md factors, see busbw_factor).

Every query returns ``None`` when the quantity was not measured: callers then fall back to the
GPUSpec / ClusterSpec defaults. Times are seconds, sizes bytes, rates bytes/s or FLOP/s.

The FLOPs and bytes the GEMM and attention fits are fitted against: kernel_work.py.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainsim.cost_models import collectives
from trainsim.cost_models.kernel_work import attention_bytes, attention_flops, gemm_bytes, gemm_flops
from trainsim.cost_models.profile_limits import (
    MAX_FLOPS,
    MAX_MEASURED_S,
    MAX_POINT_BYTES,
    MIN_RATE_PER_S,
    Seconds,
    unknown_name,
)
from trainsim.cost_models.run_factors import RunCalibration
from trainsim.specs.errors import SpecError, from_validation_error
from trainsim.specs.loaders import check_finite
from trainsim.specs.safe_read import parse_json, read_text
from trainsim.specs.safe_write import write_atomic
from trainsim.specs.spec_config import SPEC_CONFIG

PROFILE_SCHEMA_VERSION = 4
# Versions this trainsim reads: 1 lacks the eager-overhead and optimizer sections (added in 2, optional);
# 2 lacks the per-rank GEMM rates (added in 3, optional); 3 lacks the run calibration (added in 4, optional).
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4)
# Ranks a measured speed spread needs before it replaces the GPU spec's (one 8-GPU node): the sample spread
# of fewer devices is too noisy to stand for a fleet of thousands.
MIN_SPREAD_RANKS = 8
PROFILE_KIND = "trainsim-calibration-profile"
MAX_PROFILE_BYTES = 64 * 1024 * 1024  # a full profile is well under 1 MB; refuse absurd files

# Canonical collective names (nccl-tests' operations) and the names torch / users also write.
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
_OP_ALIASES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "all-reduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "all-gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter", "reduce-scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "all-to-all": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "bcast": "broadcast",
    "sendrecv": "send_recv", "send_recv": "send_recv", "send/recv": "send_recv", "p2p": "send_recv",
    "sendrecv_perf": "send_recv",
}


def canonical_op(op: str) -> str:
    """The canonical collective name for an alias (``allreduce``, ``all_gather_into_tensor``, ...)."""
    key = op.strip().lower()
    key = key.removesuffix("_perf")
    if key not in _OP_ALIASES:
        raise SpecError("collective.op", f"unknown collective {op!r} (known: {', '.join(COLLECTIVE_OPS)})")
    return _OP_ALIASES[key]


def busbw_factor(op: str, group_size: int) -> float:
    """nccl-tests' busbw/algbw factor (collectives.busbw_factor) of a collective a profile may hold
    (canonical_op)."""
    return collectives.busbw_factor(canonical_op(op), group_size)




# Measured memory-bound ops standing in for the op kinds cost models use (median over the family).
MEMORY_OPS = ("layernorm", "rmsnorm", "softmax", "gelu", "add", "copy")
MEMORY_OP_FAMILIES = {
    "norm": ("layernorm", "rmsnorm"),
    "elementwise": ("gelu", "add", "copy"),
    "activation": ("gelu",), "swiglu": ("gelu", "add"), "silu": ("gelu",),
    "residual": ("add",), "loss": ("softmax",), "embedding": ("copy",), "cast": ("copy",),
}


class _Model(BaseModel):
    model_config = SPEC_CONFIG


class Fingerprint(_Model):
    """Which machine, software and launch produced the profile."""

    device: Literal["cpu", "cuda", "imported"] = "cpu"
    device_name: str = "unknown"
    device_count: int = Field(default=1, ge=0)
    world_size: int = Field(default=1, ge=1)
    nodes: int = Field(default=1, ge=1)
    backend: str = ""
    torch_version: str = ""
    cuda_version: str | None = None
    nccl_version: str | None = None
    hostname: str = ""
    date: str = ""
    threads_per_process: int | None = None
    env: dict[str, str] = Field(default_factory=dict, description="NCCL_* / OMP_* variables at run time")
    command: str = ""


class Stats(_Model):
    """Repeated timing of one point: seconds."""

    min_s: Seconds
    median_s: float = Field(gt=0, le=MAX_MEASURED_S, description="> 0: a timed call takes time (interpolation in "
                            "log space needs it)")
    p99_s: Seconds
    reps: int = Field(ge=1)


class GemmPoint(_Model):
    """One measured GEMM (m×k)·(k×n) of a dtype and its timing."""

    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)
    dtype: str
    label: str = ""
    stats: Stats
    achieved_flops: float = Field(ge=0, description="2mnk / median time")


class ThreeTermFit(_Model):
    """t = overhead_s + flops / flops_per_s + bytes / bytes_per_s, fitted by relative least squares."""

    overhead_s: Seconds
    flops_per_s: float = Field(ge=MIN_RATE_PER_S)
    bytes_per_s: float | None = Field(default=None, ge=MIN_RATE_PER_S,
                                      description="None: memory term not significant")
    rms_rel_error: float = Field(ge=0)
    n_points: int = Field(ge=1)

    def time_s(self, flops: float, nbytes: float) -> float:
        t = self.overhead_s + flops / self.flops_per_s
        if self.bytes_per_s:
            t += nbytes / self.bytes_per_s
        return t


class AttentionPoint(_Model):
    """One measured fused-attention pass (forward or backward) of a shape and dtype and its timing."""

    batch: int = Field(gt=0)
    heads: int = Field(gt=0)
    seq_q: int = Field(gt=0)
    seq_kv: int = Field(gt=0)
    dhead: int = Field(gt=0)
    dtype: str
    causal: bool = True
    pass_: Literal["fwd", "bwd"] = Field(alias="pass")
    stats: Stats
    achieved_flops: float = Field(ge=0)

    model_config = ConfigDict(**SPEC_CONFIG, populate_by_name=True)


class BandwidthPoint(_Model):
    """A memory-bound op or a copy: bytes moved (read + written) per call and its timing."""

    op: str
    nbytes: float = Field(gt=0, le=MAX_POINT_BYTES)
    dtype: str = ""
    stats: Stats
    bw_Bps: float = Field(ge=0, description="nbytes / median time")


class LinearFit(_Model):
    """t = alpha_s + nbytes / bw_Bps (alpha: fixed latency/overhead; bw: asymptotic bandwidth)."""

    alpha_s: Seconds
    bw_Bps: float = Field(ge=MIN_RATE_PER_S)
    rms_rel_error: float = Field(ge=0)
    n_points: int = Field(ge=1)

    def time_s(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / self.bw_Bps


class EagerBlockOverhead(_Model):
    """Forward / backward time of a tiny block whose kernels do ~no work, and its modelled op counts.

    ``fwd.median_s / fwd_ops`` is the eager cost per op the cost model lists (flops.layer_ops): the
    module call, the views/transposes, the autograd node, bias-gradient reductions and AccumulateGrad
    that come with each modelled kernel in eager PyTorch, plus the kernel call itself.
    """

    fwd: Stats
    bwd: Stats
    fwd_ops: int = Field(gt=0, le=1_000_000)
    bwd_ops: int = Field(gt=0, le=1_000_000)

    def per_op_s(self, pass_: str) -> float:
        return self.fwd.median_s / self.fwd_ops if pass_ == "fwd" else self.bwd.median_s / self.bwd_ops


# The wrapper kinds kernels/host_wrappers_bench.py times (cost_models.legacy_layer_wrappers prices each).
HostWrapper = Literal["function_identity", "function_wrap", "script_call", "reentrant_checkpoint", "rng_fork"]


class ChunkHostIssue(_Model):
    """Host issue seconds of trainsim execute's eager micro-batch on a GPU, from a tiny model (kernels with ~no
    work) timed at two depths (kernels/host_issue_bench.py): per block (forward; backward, also under full
    recompute) and per micro-batch outside the blocks (embedding, head, loss, the pass's start), and the
    optimizer step per parameter tensor and per step."""

    layers: tuple[int, int]
    block_fwd_s: Seconds
    block_bwd_s: Seconds
    block_bwd_full_recompute_s: Seconds
    microbatch_fwd_s: Seconds
    microbatch_bwd_s: Seconds
    step_per_tensor_s: Seconds
    step_fixed_s: Seconds
    reps: int = Field(ge=1)


class OptimizerFit(_Model):
    """torch.optim ``step()`` and ``zero_grad()``: (per_tensor_s + zero_grad_per_tensor_s) · tensors +
    elements / elements_per_s."""

    per_tensor_s: Seconds
    elements_per_s: float = Field(ge=MIN_RATE_PER_S)
    zero_grad_per_tensor_s: float = Field(default=0.0, ge=0, le=MAX_MEASURED_S)
    big_elements: int = Field(default=0, ge=0, description="elements of the one-tensor point")
    small_tensors: int = Field(default=0, ge=0, description="one-element tensors of the per-tensor point")

    def step_time_s(self, tensors: float, elements: float) -> float:
        return self.per_tensor_s * tensors + elements / self.elements_per_s + self.zero_grad_per_tensor_s * tensors


class CollectivePoint(_Model):
    """One nccl-tests-like row: ``size_bytes`` as nccl-tests' size column, algbw/busbw in bytes/s."""

    op: str
    group_size: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    size_bytes: float = Field(gt=0, le=MAX_POINT_BYTES)
    dtype: str = "float"
    stats: Stats
    algbw_Bps: float = Field(ge=0)
    busbw_Bps: float = Field(ge=0)
    in_place: bool = False
    source: str = "measured"


class CollectiveFit(_Model):
    """t(size) = alpha_s + beta_s_per_byte · size for one (op, group_size, nodes)."""

    op: str
    group_size: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    alpha_s: Seconds
    beta_s_per_byte: float = Field(gt=0, le=1.0, description="<= 1 s per byte: a single-size fit of a tiny "
                                   "latency-bound message stays far below")
    busbw_Bps: float = Field(ge=0, description="asymptotic busbw = factor / beta")
    rms_rel_error: float = Field(ge=0)
    n_points: int = Field(ge=1)
    source: str = "measured"
    backend: str = ""

    def time_s(self, size_bytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * size_bytes


class CalibrationProfile(_Model):
    """Everything one calibration produced. Queries return None for what was not measured."""

    kind: Literal["trainsim-calibration-profile"] = PROFILE_KIND
    schema_version: int = PROFILE_SCHEMA_VERSION
    fingerprint: Fingerprint = Field(default_factory=Fingerprint)
    # Dense peak FLOP/s per dtype that the efficiencies below are relative to (the matching GPU preset).
    reference_peak_flops: dict[str, Annotated[float, Field(gt=0, le=MAX_FLOPS)]] = Field(default_factory=dict)
    reference_preset: str | None = None
    gemm_points: list[GemmPoint] = Field(default_factory=list)
    gemm_fits: dict[str, ThreeTermFit] = Field(default_factory=dict, description="per dtype")
    attention_points: list[AttentionPoint] = Field(default_factory=list)
    attention_fits: dict[str, ThreeTermFit] = Field(default_factory=dict, description="key '<dtype>/<fwd|bwd>'")
    memory_points: list[BandwidthPoint] = Field(default_factory=list)
    memory_fits: dict[str, LinearFit] = Field(default_factory=dict, description="per op, plus 'all'")
    dispatch_overhead: Stats | None = Field(default=None, description="one-element op: launch/dispatch cost")
    eager_overhead: dict[str, EagerBlockOverhead] = Field(
        default_factory=dict, description="per block style (cost_models.eager.block_style); CPU eager only")
    host_issue_chunk: dict[str, ChunkHostIssue] = Field(
        default_factory=dict, description="trainsim execute's eager micro-batch and optimizer step timed on a GPU "
        "at two depths: host issue seconds per block, per micro-batch and per optimizer tensor "
        "(kernels/host_issue_bench.py; cost_models.host_issue); GPU only")
    host_issue: dict[str, EagerBlockOverhead] = Field(
        default_factory=dict, description="per block style: a tiny executor block's forward / backward on a GPU, "
        "whose kernels do ~no work, so its time is the host's eager issue time (cost_models.host_issue); GPU only")
    host_wrappers_s: dict[HostWrapper, tuple[Seconds, Seconds]] = Field(
        default_factory=dict, description="(forward, backward) host seconds per call of the Python wrappers around "
        "Megatron's legacy layer's ops, timed on the calibrating device (kernels/host_wrappers_bench.py; "
        "cost_models.legacy_layer_wrappers); GPU only")
    optimizer_fits: dict[str, OptimizerFit] = Field(default_factory=dict, description="'adam', 'sgd'")
    dtensor_collective_overhead_s: dict[str, Seconds] = Field(
        default_factory=dict, description="per collective op: seconds a DTensor redistribution adds to the raw "
        "c10d call (CPU, the world group, 64 KiB)")
    copy_points: list[BandwidthPoint] = Field(default_factory=list)
    copy_fits: dict[str, LinearFit] = Field(default_factory=dict, description="h2d, d2h, d2d")
    collective_points: list[CollectivePoint] = Field(default_factory=list)
    collective_fits: list[CollectiveFit] = Field(default_factory=list)
    # Each rank's GEMM rate over the same suite, run by all ranks at once (FLOP/s, rank order): their spread
    # is the part-to-part speed spread of these devices (GPUSpec.speed_spread_cv, cost_models/variation.py).
    rank_gemm_flops: list[Annotated[float, Field(ge=0)]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # Factors fitted to measured training runs (`trainsim calibrate --from-runs`, cost_models.run_factors).
    run_calibration: RunCalibration | None = None
    # Measured GEMM and attention times are multiplied by this: 1 / a run calibration's compute factor for the
    # profile's device, set at prediction time (simulator.predict), never written to the file.
    compute_time_scale: float = Field(default=1.0, gt=0, exclude=True)
    # Where the profile was loaded from (not written to the file).
    source_path: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _known_names(self) -> CalibrationProfile:
        """Every measured op and fit key names something a query asks for (profile_limits.unknown_name)."""
        unknown_name(self, MEMORY_OPS, COLLECTIVE_OPS)
        return self

    # ---- compute ----------------------------------------------------------------------------------
    def _peak(self, dtype: str, peak_flops: float | None) -> float | None:
        if peak_flops is not None:
            return peak_flops
        return self.reference_peak_flops.get(dtype)

    def gemm_time_s(self, m: int, n: int, k: int, dtype: str) -> float | None:
        """Predicted time of one (m×k)·(k×n) GEMM, or None if this dtype was not measured."""
        fit = self.gemm_fits.get(dtype)
        if fit is None:
            return None
        return fit.time_s(gemm_flops(m, n, k), gemm_bytes(m, n, k, dtype)) * self.compute_time_scale

    def gemm_flops_per_s(self, m: int, n: int, k: int, dtype: str) -> float | None:
        """Achieved FLOP/s for this shape (fitted), or None."""
        t = self.gemm_time_s(m, n, k, dtype)
        return None if t is None else gemm_flops(m, n, k) / t

    def gemm_efficiency(self, m: int, n: int, k: int, dtype: str, peak_flops: float | None = None) -> float | None:
        """Achieved / peak for this shape. Pass ``peak_flops=gpu.peak(dtype)`` to be relative to your spec."""
        rate = self.gemm_flops_per_s(m, n, k, dtype)
        peak = self._peak(dtype, peak_flops)
        if rate is None or not peak:
            return None
        return rate / peak

    def attention_time_s(self, batch: int, heads: int, seq_q: int, seq_kv: int, dhead: int, dtype: str,
                         causal: bool = True, pass_: str = "fwd") -> float | None:
        """Predicted SDPA time for one forward (``pass_='fwd'``) or backward (``'bwd'``), or None."""
        fit = self.attention_fits.get(f"{dtype}/{pass_}")
        if fit is None:
            return None
        flops = attention_flops(batch, heads, seq_q, seq_kv, dhead, causal, pass_)
        return fit.time_s(flops, attention_bytes(batch, heads, seq_q, seq_kv, dhead, dtype, pass_)) * self.compute_time_scale

    def attention_efficiency(self, batch: int, heads: int, seq_q: int, seq_kv: int, dhead: int, dtype: str,
                             causal: bool = True, pass_: str = "fwd",
                             peak_flops: float | None = None) -> float | None:
        """Achieved / peak FLOP/s of attention (FLOPs as in the module docstring), or None."""
        t = self.attention_time_s(batch, heads, seq_q, seq_kv, dhead, dtype, causal, pass_)
        peak = self._peak(dtype, peak_flops)
        if t is None or not peak:
            return None
        return attention_flops(batch, heads, seq_q, seq_kv, dhead, causal, pass_) / t / peak

    # ---- memory-bound ops and copies -------------------------------------------------------------
    def _memory_ops_points(self) -> dict[str, list[tuple[float, float]]]:
        by_op: dict[str, list[tuple[float, float]]] = {}
        for p in self.memory_points:
            by_op.setdefault(p.op, []).append((p.nbytes, p.stats.median_s))
        return {op: sorted(v) for op, v in by_op.items() if len({n for n, _ in v}) >= 2}

    @property
    def floor_is_host(self) -> bool:
        """Whether the fixed part of a measured kernel time is the host's, not the device's (GPU profiles).

        ``microbench.time_fn`` brackets one eager call with CUDA events after a synchronise: the GPU records the
        start at once and then idles until the host has dispatched the call (one op ~15 us, ``dispatch_overhead``;
        ``torch.autograd.grad`` of one op ~90 us), so a small kernel's time is the host's issue time -- the 4 MB
        and 67 MB copies of the H200 profile both take 24 us, its backward norms 96 us at 6 MB and 100 MB.
        In a training step the host issues ahead of a busy GPU and kernels run back to back (the profiled H200
        steps, benchmarks/data/trace_summary_h200.json: 4,694 kernels summing to 33.8 ms, 7 us each); the host's
        issue time is the host-issue model's (cost_models/host_issue.py). A CPU profile's op *is* the host's."""
        return self.fingerprint.device == "cuda"

    def memory_time_s(self, nbytes: float, op: str | None = None, pass_: str = "fwd",
                      device_only: bool = False) -> float | None:
        """Predicted time of a memory-bound op moving ``nbytes`` (read + written), or None.

        A measured ``op`` is interpolated between its points (log-log, so cache-resident and DRAM-sized
        tensors each get their own bandwidth); below the smallest point its time is that point's (the
        dispatch floor), above the largest the largest point's bandwidth continues. An unmeasured or
        unnamed op gets the median over its family (MEMORY_OP_FAMILIES: "norm", "elementwise", ...) or
        over all measured ops. ``pass_="bwd"`` uses the measured backward kernels ("gelu_bwd", ...) of the
        op or its family when present, else the forward curve. ``device_only`` (GPU profiles, ``floor_is_host``)
        leaves the timed call's host floor out: the op streams at its largest point's bandwidth, the one point
        whose time the device's work dominates (a lower bound on the device's rate: that time still holds the
        call's launch delay), with no fixed part -- the caller adds the device's own per-kernel cost.
        """
        interp = _rate_of_largest if device_only else _loglog_interp
        by_op = self._memory_ops_points()
        if pass_ == "bwd":
            # Backward kernels were measured separately for norms, softmax and gelu ("<op>_bwd").
            names = [op] if op in MEMORY_OPS else list(MEMORY_OP_FAMILIES.get(op or "", ()))
            bwd = sorted(interp(by_op[f"{o}_bwd"], nbytes) for o in names if f"{o}_bwd" in by_op)
            if bwd:
                mid = len(bwd) // 2
                return bwd[mid] if len(bwd) % 2 else 0.5 * (bwd[mid - 1] + bwd[mid])
        by_op = {o: v for o, v in by_op.items() if not o.endswith("_bwd") or o == op}
        if op in by_op:
            return interp(by_op[op], nbytes)
        if not by_op:
            fit = self.memory_fits.get("all")
            return None if fit is None else (nbytes / fit.bw_Bps if device_only else fit.time_s(nbytes))
        family = [o for o in MEMORY_OP_FAMILIES.get(op or "", ()) if o in by_op] or list(by_op)
        times = sorted(interp(by_op[o], nbytes) for o in family)
        mid = len(times) // 2
        return times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])

    def memory_bw_Bps(self, op: str | None = None) -> float | None:
        """Achieved bandwidth of memory-bound ops at the largest measured size (of ``op``, or the median op)."""
        by_op = self._memory_ops_points()
        if not by_op:
            fit = self.memory_fits.get(op or "all") or self.memory_fits.get("all")
            return None if fit is None else fit.bw_Bps
        by_op = {o: v for o, v in by_op.items() if not o.endswith("_bwd") or o == op}
        n_max = max(pts[-1][0] for pts in by_op.values())
        t = self.memory_time_s(n_max, op)
        return None if not t else n_max / t

    def memory_ops_measured(self) -> list[str]:
        """Names of the memory-bound ops with points (layernorm, rmsnorm, softmax, gelu, add, copy, and <op>_bwd)."""
        return sorted(self._memory_ops_points())

    def kernel_overhead_s(self) -> float | None:
        """Fixed per-op cost (launch/dispatch) measured on a one-element op, or None."""
        return None if self.dispatch_overhead is None else self.dispatch_overhead.median_s

    def eager_op_overhead_s(self, style: str, pass_: str) -> float | None:
        """Eager framework cost per modelled op beyond the one bare op call every calibrated kernel time
        already holds (``dispatch_overhead``), for a block style (another measured style if absent), or None."""
        ov = self.eager_overhead.get(style) or next(iter(self.eager_overhead.values()), None)
        if ov is None:
            return None
        bare = self.kernel_overhead_s() or 0.0
        return max(0.0, ov.per_op_s(pass_) - bare)

    def host_issue_block_s(self, style: str) -> tuple[float, float] | None:
        """Measured host seconds to issue one block's forward and backward on a GPU, for a block style (None where
        that style was not measured)."""
        ov = self.host_issue.get(style)
        return None if ov is None else (ov.fwd.median_s, ov.bwd.median_s)

    def optimizer_time_s(self, name: str, tensors: float, elements: float) -> float | None:
        """Measured torch.optim step + zero_grad time for ``tensors`` tensors of ``elements`` in all, or None."""
        fit = self.optimizer_fits.get(name)
        return None if fit is None else fit.step_time_s(tensors, elements)

    def copy_bw_Bps(self, kind: str) -> float | None:
        """Host->device ('h2d'), device->host ('d2h') or device->device ('d2d') bandwidth, or None."""
        fit = self.copy_fits.get(kind)
        return None if fit is None else fit.bw_Bps

    # ---- collectives ------------------------------------------------------------------------------
    def collective_fit(self, op: str, group_size: int, nodes: int = 1, nearest: bool = False) -> CollectiveFit | None:
        """The fit for exactly (op, group_size, nodes); with ``nearest``, the closest measured group of that op."""
        op = canonical_op(op)
        same = [f for f in self.collective_fits if f.op == op]
        for f in same:
            if f.group_size == group_size and f.nodes == nodes:
                return f
        if not nearest or not same:
            return None
        return min(same, key=lambda f: (abs(math.log(f.nodes / nodes)), abs(math.log(f.group_size / group_size))))

    def collective(self, op: str, group_size: int, nodes: int = 1, nearest: bool = False) -> tuple[float, float] | None:
        """(alpha_s, beta_s_per_byte) for (op, group_size, nodes), or None if not measured."""
        f = self.collective_fit(op, group_size, nodes, nearest)
        return None if f is None else (f.alpha_s, f.beta_s_per_byte)

    def collective_time_s(self, op: str, size_bytes: float, group_size: int, nodes: int = 1,
                          nearest: bool = False) -> float | None:
        """alpha + beta·size with size as nccl-tests' size column (see module docstring), or None."""
        f = self.collective_fit(op, group_size, nodes, nearest)
        return None if f is None else f.time_s(size_bytes)

    @property
    def speed_spread_cv(self) -> float | None:
        """Sample coefficient of variation of the ranks' GEMM rates (capped at GPUSpec's 0.5), or None below two."""
        cv = speed_spread_cv(self.rank_gemm_flops)
        return None if cv is None else min(cv, 0.5)

    def pace_spread_cv(self) -> float | None:
        """The spread the slowest-GPU pace should use: a GPU profile's, measured over >= MIN_SPREAD_RANKS ranks.
        A CPU profile's ranks are cores of one host (the cpu preset's spread is 0): recorded, not used."""
        ranks = sum(1 for r in self.rank_gemm_flops if r > 0)
        if self.fingerprint.device == "cpu" or ranks < MIN_SPREAD_RANKS:
            return None
        return self.speed_spread_cv

    # ---- describing --------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line for the predict JSON's "calibration" field: path and fingerprint."""
        fp = self.fingerprint
        parts = [fp.device_name or fp.device]
        if fp.world_size > 1:
            parts.append(f"{fp.world_size} ranks/{fp.nodes} node{'s' if fp.nodes != 1 else ''}")
        if fp.backend:
            parts.append(fp.backend)
        if fp.torch_version:
            parts.append(f"torch {fp.torch_version}")
        if fp.nccl_version:
            parts.append(f"NCCL {fp.nccl_version}")
        if fp.hostname:
            parts.append(fp.hostname)
        if fp.date:
            parts.append(fp.date)
        if self.speed_spread_cv is not None:
            used = "" if self.pace_spread_cv() is not None else ", not used"
            parts.append(f"speed spread {self.speed_spread_cv:.1%} over {len(self.rank_gemm_flops)} ranks{used}")
        where = self.source_path or "(in memory)"
        if self.run_calibration is not None:
            runs = self.run_calibration.describe()
            return f"{where} [{runs}]" if not self.has_measurements() else f"{where} [{', '.join(parts)}; {runs}]"
        return f"{where} [{', '.join(parts)}]"

    def has_measurements(self) -> bool:
        """Whether any microbenchmark section holds data (a run-calibration-only profile has none)."""
        return any(self.measured().values()) or bool(self.rank_gemm_flops) or self.dispatch_overhead is not None

    def measured(self) -> dict[str, bool]:
        """Which parts hold measurements (for reports)."""
        return {
            "gemm": bool(self.gemm_fits), "attention": bool(self.attention_fits),
            "memory": bool(self.memory_fits), "copies": bool(self.copy_fits),
            "collectives": bool(self.collective_fits), "eager_overhead": bool(self.eager_overhead),
            "host_issue": bool(self.host_issue), "optimizer": bool(self.optimizer_fits),
        }


def speed_spread_cv(rates: list[float]) -> float | None:
    """Sample coefficient of variation of per-rank rates (std with n-1 / mean), None for fewer than two
    (ranks that measured nothing report 0 and are left out)."""
    xs = [float(r) for r in rates if r > 0]
    if len(xs) < 2:
        return None
    top = max(xs)
    xs = [x / top for x in xs]  # scale-free: rates near the float range's top neither overflow nor lose the spread
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) / mean


def _rate_of_largest(points: list[tuple[float, float]], x: float) -> float:
    """Seconds to move ``x`` bytes at the rate of the largest (size, time) point, no fixed part."""
    n, t = points[-1]
    return t * x / n


def _loglog_interp(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear interpolation of (size, time) in log-log space; floor below, constant rate above."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1] * x / xs[-1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= x <= x1:
            if x1 == x0:
                return max(y0, y1)
            w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
    return points[-1][1]


def describe(profile: CalibrationProfile | None) -> str:
    """What predict prints in its "calibration" field: the profile, or "defaults"."""
    return "defaults" if profile is None else profile.describe()


# ---- loading and saving --------------------------------------------------------------------------
def profile_from_dict(data: object, where: str = "calibration") -> CalibrationProfile:
    """Validate a decoded JSON object as a profile; SpecError("calibration", reason) on any problem."""
    if not isinstance(data, dict):
        raise SpecError(where, f"a profile must be a JSON object, not {type(data).__name__}")
    if data.get("kind") != PROFILE_KIND:
        raise SpecError(where, f"not a trainsim calibration profile (kind={data.get('kind')!r})")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_SCHEMA_VERSIONS)
        raise SpecError(
            where, f"schema_version {version!r} is not supported (this trainsim reads {readable}); "
            "re-run `trainsim calibrate`")
    check_finite(data, where)
    internal = sorted(k for k, f in CalibrationProfile.model_fields.items() if f.exclude and k in data)
    if internal:  # set at prediction or load time, never written: a file's value would scale every measurement
        raise SpecError(f"{where}.{internal[0]}", "unknown key (an internal setting trainsim never writes)")
    try:
        # JSON-mode strict validation: a number must be a JSON number (true is no count, "2" no time), and a
        # float no int count; the file's arrays still become tuples.
        return CalibrationProfile.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as e:
        raise from_validation_error(e, where) from None


def load_profile(path: str | os.PathLike) -> CalibrationProfile:
    """Read a profile written by ``save_profile``; a missing, corrupt, unsafe or wrong-schema file is a SpecError."""
    p = Path(path)
    data = parse_json(read_text(p, "calibration", MAX_PROFILE_BYTES), "calibration", str(p))
    try:
        profile = profile_from_dict(data)
    except SpecError as e:
        raise SpecError(e.field, f"{e.reason} (in {p})") from None
    return profile.model_copy(update={"source_path": str(p)})


def profile_to_dict(profile: CalibrationProfile) -> dict:
    """The profile as the JSON object save_profile writes (without where it was loaded from)."""
    return profile.model_dump(mode="json", by_alias=True, exclude={"source_path"})


def save_profile(profile: CalibrationProfile, path: str | os.PathLike) -> Path:
    """Write the profile as indented JSON (atomically: temp file + rename), once it reads back as load_profile
    reads it: a profile no command could load (a device name holding a terminal escape, say) is refused, not
    written."""
    text = json.dumps(profile_to_dict(profile), indent=1, allow_nan=False) + "\n"
    profile_from_dict(parse_json(text, "calibration", "the profile to write"))
    return write_atomic(path, text, "out")


def merge_collectives(base: CalibrationProfile, points: list[CollectivePoint], fits: list[CollectiveFit],
                      note: str | None = None) -> CalibrationProfile:
    """``base`` with these collective points/fits replacing any of the same (op, group_size, nodes)."""
    keys = {(f.op, f.group_size, f.nodes) for f in fits} | {(q.op, q.group_size, q.nodes) for q in points}
    kept_points = [q for q in base.collective_points if (q.op, q.group_size, q.nodes) not in keys]
    kept_fits = [f for f in base.collective_fits if (f.op, f.group_size, f.nodes) not in keys]
    notes = list(base.notes) + ([note] if note else [])
    return base.model_copy(update={
        "collective_points": kept_points + list(points),
        "collective_fits": kept_fits + list(fits),
        "notes": notes,
    })
