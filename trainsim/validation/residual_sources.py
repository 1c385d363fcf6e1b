"""The published runs behind the stored interval table, as (source, residual, features) rows.

Sources: each bundled dataset is one source (SC21, Korthikanti et al., Llama 3, zero-bubble), the MosaicML
and Megatron-Bridge tables from the directory in TRAINSIM_VALIDATION_DIR (not bundled: parsed from fetched repositories), and
docs/probe_runs.csv split by its ``publication`` column: the document a row comes from. The hierarchical band
treats sources as exchangeable units, rows of one source as not (one stack, one measurement habit); the tables
of one document share both (torchtitan's Llama 2 and Llama 3 tables, the DGXC BF16 and FP8 tables), so they are
one source, not one per table.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from pathlib import Path

from trainsim.validation.cases import Dataset
from trainsim.validation.common_run_cases import load_common_runs
from trainsim.validation.datasets import load_dataset
from trainsim.validation.intervals import scenario_features
from trainsim.validation.measured_runs import step_time_of
from trainsim.validation.mosaic import load_mosaic
from trainsim.validation.nemo import load_nemo

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "validation"


def datasets() -> dict[str, Callable[[], Dataset]]:
    """Source name -> loader of the dataset it comes from (probe runs are split by row afterwards)."""
    out: dict[str, Callable[[], Dataset]] = {
        "probe": lambda: load_common_runs(REPO / "docs" / "probe_runs.csv", name="probe_runs"),
        "sc21": lambda: load_dataset("sc21"),
        "korthikanti": lambda: load_dataset("korthikanti"),
        "zero-bubble": lambda: load_dataset("zero-bubble"),
        "llama3": lambda: load_dataset("llama3"),
    }
    if (SHARED / "mosaic_mpt_benchmarks.csv").is_file():
        out["mosaic"] = lambda: load_mosaic(SHARED / "mosaic_mpt_benchmarks.csv")
    if (SHARED / "nemo_megatron_bridge_perf.csv").is_file():
        out["nemo"] = lambda: load_nemo(SHARED / "nemo_megatron_bridge_perf.csv")
    return out


def probe_publications() -> dict[str, str]:
    """row_id -> publication of every row of docs/probe_runs.csv."""
    with open(REPO / "docs" / "probe_runs.csv", newline="", encoding="utf-8") as f:
        return {r["row_id"]: r["publication"].strip() for r in csv.DictReader(f)}


def source_of(name: str, case, publications: dict[str, str]) -> str:
    """The interval table's source of a dataset's case: the dataset, or for the probe rows their publication
    (``publications``: probe_publications())."""
    return f"probe: {publications[case.row_id]}" if name == "probe" else name


def residual_rows(name: str, ds: Dataset, predict_step: Callable) -> list[tuple[str, float, dict, str]]:
    """(source, ln(measured/predicted step), features, row_id) of every costable row of ``ds``."""
    rows, pubs = [], probe_publications() if name == "probe" else {}
    for c in ds.active:
        if not (math.isfinite(c.published) and c.published > 0):
            continue
        try:
            pred = predict_step(c.scenario)
        except (ValueError, NotImplementedError):
            continue
        if not (math.isfinite(pred) and pred > 0):
            continue
        residual = math.log(step_time_of(c, ds.metric) / pred)
        rows.append((source_of(name, c, pubs), residual, scenario_features(c.scenario), c.row_id))
    return rows
