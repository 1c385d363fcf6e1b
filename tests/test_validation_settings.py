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


def _clear_settings_caches():
    """Nothing outlives a memo scope (specs.memo): the settings are read again at the next call."""
    from trainsim.specs.memo import active_memo
    assert active_memo() is None


@pytest.fixture
def malformed_nemo_models(tmp_path, monkeypatch):
    """nemo_models.csv with its second data row's key repeating the first's (file line 3)."""
    real = settings.settings_file("nemo_models.csv").read_text().splitlines()
    first = real[1].split(",")[0]
    bad = tmp_path / "nemo_models.csv"
    bad.write_text("\n".join([real[0], real[1], first + real[2][len(real[2].split(",")[0]):], *real[3:]]) + "\n")
    monkeypatch.setattr(settings, "settings_file",
                        lambda name, orig=settings.settings_file: bad if name == "nemo_models.csv" else orig(name))
    _clear_settings_caches()
    yield
    monkeypatch.undo()
    _clear_settings_caches()


def test_importing_the_datasets_reads_no_settings_table():
    """The settings tables are read on first use, so a malformed one cannot stop an import (or another dataset)."""
    import subprocess
    import sys
    code = ("import trainsim.validation.settings as s\n"
            "def refuse(name): raise SystemExit(f'read {name} at import')\n"
            "s.settings_file = refuse\n"
            "import trainsim.validation.datasets, trainsim.cli.main\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_malformed_nemo_table_stops_only_the_nemo_dataset(malformed_nemo_models, capsys):
    from external_tables import table_path

    from trainsim.cli.main import main
    table_path("nemo_megatron_bridge_perf.csv")  # skips where the unbundled NeMo table is absent
    for other in ("korthikanti", "nccl"):
        assert datasets.load_dataset(other).cases
    with pytest.raises(SpecError, match=r"nemo_models.csv line 3: key .* repeats line 2"):
        datasets.load_dataset("nemo")
    assert main(["validate", "--dataset", "nemo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nemo_models.csv line 3" in err


@pytest.mark.parametrize("loader", [
    "nemo_recipes.nemo_systems", "nemo_recipes.nemo_models", "nemo_recipes.nemo_unmodelled",
    "nemo_recipes.nemo_mtp_default", "nemo_recipes.nemo_mla_optimizer_bytes", "nemo_recipes.nemo_expert_tp_by_model",
    "nemo_recipes.nemo_mtp_labels", "nemo_recipes.nemo_pipeline_layouts", "nemo_recipes.nemo_activation_offload",
    "nemo_recipes.nemo_ep_overlap_undated", "nccl_runs.nccl_systems", "nccl_runs.nccl_host_cpus",
    "nccl_runs.nccl_forced_algos"])
def test_memoised_settings_loaders_return_read_only_views(loader):
    """A memoised loader's result is shared by every caller of the scope, so it is a read-only view (as
    read_settings' rows are): a caller cannot change what the next one reads."""
    import importlib

    from trainsim.specs.memo import memo_scope
    module, name = loader.split(".")
    fn = getattr(importlib.import_module(f"trainsim.validation.{module}"), name)
    with memo_scope():
        table = fn()
        assert table, loader
        with pytest.raises(TypeError):
            table["x"] = None  # type: ignore[index]
        for value in table.values():
            if hasattr(value, "keys"):
                with pytest.raises(TypeError):
                    value["x"] = None
        assert fn() is table
