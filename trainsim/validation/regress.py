"""Regression of predictions against a stored baseline, for CI: nothing moves silently.

A suite is a set of scenario files (a directory of YAML/JSON, or a YAML list of paths). ``snapshot``
predicts each and keeps every reported metric; ``compare`` diffs two snapshots with a relative tolerance
and reports what moved, what was added and what was removed.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainsim import SCHEMA_VERSION, __version__
from trainsim.specs import Scenario, SpecError, build_scenario, load_scenario_file
from trainsim.specs.loaders import read_mapping
from trainsim.specs.safe_read import not_a_file, parse_yaml, read_text
from trainsim.specs.safe_write import write_atomic

BASELINE_KIND = "trainsim-regress-baseline"
SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")
# Absolute floors below which a difference is noise, by unit of the metric (relative tolerance alone
# would flag 1e-12 s of exposed communication moving to 2e-12 s).
ATOL = {"s": 1e-9, "frac": 1e-9, "bytes": 1.0, "tok/s": 1e-6, "TFLOP/s": 1e-9}


@dataclass(frozen=True)
class Drift:
    """One metric of one scenario whose current value differs from the baseline beyond the tolerance."""

    scenario: str
    metric: str
    baseline: Any
    current: Any

    @property
    def change_pct(self) -> float | None:
        """The change in percent of the baseline (None for a non-numeric metric)."""
        b, c = self.baseline, self.current
        if isinstance(b, bool) or isinstance(c, bool) or not isinstance(b, (int, float)) or not isinstance(c, (int, float)):
            return None
        if b == 0:
            return math.inf if c != 0 else 0.0
        return (c - b) / abs(b) * 100.0


@dataclass
class Comparison:
    """Predictions against a baseline: the drifts, the scenarios added and removed, and what was compared."""

    drifts: list[Drift]
    added: list[str]
    removed: list[str]
    compared: int
    metrics_checked: int

    @property
    def ok(self) -> bool:
        """No drift and the same scenarios as the baseline."""
        return not (self.drifts or self.added or self.removed)


# --- suites -------------------------------------------------------------------------------------

def suite_paths(suite: str | os.PathLike) -> list[tuple[str, Path]]:
    """(name, path) of every scenario in a suite; names are paths relative to the suite's directory."""
    p = Path(suite)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.suffix.lower() in SCENARIO_SUFFIXES and f.is_file())
        if not files:
            raise SpecError("suite", f"{p} holds no scenario files (*.yaml, *.yml, *.json)")
        return [(f.relative_to(p).as_posix(), f) for f in files]
    if not p.is_file():
        raise SpecError("suite", f"no such directory or file: {p}")
    data = parse_yaml(read_text(p, "suite"), "suite", str(p))
    if isinstance(data, dict) and "scenarios" in data:
        data = data["scenarios"]
    if not isinstance(data, list) or not data or not all(isinstance(x, str) for x in data):
        raise SpecError("suite", f"{p} must be a YAML list of scenario paths (or {{scenarios: [...]}})")
    out = []
    for item in data:
        f = (p.parent / item) if not os.path.isabs(item) else Path(item)
        if (why := not_a_file(f)) is not None:
            raise SpecError("suite", f"{p} lists {item!r}: {why}")
        out.append((Path(item).as_posix(), f))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise SpecError("suite", f"{p} lists a scenario twice")
    return out


def load_suite(suite: str | os.PathLike) -> list[tuple[str, Scenario]]:
    """Resolve every scenario of a suite; a bad file is a SpecError naming the file."""
    out = []
    for name, path in suite_paths(suite):
        try:
            out.append((name, build_scenario(load_scenario_file(path))))
        except SpecError as e:
            raise SpecError(f"suite[{name}].{e.field}", e.reason) from None
    return out


# --- metrics ------------------------------------------------------------------------------------

# (metric, unit) in the order the drift table shows them.
METRIC_UNITS: dict[str, str] = {
    "step_time_s": "s", "tokens_per_s": "tok/s", "mfu": "frac", "hfu": "frac",
    "model_tflops_per_gpu": "TFLOP/s", "hardware_tflops_per_gpu": "TFLOP/s", "bubble_fraction": "frac",
    "exposed_comm_s.tp": "s", "exposed_comm_s.pp": "s", "exposed_comm_s.dp": "s", "exposed_comm_s.cp": "s",
    "exposed_comm_s.ep": "s", "peak_bytes": "bytes", "fits": "bool",
}


def metrics_of(pred: Any) -> dict[str, Any]:
    """The regress metrics of one Prediction (or its JSON dict)."""
    j = pred.to_json() if hasattr(pred, "to_json") else dict(pred)
    out: dict[str, Any] = {}
    for k in ("step_time_s", "tokens_per_s", "mfu", "hfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
              "bubble_fraction"):
        out[k] = float(j[k])
    for dim in ("tp", "pp", "dp", "cp", "ep"):
        out[f"exposed_comm_s.{dim}"] = float((j.get("exposed_comm_s") or {}).get(dim, 0.0))
    out["peak_bytes"] = float(j["memory"]["peak_bytes"])
    out["fits"] = bool(j["fits"])
    return out


def snapshot(scenarios: Iterable[tuple[str, Scenario]], predict_fn: Callable[[Scenario], Any],
             options: dict | None = None) -> dict[str, Any]:
    """Predict each scenario and return the baseline document."""
    return {
        "kind": BASELINE_KIND,
        "schema_version": SCHEMA_VERSION,
        "trainsim_version": __version__,
        "options": dict(options or {}),
        "scenarios": {name: metrics_of(predict_fn(sc)) for name, sc in scenarios},
    }


def load_baseline(path: str | os.PathLike) -> dict[str, Any]:
    """A regress baseline, checked: its kind and every scenario's metrics; SpecError otherwise."""
    p = Path(path)
    if (why := not_a_file(p)) is not None:
        raise SpecError("baseline", why + (" (create it with --update)" if not p.exists() else ""))
    data = read_mapping(p, "baseline")  # size limit, UTF-8, JSON/YAML errors as one line
    if data.get("kind") != BASELINE_KIND or not isinstance(data.get("scenarios"), dict):
        raise SpecError("baseline", f"{p} is not a trainsim regress baseline (kind {BASELINE_KIND!r})")
    version = data.get("schema_version", SCHEMA_VERSION)  # written by every snapshot; a hand-made file may omit it
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise SpecError("baseline.schema_version", f"{version!r}: this trainsim reads schema version {SCHEMA_VERSION} "
                        "(re-create the baseline with --update)")
    # Every scenario's entry must be a mapping of metric -> number/bool (a hand-edited or corrupted file
    # otherwise crashed the comparison with TypeError/ValueError).
    for name, metrics in data["scenarios"].items():
        if not isinstance(metrics, dict):
            raise SpecError(f"baseline.scenarios.{name}", f"must be a mapping of metrics, got {type(metrics).__name__}")
        for metric, value in metrics.items():
            if METRIC_UNITS.get(metric) == "bool":
                if not isinstance(value, bool):  # 1 would compare equal to true
                    raise SpecError(f"baseline.scenarios.{name}.{metric}", f"must be true or false, got {value!r}")
            elif (isinstance(value, bool) or not isinstance(value, (int, float))
                  or (isinstance(value, float) and not math.isfinite(value))):
                raise SpecError(f"baseline.scenarios.{name}.{metric}", f"must be a finite number, got {value!r}")
    options = data.get("options", {})
    if not isinstance(options, dict) or set(options) - {"fast"} or not all(isinstance(v, bool) for v in options.values()):
        raise SpecError("baseline.options", f"must be {{fast: true|false}} as --update writes it, got {options!r}")
    return data


def save_baseline(doc: dict[str, Any], path: str | os.PathLike) -> None:
    """Write a baseline as sorted, indented JSON, atomically."""
    write_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", "baseline")


def _same(metric: str, b: Any, c: Any, rtol: float) -> bool:
    unit = METRIC_UNITS.get(metric, "")
    if unit == "bool" or isinstance(b, bool) or isinstance(c, bool):
        return b == c
    if not isinstance(b, (int, float)) or not isinstance(c, (int, float)):
        return b == c
    if math.isnan(b) or math.isnan(c):
        return math.isnan(b) and math.isnan(c)
    if math.isinf(b) or math.isinf(c):
        return b == c
    return abs(c - b) <= max(rtol * max(abs(b), abs(c)), ATOL.get(unit, 0.0))


def compare(baseline: dict[str, Any], current: dict[str, Any], rtol: float = 1e-6) -> Comparison:
    """Every metric of every scenario in both; scenarios or metrics present in only one are reported."""
    bs, cs = baseline["scenarios"], current["scenarios"]
    drifts: list[Drift] = []
    checked = 0
    for name in sorted(set(bs) & set(cs)):
        b, c = bs[name], cs[name]
        for metric in list(METRIC_UNITS) + sorted((set(b) | set(c)) - set(METRIC_UNITS)):
            if metric not in b and metric not in c:
                continue
            checked += 1
            if metric not in b or metric not in c or not _same(metric, b[metric], c[metric], rtol):
                drifts.append(Drift(name, metric, b.get(metric), c.get(metric)))
    return Comparison(drifts=drifts, added=sorted(set(cs) - set(bs)), removed=sorted(set(bs) - set(cs)),
                      compared=len(set(bs) & set(cs)), metrics_checked=checked)


# --- rendering ------------------------------------------------------------------------------------

def _fmt(metric: str, v: Any) -> str:
    if v is None:
        return "(absent)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    unit = METRIC_UNITS.get(metric, "")
    if unit == "bytes":
        return f"{v / 1e9:.3f} GB"
    if unit == "frac":
        return f"{v:.4f}"
    if unit == "s":
        return f"{v:.6g} s"
    return f"{v:.6g}"


def render_comparison(cmp: Comparison, rtol: float, width: int = 120) -> str:
    """A table of what moved and by how much, plus added/removed scenarios."""
    from rich.console import Console
    from rich.table import Table

    # markup and emoji codes off: row ids, labels and names come from the user's files (reports/console.py)
    console = Console(width=width, record=True, force_terminal=False, color_system=None, file=io.StringIO(),
                      markup=False, emoji=False)
    if cmp.drifts:
        table = Table(title=f"prediction drift (rtol {rtol:g})", title_justify="left")
        for col, just in (("scenario", "left"), ("metric", "left"), ("baseline", "right"), ("current", "right"),
                          ("change", "right")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for d in cmp.drifts:
            ch = d.change_pct
            table.add_row(d.scenario, d.metric, _fmt(d.metric, d.baseline), _fmt(d.metric, d.current),
                          "-" if ch is None else ("inf" if math.isinf(ch) else f"{ch:+.3f}%"))
        console.print(table)
    for name in cmp.added:
        console.print(f"added (not in baseline): {name}")
    for name in cmp.removed:
        console.print(f"removed (in baseline, not in suite): {name}")
    if cmp.ok:
        console.print(f"no drift: {cmp.compared} scenarios, {cmp.metrics_checked} metrics within rtol {rtol:g}")
    else:
        moved = len({d.scenario for d in cmp.drifts})
        console.print(f"DRIFT: {len(cmp.drifts)} metrics moved in {moved} of {cmp.compared} scenarios; "
                      f"{len(cmp.added)} added, {len(cmp.removed)} removed. If intended, rerun with --update "
                      "and commit the new baseline.")
    return console.export_text()
