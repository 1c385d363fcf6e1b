"""The validation tables trainsim does not bundle (parsed from fetched repositories): where each lies, and why a
dataset that reads one cannot be loaded here."""

from __future__ import annotations

from pathlib import Path

from trainsim.data import VALIDATION_DIR_ENV, external_validation_path
from trainsim.specs import SpecError

# Datasets whose tables are parsed from fetched repositories and so not bundled (trainsim.data).
EXTERNAL_DATASETS = {"mosaic": "mosaic_mpt_benchmarks.csv", "nemo": "nemo_megatron_bridge_perf.csv",
                     "vtrain": "vtrain_a100_single_node.csv"}


def external_table(dataset: str, file: str) -> Path:
    """Where the unbundled table of ``dataset`` lies; SpecError naming the ways to supply it when absent."""
    found = external_validation_path(file)
    if found is None:
        raise SpecError("dataset", f"{dataset} reads {file}, which trainsim does not bundle (parsed from a "
                                   f"fetched repository): set {VALIDATION_DIR_ENV} to the "
                                   f"directory that holds it, or pass --dataset PATH")
    return found


def missing_external(name: str) -> str | None:
    """Why bundled dataset ``name`` cannot be loaded here (its table is absent), or None."""
    file = EXTERNAL_DATASETS.get(name)
    if file is None or external_validation_path(file) is not None:
        return None
    return f"{name}: {file} not found (not bundled; set TRAINSIM_VALIDATION_DIR)"
