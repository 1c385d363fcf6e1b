"""The per-recipe settings tables (trainsim/data/validation/settings/*.csv) are well-formed: every row names the rule
that set its values and the source they were read from, keys are unique, values are in range (presets exist,
releases are ordered, release ranges of one recipe do not overlap, pipeline layouts split the model's layers), and
the dataset registry stays a registry (under 300 lines) with the adapters beside it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainsim.specs import SpecError, load_model, preset
from trainsim.specs.training import RECOMPUTE_MODULES
from trainsim.validation import datasets, settings
from trainsim.validation.nemo_recipes import nemo_release, parse_pipeline_layout
from trainsim.validation.settings import SETTINGS_KEYS, checked_rows, read_settings, whole

SETTINGS_DIR = Path(settings.__file__).resolve().parents[1] / "data" / "validation" / "settings"
RANGED = ("nemo_ep_overlap.csv", "nemo_recompute_modules.csv")
PRECISION_CLASSES = {"any", "mx", "bf16"}


def test_every_settings_file_is_registered_and_read():
    on_disk = {p.name for p in SETTINGS_DIR.glob("*.csv")}
    assert on_disk == set(SETTINGS_KEYS) and len(on_disk) >= 10


@pytest.mark.parametrize("name", sorted(SETTINGS_KEYS))
def test_every_row_has_provenance_and_a_unique_key(name):
    rows = read_settings(name)
    assert rows
    keys = [tuple(r[k] for k in SETTINGS_KEYS[name]) for r in rows]
    assert len(set(keys)) == len(keys)
    for r in rows:
        assert len(r["rule"]) >= 20 and len(r["source"]) >= 20, (name, r)
        assert any(r[k] for k in SETTINGS_KEYS[name]), (name, r)


def test_cluster_model_and_gpu_presets_exist():
    for name, col, kind in (("nemo_systems.csv", "cluster_preset", "clusters"), ("nccl_systems.csv", "cluster_preset",
                            "clusters"), ("mosaic_gpus.csv", "cluster_preset", "clusters"),
                            ("mosaic_gpus.csv", "gpu_preset", "gpus"), ("nemo_models.csv", "preset", "models")):
        for r in read_settings(name):
            assert not r[col] or preset(kind, r[col]) is not None, (name, r[col])


def test_nemo_models_name_a_preset_or_a_skip_reason_and_their_settings_are_in_range():
    for r in read_settings("nemo_models.csv"):
        assert bool(r["preset"]) != bool(r["skip_reason"]), r["table_model"]
        if r["expert_tp"]:
            assert whole(r, "expert_tp") >= 1 and load_model(r["preset"]).is_moe
        if r["mtp_layers"]:
            assert whole(r, "mtp_layers") in (0, 1)
        if r["optimizer_bytes_per_param"]:
            assert 4 <= whole(r, "optimizer_bytes_per_param") <= 16   # fp32 master weights + moments


def test_nemo_systems_and_offload_are_in_range():
    for r in read_settings("nemo_systems.csv"):
        rack = whole(r, "gpus_per_rack")
        assert rack is None or 1 <= rack <= 72
    models = {r["table_model"]: r["preset"] for r in read_settings("nemo_models.csv")}
    systems = {r["system"] for r in read_settings("nemo_systems.csv")}
    for r in read_settings("nemo_activation_offload.csv"):
        assert r["system"] in systems
        assert 1 <= whole(r, "offload_layers") <= load_model(models[r["table_model"]]).num_layers


def test_pipeline_layouts_split_the_models_layers_over_pp_times_vp_stages():
    models = {r["table_model"]: r["preset"] for r in read_settings("nemo_models.csv")}
    for r in read_settings("nemo_pipeline_layouts.csv"):
        pp, vp = whole(r, "pp"), whole(r, "vp")
        layers, _ = parse_pipeline_layout(r["layout"])
        assert pp >= 1 and vp >= 1 and len(layers) == pp * vp, r
        assert sum(layers) == load_model(models[r["table_model"]]).num_layers, r


@pytest.mark.parametrize("name", RANGED)
def test_release_ranges_are_ordered_and_do_not_overlap(name):
    rows = read_settings(name)
    for r in rows:
        lo, hi = nemo_release(r["first_release"]), nemo_release(r["last_release"])
        assert len(lo) >= 2 and len(hi) >= 2 and lo <= hi, r
        assert r["precision_class"] in PRECISION_CLASSES, r
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            same = (a["table_model"], a["system"]) == (b["table_model"], b["system"])
            classes = "any" in (a["precision_class"], b["precision_class"]) or a["precision_class"] == b[
                "precision_class"]
            apart = (nemo_release(a["last_release"]) < nemo_release(b["first_release"])
                     or nemo_release(b["last_release"]) < nemo_release(a["first_release"]))
            assert not (same and classes and not apart), (a, b)


def test_ep_overlap_and_recompute_values_are_in_range():
    assert all(r["ep_comm_overlap"] == "true" for r in read_settings("nemo_ep_overlap.csv"))
    assert all(r["ep_comm_overlap"] == "false" for r in read_settings("nemo_ep_overlap_undated.csv"))
    for r in read_settings("nemo_recompute_modules.csv"):
        mods = r["recompute_modules"].split(";")
        assert mods == ["none"] or (set(mods) <= set(RECOMPUTE_MODULES) and len(set(mods)) == len(mods)), r


def test_mosaic_peaks_and_sc21_script_values_are_in_range():
    for r in read_settings("mosaic_gpus.csv"):
        peak = float(r["peak_flops"])
        assert math.isfinite(peak) and 100e12 <= peak <= 5e15 and r["precision"] in ("bf16", "fp8"), r
    for r in read_settings("sc21_scripts.csv"):
        assert bool(r["row_id"]) != bool(r["layers"]), r        # keyed by the Table 1 row or by Table 2's layers
        assert r["layers"] or whole(r, "micro_batch") >= 1, r
        assert not r["layers_per_vstage"] or whole(r, "layers_per_vstage") >= 1, r


@pytest.mark.parametrize("rows, why", [
    ([], "no rows"),
    ([{"system": "x", "rule": "r"}], "no column source"),
    ([{"system": "x", "rule": "r", "source": " "}], "line 2: source must not be empty"),
    ([{"system": "", "rule": "r", "source": "s"}], "line 2: key must not be empty"),
    ([{"system": "x", "rule": "r", "source": "s"}, {"system": "x ", "rule": "r", "source": "s"}],
     "line 3: key ('x',) repeats line 2"),
])
def test_a_malformed_table_is_refused_with_the_file_and_line(rows, why):
    with pytest.raises(SpecError, match="settings") as e:
        checked_rows(rows, "t.csv", ("system",))
    assert why in str(e.value)


def test_a_bad_cell_is_refused_with_its_column():
    with pytest.raises(SpecError, match="pp: must be a whole number"):
        whole({"pp": "two"}, "pp")
    with pytest.raises(SpecError, match="unknown settings table"):
        read_settings("nope.csv")


def test_the_registry_is_a_registry():
    lines = len(Path(datasets.__file__).read_text(encoding="utf-8").splitlines())
    assert lines < 300, f"trainsim/validation/datasets.py has {lines} lines: the adapters belong beside it"
    assert set(datasets.DATASETS) >= {"sc21", "sc21-scripts", "mosaic", "nemo", "nccl", "zero-bubble", "korthikanti",
                                      "llama3", "memory", "vtrain"}
