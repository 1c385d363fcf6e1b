"""Calibration profile keys read silently: ``compute_time_scale`` (an internal factor predict sets, never written)
was read from the file and scaled every measured GEMM and attention time (1e-9 turned an 11.2 s step into 2.6 s);
``source_path`` was read too; a reference peak, a GEMM or attention point under an unknown dtype and a DTensor
overhead under an unknown collective ('allreduce') were kept and never asked for. Each is refused naming the key."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import REPO, assert_refused, run_cli

PROFILE = json.loads((REPO / "benchmarks" / "data" / "profile_h200.json").read_text())
ARGV = ["predict", REPO / "examples" / "llama3-8b-h100-8.yaml", "--cluster", "hgx-h200", "--fast", "--json",
        "--calibration"]


def _edit(d: dict, case: str) -> str:
    if case == "compute_time_scale":
        d["compute_time_scale"] = 1e-9
    elif case == "source_path":
        d["source_path"] = "/elsewhere.json"
    elif case == "reference_peak_flops.bf61":
        d["reference_peak_flops"]["bf61"] = 1e15
    elif case == "gemm_points[0].dtype":
        d["gemm_points"][0]["dtype"] = "bf61"
    elif case == "attention_points[0].dtype":
        d["attention_points"][0]["dtype"] = "fp7"
    elif case == "dtensor_collective_overhead_s.allreduce":
        d["dtensor_collective_overhead_s"]["allreduce"] = 1e-3
    return case


@pytest.mark.parametrize("case", ["compute_time_scale", "source_path", "reference_peak_flops.bf61",
                                  "gemm_points[0].dtype", "attention_points[0].dtype",
                                  "dtensor_collective_overhead_s.allreduce"])
def test_a_key_no_query_reads_is_refused(tmp_path, case):
    d = copy.deepcopy(PROFILE)
    field = _edit(d, case)
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(d))
    assert_refused(run_cli([*ARGV, p]), f"calibration.{field}")


def test_the_profile_as_written_still_loads(tmp_path):
    """A written profile loads, a Blackwell preset's fp4 reference peak included (calibrate copies every peak of the
    GPU preset: kernels/calibrate.py)."""
    d = copy.deepcopy(PROFILE)
    d["dtensor_collective_overhead_s"]["all_reduce"] = 1e-5
    d["reference_peak_flops"]["fp4"] = 9e15
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(d))
    r = run_cli([*ARGV, p])
    assert r.code == 0, r.err


MEGATRON_LOG = REPO / "tests" / "data" / "runs" / "megatron_gpt1p3b_8xa100.log"
A100 = ["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "8", "--global-batch", "64",
        "--seq-len", "2048", "--fast", "--json", "--calibration"]


@pytest.fixture(scope="module")
def run_profile(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("rc") / "rc.json"
    r = run_cli(["calibrate", "--from-runs", MEGATRON_LOG, "--cluster", "dgx-a100", "--no-loo", "--out", out])
    assert r.code == 0, r.err
    return json.loads(out.read_text())


@pytest.mark.parametrize("index, key, value, said", [
    (0, "value", 0.0, "must be > 0"),                 # a ValidationError traceback out of the scaled cluster
    (0, "value", -1.0, "must be > 0"),
    (0, "value", 1e-9, "below the 1% floor"),         # the same traceback, one layer later
    (1, "name", "scale_up_bandwidth", "unknown factor"),   # ignored
    (1, "name", "compute", "unknown factor"),
    (4, "value", -5.0, "step_overhead_s"),            # read as 0 s
    (4, "value", 1e6, "step_overhead_s"),
    (None, None, None, "given twice"),                # the first of the two ignored
])
def test_a_run_calibration_factor_that_cannot_apply_is_refused(tmp_path, run_profile, index, key, value, said):
    d = copy.deepcopy(run_profile)
    factors = d["run_calibration"]["factors"]
    assert [f["name"] for f in factors][1:] == ["scale_up_bw", "scale_out_bw", "kernel_overhead", "step_overhead_s"]
    if index is None:
        factors.append(dict(factors[1]))
    else:
        factors[index][key] = value
    p = tmp_path / "rc.json"
    p.write_text(json.dumps(d))
    r = run_cli([*A100, p])
    assert_refused(r, "calibration.run_calibration")
    assert said in r.err


def test_the_fitted_run_calibration_applies(tmp_path, run_profile):
    p = tmp_path / "rc.json"
    p.write_text(json.dumps(run_profile))
    assert run_cli([*A100, p]).code == 0
