"""Calibration fits recover known parameters from synthetic points (exact and noisy)."""

from __future__ import annotations

import numpy as np
import pytest

from trainsim.cost_models.kernel_work import gemm_bytes, gemm_flops
from trainsim.cost_models.profile import Stats
from trainsim.cost_models.profile_fit import (
    collective_point,
    fit_all_collectives,
    fit_collective,
    fit_linear,
    fit_three_term,
    nonneg_relative_lstsq,
    timing_stats,
)

SIZES = [2.0 ** s for s in range(10, 31, 2)]  # nccl-tests-like 1 KiB .. 1 GiB


def test_linear_fit_recovers_alpha_beta_exactly():
    alpha, bw = 25e-6, 180e9
    times = [alpha + n / bw for n in SIZES]
    fit = fit_linear(SIZES, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bw_Bps == pytest.approx(bw, rel=1e-9)
    assert fit.rms_rel_error < 1e-9


def test_linear_fit_with_multiplicative_noise():
    rng = np.random.default_rng(7)
    alpha, bw = 80e-6, 4.5e9  # gloo send/recv on this machine class (shared notes)
    times = [(alpha + n / bw) * rng.uniform(0.97, 1.03) for n in SIZES]
    fit = fit_linear(SIZES, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.06)
    assert fit.bw_Bps == pytest.approx(bw, rel=0.05)
    assert 0.0 < fit.rms_rel_error < 0.03


def test_linear_fit_never_negative():
    # Pure bandwidth data with noise that would pull an unconstrained intercept below zero.
    times = [n / 1e9 * (0.9 if i == 0 else 1.0) for i, n in enumerate(SIZES)]
    fit = fit_linear(SIZES, times)
    assert fit.alpha_s == 0.0
    # With alpha pinned at 0: minimise sum (c*r_i - 1)^2, r_i = n_i/t_i -> c = sum r / sum r^2.
    r = [1 / 0.9] + [1.0] * (len(SIZES) - 1)
    assert fit.bw_Bps == pytest.approx(1e9 * sum(x * x for x in r) / sum(r), rel=1e-9)


def test_nonneg_lstsq_matches_unconstrained_when_feasible():
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 10, size=(20, 3))
    c = np.array([0.5, 2.0, 0.1])
    coef, rms = nonneg_relative_lstsq(X, X @ c)
    assert coef == pytest.approx(c, rel=1e-9) and rms < 1e-12


def test_three_term_fit_recovers_gemm_model():
    c0, P, W = 4e-6, 150e9, 25e9
    shapes = [(m, n, k) for m in (64, 256, 1024) for n in (128, 768, 3072) for k in (64, 512, 2048)]
    flops = [gemm_flops(*s) for s in shapes]
    nbytes = [gemm_bytes(*s, "fp32") for s in shapes]
    times = [c0 + f / P + b / W for f, b in zip(flops, nbytes)]
    fit = fit_three_term(flops, nbytes, times)
    assert fit.overhead_s == pytest.approx(c0, rel=1e-6)
    assert fit.flops_per_s == pytest.approx(P, rel=1e-6)
    assert fit.bytes_per_s == pytest.approx(W, rel=1e-6)
    assert fit.time_s(2.0 * 100 * 200 * 300, 4.0 * (100 * 300 + 300 * 200 + 100 * 200)) == pytest.approx(
        c0 + 2.0 * 100 * 200 * 300 / P + 4.0 * (100 * 300 + 300 * 200 + 100 * 200) / W)


def test_three_term_fit_drops_insignificant_memory_term():
    shapes = [(m, m, m) for m in (128, 256, 512, 1024, 2048)]
    flops = [gemm_flops(*s) for s in shapes]
    nbytes = [gemm_bytes(*s, "fp32") for s in shapes]
    fit = fit_three_term(flops, nbytes, [f / 200e9 for f in flops])
    assert fit.bytes_per_s is None and fit.overhead_s == pytest.approx(0.0, abs=1e-12)
    assert fit.flops_per_s == pytest.approx(200e9, rel=1e-9)


def test_timing_stats():
    s = timing_stats([3.0, 1.0, 2.0, 10.0, 4.0])
    assert (s.min_s, s.median_s, s.reps) == (1.0, 3.0, 5)
    assert s.p99_s == pytest.approx(np.percentile([1, 2, 3, 4, 10], 99))


def _points(op, n, nodes, alpha, beta, sizes=SIZES):
    return [collective_point(op, n, nodes, s, Stats(min_s=alpha + beta * s, median_s=alpha + beta * s,
                                                       p99_s=alpha + beta * s, reps=5)) for s in sizes]


def test_collective_fit_recovers_alpha_beta_and_busbw():
    alpha, beta = 12e-6, 1 / 200e9
    fit = fit_collective(_points("all_reduce", 8, 1, alpha, beta))
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-9)
    assert fit.busbw_Bps == pytest.approx(200e9 * 2 * 7 / 8, rel=1e-9)  # nccl-tests factor 2(n-1)/n


def test_collective_fit_on_large_sizes_ignores_a_latency_floor():
    # Small sizes stuck at a 6 ms scheduling floor (4 ranks on 2 cores, shared notes); large sizes linear.
    alpha, beta = 200e-6, 1 / 0.7e9
    pts = [collective_point("all_reduce", 4, 1, s, Stats(min_s=t, median_s=t, p99_s=t, reps=5))
           for s in SIZES for t in [max(6e-3, alpha + beta * s)]]
    fit = fit_collective(pts, min_size_bytes=2 ** 24)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-3)


def test_fit_all_collectives_one_fit_per_group_shape():
    pts = _points("all_gather", 8, 1, 10e-6, 1e-11) + _points("all_gather", 16, 2, 30e-6, 4e-11) + \
        _points("send_recv", 2, 1, 5e-6, 2e-11)
    fits = fit_all_collectives(pts)
    keys = [(f.op, f.group_size, f.nodes) for f in fits]
    assert keys == [("all_gather", 8, 1), ("all_gather", 16, 2), ("send_recv", 2, 1)]
    assert fits[1].alpha_s == pytest.approx(30e-6, rel=1e-9)
    with pytest.raises(ValueError):
        fit_collective(pts)  # mixed shapes
