"""Goodput and checkpoint-interval closed forms (Young 1974, Daly 2006) against published numbers,
numerical optimisation and a seeded Monte Carlo of Poisson failures."""

import math

import numpy as np
import pytest

from trainsim.simulator import goodput as g

MIN = 60.0
HOUR = 3600.0


@pytest.mark.parametrize("mtbf_min, expected_min", [(24 * 60, 117.0), (6 * 60, 57.0), (15, 9.1)])
def test_daly_interval_matches_the_papers_worked_examples(mtbf_min, expected_min):
    # Daly, FGCS 22(3) 2006, Figs. 3-5: R = 10 min, delta = 5 min; "the new model predicts tau_opt = ..."
    tau = g.daly_interval_s(5 * MIN, mtbf_min * MIN) / MIN
    assert tau == pytest.approx(expected_min, abs=0.5)


def test_young_is_sqrt_2_delta_m():
    assert g.young_interval_s(300.0, 86400.0) == pytest.approx(math.sqrt(2 * 300 * 86400))
    # Daly's correction vanishes as delta/M -> 0: relative gap ~ sqrt(delta/2M)/3.
    d, m = 1.0, 1e8
    assert g.daly_interval_s(d, m) / g.young_interval_s(d, m) == pytest.approx(1.0, abs=1e-3)


def test_daly_interval_when_checkpoints_are_slower_than_failures():
    assert g.daly_interval_s(checkpoint_s=100.0, mtbf_s=40.0) == 40.0


@pytest.mark.parametrize("delta, mtbf, restart", [(300.0, 24 * HOUR, 600.0), (60.0, 3 * HOUR, 300.0), (300.0, HOUR, 600.0)])
def test_daly_interval_nearly_minimises_expected_wall_time(delta, mtbf, restart):
    work = 500 * HOUR
    taus = np.geomspace(delta / 10, 20 * mtbf, 20000)
    walls = [g.expected_wall_s(work, t, delta, restart, mtbf) for t in taus]
    best_tau = taus[int(np.argmin(walls))]
    tau = g.daly_interval_s(delta, mtbf)
    # Daly's perturbation solution is within a few percent of the exact optimum for delta << M ...
    assert tau == pytest.approx(best_tau, rel=0.03)
    # ... and the wall time it gives is within 0.1% of the minimum.
    assert g.expected_wall_s(work, tau, delta, restart, mtbf) == pytest.approx(min(walls), rel=1e-3)


def test_expected_wall_time_limits():
    # No failures: only the checkpoint overhead remains.
    assert g.expected_wall_s(1000.0, 100.0, 10.0, 60.0, math.inf) == pytest.approx(1100.0)
    # Rare failures: T_w ~ T_s (1 + d/tau) (1 + (tau + d)/(2M)) to first order.
    ts, tau, d, r, m = 1000 * HOUR, HOUR, 60.0, 0.0, 1e6 * HOUR
    first_order = ts * (1 + d / tau) * (1 + (tau + d) / (2 * m))
    assert g.expected_wall_s(ts, tau, d, r, m) == pytest.approx(first_order, rel=1e-6)


def test_expected_wall_time_agrees_with_a_monte_carlo_of_poisson_failures():
    """Simulate the model Daly analyses: segments of tau + delta must finish failure-free; a failure loses
    the segment and costs a restart R, which itself can be interrupted."""
    rng = np.random.default_rng(1234)
    tau, d, r, m = 2.0 * HOUR, 5 * MIN, 10 * MIN, 6 * HOUR
    segments, runs = 50, 400
    seg = tau + d
    totals = np.empty(runs)
    for i in range(runs):
        t = 0.0
        done = 0
        restarting = False
        while done < segments:
            need = r if restarting else seg
            fail = rng.exponential(m)
            if fail >= need:
                t += need
                if restarting:
                    restarting = False
                else:
                    done += 1
            else:
                t += fail
                restarting = True
        totals[i] = t
    mc_mean = totals.mean()
    mc_se = totals.std(ddof=1) / math.sqrt(runs)
    model = g.expected_wall_s(segments * tau, tau, d, r, m)
    assert abs(mc_mean - model) < 4 * mc_se
    assert abs(mc_mean - model) / model < 0.03


def test_default_failure_rate_is_llama3_statistic():
    # 419 unexpected interruptions / (16,384 GPUs x 54 days): one job interruption every ~3.1 hours at 16K GPUs.
    assert g.DEFAULT_FAILURE_RATE_PER_GPU_HOUR == pytest.approx(419 / (16384 * 54 * 24))
    assert g.job_mtbf_s(16384) / HOUR == pytest.approx(54 * 24 / 419)
    assert g.job_mtbf_s(16384) / HOUR == pytest.approx(3.09, abs=0.01)


def test_plan_goodput_combines_the_pieces():
    work = 54 * 24 * HOUR
    res = g.plan_goodput(work, 16384, checkpoint_s=60.0, restart_s=600.0)
    m = g.job_mtbf_s(16384)
    assert res.mtbf_s == pytest.approx(m)
    assert res.interval_s == pytest.approx(g.daly_interval_s(60.0, m))
    assert res.time_to_train_s == pytest.approx(g.expected_wall_s(work, res.interval_s, 60.0, 600.0, m))
    assert res.goodput == pytest.approx(work / res.time_to_train_s)
    # Meta reports > 90% effective training time at this scale; a 1-minute checkpoint and 10-minute
    # restart put the model in the same regime.
    assert 0.85 < res.goodput < 0.97
    # More GPUs fail more often: goodput falls with scale.
    assert g.plan_goodput(work, 1024, 60.0, 600.0).goodput > res.goodput
    assert g.plan_goodput(work, 16384, 60.0, 600.0, failure_rate_per_gpu_hour=0.0).goodput == 1.0


def test_checkpoint_size_and_write_time():
    # 70B parameters, bf16 weights + 12 B/param of fp32 master and Adam states = 14 B/param.
    assert g.checkpoint_bytes(70e9) == pytest.approx(70e9 * 14)
    assert g.checkpoint_write_s(980e9, 2e12) == pytest.approx(0.49)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None)
@given(work_h=st.floats(1, 10_000), gpus=st.integers(1, 100_000), ckpt_s=st.floats(0.1, 3600),
       restart_s=st.floats(0, 7200), rate=st.floats(1e-7, 1e-3))
def test_goodput_properties(work_h, gpus, ckpt_s, restart_s, rate):
    work = work_h * HOUR
    res = g.plan_goodput(work, gpus, ckpt_s, restart_s, rate)
    # Never faster than failure-free plus the checkpoints it writes; goodput is a fraction.
    assert res.time_to_train_s >= work * (1 + ckpt_s / res.interval_s) * (1 - 1e-12)
    assert 0 < res.goodput <= 1
    # More failures, slower checkpoints or slower restarts never help.
    assert g.plan_goodput(work, gpus, ckpt_s, restart_s, rate * 2).goodput <= res.goodput * (1 + 1e-12)
    assert g.plan_goodput(work, gpus, ckpt_s * 2, restart_s, rate).goodput <= res.goodput * (1 + 1e-12)
    assert g.plan_goodput(work, gpus, ckpt_s, restart_s + 60, rate).goodput <= res.goodput * (1 + 1e-12)
