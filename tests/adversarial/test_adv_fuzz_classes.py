"""One regression per class of bad input that a field-by-field fuzz of every file the CLI reads turned up: each
was a traceback, a NaN/inf answer or a value silently misread; each is now exit 2 with one line naming the field.

The base files are real ones (the H200 profile under benchmarks/data, the example scenarios); each case mutates one
field of it. Predictions use ``--fast`` (the closed form): the refusals happen while the input is read.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
from conftest import REPO, run_cli

PROFILE = REPO / "benchmarks" / "data" / "profile_h200.json"
LLAMA8 = REPO / "examples" / "llama3-8b-h100-8.yaml"


def refused(argv: list, field: str) -> str:
    r = run_cli(argv)
    assert r.code == 2, (r.code, r.out[-400:], r.err)
    assert len(r.err_lines) == 1 and r.err_lines[0].startswith("error: "), r.err
    assert "Traceback" not in r.err and field in r.err_lines[0], r.err
    return r.err_lines[0]


def _set(data: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


# --- calibration profile ----------------------------------------------------------------------------------------

PROFILE_CASES = [
    # a measured time of 0: log-log interpolation took log(0) -> ValueError traceback
    (("memory_points", 0, "stats", "median_s"), 0, "memory_points.0.stats.median_s"),
    # a fitted rate of 1e-300 FLOP/s: step time inf - inf = NaN in --json
    (("gemm_fits", "bf16", "flops_per_s"), 1e-300, "gemm_fits.bf16.flops_per_s"),
    # a fixed cost of 1e308 s: inf step time
    (("memory_fits", "all", "alpha_s"), 1e308, "memory_fits.all.alpha_s"),
    # true read as 1 (a one-second overhead), "2" read as 2
    (("gemm_fits", "bf16", "overhead_s"), True, "gemm_fits.bf16.overhead_s"),
    (("copy_fits", "h2d", "bw_Bps"), "2e10", "copy_fits.h2d.bw_Bps"),
    (("memory_points", 0, "stats", "reps"), 20.0, "memory_points.0.stats.reps"),
    # a misspelt op was folded into the median of all memory ops (changed every memory-bound cost)
    (("memory_points", 0, "op"), "layernrom", "memory_points[0].op"),
    # a fit under an unknown dtype or collective was ignored without a word
    (("gemm_fits", "bf61"), None, "gemm_fits.bf61"),
]


@pytest.mark.parametrize("path,value,field", PROFILE_CASES, ids=[c[2] for c in PROFILE_CASES])
def test_profile_field_refused(tmp_path: Path, path, value, field):
    base = json.loads(PROFILE.read_text())
    if path == ("gemm_fits", "bf61"):
        bad = copy.deepcopy(base)
        bad["gemm_fits"]["bf61"] = bad["gemm_fits"]["bf16"]
    else:
        bad = _set(base, path, value)
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(bad))
    refused(["predict", LLAMA8, "--cluster", "hgx-h200", "--fast", "--json", "--calibration", p], field)


def test_profile_unknown_collective_refused(tmp_path: Path):
    base = json.loads(PROFILE.read_text())
    fit = {"op": "allreduce_typo", "group_size": 8, "nodes": 1, "alpha_s": 3e-5, "beta_s_per_byte": 2.5e-12,
           "busbw_Bps": 7e11, "rms_rel_error": 0.1, "n_points": 10}
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({**base, "collective_fits": [fit]}))
    refused(["predict", LLAMA8, "--cluster", "hgx-h200", "--fast", "--calibration", p], "collective_fits[0].op")


def test_rank_rates_near_the_float_limit_give_a_finite_spread(tmp_path: Path):
    # rank GEMM rates of 1e308: the spread's variance overflowed (OverflowError traceback); it is scale-free now
    from trainsim.cost_models.profile import speed_spread_cv
    assert speed_spread_cv([1e308, 0.5e308]) == pytest.approx(speed_spread_cv([2.0, 1.0]))
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({**json.loads(PROFILE.read_text()), "rank_gemm_flops": [1e308] * 7 + [0.9e308]}))
    r = run_cli(["predict", LLAMA8, "--cluster", "hgx-h200", "--fast", "--json", "--calibration", p])
    assert r.code == 0, r.err
    assert math.isfinite(json.loads(r.out)["step_time_s"])


def test_profile_itself_still_predicts_finite(tmp_path: Path):
    r = run_cli(["predict", LLAMA8, "--cluster", "hgx-h200", "--fast", "--json", "--calibration", PROFILE])
    assert r.code == 0, r.err
    assert math.isfinite(json.loads(r.out)["step_time_s"])


# --- cluster file -----------------------------------------------------------------------------------------------

CLUSTER_CASES = [
    # each of these gave step_time_s NaN (or MFU inf%) in predict --json: the figure overflowed a time to inf
    ({"gpu": {"peak_flops": {"bf16": 1e-300}}}, "cluster.gpu"),
    ({"gpu": {"gemm_efficiency": 1e-300}}, "cluster.gpu.gemm_efficiency"),
    ({"gpu": {"hbm_bw_Bps": 1e-300}}, "cluster.gpu.hbm_bw_Bps"),
    ({"gpu": {"attention_efficiency": 1e-300}}, "cluster.gpu.attention_efficiency"),
    ({"scale_up": {"bw_per_gpu_Bps": 1e-300}}, "cluster.scale_up.bw_per_gpu_Bps"),
    ({"scale_up": {"efficiency": 1e-300}}, "cluster.scale_up.efficiency"),
    ({"scale_out": {"nic_bw_Bps": 1e-300}}, "cluster.scale_out.nic_bw_Bps"),
    ({"scale_out": {"efficiency": 1e-300}}, "cluster.scale_out.efficiency"),
    # a figure off by its exponent (2 B/s of NVLink, 2.5 FLOP/s) gave steps of 1e10..1e15 s without a word
    ({"scale_up": {"bw_per_gpu_Bps": 2}}, "cluster.scale_up.bw_per_gpu_Bps"),
    ({"gpu": {"peak_flops": {"bf16": 2.5}}}, "cluster.gpu"),
]


@pytest.mark.parametrize("override,field", CLUSTER_CASES, ids=[c[1] + str(i) for i, c in enumerate(CLUSTER_CASES)])
def test_cluster_figure_below_any_device_refused(tmp_path: Path, override, field):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", **override}, "gpus": 16,
                             "layout": {"tp": 2, "pp": 2}, "training": {"seq_len": 4096, "global_batch": 64}}))
    refused(["predict", p, "--fast", "--json"], field)


def test_cluster_at_every_floor_stays_finite(tmp_path: Path):
    # the floors themselves (1 GFLOP/s, 100 MB/s, 1 % efficiency) on Llama 3 405B keep every time finite
    gpu = {"peak_flops": dict.fromkeys(("bf16", "fp16", "fp32", "tf32", "fp8"), 1e9), "hbm_bw_Bps": 1e8,
           "gemm_efficiency": 0.01, "hbm_efficiency": 0.01, "attention_efficiency": 0.01, "pcie_bw_Bps": 1e8}
    cluster = {"preset": "dgx-h100", "gpu": gpu, "scale_up": {"bw_per_gpu_Bps": 1e8, "efficiency": 0.01},
               "scale_out": {"nic_bw_Bps": 1e8, "efficiency": 0.01}}
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"model": "llama3-405b", "cluster": cluster, "gpus": 1024, "layout": {"tp": 8, "pp": 16},
                             "training": {"seq_len": 131072, "global_batch": 64}}))
    r = run_cli(["predict", p, "--fast", "--json"])
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert math.isfinite(d["step_time_s"]) and d["step_time_s"] > 0 and 0 < d["mfu"] < 1


# --- scenario fields and flags read silently as something else -----------------------------------------------------

def test_boolean_for_an_integer_literal_refused(tmp_path: Path):
    # flash_attention_version: true was read as 1 (FlashAttention v1, about 2x slower attention: Dao 2023)
    p = tmp_path / "s.yaml"
    p.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\n"
                 "training: {flash_attention_version: true, global_batch: 64}\n")
    refused(["predict", p, "--fast"], "training.flash_attention_version")


def test_background_load_tier_given_twice_refused():
    # nic:0.5,nic:0.2 silently kept the last fraction
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "8", "--fast"]
    refused(argv + ["--background-load", "nic:0.5,nic:0.2"], "background_load.nic")
    assert run_cli(argv + ["--background-load", "nic:0.5,spine:0.2"]).code == 0


# --- measured-run logs (calibrate --from-runs) ---------------------------------------------------------------------

RUNS = REPO / "tests" / "data" / "runs"
MEGATRON_LOG = RUNS / "megatron_gpt1p3b_8xa100.log"


def _from_runs(tmp_path: Path, logs: list, extra: list) -> list:
    return ["calibrate", "--from-runs", *logs, *extra, "--out", tmp_path / "r.json", "--no-loo"]


@pytest.mark.parametrize("old,new,field", [
    # a dropout of inf or 2.5 was read as "dropout present"; Megatron draws masks with a probability
    ("  hidden_dropout .................................. 0.0", "  hidden_dropout .................................. inf",
     "hidden_dropout"),
    ("  attention_dropout ............................... 0.0", "  attention_dropout ............................... 2.5",
     "attention_dropout"),
    # an unknown --transformer-impl was read as 'local' (unfused attention)
    ("transformer_impl ................................ transformer_engine",
     "transformer_impl ................................ transformer_engin", "transformer_impl"),
    # every iteration 1e20 ms: a measured step of 1e17 s was fitted
    ("elapsed time per iteration (ms): 797.9 |", "elapsed time per iteration (ms): 99999999999999999999 |",
     "elapsed time per iteration"),
])
def test_megatron_log_value_refused(tmp_path: Path, old, new, field):
    text = MEGATRON_LOG.read_text()
    assert old in text
    p = tmp_path / "m.log"
    if "elapsed" in old:  # every iteration, so the median is the bad value
        text = re.sub(r"elapsed time per iteration \(ms\): [\d.]+ \|", new, text)
    p.write_text(text.replace(old, new))
    refused(_from_runs(tmp_path, [p], ["--cluster", "dgx-a100"]), field)


@pytest.mark.parametrize("degree", ["tensor_parallel", "pipeline_parallel", "context_parallel",
                                    "data_parallel_replicate"])
def test_torchtitan_zero_degree_refused(tmp_path: Path, degree):
    # a 0 degree divided the world size by zero: ZeroDivisionError traceback
    toml = (RUNS / "llama3_8b.toml").read_text()
    line = next(ln for ln in toml.splitlines() if ln.startswith(f"{degree}_degree"))
    cfg = tmp_path / "job.toml"
    cfg.write_text(toml.replace(line, f"{degree}_degree = 0"))
    refused(_from_runs(tmp_path, [RUNS / "torchtitan_llama3_8b_8xh100.log"], ["--config", cfg, "--cluster", "dgx-h100"]),
            f"parallelism.{degree}_degree")


def test_torchtitan_step_shorter_than_a_kernel_refused(tmp_path: Path):
    # tps 99,999,999,999 made a measured step of 82 ns, fitted as is
    log = re.sub(r"tps: [\d,]+", "tps: 99,999,999,999", (RUNS / "torchtitan_llama3_8b_8xh100.log").read_text())
    p = tmp_path / "t.log"
    p.write_text(log)
    refused(_from_runs(tmp_path, [p], ["--config", RUNS / "llama3_8b.toml", "--cluster", "dgx-h100"]), "tps")


def test_nccl_tests_row_outside_any_measurement_refused(tmp_path: Path):
    # a row of 1e20 bytes (or a time of 1e14 us) is no measurement: one line naming the file's row, no traceback
    from conftest import NCCL_H100
    lines = NCCL_H100.read_text().splitlines()
    i = next(j for j, ln in enumerate(lines) if ln.split()[:1] == ["1048576"])
    lines[i] = lines[i].replace("1048576", "99999999999999999999", 1)
    p = tmp_path / "n.txt"
    p.write_text("\n".join(lines) + "\n")
    line = refused(["calibrate", "--import-nccl-tests", p, "--out", tmp_path / "p.json"], "nccl-tests")
    assert "1e+20 B" in line


# --- validation CSV by path ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("column", ["layers", "hidden", "heads"])
def test_memory_schema_without_a_model_column_refused(tmp_path: Path, column):
    """A memory-schema CSV missing a column every row's model needs was a KeyError traceback."""
    import csv
    src = REPO / "trainsim" / "data" / "validation" / "memory_runs.csv"
    with src.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = tmp_path / "memory_cut.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[c for c in rows[0] if c != column])
        w.writeheader()
        w.writerows({k: v for k, v in r.items() if k != column} for r in rows)
    line = refused(["validate", "--dataset", str(out)], "dataset")
    assert column in line
