"""Measured vs predicted for `trainsim execute`: the comparison lives here, above the simulator, because
kernels (which measure) must never import the simulator (docs/design.md layering)."""

from __future__ import annotations

import math
from typing import Any

from trainsim.cost_models.profile import load_profile
from trainsim.kernels.exec_config import ExecJob
from trainsim.kernels.executor import predicted_memory, prediction_scenario
from trainsim.simulator.predict import predict


def predict_step(job: ExecJob, calibration=None) -> dict[str, Any]:
    """The engine's prediction of the executed scenario; ``calibration`` is a profile path, a loaded
    CalibrationProfile or None (datasheet defaults)."""
    profile = calibration
    if isinstance(calibration, str):
        profile = load_profile(calibration)
    return predict(prediction_scenario(job), profile=profile).to_json()


# --- comparison --------------------------------------------------------------------------------------------

STATE_KEYS = ("params", "grads", "optimizer")


def measured_per_stage(result: dict[str, Any], pp: int) -> list[dict[str, float]]:
    """Per pipeline stage, the largest value over its ranks (they agree unless shards are uneven)."""
    stages: list[dict[str, float]] = [{} for _ in range(pp)]
    for r in result["ranks"]:
        st = stages[r["pp_rank"]]
        vals = {k: r.get(k, 0) for k in STATE_KEYS}
        vals["activations_per_microbatch"] = r.get("saved_per_microbatch_bytes", 0)
        vals["activations_peak"] = r.get("peak_saved_bytes", 0)
        if "max_memory_allocated_bytes" in r:
            vals["max_memory_allocated"] = r["max_memory_allocated_bytes"]
        vals["maxrss"] = r.get("maxrss_bytes", 0)
        for k, v in vals.items():
            st[k] = max(st.get(k, 0), v)
    return stages


def error_pct(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / measured in percent; None when nothing was measured."""
    if not measured:
        return 0.0 if not predicted else None
    return 100.0 * (predicted - measured) / measured


def compare(job: ExecJob, result: dict[str, Any], *, calibration=None,
            reference: list[float] | None = None, with_prediction: bool = True) -> dict[str, Any]:
    """Measured vs predicted, side by side, with the error of each (the `--json` object of `trainsim execute`)."""
    s = job.spec
    meas_stages = measured_per_stage(result, s.layout.pp)
    pred_stages = predicted_memory(job)
    keys = STATE_KEYS + ("activations_per_microbatch", "activations_peak")
    errors = [{k: error_pct(p[k], m.get(k, 0)) for k in keys} for p, m in zip(pred_stages, meas_stages)]
    timing = result.get("timing", {})
    out: dict[str, Any] = {
        "scenario": s.name, "label": job.label, "world_size": result["world_size"], "device": job.device,
        "layout": {"tp": s.layout.tp, "pp": s.layout.pp, "dp": s.dp, "cp": s.layout.cp, "vpp": s.layout.vpp,
                   "hsdp_replicas": job.hsdp, "micro_batch": s.training.micro_batch,
                   "num_microbatches": s.num_microbatches, "schedule": s.training.schedule,
                   "zero": s.training.zero, "recompute": s.training.recompute,
                   "sequence_parallel": s.training.sequence_parallel},
        "mechanism": result.get("mechanism", {}),
        "optimizer": job.optimizer, "steps": job.steps, "warmup": job.warmup,
        "measured": {"step_time_s": timing.get("median_s"), "step_time_min_s": timing.get("min_s"),
                     "step_time_p99_s": timing.get("p99_s"), "step_times_s": result.get("step_times_s", []),
                     "phases_s": result["ranks"][0].get("phases_median_s", {}),
                     "losses": result["losses"], "per_stage": meas_stages, "ranks": result["ranks"]},
        "predicted": {"per_stage": pred_stages},
        "error_pct": {"per_stage": errors},
    }
    if with_prediction:
        pred = predict_step(job, calibration)
        out["predicted"]["prediction"] = pred
        if pred and "step_time_s" in pred:
            out["predicted"]["step_time_s"] = pred["step_time_s"]
            out["error_pct"]["step_time"] = error_pct(pred["step_time_s"], timing.get("median_s") or 0.0)
    if reference is not None:
        diffs = [abs(a - b) for a, b in zip(result["losses"], reference)]
        finite = [d for d in diffs if math.isfinite(d)]  # max() would skip a NaN that is not first
        out["reference"] = {"losses": reference, "max_abs_loss_diff": max(finite) if finite else None,
                            "nonfinite_steps": len(diffs) - len(finite)}
    return out


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def format_comparison(c: dict[str, Any]) -> str:
    """A plain-text side-by-side table of one comparison."""
    lay = c["layout"]
    head = (f"{c['scenario']}  [{c['label'] or 'execute'}]  tp={lay['tp']} pp={lay['pp']} dp={lay['dp']}"
            f" vpp={lay['vpp']} zero={lay['zero']} schedule={lay['schedule']} recompute={lay['recompute']}"
            f" sp={lay['sequence_parallel']} mb={lay['micro_batch']} x{lay['num_microbatches']}"
            f"  ({c['world_size']} processes, {c['device']})")
    lines = [head]
    for k, v in c["mechanism"].items():
        lines.append(f"  {k:10s} {v}")
    m, p, e = c["measured"], c["predicted"], c["error_pct"]
    lines.append(f"  {'quantity':46s} {'measured':>14s} {'predicted':>14s} {'error':>9s}")
    if m["step_time_s"] is not None:
        pt = p.get("step_time_s")
        lines.append(f"  {'step time median [s]':46s} {m['step_time_s']:14.4f} "
                     f"{(f'{pt:14.4f}' if pt is not None else '-'.rjust(14))} {_pct(e.get('step_time')):>9s}")
        lines.append(f"  {'step time min / p99 [s]':46s} {m['step_time_min_s']:7.4f}/{m['step_time_p99_s']:.4f}")
        if m.get("phases_s"):
            lines.append(f"  {'rank 0 phases (median) [s]':46s} " + " ".join(f"{k.removesuffix('_s')} {v:.4f}"
                                                                          for k, v in m["phases_s"].items()))
        bd = (p.get("prediction") or {}).get("breakdown_s") or {}
        if bd:
            lines.append(f"  {'predicted breakdown [s]':46s} " + " ".join(f"{k} {v:.4f}" for k, v in bd.items() if v))
        step = (p.get("prediction") or {}).get("step_time_s")
        if bd.get("host_idle") and step:
            lines.append(f"  {'predicted GPU idle waiting for the host':46s} {100 * bd['host_idle'] / step:13.0f}%"
                         " (host-bound: cost_models/host_issue.py)")
    for stage, (ms, ps, es) in enumerate(zip(m["per_stage"], p["per_stage"], e["per_stage"])):
        for key, label in (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer states"),
                           ("activations_per_microbatch", "saved activations / micro-batch"),
                           ("activations_peak", "saved activations, peak")):
            lines.append(f"  {f'stage {stage} {label} [MiB]':46s} {_mib(ms.get(key)):>14s} {_mib(ps.get(key)):>14s}"
                         f" {_pct(es.get(key)):>9s}")
        if "max_memory_allocated" in ms:
            lines.append(f"  {f'stage {stage} max_memory_allocated [MiB]':46s} {_mib(ms['max_memory_allocated']):>14s}"
                         f" {_mib(ps.get('total')):>14s}")
    ref = c.get("reference")
    if ref:
        mx, bad = ref["max_abs_loss_diff"], ref.get("nonfinite_steps", 0)
        lines.append(f"  loss vs single-process reference: max |diff| = {'-' if mx is None else f'{mx:.3g}'} over "
                     f"{len(ref['losses'])} steps (final loss {m['losses'][-1]:.6f})"
                     + (f"; {bad} step(s) with a non-finite loss" if bad else ""))
    else:
        lines.append(f"  losses: {' '.join(f'{x:.5f}' for x in m['losses'])}")
    return "\n".join(lines)
