"""Predictions vs published runs: per-row error, MAPE and worst row, as a table or JSON.

``validate(dataset, predict_fn=..., collective_fn=...)`` is pure plumbing around two injected
predictors, so it is tested with stand-ins; by default they are trainsim's engine
(``trainsim.simulator.predict.predict``) and collective model (``trainsim.cost_models.collectives``).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainsim.cost_models.collectives import busbw_factor, collective_time, single_thread_issue_s
from trainsim.simulator.predict import predict
from trainsim.specs import Scenario, SpecError
from trainsim.topologies import group_of_ranks
from trainsim.validation.cases import Case, CollectiveCase, Dataset
from trainsim.validation.structure import (
    fit_regimes,
    leverage_by_tp,
    render_leverage,
    render_structure,
    step_structure,
    term_leverage,
)


class PredictionLike(Protocol):
    """What validate reads from a prediction."""

    step_time_s: float
    tokens_per_s: float


PredictFn = Callable[[Scenario], PredictionLike]
CollectiveFn = Callable[[CollectiveCase], float]  # -> seconds for the collective


@dataclass
class RowResult:
    """One compared (or skipped) row."""

    row_id: str
    label: str
    published: float
    predicted: float | None = None
    error_pct: float | None = None  # signed: (predicted - published) / published * 100
    secondary: dict[str, dict[str, float | None]] = field(default_factory=dict)
    fits: bool | None = None
    skipped: str | None = None
    breakdown_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"row_id": self.row_id, "label": self.label, "published": _clean(self.published)}
        if self.skipped:
            out["skipped"] = self.skipped
            return out
        out.update(predicted=self.predicted, error_pct=self.error_pct, fits=self.fits)
        if self.secondary:
            out["secondary"] = self.secondary
        return out


@dataclass(frozen=True)
class Bias:
    """How much of a dataset's error one uniform factor explains.

    ``bias_pct`` is the geometric mean of predicted / published, minus one (a signed percentage in the
    metric's own direction); ``mape_after_pct`` is the MAPE left once every prediction is divided by that
    factor. A large bias with a small remainder says the model's structure agrees with the runs and one
    throughput constant does not (e.g. a kernel efficiency); a small bias with a large remainder says the
    modelled effects themselves are off. A diagnostic only: the verdict stays the plain MAPE.
    """

    bias_pct: float
    mape_after_pct: float

    @classmethod
    def of(cls, rows: list[RowResult]) -> Bias | None:
        ratios = [r.predicted / r.published for r in rows
                  if r.predicted is not None and r.published and r.predicted > 0 and r.published > 0]
        if not ratios:
            return None
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        return cls((g - 1.0) * 100.0, sum(abs(x / g - 1.0) for x in ratios) / len(ratios) * 100.0)

    @staticmethod
    def fields(b: Bias | None) -> dict[str, float | None]:
        """The JSON keys of a bias (None values when there is none)."""
        return {"bias_pct": b.bias_pct if b else None, "mape_after_bias_pct": b.mape_after_pct if b else None}

    def text(self) -> str:
        return f"bias {self.bias_pct:+.1f}%, MAPE after bias {self.mape_after_pct:.2f}%"


@dataclass
class ValidationReport:
    """One dataset's rows, predicted against published, with the compared rows' MAPE and worst row."""

    dataset: Dataset
    rows: list[RowResult]

    @property
    def compared(self) -> list[RowResult]:
        return [r for r in self.rows if r.skipped is None and r.error_pct is not None]

    @property
    def skipped(self) -> list[RowResult]:
        return [r for r in self.rows if r.skipped is not None]

    @property
    def mape_pct(self) -> float | None:
        errs = [abs(r.error_pct) for r in self.compared]  # type: ignore[arg-type]
        return sum(errs) / len(errs) if errs else None

    @property
    def worst(self) -> RowResult | None:
        rows = self.compared
        return max(rows, key=lambda r: abs(r.error_pct)) if rows else None  # type: ignore[arg-type]

    @property
    def worst_pct(self) -> float | None:
        w = self.worst
        return abs(w.error_pct) if w else None  # type: ignore[arg-type]

    @property
    def bias(self) -> Bias | None:
        """The one uniform factor in the errors, and what is left around it (see ``Bias``)."""
        return Bias.of(self.compared)

    def secondary_mape(self) -> dict[str, float]:
        """MAPE of each secondary metric over the rows that have it."""
        acc: dict[str, list[float]] = {}
        for r in self.compared:
            for name, v in r.secondary.items():
                if v.get("error_pct") is not None:
                    acc.setdefault(name, []).append(abs(v["error_pct"]))  # type: ignore[arg-type]
        return {k: sum(v) / len(v) for k, v in acc.items()}

    def by_category(self) -> dict[str, dict[str, Any]]:
        """Rows, MAPE and worst row per case category (e.g. SC21 table, GPU type, message-size class)."""
        cats: dict[str, list[RowResult]] = {}
        cat_of = {c.row_id: c.category for c in self.dataset.cases}
        regimes_of = {c.row_id: c.regimes for c in self.dataset.cases}
        for r in self.compared:
            keys = [cat_of.get(r.row_id) or "all"]
            keys += [k for k in regimes_of.get(r.row_id, ()) if k not in keys]
            for key in keys:
                cats.setdefault(key, []).append(r)
        if any(regimes_of.values()):  # regimes read best in order: "micro-batch 1, 2, 4, 8", "TP 1 .. 8"
            cats = dict(sorted(cats.items(), key=lambda kv: _natural(kv[0])))
        return _group_stats(cats)

    def by_counter(self) -> dict[str, dict[str, Any]]:
        """Rows, MAPE and worst row per measured counter (Case.counter), counters in alphabetical order; empty
        where the dataset's cases name none."""
        counter_of = {c.row_id: c.counter for c in self.dataset.cases}
        groups: dict[str, list[RowResult]] = {}
        for r in self.compared:
            if counter_of.get(r.row_id):
                groups.setdefault(counter_of[r.row_id], []).append(r)
        return _group_stats(dict(sorted(groups.items())))

    def to_json(self) -> dict[str, Any]:
        d = self.dataset
        w = self.worst
        return {
            "dataset": d.name,
            "title": d.title,
            "metric": d.metric,
            "unit": d.unit,
            "citation": d.citation,
            "notes": list(d.notes),
            "rows": [r.to_json() for r in self.compared],
            "skipped": [{"row_id": r.row_id, "label": r.label, "reason": r.skipped} for r in self.skipped],
            "mape_pct": self.mape_pct,
            "worst_pct": self.worst_pct,
            "worst_row": w.row_id if w else None,
            **Bias.fields(self.bias),
            "secondary_mape_pct": self.secondary_mape(),
            "by_category": self.by_category(),
            "by_counter": self.by_counter(),
            **(self._structure_json() if d.structure else {}),
        }


    def _structure_json(self) -> dict[str, Any]:
        """The step-structure fields of ``to_json`` (validation.structure), every regime fitted once."""
        fitted = fit_regimes(self)
        return {"structure": [g.to_json() for g in step_structure(self, fitted)],
                "term_leverage_mape_pct": term_leverage(self, fitted=fitted),
                "term_leverage_by_tp_mape_pct": leverage_by_tp(self, fitted)}

def _group_stats(groups: dict[str, list[RowResult]]) -> dict[str, dict[str, Any]]:
    """Rows, MAPE, worst row and bias of each named group of compared rows."""
    out = {}
    for name, rows in groups.items():
        errs = [abs(r.error_pct) for r in rows]  # type: ignore[arg-type]
        w = max(rows, key=lambda r: abs(r.error_pct))  # type: ignore[arg-type]
        out[name] = {"rows": len(rows), "mape_pct": sum(errs) / len(errs), "worst_pct": abs(w.error_pct),
                     "worst_row": w.row_id, **Bias.fields(Bias.of(rows))}
    return out


def _natural(text: str) -> tuple:
    """Sort key that orders the numbers inside a label by value ("TP 2" before "TP 16")."""
    return tuple(int(t) if i % 2 else t for i, t in enumerate(re.split(r"([0-9]+)", text)))


def _clean(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def _error_pct(predicted: float, published: float) -> float:
    return (predicted - published) / published * 100.0


def default_predict_fn(*, fast: bool = False, profile: Any = None) -> PredictFn:
    """trainsim's engine (imported lazily so this module loads before the engine exists)."""
    def run(scenario: Scenario) -> PredictionLike:
        return predict(scenario, fast=fast, profile=profile)

    return run


def default_collective_fn(profile: Any = None) -> CollectiveFn:
    """trainsim's collective cost model over the group of all GPUs of the case's cluster."""
    def run(case: CollectiveCase) -> float:
        group = group_of_ranks(case.cluster, list(range(case.num_gpus)))
        t = float(collective_time(case.op, case.nbytes, group, case.cluster, algo=case.algo, profile=profile,
                                  nccl_version=case.nccl_version).time_s)
        return max(t, single_thread_issue_s(case.gpus_per_thread, case.host_cpu))

    return run


def _primary(metric: str, pred: PredictionLike, scenario: Scenario) -> float:
    if metric == "step_time_s":
        return float(pred.step_time_s)
    if metric == "tokens_per_s":
        return float(pred.tokens_per_s)
    if metric == "tokens_per_s_per_gpu":
        return float(pred.tokens_per_s) / scenario.num_gpus
    if metric == "samples_per_gpu_per_s":
        return float(pred.tokens_per_s) / scenario.training.seq_len / scenario.num_gpus
    raise ValueError(f"metric {metric} is not a step metric")


def _evaluate(case: Case, dataset: Dataset, predict_fn: PredictFn | None,
              collective_fn: CollectiveFn | None) -> RowResult:
    row = RowResult(case.row_id, case.label, case.published)
    if case.skip_reason:
        row.skipped = case.skip_reason
        return row
    try:
        if case.collective is not None:
            if collective_fn is None:
                row.skipped = "no collective model available"
                return row
            c = case.collective
            time_s = collective_fn(c)
            predicted = c.nbytes / time_s * busbw_factor(c.op, c.num_gpus) / 1e9
        else:
            assert case.scenario is not None
            if predict_fn is None:
                row.skipped = "no predictor available"
                return row
            pred = predict_fn(case.scenario)
            predicted = (case.value_fn(pred) if case.value_fn is not None
                         else _primary(dataset.metric, pred, case.scenario))
            fits = getattr(pred, "fits", None)
            row.fits = bool(fits) if fits is not None else None
            row.breakdown_s = dict(getattr(pred, "breakdown_s", {}) or {})
    except (SpecError, NotImplementedError) as e:
        row.skipped = f"cannot predict: {e}"
        return row
    if not (math.isfinite(predicted) and predicted > 0):
        row.skipped = f"prediction is not a positive number ({predicted})"
        return row
    row.predicted = predicted
    row.error_pct = _error_pct(predicted, case.published)
    for name, pub in case.secondary.items():
        fn = case.secondary_fns.get(name)
        p = fn(predicted) if fn else None
        row.secondary[name] = {"published": pub, "predicted": p,
                               "error_pct": _error_pct(p, pub) if (p is not None and pub) else None}
    return row


def validate(dataset: Dataset, *, predict_fn: PredictFn | None = None,
             collective_fn: CollectiveFn | None = None) -> ValidationReport:
    """Predict every row of ``dataset``; rows the predictors cannot handle become skipped rows."""
    rows = [_evaluate(c, dataset, predict_fn, collective_fn) for c in dataset.cases]
    _fill_group_ratios(dataset, rows)
    return ValidationReport(dataset, rows)


def _fill_group_ratios(dataset: Dataset, rows: list[RowResult]) -> None:
    """Zero-bubble: predicted throughput / predicted 1F1B throughput of the same group; scaling groups (amsp):
    predicted GPU-seconds per step over the group's smallest run's (``slowdown_vs_smallest``)."""
    _fill_slowdowns(dataset, rows)
    by_id = {c.row_id: c for c in dataset.cases}
    base: dict[str, float] = {}
    for r in rows:
        c = by_id[r.row_id]
        if c.group and r.predicted and r.label.endswith(" 1F1B"):
            base[c.group] = r.predicted
    for r in rows:
        c = by_id[r.row_id]
        sec = r.secondary if r.skipped is None else None
        if sec is None or "ratio_to_1f1b" not in c.secondary:
            continue
        pub = c.secondary["ratio_to_1f1b"]
        b = base.get(c.group or "")
        p = (r.predicted / b) if (b and r.predicted) else None
        sec["ratio_to_1f1b"] = {"published": pub, "predicted": p,
                                "error_pct": _error_pct(p, pub) if p is not None else None}


def _fill_slowdowns(dataset: Dataset, rows: list[RowResult]) -> None:
    """``slowdown_vs_smallest``: (predicted step x GPUs) / (the same for the group's run on the fewest GPUs)."""
    by_id = {c.row_id: c for c in dataset.cases}
    base: dict[str, tuple[int, float]] = {}
    for r in rows:
        c = by_id[r.row_id]
        if c.group and r.predicted and c.scenario is not None:
            n = c.scenario.num_gpus
            if c.group not in base or n < base[c.group][0]:
                base[c.group] = (n, r.predicted * n)
    for r in rows:
        c = by_id[r.row_id]
        if r.skipped is not None or "slowdown_vs_smallest" not in c.secondary or c.scenario is None:
            continue
        pub, b = c.secondary["slowdown_vs_smallest"], base.get(c.group or "")
        p = r.predicted * c.scenario.num_gpus / b[1] if (b and r.predicted) else None
        r.secondary["slowdown_vs_smallest"] = {"published": pub, "predicted": p,
                                               "error_pct": _error_pct(p, pub) if p is not None else None}


# --- rendering -----------------------------------------------------------------------------------

def _fmt(x: float | None, unit: str) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if unit in ("tok/s",):
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:,.1f}"
    if abs(x) >= 1:
        return f"{x:.3f}"
    return f"{x:.4g}"


def render_text(report: ValidationReport, *, show_skipped: bool = True, width: int = 120) -> str:
    """The table `trainsim validate` prints (rich, rendered to plain text so it can be pasted)."""
    from rich.console import Console
    from rich.table import Table

    d = report.dataset
    # markup and emoji codes off: row ids, labels and names come from the user's files (reports/console.py)
    console = Console(width=width, record=True, force_terminal=False, color_system=None, file=io.StringIO(),
                      markup=False, emoji=False)
    table = Table(title=f"{d.title}: published vs predicted {d.metric} [{d.unit}]", title_justify="left")
    table.add_column("row_id")
    table.add_column("run")
    table.add_column("published", justify="right")
    table.add_column("predicted", justify="right")
    table.add_column("error", justify="right")
    sec_names = sorted({k for r in report.compared for k in r.secondary})
    for name in sec_names:
        table.add_column(f"{name} pub/pred", justify="right")
    table.add_column("fits", justify="center")
    for r in report.compared:
        cells = [r.row_id, r.label, _fmt(r.published, d.unit), _fmt(r.predicted, d.unit), f"{r.error_pct:+.1f}%"]
        for name in sec_names:
            v = r.secondary.get(name)
            cells.append("-" if not v else f"{_fmt(v['published'], '')} / {_fmt(v['predicted'], '')}")
        cells.append("" if r.fits is None else ("yes" if r.fits else "NO"))
        table.add_row(*cells)
    console.print(table)
    mape, worst = report.mape_pct, report.worst
    if mape is None:
        console.print(f"{d.name}: no rows compared")
    else:
        bias = report.bias
        console.print(f"{d.name}: {len(report.compared)} rows, MAPE {mape:.2f}%, worst {abs(worst.error_pct):.2f}% "  # type: ignore[union-attr]
                      f"({worst.row_id})" + (f"; {bias.text()}" if bias else ""))  # type: ignore[union-attr]
        cats = report.by_category()
        if len(cats) > 1:
            for name, v in cats.items():
                cat_bias = ("; " + Bias(v["bias_pct"], v["mape_after_bias_pct"]).text()
                            if v["bias_pct"] is not None else "")
                console.print(f"  {name}: {v['rows']} rows, MAPE {v['mape_pct']:.2f}%, worst {v['worst_pct']:.2f}% "
                              f"({v['worst_row']}){cat_bias}")
        counters = report.by_counter()  # one line; rows, worst row and bias per counter in --json (by_counter)
        if counters:
            console.print("  MAPE by counter: " + ", ".join(f"{k} {v['mape_pct']:.2f}%" for k, v in counters.items()))
        for name, v in report.secondary_mape().items():
            console.print(f"  {name} (source basis) MAPE {v:.2f}%")
        if d.structure:
            fitted = fit_regimes(report)
            for line in render_structure(step_structure(report, fitted)):
                console.print(line)
            for line in render_leverage(term_leverage(report, fitted=fitted), report.mape_pct,
                                        leverage_by_tp(report, fitted)):
                console.print(line)
    if show_skipped and report.skipped:
        console.print(f"skipped {len(report.skipped)} rows:")
        for r in report.skipped:
            console.print(f"  {r.row_id}: {r.skipped}")
    console.print("assumptions:")
    for n in d.notes:
        console.print(f"  - {n}")
    console.print(f"source: {d.citation}")
    return console.export_text()
