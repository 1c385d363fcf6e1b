"""Fit the run-calibration factors (cost_models.run_factors) to measured step times.

The model is ln(measured_i) = ln(predict_i(theta)) + noise, noise ~ N(0, NOISE_SD^2), with an independent
Gaussian prior on every factor in its coordinate (log for multipliers). The fit is the MAP estimate
(scipy.optimize.least_squares on the stacked data and prior residuals, bounded so efficiencies stay <= 1).

Only factors the runs identify are fitted. Factors are taken greedily by how far one prior sd of them moves
the runs (in noise units, the Jacobian at the presets); a factor joins when, together with the ones already
chosen, every chosen factor's posterior sd is at most ``IDENTIFIED_SD_RATIO`` of its prior sd and there are
no more factors than runs. A factor left out stays exactly at its preset, with the reason recorded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trainsim.cost_models.run_factors import (
    FittedFactor,
    RunCalibration,
    RunResidual,
    preset_value,
    prior_of,
    upper_log_bound,
)
from trainsim.specs import Scenario

from .predict import apply_run_values, predict

# Run-to-run sd of ln(step time) of one configuration: iteration times of a steady training run vary by about
# 1 % (Megatron-LM's per-interval "elapsed time per iteration" after warm-up; torchtitan's tps lines).
NOISE_SD = 0.01
# A factor counts as identified when the runs shrink its uncertainty to at most half its prior sd.
IDENTIFIED_SD_RATIO = 0.5
FD_STEP = 0.05  # finite-difference step of log factors (5 %); linear factors use 0.2 prior sd
LOG_FLOOR = math.log(0.05)  # no factor below 1/20 of its preset: beyond that the model, not a factor, is wrong


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run: what ran (a Scenario) and its median step time."""

    name: str
    source: str
    scenario: Scenario
    step_time_s: float
    steps_used: int | None = None


PredictLog = Callable[[MeasuredRun, dict[str, float]], float]


def candidate_factors(runs: list[MeasuredRun]) -> list[str]:
    """Every factor these runs could in principle inform: one compute factor per GPU type, then the rest."""
    gpus = sorted({r.scenario.cluster.gpu.name for r in runs})
    return [f"compute:{g}" for g in gpus] + ["scale_up_bw", "scale_out_bw", "kernel_overhead", "step_overhead_s"]


def values_of(theta: dict[str, float]) -> dict[str, float]:
    """Factor values from fitted coordinates (exp for log factors)."""
    return {n: (math.exp(t) if prior_of(n)[2] == "log" else t) for n, t in theta.items()}


def engine_predict_log(base_profile=None, fast: bool = False) -> PredictLog:
    """ln(predicted step) of a run with these factor coordinates, through trainsim's engine (with the
    microbenchmark profile ``base_profile`` when given, as `predict --calibration` applies both)."""
    def run(r: MeasuredRun, theta: dict[str, float]) -> float:
        scenario, profile, overhead = apply_run_values(r.scenario, base_profile, values_of(theta))
        pred = predict(scenario, fast=fast, profile=profile)
        return math.log(pred.step_time_s + overhead)

    return run


def _fd_step(name: str) -> float:
    _, sigma, coord = prior_of(name)
    return FD_STEP if coord == "log" else 0.2 * sigma


def sensitivity(runs: list[MeasuredRun], names: list[str], f: PredictLog) -> tuple[np.ndarray, np.ndarray]:
    """(ln prediction at the presets per run, Jacobian d ln(step) / d theta at the presets)."""
    theta0 = {n: prior_of(n)[0] for n in names}
    base = np.array([f(r, theta0) for r in runs])
    jac = np.zeros((len(runs), len(names)))
    for j, n in enumerate(names):
        h = _fd_step(n)
        up = {**theta0, n: theta0[n] + h}
        jac[:, j] = [(f(r, up) - b) / h for r, b in zip(runs, base, strict=True)]
    return base, jac


def posterior_sd_ratio(a: np.ndarray) -> np.ndarray:
    """Posterior sd / prior sd of each column of ``a`` (Jacobian scaled by prior sd / noise sd), prior I."""
    prec = a.T @ a + np.eye(a.shape[1])
    return np.sqrt(np.diag(np.linalg.inv(prec)))


def select_identified(jac: np.ndarray, names: list[str]) -> tuple[list[int], dict[int, str]]:
    """Greedy choice of identified factors (module docstring); returns chosen columns and reasons for the rest."""
    sig = np.array([prior_of(n)[1] for n in names])
    a = jac * sig / NOISE_SD
    order = sorted(range(len(names)), key=lambda j: -float(np.linalg.norm(a[:, j])))
    chosen: list[int] = []
    why: dict[int, str] = {}
    for j in order:
        strength = float(np.linalg.norm(a[:, j]))
        if strength < 1e-9:
            why[j] = "no run depends on it"
            continue
        if len(chosen) + 1 > a.shape[0]:
            why[j] = f"{a.shape[0]} run(s) identify at most {a.shape[0]} factor(s)"
            continue
        ratio = posterior_sd_ratio(a[:, chosen + [j]])
        if float(ratio.max()) > IDENTIFIED_SD_RATIO:
            worst = names[(chosen + [j])[int(np.argmax(ratio))]]
            why[j] = (f"not separable by these runs (with it, {worst}'s posterior sd would be "
                      f"{ratio.max():.0%} of its prior)")
            continue
        chosen.append(j)
    return chosen, why


def _map_fit(runs: list[MeasuredRun], measured: np.ndarray, names: list[str], free: list[int],
             f: PredictLog) -> tuple[dict[str, float], np.ndarray | None]:
    """MAP coordinates of the free factors (others at their prior means) and the residual Jacobian."""
    from scipy.optimize import least_squares  # slow import (0.4-4 s), loaded on use

    theta = {n: prior_of(n)[0] for n in names}
    if not free:
        return theta, None
    fnames = [names[j] for j in free]
    mu = np.array([prior_of(n)[0] for n in fnames])
    sd = np.array([prior_of(n)[1] for n in fnames])
    lo = np.array([LOG_FLOOR if prior_of(n)[2] == "log" else 0.0 for n in fnames])
    hi = np.array([min(upper_log_bound(n, r.scenario) for r in runs) for n in fnames])
    hi = np.maximum(hi, lo + 1e-9)

    def resid(x: np.ndarray) -> np.ndarray:
        th = {**theta, **dict(zip(fnames, x, strict=True))}
        data = np.array([f(r, th) for r in runs]) - measured
        return np.concatenate([data / NOISE_SD, (x - mu) / sd])

    # Start half a prior sd above the preset: least_squares sizes its first trust region by |x0| (a factor
    # starting on its bound at 0 would take steps of 1e-10).
    x0 = np.clip(mu + 0.5 * sd, lo + 1e-9, hi - 1e-9)
    steps = np.array([_fd_step(n) for n in fnames])

    def jac(x: np.ndarray) -> np.ndarray:
        # Forward differences with absolute steps (scipy's relative steps vanish at a log factor of 0),
        # stepping backwards where the upper bound is near.
        r0 = resid(x)
        cols = []
        for j, h in enumerate(steps):
            h = h if x[j] + h <= hi[j] else -h
            cols.append((resid(x + h * np.eye(len(x))[j]) - r0) / h)
        return np.array(cols).T

    sol = least_squares(resid, x0, jac=jac, bounds=(lo, hi), x_scale=sd, xtol=1e-6, ftol=1e-8, max_nfev=60)
    return {**theta, **dict(zip(fnames, sol.x, strict=True))}, sol.jac


def fit_theta(runs: list[MeasuredRun], f: PredictLog) -> tuple[dict[str, float], dict[str, float], dict[str, str],
                                                              np.ndarray, np.ndarray]:
    """(coordinates, posterior sds of fitted ones, reasons for kept ones, ln predictions before, after)."""
    names = candidate_factors(runs)
    measured = np.log([r.step_time_s for r in runs])
    base, jac = sensitivity(runs, names, f)
    free, why = select_identified(jac, names)
    theta, rjac = _map_fit(runs, measured, names, free, f)
    after = np.array([f(r, theta) for r in runs]) if free else base
    sds: dict[str, float] = {}
    if rjac is not None:
        cov = np.linalg.pinv(rjac.T @ rjac)
        dof = len(runs) - len(free)
        scale = 1.0
        if dof > 0:
            scale = max(1.0, float(np.sqrt(np.sum((measured - after) ** 2) / dof)) / NOISE_SD)
        sds = {names[j]: float(np.sqrt(max(cov[i, i], 0.0))) * scale for i, j in enumerate(free)}
    return theta, sds, {names[j]: w for j, w in why.items()}, base, after


def fit_runs(runs: list[MeasuredRun], f: PredictLog | None = None, *, leave_one_out: bool = True) -> RunCalibration:
    """The run calibration of ``runs``: fitted factors, their sds, every run's residual and (with two or more
    runs) its leave-one-out residual (the factors refitted without it, selection included)."""
    f = f or engine_predict_log()
    theta, sds, why, base, after = fit_theta(runs, f)
    factors = []
    for n, t in theta.items():
        _, sigma, _ = prior_of(n)
        fitted = n in sds
        value = values_of({n: t})[n] if fitted else preset_value(n)
        factors.append(FittedFactor(name=n, value=value, stderr=sds.get(n, sigma), prior_sd=sigma, fitted=fitted,
                                    reason="fitted" if fitted else f"kept at preset: {why.get(n, 'not identified')}"))
    loo = _leave_one_out(runs, f) if leave_one_out and len(runs) >= 2 else [None] * len(runs)
    rows = [RunResidual(name=r.name, source=r.source, gpu=r.scenario.cluster.gpu.name, num_gpus=r.scenario.num_gpus,
                        measured_step_s=r.step_time_s, predicted_before_s=math.exp(b), predicted_after_s=math.exp(a),
                        log_residual=math.log(r.step_time_s) - a, loo_log_residual=lo, steps_used=r.steps_used)
            for r, b, a, lo in zip(runs, base, after, loo, strict=True)]
    fitted = [x.name for x in factors if x.fitted]
    notes = [(f"fitted {', '.join(fitted) or 'no factor'} from {len(runs)} run(s); "
             f"kept at preset: {', '.join(x.name for x in factors if not x.fitted) or 'none'}")]
    return RunCalibration(factors=factors, runs=rows, noise_sd=NOISE_SD, notes=notes)


def _leave_one_out(runs: list[MeasuredRun], f: PredictLog) -> list[float]:
    out = []
    for i, r in enumerate(runs):
        rest = runs[:i] + runs[i + 1:]
        theta, _, _, _, _ = fit_theta(rest, f)
        names = candidate_factors(runs)
        th = {n: theta.get(n, prior_of(n)[0]) for n in names}  # a GPU type only run i has stays at its prior
        out.append(math.log(r.step_time_s) - f(r, th))
    return out
