"""Run calibration (calibrate --from-runs): the fit's closed forms, the real log formats, and its profile."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.profile import load_profile
from trainsim.cost_models.run_factors import apply_factors
from trainsim.simulator.run_fit import NOISE_SD, MeasuredRun, fit_runs
from trainsim.specs import build_scenario
from trainsim.validation.run_logs import megatron_run
from trainsim.validation.titan_logs import titan_run

RUNS = Path(__file__).parent / "data" / "runs"
MEGATRON = RUNS / "megatron_gpt1p3b_8xa100.log"
TITAN = RUNS / "torchtitan_llama3_8b_8xh100.log"
TOML = RUNS / "llama3_8b.toml"


def _scenario(gpus: int = 8, cluster: str = "dgx-a100"):
    return build_scenario({"model": "tiny-gpt", "cluster": cluster, "gpus": gpus,
                           "training": {"global_batch": 8 * gpus, "seq_len": 256}})


def _linear(slopes: dict[str, list[float]], base: list[float]):
    """A stand-in predictor: ln step_i = base_i + sum_j slope_ij * theta_j (exactly linear)."""
    def f(run: MeasuredRun, theta: dict[str, float]) -> float:
        i = int(run.name)
        return base[i] + sum(slopes.get(n, [0.0] * len(base))[i] * t for n, t in theta.items())
    return f


def _runs(measured: list[float], gpus: list[int]) -> list[MeasuredRun]:
    return [MeasuredRun(str(i), "synthetic", _scenario(g), m) for i, (m, g) in enumerate(zip(measured, gpus))]


def test_one_run_fits_one_factor_with_the_map_closed_form():
    # One linear factor with slope -1 (compute: 10 % faster kernels, 10 % shorter step), Gaussian prior sd 0.15:
    # the MAP residual is the prior-free residual times noise^2 / (noise^2 + slope^2 prior^2).
    gpu = _scenario().cluster.gpu.name
    base, measured = [math.log(2.0)], [2.5]
    f = _linear({f"compute:{gpu}": [-1.0], "kernel_overhead": [0.01]}, base)
    cal = fit_runs(_runs(measured, [8]), f)
    fitted = {x.name: x for x in cal.factors}
    assert fitted[f"compute:{gpu}"].fitted
    r0 = math.log(2.5 / 2.0)
    expected = r0 * NOISE_SD**2 / (NOISE_SD**2 + 0.15**2)
    assert cal.runs[0].log_residual == pytest.approx(expected, abs=1e-5)
    # The one run cannot identify a second factor: it stays exactly at its preset, with the reason.
    k = fitted["kernel_overhead"]
    assert not k.fitted and k.value == 1.0 and "identify at most 1" in k.reason
    assert fitted["step_overhead_s"].value == 0.0 and "no run depends on it" in fitted["step_overhead_s"].reason


def test_collinear_factors_are_not_both_fitted():
    # Two runs whose sensitivities to compute and scale_up are proportional: only one is identified.
    gpu = _scenario().cluster.gpu.name
    f = _linear({f"compute:{gpu}": [-1.0, -0.5], "scale_up_bw": [-0.5, -0.25]}, [0.0, 0.0])
    cal = fit_runs(_runs([1.1, 1.05], [8, 8]), f, leave_one_out=False)
    state = {x.name: x.fitted for x in cal.factors}
    assert state[f"compute:{gpu}"] and not state["scale_up_bw"]


def test_leave_one_out_residual_is_the_held_out_error():
    # Three runs with the same slope: each held-out run is predicted by the factor the other two give.
    gpu = _scenario().cluster.gpu.name
    f = _linear({f"compute:{gpu}": [-1.0, -1.0, -1.0]}, [0.0, 0.0, 0.0])
    meas = [1.10, 1.12, 1.20]
    cal = fit_runs(_runs(meas, [8, 8, 8]), f)
    for i, r in enumerate(cal.runs):
        others = [math.log(m) for j, m in enumerate(meas) if j != i]
        # Two runs, one factor: the MAP of the mean residual with shrinkage 2 s^2 / (2 s^2 + noise^2).
        shrink = 2 * 0.15**2 / (2 * 0.15**2 + NOISE_SD**2)
        theta = -statistics.mean(others) * shrink
        assert r.loo_log_residual == pytest.approx(math.log(meas[i]) + theta, abs=1e-4)


def test_megatron_log_parsed_as_written():
    run = megatron_run(MEGATRON, "dgx-a100")
    s = run.scenario
    assert (s.model.num_layers, s.model.hidden, s.model.num_heads, s.model.vocab_size) == (24, 2048, 16, 50304)
    assert (s.num_gpus, s.layout.tp, s.layout.pp, s.dp, s.training.micro_batch, s.training.global_batch) == \
        (8, 1, 1, 8, 8, 64)
    assert s.training.dtype == "bf16" and s.training.distributed_optimizer and s.training.recompute == "none"
    assert (s.model.position_embedding, s.model.norm) == ("learned", "layernorm")  # learned_absolute, LayerNorm
    times = []
    for line in MEGATRON.read_text().splitlines():
        if "elapsed time per iteration (ms):" in line:
            it = int(line.split("iteration")[1].split("/")[0])
            if it > 10:
                times.append(float(line.split("elapsed time per iteration (ms):")[1].split("|")[0]) / 1e3)
    assert run.steps_used == 9 == len(times)
    assert run.step_time_s == pytest.approx(statistics.median(times))


@pytest.mark.parametrize("rope", ["rope", "RoPE"])
def test_megatron_rope_rmsnorm_and_interleaving_read_as_printed(tmp_path, rope):
    """rope (any case) / RMSNorm as printed; 24 layers on pp 2 with 3 layers per virtual stage: 12 / 3 = 4 chunks."""
    text = MEGATRON.read_text()
    for key, old, new in (("position_embedding_type", "learned_absolute", rope),
                          ("normalization", "LayerNorm", "RMSNorm"), ("pipeline_model_parallel_size", "1", "2"),
                          ("num_layers_per_virtual_pipeline_stage", "None", "3")):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"  {key} ."))
        text = text.replace(line, line.removesuffix(old) + new)
    log = tmp_path / "rope.log"
    log.write_text(text)
    s = megatron_run(log, "dgx-a100").scenario
    assert (s.model.position_embedding, s.model.norm, s.layout.pp, s.layout.vpp) == ("rope", "rmsnorm", 2, 4)


def test_torchtitan_log_and_toml_parsed():
    run = titan_run(TITAN, TOML, "dgx-h100")
    s = run.scenario
    assert s.model.name == "llama3-8b" and s.num_gpus == 8 and s.dp == 8 and s.training.zero == 3
    assert (s.training.seq_len, s.training.global_batch, s.training.recompute) == (8192, 8, "selective")
    tps = [int(x.split("tps: ")[1].split()[0].replace(",", "")) for x in TITAN.read_text().splitlines()
           if "tps: " in x and int(x.split("step:")[1].split()[0]) > 10]
    assert run.steps_used == len(tps) == 9
    assert run.step_time_s == pytest.approx(8192 / statistics.median(tps))


def test_a_run_calibrated_on_itself_reproduces_its_step(tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--from-runs", str(MEGATRON), "--cluster", "dgx-a100", "--out", str(out)]) == 0
    prof = load_profile(out)
    assert prof.schema_version == 4 and prof.run_calibration is not None
    measured = prof.run_calibration.runs[0].measured_step_s
    capsys.readouterr()
    run = megatron_run(MEGATRON, "dgx-a100")
    argv = ["predict", "--model", str(tmp_path / "m.json"), "--cluster", "dgx-a100", "--gpus", "8", "--global-batch",
            "64", "--micro-batch", "8", "--seq-len", "2048", "--distributed-optimizer", "--json", "--calibration",
            str(out)]
    (tmp_path / "m.json").write_text(run.scenario.model.model_dump_json())
    assert main(argv) == 0
    pred = json.loads(capsys.readouterr().out)
    # MAP with prior sd 0.15 and noise sd 0.01: within 0.5 % of the residual it started from.
    assert pred["step_time_s"] == pytest.approx(measured, rel=2e-3)
    lo, hi = pred["step_time_interval_s"]
    assert lo < hi and pred["interval_coverage"] == 0.8


def test_factors_reach_the_spec():
    s = _scenario(16)
    gpu = s.cluster.gpu
    s2, over = apply_factors(s, {f"compute:{gpu.name}": 0.9, "scale_out_bw": 0.5, "step_overhead_s": 0.02})
    assert s2.cluster.gpu.gemm_efficiency == pytest.approx(gpu.gemm_efficiency * 0.9)
    assert s2.cluster.scale_out.efficiency == pytest.approx(0.96 * 0.5) and over == 0.02
    # Efficiencies never exceed 1.
    s3, _ = apply_factors(s, {f"compute:{gpu.name}": 5.0})
    assert s3.cluster.gpu.gemm_efficiency == 1.0


def test_factors_reach_every_pool():
    """On a mixed cluster each pool's node is its own spec: the fabric factors scale every pool's links, a compute
    factor the GPUs of its name only -- and the prediction moves with them."""
    s = build_scenario({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "pools": [
        {"gpu": "h100-sxm", "nodes": 1}, {"node": "dgx-a100", "nodes": 1}]}, "layout": {"tp": 8, "pp": 2},
        "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 1}})
    h100, a100 = (p.gpu for p in s.cluster.pools)
    s2, _ = apply_factors(s, {f"compute:{a100.name}": 0.5, "scale_up_bw": 0.5})
    p0, p1 = s2.cluster.pools
    assert p0.gpu.gemm_efficiency == h100.gemm_efficiency and p1.gpu.gemm_efficiency == a100.gemm_efficiency * 0.5
    from trainsim.topologies.fabric import SCALE_UP_EFFICIENCY
    for before, after in zip(s.cluster.pools, (p0, p1)):
        base = before.scale_up.efficiency or SCALE_UP_EFFICIENCY[before.scale_up.kind]
        assert after.scale_up.efficiency == pytest.approx(0.5 * base)
    from trainsim.simulator.predict import predict
    assert predict(s2).step_time_s > 1.2 * predict(s).step_time_s


def test_csv_runs_calibrate_and_validate_agree(tmp_path, capsys):
    """A common-run-schema CSV through calibrate --from-runs, then validate --calibration on the same file:
    validate's per-row errors are the profile's recorded fitted residuals."""
    csv = tmp_path / "runs.csv"
    head = ("row_id,record_type,model_name,layers,hidden,heads,seq_len,global_batch_seqs,micro_batch,num_gpus,"
            "gpu_type,tp,pp,recompute,precision,step_time_s\n")
    csv.write_text(head + "a,measured_step_time,GPT 1.3B,24,2048,16,2048,64,8,8,A100 80GB,1,1,none,bf16,0.80\n"
                          "b,measured_step_time,GPT 1.3B,24,2048,16,2048,128,8,16,A100 80GB,1,1,none,bf16,0.84\n")
    prof = tmp_path / "cal.json"
    assert main(["calibrate", "--from-runs", str(csv), "--out", str(prof), "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)["run_calibration"]
    assert main(["validate", "--dataset", str(csv), "--calibration", str(prof), "--json"]) == 0
    rows = {r["row_id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for r in cal["runs"]:
        expected = 100 * (r["predicted_after_s"] / r["measured_step_s"] - 1)
        assert rows[r["name"]]["error_pct"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("cluster, noted", [("dgx-a100", False), ("dgx-h100", True)])
def test_a_compute_factor_of_another_gpu_is_named(tmp_path, capsys, cluster, noted):
    """A run calibration's compute factor is keyed by the GPU its runs measured (run_factors.apply_factors): on
    another GPU the preset rates stay, and the prediction says so instead of naming the profile as if all of it
    applied."""
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--from-runs", str(MEGATRON), "--cluster", "dgx-a100", "--out", str(out)]) == 0
    fitted = load_profile(out).run_calibration.fitted_names()
    assert any(n.startswith("compute:A100") for n in fitted)
    capsys.readouterr()
    assert main(["predict", "--model", "llama3-8b", "--cluster", cluster, "--gpus", "8", "--global-batch", "64",
                 "--seq-len", "2048", "--json", "--calibration", str(out)]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    named = [w for w in warnings if w.startswith("run calibration fits compute for A100")]
    assert bool(named) == noted
