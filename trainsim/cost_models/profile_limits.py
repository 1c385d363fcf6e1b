"""What a calibration profile may hold: the ranges a measurement can take and the names a query asks for.

A value outside them is no measurement of the suite's (a corrupt or hand-edited profile): read as is it crashed the
log-log interpolation (a time of 0), overflowed a step's time to inf or NaN (a rate of 1e-300 FLOP/s), or was
silently ignored (a misspelt dtype) or folded into the median of all memory ops (a misspelt op).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, get_args

from pydantic import Field

from trainsim.specs.errors import SpecError
from trainsim.specs.hardware import Dtype

# What a measurement can be. A point or fixed cost longer than a week is none of the suite's (`trainsim calibrate
# --timeout` allows the whole run at most 604,800 s). A rate below a million per second (FLOP/s, bytes/s,
# elements/s) is below any device torch runs on (a 10 Mb/s Ethernet link moves 1.25e6 B/s, one 1990s CPU core
# ~1e7 FLOP/s) and overflowed a step's time to inf. Fitted rates have no upper bound (a flat, latency-bound series
# fits a huge one, harmless in a time); reference peaks stop at GPUSpec's 1e18 FLOP/s (specs/hardware.py), sizes at
# 1 PiB as `trainsim collective`'s.
MAX_MEASURED_S = 604_800.0
MIN_RATE_PER_S = 1e6
MAX_FLOPS = 1e18
MAX_POINT_BYTES = float(2**50)
Seconds = Annotated[float, Field(ge=0, le=MAX_MEASURED_S)]
# Host/device copies the suite times (kernels/microbench.py) and the dtypes it times GEMMs and attention in
# (`trainsim calibrate --dtype` offers these choices).
COPY_KINDS = ("h2d", "d2h", "d2d")
PROFILE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
# The reference peaks are the GPU preset's, every dtype it has a peak for (kernels/calibrate.py copies them all).
PEAK_DTYPES = get_args(Dtype)


def _refuse(field: str, name: str, known: Sequence[str]) -> SpecError:
    return SpecError(field, f"unknown name {name!r} (known: {', '.join(known)})")


def unknown_name(profile: Any, memory_ops: Sequence[str], collective_ops: Sequence[str]) -> None:
    """SpecError naming the first op or fit key of ``profile`` that no query asks for."""
    ops = sorted({*memory_ops, *(f"{o}_bwd" for o in memory_ops)})
    attention = [f"{d}/{p}" for d in PROFILE_DTYPES for p in ("fwd", "bwd")]
    named: list[tuple[str, str, Sequence[str]]] = [
        *((f"memory_points[{i}].op", p.op, ops) for i, p in enumerate(profile.memory_points)),
        *((f"memory_fits.{k}", k, [*ops, "all"]) for k in profile.memory_fits),
        *((f"gemm_fits.{k}", k, PROFILE_DTYPES) for k in profile.gemm_fits),
        *((f"attention_fits.{k}", k, attention) for k in profile.attention_fits),
        *((f"copy_points[{i}].op", p.op, COPY_KINDS) for i, p in enumerate(profile.copy_points)),
        *((f"copy_fits.{k}", k, COPY_KINDS) for k in profile.copy_fits),
        *((f"collective_points[{i}].op", p.op, collective_ops) for i, p in enumerate(profile.collective_points)),
        *((f"collective_fits[{i}].op", f.op, collective_ops) for i, f in enumerate(profile.collective_fits)),
        *((f"reference_peak_flops.{k}", k, PEAK_DTYPES) for k in profile.reference_peak_flops),
        *((f"gemm_points[{i}].dtype", p.dtype, PROFILE_DTYPES) for i, p in enumerate(profile.gemm_points)),
        *((f"attention_points[{i}].dtype", p.dtype, PROFILE_DTYPES) for i, p in enumerate(profile.attention_points)),
        *((f"dtensor_collective_overhead_s.{k}", k, collective_ops) for k in profile.dtensor_collective_overhead_s),
    ]
    for field, name, known in named:
        if name not in known:
            raise _refuse(field, name, known)
