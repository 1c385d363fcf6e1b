"""The one reader of the per-recipe settings tables (trainsim/data/validation/settings/*.csv).

A published table rarely prints everything a run was configured with: the NeMo (Megatron-Bridge) summaries do
not print a row's recompute modules or EP all-to-all overlap, MosaicML's do not name the network, SC21's Table 1
leaves the micro-batch open. What trainsim sets for such a value is a fact about the recipe, so it lives in a
settings CSV keyed by the recipe's identity (model, system, precision, release range, row id ...), which the
dataset adapters join to the published rows. Every settings row states, besides its key and values:

* ``rule``: the rule that set the value (e.g. "the config of the row's release"), and
* ``source``: where the value was read (file, commit, pull request, paper section).

``read_settings`` refuses a table whose key columns or provenance are missing or whose keys repeat, so a
malformed table stops the loader with the file and row named instead of silently changing a prediction.
"""

from __future__ import annotations

from types import MappingProxyType

from trainsim.data import validation_path
from trainsim.specs import SpecError
from trainsim.specs.memo import memoised
from trainsim.specs.safe_read import read_csv_rows

SETTINGS_DIR = "settings"
PROVENANCE = ("rule", "source")

# file -> the columns that identify a row (unique within the file).
SETTINGS_KEYS: dict[str, tuple[str, ...]] = {
    "nemo_systems.csv": ("system",),
    "nemo_models.csv": ("table_model",),
    "nemo_mtp_labels.csv": ("label",),
    "nemo_pipeline_layouts.csv": ("table_model", "pp", "vp"),
    "nemo_activation_offload.csv": ("table_model", "system"),
    "nemo_ep_overlap.csv": ("table_model", "system", "precision_class", "first_release", "last_release"),
    "nemo_ep_overlap_undated.csv": ("table_model", "system", "precision", "release"),
    "nemo_fused_grouped_mlp.csv": ("table_model", "system", "precision_class", "first_release", "last_release"),
    "nemo_moe_dispatcher.csv": ("table_model", "system", "precision_class", "first_release", "last_release"),
    "nemo_recompute_modules.csv": ("table_model", "system", "precision_class", "first_release", "last_release"),
    "nemo_lora.csv": ("table_model", "first_release", "last_release"),
    "nemo_skipped_runs.csv": ("table_model", "system", "precision", "release"),
    "mosaic_gpus.csv": ("gpu", "precision"),
    "sc21_scripts.csv": ("row_id", "layers"),
    "nccl_systems.csv": ("system",),
}


def settings_file(name: str):
    """Path of a bundled settings table."""
    return validation_path(f"{SETTINGS_DIR}/{name}")


@memoised(maxsize=64)
def read_settings(name: str) -> tuple[MappingProxyType, ...]:
    """The rows of bundled settings table ``name``, checked by ``checked_rows``; read-only mappings."""
    keys = SETTINGS_KEYS.get(name)
    if keys is None:
        raise SpecError("settings", f"unknown settings table {name!r} (known: {', '.join(SETTINGS_KEYS)})")
    rows = checked_rows(read_csv_rows(settings_file(name), "settings"), name, keys)
    return tuple(MappingProxyType(r) for r in rows)


def checked_rows(raw: list[dict], name: str, keys: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of a settings table with every cell stripped; SpecError naming the file and line unless the key
    and provenance columns are present and filled in every row (a key column may be empty where the row is keyed
    by another one) and no key repeats."""
    rows = [{k: (v or "").strip() for k, v in r.items() if k is not None} for r in raw]
    missing = [c for c in keys + PROVENANCE if rows and c not in rows[0]]
    if not rows or missing:
        raise SpecError("settings", f"{name}: " + (f"no column {', '.join(missing)}" if missing else "no rows"))
    seen: dict[tuple[str, ...], int] = {}
    for i, r in enumerate(rows, start=2):
        empty = [c for c in PROVENANCE if not r[c]]
        if empty or not any(r[k] for k in keys):
            raise SpecError("settings", f"{name} line {i}: {', '.join(empty) or 'key'} must not be empty")
        key = tuple(r[k] for k in keys)
        if key in seen:
            raise SpecError("settings", f"{name} line {i}: key {key} repeats line {seen[key]}")
        seen[key] = i
    return rows


def whole(row, column: str) -> int | None:
    """A settings cell as a whole number >= 0, None when empty; SpecError naming the column otherwise."""
    text = row[column]
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise SpecError("settings", f"{column}: must be a whole number >= 0, got {text!r}")
    return int(text)
