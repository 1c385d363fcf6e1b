"""Time of each op on one GPU: a roofline with shape-dependent GEMM efficiency, plus per-kernel overhead.

``t = max(FLOPs / (peak · eff), bytes / (hbm_bw · hbm_eff)) + kernel_overhead``, per kernel, where

* ``peak`` is the dense datasheet peak of the op's dtype (fp8 GEMMs at the fp8 peak; attention, router and
  logits at the 16-bit peak), ``hbm_eff`` the measured STREAM-like fraction (GPUSpec, cited in presets).
* GEMM ``eff = GPUSpec.gemm_efficiency × S(m,n,k) / S(16384,16384,16384)``, capped at
  ``gemm_efficiency`` (measured by cuBLASLt at 16384³). ``S`` is a tile model of how a GEMM library
  runs on ``num_sms`` SMs with 128×128 output tiles:
    - padding: m, n rounded up to 128 and k to 64 do wasted work (dims not multiples of 64/128 are slower);
    - wave quantization: ``tiles / (ceil(tiles / SMs) · SMs)``; grids smaller than the GPU use split-K
      (as cuBLAS heuristics do), each split keeping ``k ≥ 256``;
    - per-tile fixed cost ``TILE_OVERHEAD_S`` (prologue/epilogue, writing the C tile): a tile's math takes
      ``2·128·128·k / (peak/SMs)``, so short-k GEMMs lose ``k / (k + k0)``. The 1.5 µs value is the
      mean of what the 8192³ vs 16384³ cuBLASLt rates imply for A100 (2.1 µs), H100 (1.6) and H200 (0.95)
      [hardware.csv a100_azure, h100_azure, h200_azure].
  Small, skinny GEMMs also fall onto the memory roof through their bytes. Without ``num_sms`` (CPU
  "GPUs", custom specs) ``S`` = 1. NVFP4 GEMMs (dtype nvfp4) use the same tile model at ``GPUSpec.peak("fp4")``
  and ``GPUSpec.gemm_efficiency_fp4`` (measured cuBLASLt FP4 at 16384³), operands at 0.5625 bytes (nvfp4.py).
* Fused (flash) attention runs at ``GPUSpec.attention_efficiency`` of the 16-bit peak on the FLOPs it
  executes: forward 4·b·a·sq·sk·d, halved when causal; backward 2.5× forward (it recomputes the scores:
  five GEMM-sized products against two), the convention FlashAttention's benchmarks and
  ``kernel_work.attention_flops`` use. Unfused attention is two batched GEMMs plus memory-bound
  softmax/dropout.

An optional calibration ``profile`` (``trainsim.cost_models.profile.CalibrationProfile``) replaces the
datasheet model wherever it has measurements (GEMM, attention, memory-bound ops); ``profile=None`` means
datasheet defaults. A GPU profile's fixed part of a timed call is its host's dispatch
(``CalibrationProfile.floor_is_host``): on the device a kernel costs the measured rate terms plus the GPU's
``kernel_overhead_s``, and the host's issue time is cost_models/host_issue.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainsim.specs.framework_behaviour import behaviour
from trainsim.specs.memo import memoised

from .eager import block_style, count_passes, op_passes, stage_param_tensors, tp_wrapper
from .flops import Op, _embedding_ops, _mtp_ops, head_ops, layer_ops, recompute_ops
from .framework import FOREACH_ADAM_BYTES, PER_PARAM_LOOP_ADAM_BYTES
from .muon import step_seconds
from .nvfp4 import NVFP4_BYTES
from .profile import MEMORY_OPS
from .shapes import IdentityMemo, LayerShape, layer_shape

if TYPE_CHECKING:
    from trainsim.specs import GPUSpec, Scenario

    from .profile import CalibrationProfile

TILE = 128
K_STEP = 64
MIN_SPLIT_K = 256
TILE_OVERHEAD_S = 1.5e-6
_REF_GEMM = (16384, 16384, 16384)
FLASH_BWD_FACTOR = 2.5
# Training dtypes whose non-GEMM math (attention, norms, the logits) runs at the 16-bit rate: fp8 and nvfp4 put only
# the blocks' linear GEMMs on their own tensor cores.
LOW_PRECISION_DTYPES = ("fp8", "nvfp4")
# First-generation fused attention (FlashAttention v1 and the Triton kernel MPT/llm-foundry used in 2023)
# runs at about half the speed of FlashAttention-2, whose measured efficiency the GPU presets carry: the
# FlashAttention-2 paper (Dao 2023, arXiv:2307.08691) reports "around 2x speedup compared to FlashAttention"
# (25-40% vs 50-73% of A100 peak). For the Triton kernel MPT ran (flash_attn/flash_attn_triton.py) its author
# notes "Triton forward is generally faster than CUDA forward, while Triton backward is generally slower ...
# Overall Triton forward + backward is slightly slower than CUDA forward + backward" -- about the same half;
# the FA2 paper's own Triton comparison (1.3-1.5x forward, 2x backward) is of OpenAI's triton.ops kernel.
FLASH_V1_SPEED_VS_V2 = 0.5
# Host DRAM streaming bandwidth per node for CPU-side Adam under optimizer offload (ZeRO-Offload):
# a dual-socket server with 8 DDR4/DDR5 channels per socket streams ~150-300 GB/s; 200 GB/s assumed,
# shared by the node's GPUs.
HOST_MEM_BW_PER_NODE_BPS = 200e9
# fp16 training scales the loss, so every step unscales the fp32 main gradients and checks them for
# inf/NaN before the update (Megatron ``_unscale_main_grads_and_check_for_nan``, torch GradScaler
# ``_amp_foreach_non_finite_check_and_unscale_``): one read and one write of 4 bytes per gradient.
FP16_UNSCALE_BYTES_PER_PARAM = 8


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of one block (or embedding/head) per micro-batch on one rank, by pass."""

    fwd_s: float
    bwd_input_s: float
    bwd_weight_s: float
    recompute_s: float = 0.0

    @property
    def bwd_s(self) -> float:
        """Whole backward (input + weight gradients), recompute excluded."""
        return self.bwd_input_s + self.bwd_weight_s

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_input_s + self.bwd_weight_s + self.recompute_s


@dataclass(frozen=True)
class OpTimes:
    """Seconds of one op per pass (forward, input gradient, weight gradient)."""

    name: str
    fwd_s: float
    bwd_input_s: float
    bwd_weight_s: float


@dataclass(frozen=True)
class _Hw:
    """The GPU numbers the roofline needs (hashable, built once per call from a GPUSpec)."""

    peak: float          # dense peak of the training dtype's 16-bit/32-bit math
    peak_fp8: float
    gemm_eff: float
    attn_eff: float
    mem_Bps: float       # achieved HBM bandwidth
    overhead_s: float
    num_sms: int | None
    peak_fp4: float = 0.0        # dense FP4 peak (0: no FP4 tensor cores; nvfp4 is refused there)
    gemm_eff_fp4: float = 0.0    # GPUSpec.gemm_efficiency_fp4, else gemm_eff


class _ProfileRef:
    """Identity-hashed holder so an (unhashable) calibration profile can key the caches."""

    __slots__ = ("profile",)

    def __init__(self, profile):
        self.profile = profile

    def __hash__(self) -> int:
        return id(self.profile)

    def __eq__(self, other) -> bool:
        return isinstance(other, _ProfileRef) and other.profile is self.profile


def hw_of(gpu: GPUSpec, dtype: str) -> _Hw:
    """Roofline parameters of a GPUSpec for a training dtype (fp8 training: 16-bit for non-GEMM math)."""
    return _hw_memo(gpu, dtype)


def _hw_of(gpu, dtype: str) -> _Hw:
    base = "bf16" if dtype in LOW_PRECISION_DTYPES else dtype
    fp4 = getattr(gpu, "fp4", False)
    return _Hw(
        peak=gpu.peak(base), peak_fp8=gpu.peak("fp8"), gemm_eff=gpu.gemm_efficiency,
        peak_fp4=gpu.peak("fp4") if fp4 else 0.0,
        gemm_eff_fp4=(gpu.gemm_efficiency_fp4 or gpu.gemm_efficiency) if fp4 else 0.0,
        attn_eff=gpu.attention_efficiency, mem_Bps=gpu.hbm_bw_Bps * gpu.hbm_efficiency,
        overhead_s=gpu.kernel_overhead_s, num_sms=getattr(gpu, "num_sms", None),
    )


_hw_memo = IdentityMemo(_hw_of)


def _tile_factor(m: int, n: int, k: int, batch: int, num_sms: int, peak: float) -> float:
    """Fraction of the math a 128×128-tiled GEMM does usefully at full speed (padding, waves, tile cost)."""
    tm, tn = -(-m // TILE), -(-n // TILE)
    kp = -(-k // K_STEP) * K_STEP  # the k-loop runs in whole K_STEP slices
    pad = (m * n) / (tm * tn * TILE * TILE) * k / kp
    tiles = batch * tm * tn
    split = 1
    if tiles < num_sms:
        split = max(1, min(num_sms // tiles, kp // MIN_SPLIT_K))
    units = tiles * split
    wave = units / (-(-units // num_sms) * num_sms)
    k_split = kp / split
    k0 = TILE_OVERHEAD_S * (peak / num_sms) / (2 * TILE * TILE)
    return pad * wave * k_split / (k_split + k0)


@memoised(maxsize=65536)
def gemm_efficiency_default(m: int, n: int, k: int, batch: int, gemm_eff: float, num_sms: int | None,
                            peak: float) -> float:
    """Datasheet-model GEMM efficiency for this shape (fraction of dense peak), see module docstring."""
    if num_sms is None:
        return gemm_eff
    ref = _tile_factor(*_REF_GEMM, 1, num_sms, peak)
    return gemm_eff * min(1.0, _tile_factor(m, n, k, batch, num_sms, peak) / ref)


def gemm_time_s(m: int, n: int, k: int, hw: _Hw, *, batch: int = 1, fp8: bool = False, e: int = 2,
                profile: CalibrationProfile | None = None, dtype: str = "bf16", fp4: bool = False) -> float:
    """Seconds of ``batch`` (m×k)·(k×n) GEMMs launched as one kernel (bmm / grouped GEMM); ``fp4``: NVFP4 operands
    at the FP4 peak and its measured efficiency (nvfp4.py)."""
    if fp4:
        return _fp4_gemm_time_s(m, n, k, hw, batch, e)
    pdtype = "fp8" if fp8 else dtype
    if profile is not None:
        t1 = profile.gemm_time_s(m, n, k, pdtype)
        if t1 is not None:
            fit = profile.gemm_fits.get(pdtype)
            c0 = fit.overhead_s * profile.compute_time_scale if fit is not None else 0.0
            if profile.floor_is_host:  # the fit's fixed part is the timed call's host issue (profile.floor_is_host)
                return batch * max(0.0, t1 - c0) + hw.overhead_s
            return t1 + (batch - 1) * max(0.0, t1 - c0)
    peak = hw.peak_fp8 if fp8 else hw.peak
    eff = gemm_efficiency_default(m, n, k, batch, hw.gemm_eff, hw.num_sms, peak)
    flops = 2.0 * m * n * k * batch
    ob = 1 if fp8 else e
    nbytes = batch * ((m * k + k * n) * ob + m * n * e)
    return max(flops / (peak * eff), nbytes / hw.mem_Bps) + hw.overhead_s


def _fp4_gemm_time_s(m: int, n: int, k: int, hw: _Hw, batch: int, e: int) -> float:
    """An NVFP4 GEMM: the tile model at the FP4 peak. ``trainsim calibrate`` measures no FP4 GEMM (its dtypes are
    fp32, tf32, bf16, fp16, fp8), so a calibration profile leaves this datasheet model in place."""
    eff = gemm_efficiency_default(m, n, k, batch, hw.gemm_eff_fp4, hw.num_sms, hw.peak_fp4)
    nbytes = batch * ((m * k + k * n) * NVFP4_BYTES + m * n * e)
    return max(2.0 * m * n * k * batch / (hw.peak_fp4 * eff), nbytes / hw.mem_Bps) + hw.overhead_s


def memory_time_s(nbytes: float, hw: _Hw, profile: CalibrationProfile | None = None, op: str | None = None,
                  pass_: str = "fwd") -> float:
    """Seconds of a memory-bound kernel moving ``nbytes`` (read + written)."""
    if profile is not None:
        host_floor = profile.floor_is_host
        t = profile.memory_time_s(nbytes, op, pass_, device_only=host_floor)
        if t is not None:
            return t + hw.overhead_s if host_floor else t
    return nbytes / hw.mem_Bps + hw.overhead_s


def _gemms_time(gemms, op: Op, hw: _Hw, e: int, profile, dtype: str, extra_bytes: float,
                fp8: bool | None = None) -> float:
    """Seconds of ``gemms`` (at the fp8 rate where ``fp8``, default ``op.fp8``; an fp8 op's GEMM run without it is a
    bf16 one, profile lookups included) and of ``extra_bytes`` of casts."""
    if fp8 is None:
        fp8 = op.fp8
    elif op.fp8 and not fp8:
        dtype = "bf16"
    t = 0.0
    for m, n, k in gemms:
        t += gemm_time_s(m, n, k, hw, batch=op.batch, fp8=fp8, e=e, profile=profile, dtype=dtype, fp4=op.fp4)
    if extra_bytes > 0:  # fp8 / NVFP4 casts of X / dY: separate memory-bound kernels
        t += memory_time_s(extra_bytes, hw, profile, "copy")
    return t


def _attention_time(op: Op, hw: _Hw, profile, dtype: str, pass_: str, causal: bool,
                    flash_version: int = 2) -> float:
    base = "bf16" if dtype in LOW_PRECISION_DTYPES else dtype
    if profile is not None and op.attn is not None:
        t = profile.attention_time_s(*op.attn, base, causal, pass_)
        if t is not None:
            if profile.floor_is_host:  # the fit's fixed part is the timed call's host issue (profile.floor_is_host)
                fit = profile.attention_fits[f"{base}/{pass_}"]
                return max(0.0, t - fit.overhead_s * profile.compute_time_scale) + hw.overhead_s
            return t
    mult = 1.0 if pass_ == "fwd" else FLASH_BWD_FACTOR
    flops = op.fwd_flops * op.work_fraction * mult
    nbytes = op.fwd_bytes if pass_ == "fwd" else op.bwd_input_bytes
    eff = hw.attn_eff * (FLASH_V1_SPEED_VS_V2 if flash_version == 1 else 1.0)
    return max(flops / (hw.peak * eff), nbytes / hw.mem_Bps) + hw.overhead_s


def _ssd_time(flops: float, nbytes: float, hw: _Hw, kernels: int) -> float:
    """Seconds of a pass of Mamba-2's chunked SSD scan: the larger of its FLOPs at the 16-bit peak times the GPU's
    fused-attention efficiency (tiled tensor-core kernels of the same kind, cost_models/mamba.py) and its bytes at
    HBM bandwidth, plus one kernel overhead per kernel the pass launches (Op.launches: mamba.SSD_KERNELS_FWD / _BWD)."""
    return max(flops / (hw.peak * hw.attn_eff), nbytes / hw.mem_Bps) + kernels * hw.overhead_s


def op_times(op: Op, hw: _Hw, *, e: int = 2, dtype: str = "bf16", profile: CalibrationProfile | None = None,
             causal: bool = True, norm: str | None = None, flash_version: int = 2) -> OpTimes:
    """Seconds of one op in forward, input-gradient and weight-gradient passes."""
    if op.kind == "ssd":  # Mamba-2's Triton SSD scan: roofline at the fused-attention efficiency (mamba.py)
        return OpTimes(op.name, _ssd_time(op.fwd_flops, op.fwd_bytes, hw, op.launches[0]),
                       _ssd_time(op.bwd_input_flops, op.bwd_input_bytes, hw, op.launches[1]), 0.0)
    if op.kind == "attention":
        return OpTimes(op.name, _attention_time(op, hw, profile, dtype, "fwd", causal, flash_version),
                       _attention_time(op, hw, profile, dtype, "bwd", causal, flash_version), 0.0)
    if op.fwd_gemms:
        ob = NVFP4_BYTES if op.fp4 else (1 if op.fp8 else e)
        # Bytes beyond the GEMMs' own operands are the fp8 / NVFP4 casts (see flops._linear).
        def gemm_bytes(gs):
            return op.batch * sum((m * k + k * n) * ob + m * n * e for m, n, k in gs)
        cast_f = max(0.0, op.fwd_bytes - gemm_bytes(op.fwd_gemms))
        cast_b = max(0.0, op.bwd_input_bytes - gemm_bytes(op.bwd_input_gemms))
        fwd = _gemms_time(op.fwd_gemms, op, hw, e, profile, dtype, cast_f)
        bi = _gemms_time(op.bwd_input_gemms, op, hw, e, profile, dtype, cast_b) if op.bwd_input_gemms else 0.0
        bw = (_gemms_time(op.bwd_weight_gemms, op, hw, e, profile, dtype, 0.0, op.fp8 and not op.hp_weight_grad)
              if op.bwd_weight_gemms else 0.0)
        return OpTimes(op.name, fwd, bi, bw)
    # Memory-bound ops (norms, activations, softmax, residuals, loss, embedding gather/scatter).
    # A profile is asked for the kernel it measured by name (gelu, softmax, layernorm/rmsnorm), else the kind.
    key = op.name if op.name in MEMORY_OPS else (norm if op.kind == "norm" and norm else op.kind)
    # An op of several kernels (Op.launches) pays the further launches' overhead on top.
    more_f, more_b = ((n - 1) * hw.overhead_s for n in op.launches)
    fwd = memory_time_s(op.fwd_bytes, hw, profile, key) + more_f if op.fwd_bytes else 0.0
    bi = memory_time_s(op.bwd_input_bytes, hw, profile, key, "bwd") + more_b if op.bwd_input_bytes else 0.0
    bw = memory_time_s(op.bwd_weight_bytes, hw, profile, key, "bwd") if op.bwd_weight_bytes else 0.0
    return OpTimes(op.name, fwd, bi, bw)


def eager_overhead_s(shp: LayerShape, profile: CalibrationProfile | None) -> tuple[float, float]:
    """(forward, backward) eager-framework seconds per modelled op from a CPU profile, else (0, 0).

    Only a profile that measured eager execution (``trainsim calibrate --device cpu``) has them: the
    datasheet path and GPU profiles keep the per-kernel ``kernel_overhead_s`` alone (eager.py).
    """
    if profile is None or not getattr(profile, "eager_overhead", None):
        return 0.0, 0.0
    style = block_style(shp)
    wrap = tp_wrapper(shp)
    if wrap and f"{style}+{wrap}" in profile.eager_overhead:
        style = f"{style}+{wrap}"  # DTensor dispatch of the TP block (measured on a one-rank mesh)
    return (profile.eager_op_overhead_s(style, "fwd") or 0.0, profile.eager_op_overhead_s(style, "bwd") or 0.0)


def wrapper_overhead_s(scenario: Scenario, profile: CalibrationProfile | None,
                       wrapper: str) -> tuple[float, float]:
    """Extra (forward, backward) seconds per block that a module wrapper (``"fsdp"``: FSDP2 fully_shard's
    hooks, all-gather copy-in/out and reduce-scatter bookkeeping) adds in eager execution, from a CPU
    profile; (0, 0) when not measured. Collectives themselves are timed by the collective model."""
    if profile is None or not getattr(profile, "eager_overhead", None):
        return 0.0, 0.0
    shp = layer_shape(scenario)
    style = block_style(shp)
    wrapped, plain = profile.eager_overhead.get(f"{style}+{wrapper}"), profile.eager_overhead.get(style)
    if wrapped is None or plain is None:
        return 0.0, 0.0
    n_f, n_b = count_passes(layer_ops(shp))
    return (max(0.0, wrapped.fwd.median_s - plain.fwd.median_s) * n_f / wrapped.fwd_ops,
            max(0.0, wrapped.bwd.median_s - plain.bwd.median_s) * n_b / wrapped.bwd_ops)


def _sum_times(ops: tuple[Op, ...], rec: tuple[Op, ...], hw: _Hw, shp: LayerShape, profile) -> LayerTimes:
    f = bi = bw = r = 0.0
    ov_f, ov_b = eager_overhead_s(shp, profile)
    # The re-run ops are the block's own or, for torchtitan's op_sac, shares of its fused GEMMs (flops._gemm_share).
    for op, rerun in [(op, False) for op in ops] + [(op, True) for op in rec]:
        t = op_times(op, hw, e=shp.e, dtype=shp.dtype, profile=profile, causal=shp.causal, norm=shp.norm,
                     flash_version=shp.flash_version)
        in_f, in_b = op_passes(op) if (ov_f or ov_b) else (False, False)
        if rerun:
            r += t.fwd_s + (ov_f if in_f else 0.0)
            continue
        f += t.fwd_s + (ov_f if in_f else 0.0)
        bi += t.bwd_input_s + (ov_b if in_b else 0.0)
        bw += t.bwd_weight_s
    return LayerTimes(f, bi, bw, r)


@memoised(maxsize=16384)
def _cached_times(what: str, shp: LayerShape, hw: _Hw, pref, learned_positions: bool) -> LayerTimes:
    profile = pref.profile if pref is not None else None
    if what == "layer":
        ops = layer_ops(shp)
        return _sum_times(ops, recompute_ops(ops, shp.recompute, shp.rc_modules), hw, shp, profile)
    if what == "embedding":
        return _sum_times(_embedding_ops(shp, learned_positions), (), hw, shp, profile)
    if what == "mtp":
        ops = _mtp_ops(shp)
        return _sum_times(ops, recompute_ops(ops, shp.recompute, shp.rc_modules), hw, shp, profile)
    return _sum_times(head_ops(shp), (), hw, shp, profile)


def _ctx(scenario, profile):
    shp = layer_shape(scenario)
    hw = hw_of(scenario.cluster.gpu, shp.dtype)
    return shp, hw, (_ProfileRef(profile) if profile is not None else None)


def layer_times(scenario: Scenario, profile: CalibrationProfile | None = None) -> LayerTimes:
    """Seconds of one transformer block per micro-batch on one rank: fwd, bwd-input, bwd-weight, recompute.

    ``recompute_s`` is the forward re-run before backward (selective: attention core; full: whole block).
    """
    shp, hw, pref = _ctx(scenario, profile)
    return _cached_times("layer", shp, hw, pref, False)


def layer_op_times(scenario: Scenario, profile: CalibrationProfile | None = None) -> tuple[OpTimes, ...]:
    """Per-op seconds of one block (for traces and reports)."""
    shp, hw, _ = _ctx(scenario, profile)
    return tuple(op_times(op, hw, e=shp.e, dtype=shp.dtype, profile=profile, causal=shp.causal, norm=shp.norm,
                     flash_version=shp.flash_version)
                 for op in layer_ops(shp))


def embedding_times(scenario: Scenario, profile: CalibrationProfile | None = None) -> LayerTimes:
    """Seconds of the embedding (first stage) per micro-batch on one rank."""
    shp, hw, pref = _ctx(scenario, profile)
    return _cached_times("embedding", shp, hw, pref, scenario.model.position_embedding == "learned")


def head_times(scenario: Scenario, profile: CalibrationProfile | None = None) -> LayerTimes:
    """Seconds of final norm + logits + cross-entropy (last stage) per micro-batch on one rank."""
    shp, hw, pref = _ctx(scenario, profile)
    return _cached_times("head", shp, hw, pref, False)


def mtp_times(scenario: Scenario, profile: CalibrationProfile | None = None) -> LayerTimes:
    """Seconds of one multi-token-prediction module's own ops (embedding, norms, 2h->h projection) per
    micro-batch on one rank; its block and head pass cost what ``layer_times`` / ``head_times`` say."""
    shp, hw, pref = _ctx(scenario, profile)
    return _cached_times("mtp", shp, hw, pref, False)


def optimizer_step_time(scenario: Scenario, stage: int, profile: CalibrationProfile | None = None) -> float:
    """Seconds of the optimizer step over this rank's optimizer shard (Adam's memory-bound update, or Muon's:
    cost_models/muon.py), plus the grad-norm pass."""
    return sum(optimizer_step_parts(scenario, stage, profile))


def optimizer_step_parts(scenario: Scenario, stage: int,
                         profile: CalibrationProfile | None = None) -> tuple[float, float]:
    """(device seconds, host seconds) of the optimizer step: the update and the grad-norm pass on the device,
    or with ``offload_optimizer`` the update on the host (only the norm pass stays on the device).

    Fused Adam streams per parameter: fp32 master weight, m and v read and written (2·K bytes), the
    gradient read and the 16-bit weight written; a per-parameter eager loop (Composer's DecoupledAdamW) makes
    one pass per op instead; clipping reads every local gradient once more (and scales it where the
    framework always does: framework.clip_scales_grads); fp16
    adds the loss-scale unscale/inf check, and the framework its extra copies (framework.py). With
    ``offload_optimizer`` the update runs on the host at ``HOST_MEM_BW_PER_NODE_BPS / gpus_per_node``
    (the PCIe traffic is reported by ``memory.stage_memory`` for the engine to time).
    """
    from .memory import rank_param_shards  # memory does not import compute
    from .model_states import held_grad_bytes  # cycle: model_states -> muon -> here

    t = scenario.training
    fw = behaviour(t.framework)
    sh = rank_param_shards(scenario, stage)
    grad_bytes = held_grad_bytes(t)
    if fw.optimizer_update == "per_param_loop" and t.optimizer_bytes_per_param == 12:
        per_param = PER_PARAM_LOOP_ADAM_BYTES  # fp32 master, m, v: the eager op sequence of framework.py
    elif fw.optimizer_update == "foreach" and t.optimizer_bytes_per_param == 8 and t.param_bytes == 4:
        per_param = FOREACH_ADAM_BYTES  # torch.optim.Adam's _foreach passes over fp32 params, m, v (framework.py)
    else:
        per_param = 2 * t.optimizer_bytes_per_param + grad_bytes + t.param_bytes
    update_bytes = sh.optimizer_params * (per_param + fw.optimizer_extra_bytes_per_param)
    norm_bytes = sh.grad_params * grad_bytes * (3 if fw.clip_scales_grads else 1) if fw.clips_grads else 0.0
    if t.dtype == "fp16":
        norm_bytes += sh.optimizer_params * FP16_UNSCALE_BYTES_PER_PARAM
    hw = hw_of(scenario.cluster.gpu, t.dtype)
    prof = profile
    norm_s = memory_time_s(norm_bytes, hw, prof, "copy") if norm_bytes else 0.0
    if t.optimizer == "muon":  # Newton-Schulz GEMMs and per-parameter passes on the busiest rank (muon.py)
        return step_seconds(scenario, stage, prof) + norm_s, 0.0
    if t.offload_optimizer:
        host_bw = HOST_MEM_BW_PER_NODE_BPS / min(scenario.cluster.gpus_per_node, scenario.num_gpus)
        return norm_s, update_bytes / host_bw
    fits = getattr(prof, "optimizer_fits", None) if prof is not None else None
    if fits:
        # A CPU profile measured torch.optim itself (per-parameter loop: per-tensor cost + streaming);
        # Adam keeps m and v (8 B/param in fp32), SGD with momentum 4 B/param.
        name = "sgd" if t.optimizer_bytes_per_param <= 4 else "adam"
        plain, dtensor = stage_param_tensors(scenario, stage)
        total = plain + dtensor
        if total and name in fits:
            # Elements split by tensor count (DTensor parameters go through DTensor dispatch, measured apart).
            parts = [(name, plain), (f"{name}-dtensor" if f"{name}-dtensor" in fits else name, dtensor)]
            return sum(prof.optimizer_time_s(k, n, sh.optimizer_params * n / total) for k, n in parts if n), 0.0
    # The host's issue of the step's kernels is cost_models/step_host.py's (the builder takes the longer).
    return (memory_time_s(update_bytes, hw, prof, "copy") if update_bytes else 0.0) + norm_s, 0.0


def waves(m: int, n: int, num_sms: int) -> int:
    """Number of waves of 128×128 tiles an (m×n) output needs on ``num_sms`` SMs."""
    return math.ceil(math.ceil(m / TILE) * math.ceil(n / TILE) / num_sms)
