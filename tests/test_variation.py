"""GPU-to-GPU speed spread: the expected slowest of n GPUs, and how the builder applies it to compute only."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.variation import expected_max_std_normal, slowest_gpu_factor
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario

# Expected largest of n standard normal draws: closed forms for n = 2, 3 (1/sqrt(pi), 3/(2 sqrt(pi))) and the
# tabulated values of Harter (1961), "Expected values of normal order statistics", Biometrika 48, Table 1.
TABLE = {2: 1 / math.sqrt(math.pi), 3: 1.5 / math.sqrt(math.pi), 4: 1.029375, 5: 1.162964, 10: 1.538753,
         100: 2.507594, 1000: 3.241436}


@pytest.mark.parametrize("n, expected", sorted(TABLE.items()))
def test_expected_max_of_n_standard_normals(n, expected):
    assert expected_max_std_normal(n) == pytest.approx(expected, abs=2e-6)


def test_slowest_gpu_factor_edges_and_monotone():
    assert expected_max_std_normal(1) == 0.0 and slowest_gpu_factor(1, 0.015) == 1.0
    assert slowest_gpu_factor(4096, 0.0) == 1.0
    assert slowest_gpu_factor(1000, 0.015) == pytest.approx(1 + 0.015 * 3.241436, abs=1e-7)
    xs = [slowest_gpu_factor(n, 0.015) for n in (2, 8, 64, 512, 4096, 32768)]
    assert xs == sorted(xs) and xs[-1] < 1.07
    with pytest.raises(ValueError):
        expected_max_std_normal(0)
    with pytest.raises(ValueError):
        slowest_gpu_factor(8, -0.01)


def _scenario(cv: float | None, gpus: int = 64):
    cluster = {"preset": "dgx-h100", **({"gpu": {"speed_spread_cv": cv}} if cv is not None else {})}
    return build_scenario({"model": "llama3-8b", "gpus": gpus, "layout": {"tp": 2, "pp": 2},
                           "training": {"seq_len": 4096, "global_batch": 64}, "cluster": cluster})


def test_presets_carry_the_spread_and_cpu_does_not():
    assert _scenario(None).cluster.gpu.speed_spread_cv == pytest.approx(0.015)
    cpu = build_scenario({"model": "tiny-gpt", "gpus": 2, "cluster": {"preset": "cpu-host"},
                          "training": {"seq_len": 128, "global_batch": 2}})
    assert cpu.cluster.gpu.speed_spread_cv == 0.0


def test_builder_stretches_compute_not_communication():
    """Every chunk's compute and the optimizer step's GPU part scale by the factor of the job's 64 GPUs; TP/DP/PP
    transfers, the grad norm's scalar all-reduces and the host's lead-in after its .item() sync (cost_models/
    step_host.py) stay as they are."""
    spread, flat = build_cost_table(_scenario(None)), build_cost_table(_scenario(0.0))
    k = slowest_gpu_factor(64, 0.015)
    assert spread.slowest_gpu_factor == pytest.approx(k) and flat.slowest_gpu_factor == 1.0
    from trainsim.cost_models.compute import optimizer_step_parts
    for i, (s1, s0) in enumerate(zip(spread.stages, flat.stages)):
        assert s1.optimizer_host_idle_s == s0.optimizer_host_idle_s > 0
        gpu, _ = optimizer_step_parts(_scenario(0.0), i)
        assert s1.optimizer_s - s0.optimizer_s == pytest.approx((k - 1) * gpu, rel=1e-9)
        assert s1.send_fwd == s0.send_fwd and s1.send_bwd == s0.send_bwd
        for c1, c0 in zip(s1.chunks, s0.chunks):
            for f in ("fwd_s", "bwd_input_s", "bwd_weight_s", "recompute_s"):
                assert getattr(c1, f) == pytest.approx(k * getattr(c0, f), rel=1e-12), f
            assert (c1.tp_fwd_s, c1.tp_bwd_s) == (c0.tp_fwd_s, c0.tp_bwd_s)
            # buckets alike; their ready points are fractions of the (stretched) backward: equal up to rounding
            assert [replace(b, ready_at=None) for b in c1.grad_buckets] == \
                [replace(b, ready_at=None) for b in c0.grad_buckets]
            assert [b.ready_at for b in c1.grad_buckets] == pytest.approx([b.ready_at for b in c0.grad_buckets])


def test_prediction_reports_the_slowest_gpu_share():
    p1, p0 = predict(_scenario(None)), predict(_scenario(0.0))
    k = slowest_gpu_factor(64, 0.015)
    b1, b0 = p1.breakdown_s, p0.breakdown_s
    assert b0["compute_slowest_gpu"] == 0.0
    assert b1["compute"] == pytest.approx(b0["compute"], rel=1e-9)
    assert b1["compute_slowest_gpu"] == pytest.approx((k - 1) * b0["compute"], rel=1e-9)
    assert p1.step_time_s > p0.step_time_s
    # one GPU: nothing to wait for
    one = predict(build_scenario({"model": "llama3-8b", "gpus": 1, "cluster": {"preset": "dgx-h100"},
                                  "training": {"seq_len": 2048, "global_batch": 1}}))
    assert one.breakdown_s["compute_slowest_gpu"] == 0.0


def test_negative_spread_is_a_clear_error(capsys, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ngpus: 8\ncluster: {preset: dgx-h100, gpu: {speed_spread_cv: -0.1}}\n")
    assert main(["predict", str(f)]) == 2
    err = capsys.readouterr().err
    assert "speed_spread_cv" in err and "Traceback" not in err


def test_pinned_factor_at_1000_gpus_and_paced_op_times():
    """n is the job's GPU count: 1,000 GPUs stretch by 1 + 0.015 x 3.241436 (Harter's E[max of 1000]), and the
    op times every exposure is computed against (builder._op_times) are the cost model's times x that."""
    from trainsim.cost_models.compute import layer_op_times
    from trainsim.simulator.builder import _op_times
    sc = build_scenario({"model": "llama3-8b", "gpus": 1000, "cluster": {"preset": "dgx-h100"},
                         "training": {"seq_len": 2048, "global_batch": 1000}})
    k = 1 + 0.015 * 3.241436
    assert build_cost_table(sc).slowest_gpu_factor == pytest.approx(k, abs=1e-7)
    for paced, plain in zip(_op_times(sc, None), layer_op_times(sc)):
        assert paced.fwd_s == pytest.approx(k * plain.fwd_s, rel=1e-6)
        assert paced.bwd_weight_s == pytest.approx(k * plain.bwd_weight_s, rel=1e-6)


def test_offloaded_optimizer_host_time_is_not_stretched():
    """With offload_optimizer the Adam update runs on the host CPU: only the device part (the grad-norm pass)
    is at the slowest GPU's pace."""
    from trainsim.cost_models.compute import optimizer_step_parts
    sc = build_scenario({"model": "llama3-8b", "gpus": 64, "cluster": {"preset": "dgx-h100"},
                         "training": {"seq_len": 4096, "global_batch": 64, "zero": 2, "offload_optimizer": True}})
    gpu, host = optimizer_step_parts(sc, 0)
    assert host > 10 * gpu > 0
    from trainsim.cost_models.memory import stage_memory
    sm = stage_memory(sc, 0)
    pcie = (sm.pcie_h2d_bytes + sm.pcie_d2h_bytes) / sc.cluster.gpu.pcie_bw_Bps  # the offload's PCIe copies
    k = slowest_gpu_factor(64, 0.015)
    assert build_cost_table(sc).stages[0].optimizer_s == pytest.approx(k * gpu + host + pcie, rel=1e-12)


def test_hand_written_gpu_gets_the_preset_spread():
    """A GPU given in full (no preset) gets the same default spread as the GPU presets, not identical devices."""
    gpu = {"name": "my-gpu", "memory_bytes": 8.6e10, "hbm_bw_Bps": 3.35e12, "peak_flops": {"bf16": 989e12},
           "num_sms": 132}
    sc = build_scenario({"model": "llama3-8b", "gpus": 8, "cluster": {"preset": "dgx-h100", "gpu": gpu},
                         "training": {"seq_len": 2048, "global_batch": 8}})
    assert sc.cluster.gpu.speed_spread_cv == pytest.approx(0.015)


def test_integer_types_and_bad_n():
    import numpy as np
    assert expected_max_std_normal(np.int64(10)) == pytest.approx(1.538753, abs=2e-6)
    for bad in (True, 2.5, 0, -4):
        with pytest.raises(ValueError):
            expected_max_std_normal(bad)


def test_profile_spread_closed_form_and_use():
    """A calibration profile's per-rank GEMM rates give the spread (sample std / mean); a GPU profile measured
    over >= 8 ranks replaces the spec's spread in every compute time of the pace (block ops, the exposures'
    op times, the table's factor); fewer ranks or a CPU profile do not."""
    import os
    import tempfile

    from trainsim.cost_models.compute import layer_op_times
    from trainsim.cost_models.profile import (
        CalibrationProfile,
        Fingerprint,
        load_profile,
        save_profile,
        speed_spread_cv,
    )
    from trainsim.simulator.builder import _op_times
    assert speed_spread_cv([1e12]) is None and speed_spread_cv([]) is None
    assert speed_spread_cv([2e12, 2e12, 2e12]) == 0.0
    assert speed_spread_cv([0.9e12, 1.1e12, 0.0]) == pytest.approx(0.1 * math.sqrt(2))  # the 0 rank left out
    rates = [0.97e15, 0.99e15, 1.0e15, 1.0e15, 1.0e15, 1.0e15, 1.01e15, 1.03e15]
    cv = speed_spread_cv(rates)
    sc = _scenario(None)
    gpu8 = CalibrationProfile(fingerprint=Fingerprint(device="cuda"), rank_gemm_flops=rates)
    assert gpu8.pace_spread_cv() == pytest.approx(cv) and "over 8 ranks" in gpu8.describe()
    k = slowest_gpu_factor(64, cv)
    t = build_cost_table(sc, profile=gpu8)
    assert t.slowest_gpu_factor == pytest.approx(k)
    flat = build_cost_table(_scenario(0.0), profile=gpu8)  # the profile's spread wins over the spec's
    assert flat.slowest_gpu_factor == pytest.approx(k)
    # the block compute and the op times the exposures use are paced with the profile's spread too
    for paced, plain in zip(_op_times(sc, gpu8), layer_op_times(sc, gpu8)):
        assert paced.fwd_s == pytest.approx(k * plain.fwd_s, rel=1e-12)
    # two ranks, or a CPU profile: measured and shown, not used
    gpu2 = CalibrationProfile(fingerprint=Fingerprint(device="cuda"), rank_gemm_flops=[0.98e15, 1.02e15])
    # every compute field of every chunk scales with the profile's pace against the spec's (same fits otherwise)
    t2 = build_cost_table(sc, profile=gpu2)
    for c8, c2 in zip(t.stages[0].chunks + t.stages[1].chunks, t2.stages[0].chunks + t2.stages[1].chunks):
        for f in ("fwd_s", "bwd_input_s", "bwd_weight_s"):
            assert getattr(c8, f) == pytest.approx(getattr(c2, f) * k / slowest_gpu_factor(64, 0.015), rel=1e-12)
    assert gpu2.pace_spread_cv() is None and "not used" in gpu2.describe()
    assert build_cost_table(sc, profile=gpu2).slowest_gpu_factor == pytest.approx(slowest_gpu_factor(64, 0.015))
    cpu8 = CalibrationProfile(fingerprint=Fingerprint(device="cpu"), rank_gemm_flops=rates)
    assert build_cost_table(sc, profile=cpu8).slowest_gpu_factor == pytest.approx(slowest_gpu_factor(64, 0.015))
    # the rates survive the profile's JSON round trip; a wild spread is capped at GPUSpec's 0.5
    with tempfile.TemporaryDirectory() as d:
        path = save_profile(gpu8, os.path.join(d, "p.json"))
        assert load_profile(path).pace_spread_cv() == pytest.approx(cv)
    assert CalibrationProfile(rank_gemm_flops=[1e12, 9e12]).speed_spread_cv == 0.5
