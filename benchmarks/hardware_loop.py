"""The hardware loop: microbenchmark calibration -> execute a one-device plan -> feed the measured step back.

    python benchmarks/hardware_loop.py --device cpu|cuda [--out FILE] [--profile PROFILE.json | --no-microbench]
                                       [--plan SCENARIO.yaml] [--steps N]

1. ``trainsim calibrate --device D --quick`` measures this machine (skipped with ``--profile`` or
   ``--no-microbench``);
2. ``trainsim execute`` runs the bundled plan (benchmarks/hardware_plans/: one gloo rank on CPU, one GPU on
   CUDA) with that profile and measures step time, forward/backward/optimizer phases and peak memory; with
   two or more devices also a multi-device plan (two gloo ranks, or TP2 on two GPUs), recorded beside it;
3. the measured step goes through the run calibration (simulator.run_fit, as ``calibrate --from-runs``);
4. one JSON file records predicted (microbenchmarks only, then with the run calibration) vs measured: step,
   phases, peak memory, and the fitted factors. Commit the file under benchmarks/data/ as validation data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLANS = {"cpu": HERE / "hardware_plans" / "cpu_one_rank.yaml", "cuda": HERE / "hardware_plans" / "cuda_one_gpu.yaml"}
# Run as well when more devices are present: two gloo ranks (pipeline) on CPU, TP2 on two GPUs.
MULTI_PLANS = {"cpu": HERE.parent / "examples" / "tiny-gpt-cpu.yaml",
               "cuda": HERE / "hardware_plans" / "cuda_two_gpu_tp2.yaml"}


def devices(device: str) -> int:
    """Devices this machine offers the loop: CUDA GPUs, or CPU cores (gloo ranks)."""
    if device == "cuda":
        import torch  # only here: the loop itself runs torch through `trainsim execute`
        return torch.cuda.device_count()
    import os
    return os.cpu_count() or 1


def _cli(*argv: str, timeout: int = 1800) -> str:
    res = subprocess.run([sys.executable, "-m", "trainsim.cli.main", *argv], check=False, capture_output=True,
                         text=True,
                         timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"trainsim {argv[0]} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return res.stdout


def predicted_summary(pred) -> dict:
    return {"step_time_s": pred.step_time_s, "breakdown_s": dict(pred.breakdown_s), "peak_bytes": pred.peak_bytes,
            "calibration": pred.calibration}


def measured_summary(out: dict) -> dict:
    m = out["measured"]
    peak = max((s.get("maxrss", 0) for s in m.get("per_stage", [])), default=0)
    return {"step_time_s": m["step_time_s"], "step_times_s": m["step_times_s"], "phases_s": m.get("phases_s", {}),
            "per_stage": m.get("per_stage", []), "peak_bytes_maxrss": peak}


def loop(device: str, plan: Path, profile_path: str | None, steps: int) -> dict:
    from trainsim.cost_models.profile import load_profile, save_profile
    from trainsim.simulator.predict import predict
    from trainsim.simulator.run_fit import MeasuredRun, engine_predict_log, fit_runs
    from trainsim.specs import build_scenario, load_scenario_file

    scenario = build_scenario(load_scenario_file(str(plan)))
    profile = load_profile(profile_path) if profile_path else None
    argv = ["execute", str(plan), "--device", device, "--steps", str(steps), "--json"]
    executed = json.loads(_cli(*argv, *(["--calibration", profile_path] if profile_path else [])))
    measured = measured_summary(executed)
    before = predict(scenario, profile=profile)
    run = MeasuredRun(name=plan.stem, source=f"hardware_loop {device}", scenario=scenario,
                      step_time_s=measured["step_time_s"], steps_used=len(measured["step_times_s"]))
    cal = fit_runs([run], engine_predict_log(profile), leave_one_out=False)
    from trainsim.cost_models.profile import CalibrationProfile
    combined = (profile or CalibrationProfile()).model_copy(update={"run_calibration": cal, "schema_version": 4})
    with tempfile.TemporaryDirectory() as tmp:
        save_profile(combined, Path(tmp) / "combined.json")
        after = predict(scenario, profile=load_profile(Path(tmp) / "combined.json"))
    return {"kind": "trainsim-hardware-loop", "device": device, "plan": plan.name,
            "scenario": scenario.model_dump(mode="json"), "fingerprint": executed.get("device"),
            "profile": profile.describe() if profile else None,
            "measured": measured, "predicted_microbenchmarks": predicted_summary(before),
            "predicted_with_run_calibration": predicted_summary(after),
            "error_pct_before": 100 * (before.step_time_s / measured["step_time_s"] - 1),
            "error_pct_after": 100 * (after.step_time_s / measured["step_time_s"] - 1),
            "run_calibration": cal.model_dump(mode="json")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--plan", type=Path, help="scenario YAML (default: the bundled one-device plan)")
    ap.add_argument("--profile", help="existing microbenchmark profile (skips step 1)")
    ap.add_argument("--no-microbench", action="store_true", help="skip step 1: predict with the presets")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    profile = args.profile
    with tempfile.TemporaryDirectory() as tmp:
        if profile is None and not args.no_microbench:
            profile = str(Path(tmp) / "profile.json")
            _cli("calibrate", "--device", args.device, "--quick", "--out", profile,
                 *(["--nproc", "1"] if args.device == "cuda" else []))
        result = loop(args.device, args.plan or PLANS[args.device], profile, args.steps)
        if args.plan is None and devices(args.device) >= 2:
            result["multi_device"] = loop(args.device, MULTI_PLANS[args.device], profile, args.steps)
    out = args.out or HERE / "data" / f"hardware_loop_{args.device}.json"
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"measured {result['measured']['step_time_s']:.4g} s; predicted {result['predicted_microbenchmarks']['step_time_s']:.4g} s "
          f"({result['error_pct_before']:+.1f} %), after the run calibration "
          f"{result['predicted_with_run_calibration']['step_time_s']:.4g} s ({result['error_pct_after']:+.1f} %) -> {out}")


if __name__ == "__main__":
    main()
