"""Measured vs predicted one-GPU steps of `trainsim execute --device cuda` on an H200 (benchmarks/data), two leases.

Every untraced record (the profiler slows the host, so a traced line's step time is not a clean measurement) of
the two machine leases -- ``executed_h200.jsonl`` (lease 1) and ``executed_h200_host.jsonl`` (lease 2, whose
records also carry the host's issue time per phase, ``host_phases_median_s``) -- is rebuilt as the scenario it ran
(its line in ``benchmarks/device/sweep.txt`` / ``trace_sweep.txt`` / ``host_sweep.txt``, written as
``benchmarks/device/gen_scenario.py`` and ``session.sh`` do: cluster hgx-h200, bf16, framework torch) and
predicted by today's code with the profile ``trainsim calibrate --device cuda --quick`` measured on an H200
(``benchmarks/data/profile_h200.json``). It prints, per lease and record, the measured median step, its spread over
the timed steps, the prediction, the error, the predicted GPU idle waiting for the host and the 80 % interval; per
repeated line both leases side by side; for lease 2 the host's measured issue time per phase against the engine's
host-issue model (cost_models/host_issue.py, step_host.py) and the device time of the phase (host-bound where the
two agree); and the mean absolute percentage error per lease and over both.

    python benchmarks/bench_executed_h200.py [--records PATH ...] [--profile PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from trainsim.validation.host_band import HOST_BOUND_RATIO

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SWEEPS = tuple(ROOT / "benchmarks" / "device" / name for name in ("sweep.txt", "trace_sweep.txt", "host_sweep.txt"))
TRACE_COLUMN = ("trace_sweep.txt", "host_sweep.txt")   # sweeps whose second column says whether to profile the line
CLUSTER, DTYPE = "hgx-h200", "bf16"


def sweep_lines() -> dict[str, list[str]]:
    """Sweep name -> its fields (name L H heads ffn seq mb gb recompute [k=v,...]); trace_sweep's and host_sweep's
    second column (profile the line or not) is dropped. A name in several sweeps has the same fields in each."""
    out: dict[str, list[str]] = {}
    for path in SWEEPS:
        for line in path.read_text().splitlines():
            f = line.split()
            if not f:
                continue
            if path.name in TRACE_COLUMN:
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


LEASES = {"lease 1": DATA / "executed_h200.jsonl", "lease 2": DATA / "executed_h200_host.jsonl"}
# A phase is host-bound where the host's issue time of it is at least this share of its device time: the device's
# events then span the host's issue (the GPU waited for it). A host that blocks on a full launch queue also ends
# up level with the device, so the flag is read together with the predicted host share (``host_share``).
# HOST_BOUND_RATIO (validation.host_band) is the criterion the host band's lease pairs use too.


def untraced_records(path: Path = DATA / "executed_h200.jsonl") -> list[dict]:
    """The records whose step time is clean (not run under torch.profiler)."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in recs if not r.get("traced") and r.get("measured", {}).get("step_time_s")]


def executed_scenario(rec: dict):
    """The scenario the record ran, as the engine predicts it executed (executor.prediction_scenario)."""
    from trainsim.kernels.exec_config import ExecJob
    from trainsim.kernels.executor import prediction_scenario
    from trainsim.specs.loaders import build_scenario

    sc = build_scenario(scenario_raw(sweep_lines()[rec["sweep_name"]]))
    return prediction_scenario(ExecJob(scenario=sc.model_dump(mode="json"), device="cuda",
                                       optimizer=rec.get("optimizer", "adam")))


def predict_record(rec: dict, profile) -> dict:
    """Today's prediction of the record's scenario as executed (executor.prediction_scenario)."""
    from trainsim.kernels.exec_config import ExecJob
    from trainsim.reports.execution import predict_step
    from trainsim.specs.loaders import build_scenario

    sc = build_scenario(scenario_raw(sweep_lines()[rec["sweep_name"]]))
    job = ExecJob(scenario=sc.model_dump(mode="json"), device="cuda", optimizer=rec.get("optimizer", "adam"))
    return predict_step(job, profile)


def predicted_host_phases(scenario, profile) -> dict[str, float]:
    """The engine's host issue seconds of one step per phase, summed over the micro-batches as the executor's
    ``host_phases_median_s`` sums them: forward and backward (cost_models.host_issue.executor_block_issue: the
    blocks and the micro-batch's work outside them), optimizer (cost_models.step_host.scenario_step_host)."""
    from trainsim.cost_models.host_issue import scenario_block_issue
    from trainsim.cost_models.step_host import scenario_step_host

    issue = scenario_block_issue(scenario, profile)
    step = scenario_step_host(scenario, 0, profile)
    n, layers = scenario.num_microbatches, scenario.model.num_layers
    return {"forward_s": n * (layers * issue.fwd_s + issue.microbatch_fwd_s),
            "backward_s": n * (layers * issue.bwd_s + issue.microbatch_bwd_s),
            "optimizer_s": step.issue_s if step is not None else 0.0}


def hardware_loop_error_pct(profile, path: Path = DATA / "hardware_loop_cuda.json") -> tuple[float, float]:
    """(measured s, today's error %) of the hardware loop's one-GPU plan predicted as executed."""
    from trainsim.kernels.exec_config import ExecJob
    from trainsim.reports.execution import predict_step
    from trainsim.specs.loaders import build_scenario

    loop = json.loads(path.read_text())
    job = ExecJob(scenario=build_scenario(loop["scenario"]).model_dump(mode="json"), device="cuda", optimizer="adam")
    measured = loop["measured"]["step_time_s"]
    return measured, 100 * (predict_step(job, profile)["step_time_s"] / measured - 1)


def host_columns(rec: dict, scenario, profile, step_s: float) -> dict:
    """Measured host issue per phase (where the record has it), the model's, and whether the phase is host-bound."""
    pred = predicted_host_phases(scenario, profile)
    out = {"host_pred": pred, "host_share": min(1.0, sum(pred.values()) / step_s)}
    host = rec["measured"]["ranks"][0].get("host_phases_median_s")
    if host:
        dev = rec["measured"]["phases_s"]
        out["host_meas"] = {k: host[k] for k in pred}
        out["device"] = {k: dev[k] for k in pred}
        out["host_issue_s"] = host.get("host_issue_s")
        out["host_bound"] = all(host[k] >= HOST_BOUND_RATIO * dev[k] for k in ("forward_s", "backward_s"))
    return out


def rows(records: list[dict], profile) -> list[dict]:
    """Per record: name, measured median, relative spread of the timed steps, predicted, error %, host idle, the
    80 % interval (validation.intervals) and the host columns (``host_columns``)."""
    from trainsim.simulator.predict import predict
    from trainsim.validation.intervals import interval_for

    out = []
    for r in records:
        m = r["measured"]
        sc = executed_scenario(r)
        pred = predict(sc, profile=profile)
        iv = interval_for(pred.step_time_s, pred.tokens_per_s, pred.mfu, sc, profile, 0.8,
                          breakdown=pred.breakdown_s)
        times = m["step_times_s"]
        spread = (statistics.pstdev(times) / statistics.median(times)) if len(times) > 1 else 0.0
        out.append({"name": r["sweep_name"], "measured_s": m["step_time_s"], "spread": spread,
                    "predicted_s": pred.step_time_s,
                    "error_pct": 100.0 * (pred.step_time_s - m["step_time_s"]) / m["step_time_s"],
                    "host_idle_s": pred.breakdown_s.get("host_idle", 0.0),
                    "optimizer_s": pred.breakdown_s.get("optimizer", 0.0),
                    "measured_optimizer_s": m.get("phases_s", {}).get("optimizer_s"),
                    "interval_s": iv.step_time_s, **host_columns(r, sc, profile, pred.step_time_s)})
    return out


def mape(res: list[dict]) -> float:
    return statistics.fmean(abs(x["error_pct"]) for x in res)


def print_lease(label: str, res: list[dict]) -> None:
    print(f"{label}: {'record':<16} {'measured':>9} {'spread':>7} {'predicted':>9} {'error':>8} {'host idle':>9} "
          f"{'80 % interval':>17} {'opt meas':>8} {'opt pred':>8}")
    for x in res:
        lo, hi = x["interval_s"]
        inside = " " if lo <= x["measured_s"] <= hi else "*"
        print(f"{'':9}{x['name']:<16} {x['measured_s']:9.4f} {100 * x['spread']:6.1f}% {x['predicted_s']:9.4f} "
              f"{x['error_pct']:+7.1f}% {x['host_idle_s']:9.4f} {lo:8.4f}..{hi:.4f}{inside}"
              f"{x['measured_optimizer_s'] or 0:8.4f} {x['optimizer_s']:8.4f}")
    print(f"{'':9}MAPE {mape(res):.1f} % over {len(res)} untraced records; worst "
          f"{max(abs(x['error_pct']) for x in res):.1f} % (* outside the 80 % interval)")


def print_repeated(by_lease: dict[str, list[dict]]) -> None:
    """Lines both leases ran: the two measured steps, their log ratio, the prediction and both errors."""
    (l1, a), (l2, b) = list(by_lease.items())[:2]
    second = {x["name"]: x for x in b}
    print(f"\nrepeated lines {'':<6} {l1:>9} {l2:>9} {'ln(2/1)':>8} {'predicted':>9} {'err 1':>7} {'err 2':>7} "
          f"{'host share':>10} {'host-bound (2)':>14}")
    for x in a:
        y = second.get(x["name"])
        if y is None:
            continue
        print(f"{x['name']:<21} {x['measured_s']:9.4f} {y['measured_s']:9.4f} "
              f"{math.log(y['measured_s'] / x['measured_s']):+8.3f} {x['predicted_s']:9.4f} {x['error_pct']:+6.1f}% "
              f"{y['error_pct']:+6.1f}% {x['host_share']:10.2f} {y.get('host_bound', '-')!s:>14}")


def print_host_phases(res: list[dict]) -> None:
    """Measured host issue per phase (summed over micro-batches) against the model, beside the device time."""
    print(f"\nhost issue per phase [s] (host-bound: host >= {HOST_BOUND_RATIO:.0%} of device in forward and backward)")
    print(f"{'record':<16} {'phase':<9} {'host meas':>9} {'model':>8} {'error':>7} {'device':>8}  host-bound")
    errs: dict[str, list[float]] = {}
    for x in res:
        if "host_meas" not in x:
            continue
        for k in ("forward_s", "backward_s", "optimizer_s"):
            h, p, d = x["host_meas"][k], x["host_pred"][k], x["device"][k]
            e = 100 * (p / h - 1)
            if x["host_bound"] and k != "optimizer_s":
                errs.setdefault(k, []).append(e)
            print(f"{x['name']:<16} {k.removesuffix('_s'):<9} {h:9.4f} {p:8.4f} {e:+6.0f}% {d:8.4f}  "
                  f"{'yes' if x['host_bound'] else 'no'}")
    for k, v in errs.items():
        print(f"host-bound {k.removesuffix('_s')}: model vs measured host issue, mean {statistics.fmean(v):+.0f} %, "
              f"range {min(v):+.0f} .. {max(v):+.0f} % over {len(v)} records")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", nargs="+", default=[str(p) for p in LEASES.values()],
                    help="execute --json record files, one JSON object per line, one file per lease "
                         "(default: the two H200 leases)")
    ap.add_argument("--profile", default=str(DATA / "profile_h200.json"),
                    help="calibration profile the predictions use (default: the H200 profile)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from trainsim.cost_models.profile import load_profile
    from trainsim.specs import SpecError

    try:
        profile = load_profile(args.profile)
        by_lease = {f"lease {i + 1}": rows(untraced_records(Path(p)), profile) for i, p in enumerate(args.records)}
    except (OSError, ValueError, KeyError, SpecError) as exc:  # a missing or malformed file: one line, exit 2
        print(f"error: --records/--profile: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    for label, res in by_lease.items():
        print_lease(label, res)
    if len(by_lease) > 1:
        print_repeated(by_lease)
    for res in by_lease.values():
        print_host_phases(res)
    measured, err = hardware_loop_error_pct(profile)
    print(f"\nhardware loop: measured {measured:.4f} s, today's error {err:+.1f}%")
    both = [x for res in by_lease.values() for x in res]
    print("MAPE " + ", ".join(f"{k} {mape(v):.1f} %" for k, v in by_lease.items())
          + f"; over both {mape(both):.1f} % ({len(both)} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
