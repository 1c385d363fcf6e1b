"""Device-side kernel costs from a GPU calibration profile, and the kernels torch.autocast and eager block code add.

A GPU profile's kernel times are single eager calls bracketed by CUDA events after a sync, so their fixed part is
the host's dispatch (CalibrationProfile.floor_is_host); the step's device time leaves it out. Checked against the
H200 profile's own points and against the profiled H200 steps' summed kernel time
(benchmarks/data/trace_summary_h200.json, the GPU's own kernel durations)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_executed_h200", ROOT / "benchmarks" / "bench_executed_h200.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def profile():
    from trainsim.cost_models.profile import load_profile

    return load_profile(bench.DATA / "profile_h200.json")


def _record(name: str) -> dict:
    return next(r for r in bench.untraced_records(bench.LEASES["lease 2"]) if r["sweep_name"] == name)


def _hw(profile):
    from trainsim.cost_models.compute import hw_of
    from trainsim.specs.loaders import build_scenario

    sc = build_scenario(bench.scenario_raw(bench.sweep_lines()["g1024_mb8"]))
    return hw_of(sc.cluster.gpu, "bf16")


def test_gpu_profile_memory_op_streams_at_its_largest_point_rate_plus_the_device_kernel_cost(profile):
    from trainsim.cost_models.compute import memory_time_s

    hw = _hw(profile)
    pts = sorted((p.nbytes, p.stats.median_s) for p in profile.memory_points if p.op == "copy")
    (n_small, t_small), (n_big, t_big) = pts[0], pts[-1]
    assert profile.floor_is_host
    # the 4 MB and 67 MB copies both take ~24 us: the timed call's floor, not the device's work
    assert pts[1][1] == pytest.approx(t_small, rel=0.05)
    got = memory_time_s(n_small, hw, profile, "copy")
    assert got == pytest.approx(n_small * t_big / n_big + hw.overhead_s)
    assert got < 0.3 * t_small
    # a CPU profile's op is the host's own work: its measured curve, floor included
    cpu = profile.model_copy(update={"fingerprint": profile.fingerprint.model_copy(update={"device": "cpu"})})
    assert not cpu.floor_is_host
    assert memory_time_s(n_small, hw, cpu, "copy") == pytest.approx(t_small)


def test_gpu_profile_gemm_and_attention_leave_the_fits_fixed_part_out(profile):
    from trainsim.cost_models.compute import gemm_time_s
    from trainsim.cost_models.kernel_work import gemm_flops

    hw = _hw(profile)
    fit = profile.gemm_fits["bf16"]
    m, n, k = 2048, 6144, 2048
    assert gemm_time_s(m, n, k, hw, batch=3, profile=profile) == pytest.approx(
        3 * gemm_flops(m, n, k) / fit.flops_per_s + hw.overhead_s)
    att = profile.attention_fits["bf16/bwd"]
    assert att.overhead_s > 1e-4   # the backward's timed call: torch.autograd.grad's host work before the kernel


@pytest.mark.parametrize("name", ["g1024_mb8", "g4096_mb1"])
def test_gpu_bound_step_device_time_is_the_profiled_kernel_sum(profile, name):
    """The engine's compute + optimizer seconds of a step with no host idle against the same line's profiled
    step (sum of its kernels' GPU durations): within 5 %. With the profile's host floors in the device costs
    they were 14 % and 9 % over; without autocast's activation casts and fp32 norms 13 % and 2 % under."""
    rec = _record(name)
    pred = bench.predict_record(rec, profile)["breakdown_s"]
    assert pred["host_idle"] == 0.0
    trace = json.loads((bench.DATA / "trace_summary_h200.json").read_text())["steps"][name]
    measured = trace["kernel_sum_us"] * 1e-6
    assert (pred["compute"] + pred["optimizer"]) / measured - 1 == pytest.approx(0.0, abs=0.05)


def test_autocast_block_ops_bytes(profile):
    """Per element of the block's hidden state: three casts of the attention norm's fp32 output (q, k, v Linears)
    and one (GeLU fc1) of the MLP norm's, fp32 norms, type-promoting residual adds; eager RoPE and SwiGLU."""
    from trainsim.cost_models.flops import layer_ops
    from trainsim.cost_models.shapes import layer_shape

    sc = bench.executed_scenario(_record("g1024_mb8"))
    shp = layer_shape(sc)
    assert shp.autocast and shp.e == 2
    ops = {op.name: op for op in layer_ops(sc)}
    n = shp.tokens * shp.h
    assert ops["norm1_casts"].fwd_bytes == pytest.approx(3 * (4 + 2) * n)
    assert ops["norm1_casts"].bwd_input_bytes == pytest.approx((3 * (2 + 4) + 2 * 12) * n)
    assert ops["norm2_casts"].fwd_bytes == pytest.approx((4 + 2) * n)
    assert ops["residual1"].fwd_bytes == pytest.approx((2 + 4 + 4) * n)
    assert ops["norm1"].fwd_bytes == pytest.approx(8 * n + 8 * shp.tokens)   # fp32 in, fp32 out, mean + rstd

    llama = bench.executed_scenario(_record("l2048_mb4"))
    lshp = layer_shape(llama)
    lops = {op.name: op for op in layer_ops(llama)}
    qk = lshp.tokens * (lshp.a + lshp.kv) * lshp.d
    assert lops["rope"].fwd_bytes == pytest.approx(9 * 2 * qk) and lops["rope"].bwd_input_bytes == pytest.approx(30 * qk)
    act = lshp.tokens * lshp.f
    assert lops["swiglu"].fwd_bytes == pytest.approx(10 * act) and lops["swiglu"].bwd_input_bytes == pytest.approx(18 * act)
    assert lops["norm2_casts"].fwd_bytes == pytest.approx(2 * 6 * lshp.tokens * lshp.h)   # gate and up
