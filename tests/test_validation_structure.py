"""The step-structure diagnostic (validation.structure): least squares of step = a + b·L + c·m + e·m·L recover
the terms of a closed form exactly, refuse grids that cannot fix them, and split the vTrain runs into the same
per-block-and-micro-batch cost their own row differences give."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from external_tables import table_path

from trainsim.validation.datasets import load_dataset
from trainsim.validation.structure import fit_terms, render_structure, step_structure
from trainsim.validation.validate import render_text, validate
from trainsim.validation.vtrain import VTRAIN_FILE


@dataclass(frozen=True)
class Fixed:
    """A stand-in prediction: only the step time, which is all validate reads."""

    step_time_s: float


A, B, C, E = 0.004, 0.0015, 0.011, 0.0032  # seconds: fixed, per block and step, per micro-batch, per both


def closed_form(layers: int, m: float) -> float:
    return A + B * layers + C * m + E * m * layers


def test_fit_recovers_a_bilinear_closed_form():
    pts = [(L, m, closed_form(L, m)) for L, m in itertools.product((12, 16, 20, 24), (2, 4, 8, 16))]
    t = fit_terms(pts)
    assert (t.fixed_s, t.per_layer_step_s, t.per_microbatch_s, t.per_layer_microbatch_s) == pytest.approx(
        (A, B, C, E), rel=1e-9)
    assert t.rms_s == pytest.approx(0.0, abs=1e-12)


def test_grids_that_cannot_fix_four_terms_are_refused():
    one_m = [(L, 2, closed_form(L, 2)) for L in (12, 16, 20, 24, 28, 32)]  # m never varies: c and e mix with a, b
    assert fit_terms(one_m) is None
    assert fit_terms([(L, m, closed_form(L, m)) for L, m in itertools.product((12, 24), (2, 4))]) is None  # 4 < 6


@pytest.fixture(scope="module")
def ds():
    return load_dataset(str(table_path(VTRAIN_FILE)))


def test_vtrain_structure_matches_row_differences(ds):
    """A stand-in predictor that returns the closed form is read back exactly; the published per-block cost of
    TP 8, micro-batch 1 equals what two rows give directly: vt1_249 (L24) - vt1_185 (L12), both 16
    micro-batches per step: (1.883691 - 0.961607) s / (12 x 16) = 4.80 ms."""

    def predict(s):
        return Fixed(closed_form(s.model.num_layers, s.training.global_batch / (s.dp * s.training.micro_batch)))

    rep = validate(ds, predict_fn=predict)
    groups = {(g.tp, g.micro_batch): g for g in step_structure(rep)}
    assert set(groups) == {(t, m) for t in (1, 2, 4, 8) for m in (1, 2, 4)}  # mb 8 rows hold one m only
    for g in groups.values():
        q = g.predicted
        assert (q.per_layer_microbatch_s, q.per_microbatch_s, q.per_layer_step_s) == pytest.approx((E, C, B))
    tp8 = groups[(8, 1)]
    assert tp8.rows == 16
    assert tp8.published.per_layer_microbatch_s == pytest.approx((1.883691 - 0.961607) / (12 * 16), rel=0.01)
    lines = render_structure(list(groups.values()))
    assert any(line.startswith("  TP 8, micro-batch 1 (16 rows): e 4.79 | 3.20, c ") for line in lines)
    assert "structure (pp = 1 rows" in render_text(rep)
    assert len(rep.to_json()["structure"]) == 12


def _group(tp: int, mb: int, e: float, *, dp_groups: int = 1, spread: float = 0.0):
    from trainsim.validation.structure import GroupStructure, Terms

    t = Terms(A, B, C, e, 0.0)
    return GroupStructure(tp, mb, 8, t, t, dp_groups, spread)


def test_falling_e_flags_only_a_drop_as_the_micro_batch_grows():
    """Twice the work per block cannot take less time: the check names exactly the pairs where e falls."""
    from trainsim.validation.structure import falling_e, render_checks

    groups = [_group(1, 1, 0.003), _group(1, 2, 0.005), _group(1, 4, 0.009),
              _group(8, 1, 0.004), _group(8, 2, 0.003, dp_groups=3, spread=2e-6), _group(8, 4, 0.0045)]
    assert falling_e(groups) == [(8, 1, 2, 0.004, 0.003)]
    lines = render_checks(groups)
    assert "largest spread 2 us (1 regimes with several DP groups)" in lines[0]
    assert lines[1].endswith("TP 8, micro-batch 1 -> 2: 4.00 -> 3.00 ms (scatter of at least 25 %)")


def test_vtrain_rows_share_one_measurement_per_regime(ds):
    """The published per-micro-batch terms of a (TP, micro-batch) regime agree over its DP groups to the table's
    rounding (1 us), and e falls from micro-batch 1 to 2 at TP 8: rows vt1_249 - vt1_185 give (1.883691 - 0.961607)
    s / (12 x 16) = 4.80 ms at micro-batch 1, the micro-batch 2 rows of the same TP 3.87 ms."""
    from trainsim.validation.structure import falling_e

    rep = validate(ds, predict_fn=lambda s: Fixed(closed_form(s.model.num_layers, 1.0)))
    groups = step_structure(rep)
    multi = [g for g in groups if g.dp_groups > 1]
    assert len(multi) == 9 and max(g.dp_spread_s for g in multi) < 5e-6
    drops = {(tp, a, b): (e1, e2) for tp, a, b, e1, e2 in falling_e(groups)}
    assert set(drops) == {(4, 1, 2), (8, 1, 2)}
    assert drops[(8, 1, 2)][0] == pytest.approx((1.883691 - 0.961607) / (12 * 16), rel=0.01)
    assert drops[(8, 1, 2)][1] == pytest.approx(3.87e-3, abs=0.01e-3)


def test_term_leverage_closes_exactly_the_term_that_carries_the_error(ds):
    """A stand-in predictor that is off only by 1 ms per block and step on the fitted rows (pp = 1, micro-batch up to
    4: published + 0.001 x L; every other row exact): closing b's gap takes the MAPE to zero, closing any other
    term leaves it as predicted (least squares moves exactly b by 0.001 s, the other fitted terms by nothing)."""
    from trainsim.validation.structure import render_leverage, term_leverage

    by_name = {c.scenario.name: c for c in ds.cases}

    def predict(s):
        c = by_name[s.name]
        fitted = s.layout.pp == 1 and s.training.micro_batch <= 4  # micro-batch 8 rows hold one m: not fitted
        return Fixed(c.published + (0.001 * s.model.num_layers if fitted else 0.0))

    rep = validate(ds, predict_fn=predict)
    lev = term_leverage(rep)
    assert lev["b"] == pytest.approx(0.0, abs=1e-9)
    for k in ("a", "c", "e"):
        assert lev[k] == pytest.approx(rep.mape_pct, rel=1e-9)
    assert render_leverage(lev, rep.mape_pct)[0].startswith("  MAPE with one term's gap closed")
    assert rep.to_json()["term_leverage_mape_pct"] == pytest.approx(lev)


def test_leverage_by_tp_closes_the_term_only_at_the_tp_that_carries_the_error(ds):
    """A stand-in predictor off by 2 ms per block and micro-batch on the fitted TP 2 rows only (published + 0.002 x m x
    L; every other row exact): closing e at TP 2 alone takes the MAPE to zero; closing e at any other TP, or c at any
    TP, leaves it as predicted (the fit moves exactly TP 2's e by 0.002 s)."""
    from trainsim.validation.structure import leverage_by_tp, render_leverage, term_leverage

    by_name = {c.scenario.name: c for c in ds.cases}

    def predict(s):
        c = by_name[s.name]
        fitted = s.layout.pp == 1 and s.training.micro_batch <= 4 and s.layout.tp == 2
        m = s.training.global_batch / (s.dp * s.training.micro_batch)
        return Fixed(c.published + (0.002 * m * s.model.num_layers if fitted else 0.0))

    rep = validate(ds, predict_fn=predict)
    by_tp = leverage_by_tp(rep)
    assert sorted(by_tp) == [1, 2, 4, 8]
    assert by_tp[2]["e"] == pytest.approx(0.0, abs=1e-9)
    for tp, lev in by_tp.items():
        assert lev["c"] == pytest.approx(rep.mape_pct, rel=1e-9)
        if tp != 2:
            assert lev["e"] == pytest.approx(rep.mape_pct, rel=1e-9)
    assert term_leverage(rep)["e"] == pytest.approx(0.0, abs=1e-9)
    line = render_leverage(term_leverage(rep), rep.mape_pct, by_tp)[1]
    assert line.startswith("  ... closed at one TP degree only: c: TP 1 ") and "e: TP 1 " in line
    assert rep.to_json()["term_leverage_by_tp_mape_pct"] == by_tp


def test_rows_of_two_widths_are_fitted_apart(tmp_path):
    """A table with two model widths (vTrain's own file holds hidden 1024 and 2048 runs of one grid): each width's
    rows are fitted on their own, so each recovers its own closed form, and the lines name the width."""
    rows = ["row_id,num_gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,step_time_s"]
    for h, (L, gb) in itertools.product((1024, 2048), itertools.product((12, 16, 20, 24), (4, 8, 16, 32))):
        rows.append(f"r{h}_{L}_{gb},2,{gb},2,{h},16,{L},1024,2,1,1,1.0")
    path = tmp_path / "two_widths.csv"
    path.write_text("\n".join(rows) + "\n")

    def predict(s):  # each width its own per-block cost
        e = E if s.model.hidden == 1024 else 2 * E
        m = s.training.global_batch / (s.dp * s.training.micro_batch)
        return Fixed(A + B * s.model.num_layers + C * m + e * m * s.model.num_layers)

    groups = step_structure(validate(load_dataset(str(path)), predict_fn=predict))
    assert sorted((g.hidden, g.rows) for g in groups) == [(1024, 16), (2048, 16)]
    for g in groups:
        assert g.predicted.per_layer_microbatch_s == pytest.approx(E if g.hidden == 1024 else 2 * E)
    assert [line.split(" (")[0] for line in render_structure(groups)[3:5]] == [
        "  hidden 1024, TP 2, micro-batch 2", "  hidden 2048, TP 2, micro-batch 2"]
