"""Run-calibration factors: a few named physical multipliers learnt from a user's measured runs (pure).

``trainsim calibrate --from-runs`` fits these factors to measured step times; the cost model applies them to
the scenario's hardware spec before costing it, so every op, collective and report sees the same physics:

* ``compute:<GPU>`` -- sustained compute efficiency of that GPU type: multiplies ``GPUSpec.gemm_efficiency``
  and ``attention_efficiency`` (the datasheet-derived cuBLASLt / FlashAttention fractions of peak). A
  training job's kernels sustain less (or, with better-tuned kernels, more) than the microbenchmark; this
  is that ratio. Capped so that efficiency stays <= 1.
* ``scale_up_bw`` -- achieved fraction of the NVLink/NVSwitch payload rate (``ScaleUpSpec.efficiency``,
  NCCL topo.h default 0.80), relative to the default.
* ``scale_out_bw`` -- achieved fraction of the NIC line rate (``ScaleOutSpec.efficiency``, NCCL's 0.96),
  relative to the default: congestion, adaptive routing, NCCL channel counts.
* ``kernel_overhead`` -- the per-op host/launch cost (``GPUSpec.kernel_overhead_s``, 4 us); it is paid per op
  per micro-batch, so this is the per-micro-batch host overhead of the stack (Python dispatch, hooks).
* ``step_overhead_s`` -- seconds added once per optimizer step outside forward/backward: data-loader waits,
  timers and logging, gradient-norm and loss all-reduces, checkpoint-free bookkeeping.

The multiplicative factors are fitted in log space with a Gaussian prior at 1 (the preset); the additive
step overhead with a Gaussian prior at 0 s, bounded below by 0. Prior widths (one sigma) are physical:
sustained compute between the microbenchmark and about 0.86x / 1.16x of it (log sigma 0.15: the spread of
Megatron-LM's MFU across model sizes at one scale, SC21 Table 1, 44-52 % of peak); fabric efficiencies
within 0.82x..1.22x (log sigma 0.2: nccl-tests busbw on one fabric varies by this much with NCCL version
and channel settings, validation/nccl_busbw.csv); launch overhead within a factor 2 (log sigma ln 2: 2-8 us
per launch across CUDA/driver versions); step overhead sigma 50 ms (Megatron's per-iteration bookkeeping:
timers, loss and grad-norm reductions, tens of ms).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, model_validator

from trainsim.specs.errors import SpecError
from trainsim.specs.hardware import MIN_EFFICIENCY
from trainsim.specs.spec_config import SPEC_CONFIG
from trainsim.topologies.fabric import NIC_EFFICIENCY, SCALE_UP_EFFICIENCY

from .profile_limits import MAX_MEASURED_S

if TYPE_CHECKING:
    from trainsim.specs import Scenario

# name -> (prior mean in the fitted coordinate, prior sigma, coordinate, what it is)
# coordinate "log": the value is exp(theta) (a multiplier, preset 1); "linear": theta itself (seconds).
FACTOR_PRIORS: dict[str, tuple[float, float, str, str]] = {
    "compute": (0.0, 0.15, "log", "sustained GEMM/attention efficiency multiplier of one GPU type"),
    "scale_up_bw": (0.0, 0.20, "log", "scale-up (NVLink/NVSwitch) payload efficiency multiplier"),
    "scale_out_bw": (0.0, 0.20, "log", "scale-out (NIC) payload efficiency multiplier"),
    "kernel_overhead": (0.0, math.log(2.0), "log", "per-op host/launch overhead multiplier (per micro-batch)"),
    "step_overhead_s": (0.0, 0.05, "linear", "fixed seconds per optimizer step outside forward/backward"),
}


def kind_of(name: str) -> str:
    """The prior family of a factor name (``compute:H100`` -> ``compute``)."""
    return name.split(":", 1)[0]


def prior_of(name: str) -> tuple[float, float, str]:
    """(mean, sigma, coordinate) of the prior of a factor name (FACTOR_PRIORS)."""
    mean, sigma, coord, _ = FACTOR_PRIORS[kind_of(name)]
    return mean, sigma, coord


def preset_value(name: str) -> float:
    """The factor's value at its prior mean (1 for multipliers, 0 s for the step overhead)."""
    mean, _, coord = prior_of(name)
    return math.exp(mean) if coord == "log" else mean


class _Model(BaseModel):
    model_config = SPEC_CONFIG


class FittedFactor(_Model):
    """One factor: its value, standard error (in the fitted coordinate: log for multipliers) and status."""

    name: str
    value: float
    stderr: float = Field(ge=0, description="posterior sd in the fitted coordinate (log for multipliers)")
    prior_sd: float = Field(gt=0)
    fitted: bool = Field(description="False: the runs do not identify it; kept at its preset")
    reason: str = ""

    @model_validator(mode="after")
    def _check(self) -> FittedFactor:
        """A name apply_factors reads and a value it can apply: a multiplier > 0 (the scaled spec's efficiencies
        must stay positive), a step overhead in [0, a week]."""
        kind, _, gpu = self.name.partition(":")
        if kind not in FACTOR_PRIORS or (kind == "compute") != bool(gpu):
            raise ValueError(f"unknown factor {self.name!r} (known: compute:<GPU name>, "
                             f"{', '.join(k for k in FACTOR_PRIORS if k != 'compute')})")
        if FACTOR_PRIORS[kind][2] == "log" and not self.value > 0:
            raise ValueError(f"{self.name} is a multiplier: must be > 0, got {self.value:g}")
        if kind == "step_overhead_s" and not 0 <= self.value <= MAX_MEASURED_S:
            raise ValueError(f"step_overhead_s must be between 0 and {MAX_MEASURED_S:g} s, got {self.value:g}")
        return self


class RunResidual(_Model):
    """One measured run used by the fit: measured and calibrated-predicted step, and the held-out residual."""

    name: str
    source: str = Field(description="file[:line] the run was read from")
    gpu: str
    num_gpus: int = Field(ge=1)
    measured_step_s: float = Field(gt=0)
    predicted_before_s: float = Field(gt=0, description="prediction with the presets")
    predicted_after_s: float = Field(gt=0, description="prediction with the fitted factors")
    log_residual: float = Field(description="ln(measured / predicted_after)")
    loo_log_residual: float | None = Field(default=None, description="ln(measured / prediction fitted without it)")
    steps_used: int | None = None


class RunCalibration(_Model):
    """The run-calibration section of a calibration profile (schema 4)."""

    factors: list[FittedFactor]
    runs: list[RunResidual]
    noise_sd: float = Field(gt=0, description="assumed run-to-run sd of ln(step time) in the likelihood")
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> RunCalibration:
        names = [f.name for f in self.factors]
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:  # values() keeps the last: the first would be ignored
            raise ValueError(f"factor {twice!r} is given twice")
        return self

    def values(self) -> dict[str, float]:
        return {f.name: f.value for f in self.factors}

    def fitted_names(self) -> list[str]:
        return [f.name for f in self.factors if f.fitted]

    def loo_residuals(self) -> list[float]:
        return [r.loo_log_residual for r in self.runs if r.loo_log_residual is not None]

    def describe(self) -> str:
        fitted = ", ".join(f"{f.name}={f.value:.3g}" for f in self.factors if f.fitted) or "none"
        return f"run calibration on {len(self.runs)} run(s): fitted {fitted}"


def apply_factors(scenario: Scenario, values: dict[str, float]):
    """``scenario`` with its GPU, scale-up and scale-out efficiencies and launch overhead scaled by the factors
    (missing factors = presets), on the cluster's node and on every pool's (a ``compute:`` factor on the GPUs of its
    name only); efficiencies are capped at 1. Returns (scenario, step_overhead_s)."""
    cl = scenario.cluster
    update = _scaled_node(cl, values, cl.name)
    if cl.pools:
        update["pools"] = tuple(p.model_copy(update=_scaled_node(p, values, f"{cl.name} pool {p.name}"))
                                for p in cl.pools)
    if update:
        scenario = scenario.model_copy(update={"cluster": cl.model_copy(update=update)})
    return scenario, max(0.0, values.get("step_overhead_s", 0.0))


def _scaled_node(node, values: dict[str, float], where: str) -> dict:
    """The scaled ``gpu``, ``scale_up`` and ``scale_out`` of a cluster or pool (only those a factor moves)."""
    gpu, su, so = node.gpu, node.scale_up, node.scale_out
    c = values.get(f"compute:{gpu.name}", 1.0)
    k = values.get("kernel_overhead", 1.0)
    gpu_up = {}
    if c != 1.0:
        gpu_up.update(gemm_efficiency=min(1.0, gpu.gemm_efficiency * c),
                      attention_efficiency=min(1.0, gpu.attention_efficiency * c))
    if k != 1.0:
        gpu_up["kernel_overhead_s"] = min(1.0, gpu.kernel_overhead_s * k)
    up = values.get("scale_up_bw", 1.0)
    out = values.get("scale_out_bw", 1.0)
    node_up = {}
    if gpu_up:
        node_up["gpu"] = gpu.model_copy(update=gpu_up)
    if up != 1.0:
        node_up["scale_up"] = su.model_copy(update={"efficiency": min(1.0, (su.efficiency or SCALE_UP_EFFICIENCY[su.kind]) * up)})
    if out != 1.0:
        node_up["scale_out"] = so.model_copy(update={"efficiency": min(1.0, (so.efficiency or NIC_EFFICIENCY) * out)})
    for part, key in (("gpu", "gemm_efficiency"), ("gpu", "attention_efficiency"), ("scale_up", "efficiency"),
                      ("scale_out", "efficiency")):
        scaled = getattr(node_up.get(part), key, None)
        if scaled is not None and scaled < MIN_EFFICIENCY:
            raise SpecError("calibration.run_calibration", f"its factors take {where}'s {part}.{key} to {scaled:.3g}, "
                                                           f"below the {MIN_EFFICIENCY:.0%} floor of any device")
    return node_up


def upper_log_bound(name: str, scenario: Scenario) -> float:
    """Largest log multiplier that keeps the efficiency a factor scales <= 1 for this scenario, on the cluster's node
    and every pool's (a ``compute:`` factor on the GPUs of its name); inf if none."""
    kind = kind_of(name)
    cl = scenario.cluster
    nodes = [cl, *(cl.pools or ())]
    if kind == "compute":
        effs = [max(n.gpu.gemm_efficiency, n.gpu.attention_efficiency) for n in nodes
                if f"compute:{n.gpu.name}" == name]
    elif kind == "scale_up_bw":
        effs = [n.scale_up.efficiency or SCALE_UP_EFFICIENCY[n.scale_up.kind] for n in nodes]
    elif kind == "scale_out_bw":
        effs = [n.scale_out.efficiency or NIC_EFFICIENCY for n in nodes]
    else:
        effs = []
    return -math.log(max(effs)) if effs else math.inf
