"""Prediction intervals: closed forms, coverage on synthetic residuals, the stored table, predict's output."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from trainsim.cli.main import main
from trainsim.specs import build_scenario
from trainsim.validation.intervals import (
    build_table,
    conformal_band,
    interval_for,
    load_table,
    published_band,
    scenario_features,
    t_band,
)
from trainsim.validation.novelty import held_out_groups, scale_of
from trainsim.validation.source_conformal import (
    hcp_level,
    hierarchical_band,
    mixture_quantile,
    random_effects_band,
    source_quantile,
    source_summary,
)


def test_conformal_order_statistics():
    # n = 19, 80 %: ranks floor(20 x 0.1) = 2 and ceil(20 x 0.9) = 18 of the sorted residuals.
    r = [float(i) for i in range(19, 0, -1)]
    assert conformal_band(r, 0.8) == (2.0, 18.0)
    assert conformal_band(r[:5], 0.8) is None  # 5 residuals cannot bound a 10 % tail


def test_student_t_band():
    lo, hi = t_band([-0.1, 0.0, 0.1], 0.8)
    half = student_t.ppf(0.9, 2) * 0.1 * math.sqrt(4 / 3)
    assert (lo, hi) == pytest.approx((-half, half))


def test_mixture_intervals_cover_new_sources_at_their_rate():
    # Residuals of a source: its own offset ~ N(0, 0.08) plus row noise ~ N(0, 0.05). The table of 200 sources,
    # each weighted equally, must cover about 80 % of the rows of 400 new sources.
    rng = np.random.default_rng(7)

    def source(n: int) -> np.ndarray:
        return rng.normal(0, 0.08) + rng.normal(0, 0.05, n)

    rows = [(f"s{i}", float(r), {}) for i in range(200) for r in source(int(rng.integers(5, 60)))]
    srcs = list(build_table(rows)["sources"].values())
    lo, hi, basis = hierarchical_band(srcs, 0.8)
    assert "hierarchical split-conformal" in basis
    new = [source(20) for _ in range(400)]
    covered = np.mean([np.mean((r >= lo) & (r <= hi)) for r in new])
    assert 0.75 <= covered <= 0.85
    # The population's own band at the finite-sample level 0.9 x 201/200: z = 1.3085 of sqrt(0.08^2 + 0.05^2).
    assert hi == pytest.approx(1.3085 * math.hypot(0.08, 0.05), rel=0.2)


def test_hcp_level_is_the_conformal_rank_over_sources():
    # (1 - tail)(K + 1)/K: K = 14 sources, tail 0.1 -> 0.9 x 15/14; K = 9 bounds it exactly; K = 8 cannot.
    assert hcp_level(14, 0.1) == pytest.approx(0.9 * 15 / 14)
    assert hcp_level(9, 0.1) == pytest.approx(1.0)
    assert hcp_level(8, 0.1) is None


def _coverage_of_new_rows(k: int, tau: float, sigma: float, sizes: tuple[int, int], draws: int, seed: int):
    """Mean over seeded draws of the probability that a row of a new source falls in the band built from k
    sources (offset ~ N(0, tau), rows ~ N(offset, sigma)): exactly Phi(hi/s) - Phi(lo/s), s = hypot(tau, sigma),
    for the hierarchical band, its upper end alone, and the uncorrected mixture 10 / 90 % quantiles."""
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    s = math.hypot(tau, sigma)
    got = {"band": [], "upper": [], "pooled": []}
    for _ in range(draws):
        srcs = [source_summary(list(rng.normal(rng.normal(0, tau), sigma, int(rng.integers(*sizes)))), [])
                for _ in range(k)]
        lo, hi, _ = hierarchical_band(srcs, 0.8)
        got["band"].append(norm.cdf(hi / s) - norm.cdf(lo / s))
        got["upper"].append(norm.cdf(hi / s))
        plo, phi = mixture_quantile(srcs, 0.1), mixture_quantile(srcs, 0.9)
        got["pooled"].append(norm.cdf(phi / s) - norm.cdf(plo / s))
    return {key: (float(np.mean(v)), float(np.std(v)) / math.sqrt(draws)) for key, v in got.items()}


def test_one_row_per_source_gives_the_closed_form_conformal_coverage():
    # K = 14 exchangeable sources of one row each: the 80 % band is the 1st and 14th order statistics, which
    # cover a 15th draw with probability exactly 13/15 (in [1 - a, 1 - a + 2/(K + 1)]); its upper end alone
    # 14/15 (in [1 - a/2, 1 - a/2 + 1/(K + 1)]). The uncorrected mixture quantiles (ranks 2 and 13) give 11/15.
    c = _coverage_of_new_rows(14, 1.0, 1e-9, (1, 2), draws=200, seed=3)
    mean, se = c["band"]
    assert 0.8 <= mean <= 0.8 + 2 / 15 and abs(mean - 13 / 15) < 3.5 * se
    mean, se = c["upper"]
    assert 0.9 <= mean <= 0.9 + 1 / 15 and abs(mean - 14 / 15) < 3.5 * se
    mean, se = c["pooled"]
    assert abs(mean - 11 / 15) < 3.5 * se + 0.02  # the mixture interpolates between ranks: about 11/15


def test_hierarchical_band_keeps_its_coverage_when_source_offsets_dominate():
    # 13 sources of 1..59 rows, source offsets sd 0.1 and row noise sd 0.03 (published sources look like this):
    # the band covers a new source's row with probability >= 80 %; the uncorrected mixture does not.
    c = _coverage_of_new_rows(13, 0.1, 0.03, (1, 60), draws=120, seed=5)
    mean, se = c["band"]
    assert mean - 3 * se >= 0.8 - 0.01
    mean, se = c["pooled"]
    assert mean + 3 * se < 0.8


def test_coverage_beyond_what_the_sources_bound_is_a_random_effects_band():
    from scipy.stats import t as student

    srcs = [{"n": 4, "mean": m, "sd": 0.05, "min": m, "max": m, "quantiles": [m] * 39} for m in (-0.1, 0.0, 0.1, 0.2)]
    lo, hi, basis = hierarchical_band(srcs, 0.8)  # 4 sources bound at most 1 - 2/5 = 60 %
    assert "Student-t" in basis and "60.0%" in basis
    sd = math.sqrt(0.05**2 + np.var([-0.1, 0.0, 0.1, 0.2]))
    half = student.ppf(0.9, 3) * sd * math.sqrt(1 + 1 / 4)
    assert (lo, hi) == pytest.approx((0.05 - half, 0.05 + half))
    assert (lo, hi) == pytest.approx(random_effects_band(srcs, 0.8))


def test_unvalidated_scenario_is_scaled_by_what_held_out_sources_measured():
    table = load_table()
    known = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "training": {"global_batch": 8}})
    f = scenario_features(known)
    lo, hi, basis, why = published_band(table, f, 0.8)
    assert not why and "split-conformal" in basis
    odd = {**f, "gpu": ["Imaginary X1"], "framework": ["nothing-like-it"]}
    lo2, hi2, _, why2 = published_band(table, odd, 0.8)
    assert len(why2) == 2 and "Imaginary X1" in why2[0] and "held-out rows whose GPU type" in why2[0]
    assert "held-out rows whose framework" in why2[1]
    w = max(1.0, *(scale_of(table["novelty"], d, 0.8) for d in ("gpu", "framework")))
    m = mixture_quantile(list(table["sources"].values()), 0.5)
    assert (lo2, hi2) == pytest.approx((m - w * (m - lo), m + w * (hi - m)))
    assert lo2 <= lo and hi2 >= hi


def _uniform(half: float, n: int = 401) -> list[float]:
    return [float(x) for x in np.linspace(-half, half, n)]


@functools.cache
def _novel_table(novel_half: float) -> dict:
    """9 familiar sources (GPU 'A', residuals evenly spread on +-0.1) and one source 'n' on a GPU none of them
    has (residuals evenly spread on +-novel_half); 401 rows each, so every CDF is exactly uniform."""
    rows = [(f"f{i}", r, {"gpu": ["A"]}) for i in range(9) for r in _uniform(0.1)]
    return build_table(rows + [("n", r, {"gpu": ["N"]}) for r in _uniform(novel_half)])


@pytest.mark.parametrize(("coverage", "h"), [(0.8, 0.1), (0.5, 0.1 * (2 * 0.75 * 10 / 9 - 1))])
def test_novelty_scale_is_the_held_out_score_quantile(coverage, h):
    # Held out, 'n' meets the 9 familiar sources' band +-h: the mixture quantile at (1 - a/2) x 10/9 of
    # U(-0.1, 0.1) (1.0 at 80 %: h = 0.1). Its residuals, uniform on +-0.3, score uniform on [0, 0.3/h],
    # whose quantile c is c x 0.3/h (2.4 at 80 %). The familiar held-out sources meet 8 familiar and 'n'
    # (band +-0.3 at 80 %): their scale is 0.8 x 0.1/0.3.
    block = _novel_table(0.3)["novelty"]
    assert block["groups"]["gpu"]["sources"] == ["n"] and block["groups"]["gpu"]["rows"] == 401
    assert scale_of(block, "gpu", coverage) == pytest.approx(coverage * 0.3 / h, rel=1e-6)
    assert set(block["groups"]) == {"gpu", "any", "none"}
    assert block["groups"]["none"]["sources"] == [f"f{i}" for i in range(9)]
    if coverage == 0.8:
        assert scale_of(block, "none", 0.8) == pytest.approx(0.8 * 0.1 / 0.3, rel=1e-6)
        fresh = np.array(_uniform(0.3, 3001))  # the held-out band scaled by it holds 80 % of such rows
        assert np.mean(np.abs(fresh) <= scale_of(block, "gpu", 0.8) * h) == pytest.approx(0.8, abs=1e-3)


def test_novel_scenario_band_is_the_conformal_band_scaled_about_its_median():
    table = _novel_table(0.3)
    lo, hi, _ = hierarchical_band(list(table["sources"].values()), 0.8)
    lo2, hi2, basis2, why = published_band(table, {"gpu": ["Z"]}, 0.8)
    assert (lo, hi) == pytest.approx((-0.24, 0.24), abs=1e-6)  # 0.1 x (0.3 - x)/0.6 = 0.01 above x
    assert (lo2, hi2) == pytest.approx((-0.24 * 2.4, 0.24 * 2.4), abs=1e-6)
    assert "band x2.40" in why[0] and "401 rows of 1 source(s)" in why[0] and "scaled x2.40" in basis2
    assert len(published_band(table, {"gpu": ["Z"], "family": ["q"]}, 0.8)[3]) == 2  # one line per feature


def test_novel_scenario_not_widened_when_held_out_novel_sources_were_predicted_as_well():
    table = _novel_table(0.05)
    lo, hi, basis = hierarchical_band(list(table["sources"].values()), 0.8)
    lo2, hi2, basis2, why = published_band(table, {"gpu": ["Z"]}, 0.8)
    assert scale_of(table["novelty"], "gpu", 0.8) == pytest.approx(0.8 * 0.05 / 0.1, rel=1e-6)
    assert (lo2, hi2, basis2) == (lo, hi, basis) and "not widened" in why[0]


def test_held_out_groups_and_the_envelope_without_a_measurement():
    rows = [("a", 0.1, {"gpu": ["A"], "family": ["x"]}), ("b", 0.0, {"gpu": ["B"], "family": ["y"]}),
            ("b", 0.2, {"gpu": ["A"], "family": ["x"]}), ("c", -0.1, {"gpu": ["A"], "family": ["x"]})]
    sources = build_table(rows)["sources"]
    g = held_out_groups(rows, sources)
    assert g["gpu"] == {"b": [0.0]} and g["family"] == {"b": [0.0]} and g["any"] == {"b": [0.0]}
    assert g["none"] == {"a": [0.1], "b": [0.2], "c": [-0.1]}
    plain = build_table([(s, r, {"gpu": ["A"]}) for s, r, _ in rows])
    assert "novelty" not in plain  # no held-out row was new to the rest: nothing to measure
    lo, hi, basis, why = published_band(plain, {"gpu": ["Z"]}, 0.6)
    assert "envelope" in basis and "no held-out source was new" in why[0]
    srcs = list(plain["sources"].values())
    blo, bhi, _ = hierarchical_band(srcs, 0.6)  # the envelope is at least the conformal band
    assert (lo, hi) == pytest.approx((min(blo, *(source_quantile(s, 0.2) for s in srcs)),
                                      max(bhi, *(source_quantile(s, 0.8) for s in srcs))))


def test_interval_is_the_prediction_times_the_residual_quantiles():
    scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "training": {"global_batch": 8}})
    lo, hi, _, _ = published_band(load_table(), scenario_features(scn), 0.9)
    iv = interval_for(2.0, 1000.0, 0.4, scn, coverage=0.9)
    assert iv.step_time_s == pytest.approx((2.0 * math.exp(lo), 2.0 * math.exp(hi)))
    assert iv.tokens_per_s == pytest.approx((2000.0 / iv.step_time_s[1], 2000.0 / iv.step_time_s[0]))
    assert iv.mfu[0] == pytest.approx(0.8 / iv.step_time_s[1])


def test_predict_prints_the_interval(capsys):
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "8"]
    assert main(argv + ["--json", "--coverage", "0.9"]) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["step_time_interval_s"]
    assert out["interval_coverage"] == 0.9 and 0 < lo < hi
    assert out["tokens_per_s_interval"][0] == pytest.approx(out["tokens_per_s"] * out["step_time_s"] / hi)
    assert main(argv) == 0
    assert "90 % interval" not in capsys.readouterr().out
    assert main(argv + ["--coverage", "0.99"]) == 2
    assert "coverage" in capsys.readouterr().err


def test_stored_table_matches_what_the_script_computes_on_a_subset():
    """benchmarks/residual_table.py's rows of two small probe sources, recomputed now, give the stored
    quantiles (regenerate the table with that script when the model moves predictions)."""
    from trainsim.simulator.predict import predict
    from trainsim.validation.residual_sources import datasets, probe_publications, residual_rows, source_of

    ds, pubs = datasets()["probe"](), probe_publications()
    wanted = ("probe: Trainy H200 torchtitan benchmark", "probe: NVIDIA dgxc-benchmarking Nemotron-4 340B")
    sub = type(ds)(**{**ds.__dict__, "cases": tuple(c for c in ds.cases if source_of("probe", c, pubs) in wanted)})
    rows = residual_rows("probe", sub, lambda s: predict(s).step_time_s)
    fresh = build_table([(s, r, f) for s, r, f, _ in rows])["sources"]
    stored = load_table()["sources"]
    assert set(fresh) == set(wanted)
    for name, src in fresh.items():
        assert src["n"] == stored[name]["n"]
        assert src["quantiles"] == pytest.approx(stored[name]["quantiles"], abs=0.01), \
            "stale table: run python benchmarks/residual_table.py"
        assert src["mean"] == pytest.approx(stored[name]["mean"], abs=0.01)
        assert src["covers"] == stored[name]["covers"]


def test_plan_ranks_by_the_chosen_quantile(capsys):
    argv = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8:16", "--global-batch", "64",
            "--seq-len", "4096", "--top", "3", "--max-micro-batch", "2", "--schedule", "1f1b", "--json"]
    assert main(argv + ["--rank-by", "p90"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rank_by"] == "p90"
    rows = [r for r in d["rows"] if r["fits"]]
    keys = [r["time_to_train_s"] * r["step_time_p90_s"] / r["step_time_s"] for r in rows]
    assert keys == sorted(keys)
    for r in rows:
        lo, hi = r["step_time_interval_s"]
        assert hi == r["step_time_p90_s"] and lo < hi


def test_report_shows_the_band():
    from trainsim.reports.whatif import _band_sentence, scaling
    from trainsim.simulator.predict import predict

    scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8,
                          "training": {"global_batch": 8, "zero": 3, "framework": "torch"}})
    pred = predict(scn)
    iv = interval_for(pred.step_time_s, pred.tokens_per_s, pred.mfu, scn)
    assert "80 % interval" in _band_sentence(pred, scn, None) and iv.basis in _band_sentence(pred, scn, None)
    strong, _ = scaling(scn, None, points=2)
    p = next(q for q in strong if q["gpus"] == 8 and q["fits"])
    lo, hi = p["tokens_per_s_band"]
    assert lo < hi


def _run_cal(loo: list[float], gpu: str):
    from trainsim.cost_models.run_factors import FittedFactor, RunCalibration, RunResidual

    runs = [RunResidual(name=str(i), source="s", gpu=gpu, num_gpus=8, measured_step_s=1.0, predicted_before_s=1.0,
                        predicted_after_s=1.0, log_residual=0.0, loo_log_residual=r) for i, r in enumerate(loo)]
    return RunCalibration(factors=[FittedFactor(name="step_overhead_s", value=0.0, stderr=0.05, prior_sd=0.05,
                                                fitted=False)], runs=runs, noise_sd=0.01)


def test_run_calibration_intervals_come_from_its_leave_one_out_residuals():
    from trainsim.cost_models.profile import CalibrationProfile

    scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "training": {"global_batch": 8}})
    gpu = scn.cluster.gpu.name
    loo = [0.01 * k for k in range(-5, 6)]  # 11 residuals: conformal ranks 1 and 11 at 80 %
    iv = interval_for(1.0, 1.0, 0.5, scn, CalibrationProfile(run_calibration=_run_cal(loo, gpu)))
    assert iv.step_time_s == pytest.approx((math.exp(-0.05), math.exp(0.05))) and "split-conformal" in iv.basis
    few = [-0.02, 0.0, 0.02, 0.04]
    iv = interval_for(1.0, 1.0, 0.5, scn, CalibrationProfile(run_calibration=_run_cal(few, gpu)))
    assert iv.step_time_s == pytest.approx(tuple(math.exp(x) for x in t_band(few, 0.8))) and "Student-t" in iv.basis
    other = interval_for(1.0, 1.0, 0.5, scn, CalibrationProfile(run_calibration=_run_cal(loo, "A100 80GB SXM4")))
    assert "published" in other.basis and "no run on" in other.reasons[0]
