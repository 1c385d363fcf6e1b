"""The dataset registry: every published-run dataset trainsim validates against, by name, and the loader of a
CSV given by path (its schema detected by its columns).

Each dataset is read by its adapter module: the rows of its CSV become ``Case``s (trainsim/validation/cases.py),
and what a source does not print is set by one documented rule per dataset or joined from the recipe settings
tables of trainsim/data/validation/settings/ (read by trainsim/validation/settings.py):

* common_run_cases: the one loader of the common run schema: SC21 Tables 1-2 (``sc21``, ``sc21-scripts``),
  Llama 3 405B, Korthikanti et al. 2022 (``korthikanti``: its recipe in the CSV's explicit columns, its MFU
  formula in korthikanti.py), the zero-bubble paper (``zero-bubble``: its recipe in zero_bubble_2024.csv, its
  samples/s metric and ratio to 1F1B in zero_bubble.py), the AMSP paper's ZeRO runs from 8 to 1,024 GPUs (``amsp``:
  MFU-derived step times and each layout's slowdown, amsp.py) and any common-run-schema CSV;
* nccl_runs: nccl-tests busbw (a table of its own shape);
* mosaic, nemo (+ nemo_recipes), vtrain: tables parsed from fetched repositories, read from
  $TRAINSIM_VALIDATION_DIR (external_tables), never bundled;
* memory_runs: measured peak memory of published runs.

The names below are re-exported for importers of this module (the shapes, the loaders and the one formula each
source's metric needs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainsim.cost_models.collectives import busbw_factor
from trainsim.data import validation_path
from trainsim.specs import SpecError
from trainsim.specs.errors import did_you_mean
from trainsim.specs.memo import in_memo_scope
from trainsim.validation import vtrain
from trainsim.validation.amsp import load_amsp
from trainsim.validation.cases import Case, CollectiveCase, Dataset, read_rows
from trainsim.validation.common_run_cases import load_common_runs, load_llama3, sc21_eq3_flops
from trainsim.validation.dataset_checks import range_checked
from trainsim.validation.external_tables import EXTERNAL_DATASETS, external_table, missing_external
from trainsim.validation.korthikanti import korthikanti_model_flops, load_korthikanti
from trainsim.validation.memory_runs import load_memory
from trainsim.validation.mosaic import load_mosaic, mosaic_flops_per_seq, mosaic_peak_flops
from trainsim.validation.nccl_runs import load_nccl
from trainsim.validation.nemo import load_nemo, nemo_llama_flops_per_token
from trainsim.validation.zero_bubble import load_zero_bubble

__all__ = [
    "DATASETS",
    "DATASET_CSV",
    "EXTERNAL_DATASETS",
    "SECONDARY_DATASETS",
    "Case",
    "CollectiveCase",
    "Dataset",
    "busbw_factor",
    "dataset_csv",
    "dataset_names",
    "external_table",
    "korthikanti_model_flops",
    "load_amsp",
    "load_common_runs",
    "load_dataset",
    "load_korthikanti",
    "load_llama3",
    "load_mosaic",
    "load_nccl",
    "load_nemo",
    "load_zero_bubble",
    "missing_external",
    "mosaic_flops_per_seq",
    "mosaic_peak_flops",
    "nemo_llama_flops_per_token",
    "sc21_eq3_flops",
]

# --- registry ------------------------------------------------------------------------------------------

def _sc21(unknowns: str) -> Callable[[], Dataset]:
    def load() -> Dataset:
        return load_common_runs(validation_path("megatron_sc21_table1.csv"),
                                name="sc21" if unknowns == "blind" else "sc21-scripts", unknowns=unknowns)
    return load


# Secondary datasets (not in `validate --dataset all`): the same rows under other documented choices.
SECONDARY_DATASETS = ("sc21-scripts",)

DATASETS: dict[str, Callable[[], Dataset]] = {
    "sc21": _sc21("blind"),
    "sc21-scripts": _sc21("scripts"),
    "mosaic": load_mosaic,
    "zero-bubble": load_zero_bubble,
    "nccl": load_nccl,
    "nemo": load_nemo,
    "korthikanti": load_korthikanti,
    "llama3": load_llama3,
    "memory": load_memory,
    "amsp": load_amsp,
    "vtrain": lambda: vtrain.load_vtrain(external_table("vtrain", vtrain.VTRAIN_FILE), name="vtrain"),
}


def dataset_names() -> list[str]:
    """Names of the datasets ``validate --dataset`` knows (DATASETS)."""
    return list(DATASETS)


# The CSV each bundled dataset reads (its numeric cells are range-checked by dataset_checks).
DATASET_CSV = {"sc21": "megatron_sc21_table1.csv", "sc21-scripts": "megatron_sc21_table1.csv",
               "mosaic": "mosaic_mpt_benchmarks.csv", "zero-bubble": "zero_bubble_2024.csv", "nccl": "nccl_busbw.csv",
               "nemo": "nemo_megatron_bridge_perf.csv", "korthikanti": "korthikanti_2022.csv",
               "llama3": "llama3_2024.csv", "memory": "memory_runs.csv",
               "amsp": "amsp_2023.csv"}


def dataset_csv(name: str) -> Path:
    """The CSV a named dataset reads: bundled, or an unbundled table from TRAINSIM_VALIDATION_DIR."""
    if name in EXTERNAL_DATASETS:
        return external_table(name, EXTERNAL_DATASETS[name])
    return validation_path(DATASET_CSV[name])


@in_memo_scope  # the settings tables read once per load (specs.memo), or once per the caller's scope
def load_dataset(name_or_path: str) -> Dataset:
    """A bundled dataset by name, or a CSV file in one of the bundled schemas (detected by its columns); every
    row with a negative or non-finite number, or a non-positive published value, is skipped with that reason."""
    if name_or_path in DATASETS:
        ds = DATASETS[name_or_path]()
        return range_checked(ds, read_rows(dataset_csv(name_or_path)))
    p = Path(name_or_path)
    if not p.is_file():
        raise SpecError("dataset", f"unknown dataset {name_or_path!r}{did_you_mean(name_or_path, DATASETS)} "
                                   f"(known: {', '.join(DATASETS)}; or a CSV path)")
    rows = read_rows(p, ragged=True)  # the vTrain reader skips a ragged row by itself; every other refuses the file
    cols = set(rows[0]) if rows else set()
    if vtrain.is_vtrain_raw(cols):  # a vTrain repository table as published; range reasons name its columns
        if "row_id" in cols:  # a table with ids of its own keeps them: each must name one row
            check_row_ids(p, rows)
        raw = vtrain.with_row_ids(rows)
        return range_checked(vtrain.load_vtrain(p, name=p.stem, rows=vtrain.from_raw(raw)), raw)
    if cols & vtrain.RAW_HEADER and "row_id" not in cols:
        missing = ", ".join(map(repr, sorted(vtrain.RAW_HEADER - cols)))
        raise SpecError("dataset", f"{p}: a vTrain table without the column(s) {missing}")
    return range_checked(_load_csv_dataset(p), rows)


def check_row_ids(p: Path, rows: list[dict]) -> None:
    """SpecError when a row's ``row_id`` is empty or repeats an earlier row's: rows are told apart by it (results,
    skips, calibrate's runs)."""
    first: dict[str, int] = {}
    for line, row in enumerate(rows, 2):
        rid = (row.get("row_id") or "").strip()
        if not rid:
            raise SpecError("dataset", f"{p}: row {line} has an empty row_id")
        if rid in first:
            raise SpecError("dataset", f"{p}: row_id {rid!r} at row {line} repeats row {first[rid]}")
        first[rid] = line


def _load_csv_dataset(p: Path) -> Dataset:
    rows = read_rows(p)
    cols = set(rows[0]) if rows else set()
    if not rows:
        raise SpecError("dataset", f"{p} has no rows")
    if "row_id" not in cols:
        hint = next((f" (its header holds {name}: the columns are separated by commas, not {name}s)"
                     for sep, name in ((";", "';'"), ("\t", "a tab")) if any(sep in c for c in cols)), "")
        raise SpecError("dataset", f"{p} has no row_id column{hint}")
    check_row_ids(p, rows)
    if {"throughput_tok_per_s", "fsdp_sharding_strategy"} <= cols:
        return load_mosaic(p, name=p.stem)
    if {"peak_memory_gib", "memory_metric"} <= cols:
        return load_memory(p, name=p.stem)
    if "samples_per_gpu_per_s" in cols and "num_stages_p" in cols:
        raise SpecError("dataset", f"{p}: pipeline_bubble.csv's shape; write the runs in the common run schema "
                                   "(as trainsim/data/validation/zero_bubble_2024.csv) with samples_per_gpu_per_s")
    if "samples_per_gpu_per_s" in cols:
        return load_zero_bubble(p, name=p.stem)
    if {"tokens_per_s_per_gpu", "model_tflops_per_gpu", "nemo_container"} <= cols:
        return load_nemo(p, name=p.stem)
    if "busbw_GBps" in cols:
        return load_nccl(p, name=p.stem)
    if vtrain.is_vtrain(cols):
        return vtrain.load_vtrain(p, name=p.stem)
    if {"step_time_s", "num_gpus", "layers", "hidden", "heads", "global_batch_seqs"} <= cols:
        return load_common_runs(p, name=p.stem, unknowns="blind")
    raise SpecError("dataset", f"{p}: columns match none of the known schemas (common run schema, MosaicML, "
                               "zero-bubble, nccl-tests)")

