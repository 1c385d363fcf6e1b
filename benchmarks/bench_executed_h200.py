"""Measured vs predicted one-GPU steps of `trainsim execute --device cuda` on an H200 (benchmarks/data).

Every untraced record of ``benchmarks/data/executed_h200.jsonl`` (the profiler slows the host, so a traced line's
step time is not a clean measurement) is rebuilt as the scenario it ran (its sweep line in
``benchmarks/device/sweep.txt`` / ``trace_sweep.txt``, written as ``benchmarks/device/gen_scenario.py`` and
``session.sh`` do: cluster hgx-h200, bf16, framework torch) and predicted by today's code with the profile
``trainsim calibrate --device cuda --quick`` measured on that machine (``benchmarks/data/profile_h200.json``).
It prints, per record, the measured median step, its spread over the timed steps, the prediction, the error,
the predicted GPU idle waiting for the host, and the mean absolute percentage error.

    python benchmarks/bench_executed_h200.py [--records PATH] [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SWEEPS = (ROOT / "benchmarks" / "device" / "sweep.txt", ROOT / "benchmarks" / "device" / "trace_sweep.txt")
CLUSTER, DTYPE = "hgx-h200", "bf16"


def sweep_lines() -> dict[str, list[str]]:
    """Sweep name -> its fields (name L H heads ffn seq mb gb recompute [k=v,...]); trace_sweep's second column
    (profile the line or not) is dropped."""
    out: dict[str, list[str]] = {}
    for path in SWEEPS:
        for line in path.read_text().splitlines():
            f = line.split()
            if not f:
                continue
            if path.name == "trace_sweep.txt":
                f = [f[0]] + f[2:]
            out.setdefault(f[0], f)
    return out


def scenario_raw(fields: list[str]) -> dict:
    """The scenario mapping the device session wrote for a sweep line (gen_scenario.py, session.sh)."""
    import yaml

    name, L, H, NH, F, S, MB, GB, RC, *extra = fields
    model = {"name": name, "num_layers": int(L), "hidden": int(H), "num_heads": int(NH), "ffn_hidden": int(F),
             "vocab_size": 50304, "max_seq_len": int(S)}
    for kv in (extra[0].split(",") if extra else []):
        k, v = kv.split("=")
        model[k] = yaml.safe_load(v)
    return {"model": model, "cluster": CLUSTER, "gpus": 1, "layout": {"tp": 1, "pp": 1, "dp": 1},
            "training": {"seq_len": int(S), "global_batch": int(GB), "micro_batch": int(MB), "dtype": DTYPE,
                         "recompute": RC, "framework": "torch"}}


def untraced_records(path: Path = DATA / "executed_h200.jsonl") -> list[dict]:
    """The records whose step time is clean (not run under torch.profiler)."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in recs if not r.get("traced") and r.get("measured", {}).get("step_time_s")]


def predict_record(rec: dict, profile) -> dict:
    """Today's prediction of the record's scenario as executed (executor.prediction_scenario)."""
    from trainsim.kernels.exec_config import ExecJob
    from trainsim.reports.execution import predict_step
    from trainsim.specs.loaders import build_scenario

    sc = build_scenario(scenario_raw(sweep_lines()[rec["sweep_name"]]))
    job = ExecJob(scenario=sc.model_dump(mode="json"), device="cuda", optimizer=rec.get("optimizer", "adam"))
    return predict_step(job, profile)


def hardware_loop_error_pct(profile, path: Path = DATA / "hardware_loop_cuda.json") -> tuple[float, float]:
    """(measured s, today's error %) of the hardware loop's one-GPU plan predicted as executed."""
    from trainsim.kernels.exec_config import ExecJob
    from trainsim.reports.execution import predict_step
    from trainsim.specs.loaders import build_scenario

    loop = json.loads(path.read_text())
    job = ExecJob(scenario=build_scenario(loop["scenario"]).model_dump(mode="json"), device="cuda", optimizer="adam")
    measured = loop["measured"]["step_time_s"]
    return measured, 100 * (predict_step(job, profile)["step_time_s"] / measured - 1)


def rows(records: list[dict], profile) -> list[dict]:
    """Per record: name, measured median, relative spread of the timed steps, predicted, error %, host idle."""
    out = []
    for r in records:
        m = r["measured"]
        pred = predict_record(r, profile)
        times = m["step_times_s"]
        spread = (statistics.pstdev(times) / statistics.median(times)) if len(times) > 1 else 0.0
        out.append({"name": r["sweep_name"], "measured_s": m["step_time_s"], "spread": spread,
                    "predicted_s": pred["step_time_s"],
                    "error_pct": 100.0 * (pred["step_time_s"] - m["step_time_s"]) / m["step_time_s"],
                    "host_idle_s": pred["breakdown_s"].get("host_idle", 0.0),
                    "optimizer_s": pred["breakdown_s"].get("optimizer", 0.0),
                    "measured_optimizer_s": m.get("phases_s", {}).get("optimizer_s")})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=str(DATA / "executed_h200.jsonl"),
                    help="execute --json records, one JSON object per line (default: the H200 records)")
    ap.add_argument("--profile", default=str(DATA / "profile_h200.json"),
                    help="calibration profile the predictions use (default: the H200 profile)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from trainsim.cost_models.profile import load_profile
    from trainsim.specs import SpecError

    try:
        profile = load_profile(args.profile)
        res = rows(untraced_records(Path(args.records)), profile)
    except (OSError, ValueError, KeyError, SpecError) as exc:  # a missing or malformed file: one line, exit 2
        print(f"error: --records/--profile: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"{'record':<16} {'measured':>9} {'spread':>7} {'predicted':>9} {'error':>8} {'host idle':>9} "
          f"{'opt meas':>8} {'opt pred':>8}")
    for x in res:
        print(f"{x['name']:<16} {x['measured_s']:9.4f} {100 * x['spread']:6.1f}% {x['predicted_s']:9.4f} "
              f"{x['error_pct']:+7.1f}% {x['host_idle_s']:9.4f} {x['measured_optimizer_s'] or 0:8.4f} "
              f"{x['optimizer_s']:8.4f}")
    measured, err = hardware_loop_error_pct(profile)
    print(f"{'hardware loop':<16} {measured:9.4f} {'':>7} {'':>9} {err:+7.1f}%")
    mape = statistics.fmean(abs(x["error_pct"]) for x in res)
    print(f"MAPE {mape:.1f} % over {len(res)} untraced records; worst {max(abs(x['error_pct']) for x in res):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
