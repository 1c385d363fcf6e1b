"""The settings of the NVIDIA Megatron-Bridge (NeMo) performance recipes that the published tables do not print,
joined to each table row by its recipe identity (table model, system, precision, release).

The tables print a run's parallel layout and batch but not, e.g., its recompute modules, EP all-to-all overlap,
pipeline split or activation offload. Those were read from the Megatron-Bridge configs of the row's release and
are kept, with the file, commit or pull request each was read from, in trainsim/data/validation/settings/
(read by trainsim/validation/settings.py):

* nemo_systems.csv: system -> cluster preset, GPUs per NVL72 rack used by jobs larger than one rack;
* nemo_models.csv: table model -> model preset (or why it is skipped), the config's expert tensor parallelism,
  the recipe's MTP modules and optimizer state bytes per parameter (multi-head-latent-attention models);
* nemo_mtp_labels.csv: a model cell's '(w/o MTP)' / '(w/ MTP)' label -> MTP modules;
* nemo_pipeline_layouts.csv: (table model, pp, vp) -> Megatron-Core pipeline_model_parallel_layout;
* nemo_activation_offload.csv: (table model, system) -> cpu_offloading_num_layers of the Megatron-FSDP fp8 runs;
* nemo_ep_overlap.csv: (table model, system, precision class, release range) where moe_a2a_overlap is on
  (Megatron-Core --overlap-moe-expert-parallel-comm -> TrainingSpec.ep_comm_overlap); absent = off;
* nemo_ep_overlap_undated.csv: the rows whose release's config could not be pinned down (kept off);
* nemo_recompute_modules.csv: (table model, system, precision class, release range) -> recompute_modules;
* nemo_lora.csv: (table model, release range) -> the LoRA rank, alpha, target modules and packed dataset of the
  LoRA Performance rows.
* nemo_moe_dispatcher.csv: (table model, system, precision class, release range) -> the config's Megatron-Core token
  dispatcher, alltoall or flex (-> TrainingSpec.moe_token_dispatcher); absent = not stated;
* nemo_fused_grouped_mlp.csv: (table model, system, precision class, release range) where the config runs the
  experts through Transformer Engine's op fuser (-> TrainingSpec.fused_grouped_mlp); absent = off;
* nemo_skipped_runs.csv: (table model, system, precision, release) -> why the row is not predicted (a run the
  release footnotes as a software defect, a printed layout that matches no config of its release).

Releases map to Megatron-Bridge branches: 25.09 = r0.1.0, 25.11 = r0.2.0, 26.02(.01) = r0.3.0, 26.04(.01) =
r0.4.0, 26.06(.01) = r0.5.0, 26.08 = r0.6.0 (cherry-pick PRs #594 -> r0.1.0 2025-09, #1526 -> r0.2.0 2025-11,
#2198/#2378 -> r0.3.0 2026-02; PR #5168: "cannot merge into r0.5.0 ... 26.06.01 container is already out ... 26.08
rel branch r0.6.0"). The stored config versions carry commits without dates, so each is dated by its parallel
layout (which must equal the row's) and by dated pull requests. Precision classes: "mx" (MXFP8 / FP8-MX), "bf16",
"any".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from trainsim.specs import SpecError
from trainsim.specs.memo import memoised
from trainsim.validation.cells import yes_no
from trainsim.validation.settings import read_settings, whole


@memoised(maxsize=64)
def nemo_systems() -> Mapping[str, tuple[str, int | None]]:
    """system -> (cluster preset, GPUs per NVLink domain used by jobs larger than one domain or None)."""
    return MappingProxyType({s["system"]: (s["cluster_preset"], whole(s, "gpus_per_rack"))
                             for s in read_settings("nemo_systems.csv")})


def _model_column(column: str, parse=whole) -> dict[str, object]:
    """table model -> a nemo_models.csv column, for the models where it is set."""
    return {s["table_model"]: parse(s, column) for s in read_settings("nemo_models.csv") if s[column]}


@memoised(maxsize=64)
def nemo_models() -> Mapping[str, str]:
    """Table model name (before any parenthesis) -> model preset."""
    return MappingProxyType(_model_column("preset", lambda s, c: s[c]))


@memoised(maxsize=64)
def nemo_unmodelled() -> Mapping[str, str]:
    """Table model name -> why the model is not representable."""
    return MappingProxyType(_model_column("skip_reason", lambda s, c: s[c]))


@memoised(maxsize=64)
def nemo_mtp_default() -> Mapping[str, int]:
    """MTP modules of a row whose model cell has no '(w/o MTP)' / '(w/ MTP)' label: what its release's recipe did."""
    return MappingProxyType(_model_column("mtp_layers"))


@memoised(maxsize=64)
def nemo_mla_optimizer_bytes() -> Mapping[str, int]:
    """Optimizer state bytes per parameter of the Adam recipes where set by hand (precision-aware Adam 4 + 2 + 2);
    a Muon recipe's follow from its parameters (nemo_optimizer, cost_models/muon.py)."""
    return MappingProxyType(_model_column("optimizer_bytes_per_param"))


@memoised(maxsize=64)
def nemo_optimizer() -> Mapping[str, str]:
    """The recipe's optimizer (TrainingSpec.optimizer: adam or muon) of the models where the table sets it."""
    return MappingProxyType(_model_column("optimizer", lambda s, c: s[c]))


@memoised(maxsize=64)
def nemo_expert_tp_by_model() -> Mapping[str, int]:
    """Megatron-Core --expert-tensor-parallel-size of the MoE models' configs, used where the table's etp cell is
    empty (every MoE row's is); a model absent here takes Megatron-Core's default, etp = tp."""
    return MappingProxyType(_model_column("expert_tp"))


@memoised(maxsize=64)
def nemo_mtp_labels() -> Mapping[str, int | None]:
    """A model cell's '(w/o MTP)' / '(w/ MTP)' label -> MTP modules."""
    return MappingProxyType({s["label"]: whole(s, "mtp_layers") for s in read_settings("nemo_mtp_labels.csv")})


@memoised(maxsize=64)
def nemo_pipeline_layouts() -> Mapping[str, Mapping[tuple[int, int], str]]:
    """Multi-head-latent-attention models (DeepSeek-V3, Kimi K2): (pp, vp) -> pipeline_model_parallel_layout (E =
    embedding, t = transformer layer, m = MTP module, L = loss, | = virtual-stage boundary, x*n / (..)*n =
    repetition)."""
    out: dict[str, dict[tuple[int, int], str]] = {}
    for s in read_settings("nemo_pipeline_layouts.csv"):
        out.setdefault(s["table_model"], {})[(whole(s, "pp"), whole(s, "vp"))] = s["layout"]
    return MappingProxyType({model: MappingProxyType(layouts) for model, layouts in out.items()})


@memoised(maxsize=64)
def nemo_activation_offload() -> Mapping[tuple[str, str], int | None]:
    """Activation CPU offload (cpu_offloading_num_layers) of the Megatron-FSDP fp8 runs: (table model, system) ->
    layers."""
    return MappingProxyType({(s["table_model"], s["system"]): whole(s, "offload_layers")
                             for s in read_settings("nemo_activation_offload.csv")})


def _ranged(name: str) -> tuple[tuple[str, str, str, str, str], ...]:
    """(table model, system, precision class, first release, last release) of each row of a release-range table."""
    return tuple((s["table_model"], s["system"], s["precision_class"], s["first_release"], s["last_release"])
                 for s in read_settings(name))


@memoised(maxsize=64)
def nemo_ep_overlap_ranges() -> tuple[tuple[str, str, str, str, str], ...]:
    """Where moe_a2a_overlap is on: (table model, system, precision class, first release, last release); absent =
    off."""
    rows = read_settings("nemo_ep_overlap.csv")
    if not all(yes_no(s, "ep_comm_overlap") for s in rows):
        raise SpecError("settings", "nemo_ep_overlap.csv lists where moe_a2a_overlap is on: every "
                                    "ep_comm_overlap must be true")
    return _ranged("nemo_ep_overlap.csv")


@memoised(maxsize=64)
def nemo_fused_grouped_mlp_ranges() -> tuple[tuple[str, str, str, str, str], ...]:
    """Where use_transformer_engine_op_fuser is on (the cuteDSL fused grouped MLP): (table model, system, precision
    class, first release, last release); absent = off."""
    rows = read_settings("nemo_fused_grouped_mlp.csv")
    if not all(yes_no(s, "fused_grouped_mlp") for s in rows):
        raise SpecError("settings", "nemo_fused_grouped_mlp.csv lists where the op fuser is on: every "
                                    "fused_grouped_mlp must be true")
    return _ranged("nemo_fused_grouped_mlp.csv")


def nemo_fused_grouped_mlp(model_name: str, system: str, precision: str, release: str) -> bool:
    """Whether the row's performance config ran the experts through TE's op fuser (nemo_fused_grouped_mlp_ranges())."""
    return _nemo_config_entry(nemo_fused_grouped_mlp_ranges(), model_name, system, precision, release) is not None


@memoised(maxsize=64)
def nemo_moe_dispatcher_ranges() -> tuple[tuple[str, str, str, str, str, str], ...]:
    """Megatron-Core token dispatcher of each listed config: (table model, system, precision class, first release,
    last release, 'alltoall' | 'flex'); absent = not stated."""
    rows = read_settings("nemo_moe_dispatcher.csv")
    bad = [s["moe_token_dispatcher"] for s in rows if s["moe_token_dispatcher"] not in ("alltoall", "flex")]
    if bad:
        raise SpecError("settings", f"nemo_moe_dispatcher.csv: moe_token_dispatcher {bad[0]!r} is neither alltoall "
                                    "nor flex")
    return tuple((*key, s["moe_token_dispatcher"]) for key, s in zip(_ranged("nemo_moe_dispatcher.csv"), rows))


def nemo_moe_dispatcher(model_name: str, system: str, precision: str, release: str) -> str | None:
    """The row's config's token dispatcher (nemo_moe_dispatcher_ranges()), or None where not listed."""
    entry = _nemo_config_entry(nemo_moe_dispatcher_ranges(), model_name, system, precision, release)
    return entry[5] if entry else None


@memoised(maxsize=64)
def nemo_ep_overlap_undated() -> Mapping[tuple[str, str, str, str], str]:
    """Rows whose release's config could not be pinned down, kept off: (table model, system, precision, release) ->
    why."""
    return MappingProxyType({(s["table_model"], s["system"], s["precision"], s["release"]): s["source"]
                             for s in read_settings("nemo_ep_overlap_undated.csv")})


@memoised(maxsize=64)
def nemo_recompute_ranges() -> tuple[tuple[str, str, str, str, str, tuple[str, ...]], ...]:
    """recompute_modules of each row's config: (table model, system, precision class, first, last release,
    modules); () = recompute none. Qwen3 rows have none: every Qwen3 config read sets
    recompute_granularity=None."""
    mods = [tuple(m for m in s["recompute_modules"].split(";") if m != "none")
            for s in read_settings("nemo_recompute_modules.csv")]
    return tuple((*key, m) for key, m in zip(_ranged("nemo_recompute_modules.csv"), mods))


@memoised(maxsize=64)
def nemo_lora_settings() -> tuple[tuple[str, str, str, Mapping[str, object]], ...]:
    """(table model, first release, last release, LoRA training keys) of each LoRA recipe (nemo_lora.csv)."""
    return tuple((s["table_model"], s["first_release"], s["last_release"],
                  MappingProxyType({"lora_rank": whole(s, "lora_rank"), "lora_alpha": float(s["lora_alpha"]),
                                    "lora_target_modules": tuple(s["target_modules"].split(";"))}))
                 for s in read_settings("nemo_lora.csv"))


def nemo_lora(model_name: str, release: str) -> Mapping[str, object] | None:
    """The LoRA training keys of a LoRA row's recipe (``nemo_lora_settings``), or None where no entry covers it."""
    r = nemo_release(release)
    return next((keys for model, first, last, keys in nemo_lora_settings()
                 if model == model_name and nemo_release(first) <= r <= nemo_release(last)), None)


@memoised(maxsize=64)
def nemo_skipped_runs() -> Mapping[tuple[str, str, str, str], str]:
    """Rows not predicted, with why: (table model, system, precision as printed, release) -> reason."""
    return MappingProxyType({(s["table_model"], s["system"], s["precision"], s["release"]): s["reason"]
                             for s in read_settings("nemo_skipped_runs.csv")})


def nemo_recompute_known(model_name: str) -> bool:
    """Whether the recompute of ``model_name``'s configs is listed per (system, precision, release): then a row with
    no entry has an unknown recompute and is not predicted (models with no entry at all run without recompute in
    every config read, nemo_recompute_ranges())."""
    return any(entry[0] == model_name for entry in nemo_recompute_ranges())


def nemo_release(text: str) -> tuple[int, ...]:
    """A NeMo container release ('26.04.01') as a sortable tuple."""
    return tuple(int(x) for x in re.findall(r"\d+", text or ""))


def _nemo_config_entry(table, model_name: str, system: str, precision: str, release: str) -> tuple | None:
    """The first entry (model, system, precision class 'any'|'mx'|'bf16', first release, last release, ...) of a
    per-release config table that covers the row, or None."""
    cls, rel = nemo_precision_class(precision), nemo_release(release)
    return next((entry for entry in table
                 if entry[0] == model_name and entry[1] == system and entry[2] in ("any", cls)
                 and nemo_release(entry[3]) <= rel <= nemo_release(entry[4])), None)


def nemo_ep_overlap(model_name: str, system: str, precision: str, release: str) -> bool:
    """Whether the row's Megatron-Bridge performance config set moe_a2a_overlap (nemo_ep_overlap_ranges())."""
    return _nemo_config_entry(nemo_ep_overlap_ranges(), model_name, system, precision, release) is not None


def nemo_precision_class(precision: str) -> str:
    """'mx' (MXFP8 / FP8-MX), 'bf16' or 'other' (the classes of nemo_recompute_ranges())."""
    p = (precision or "").upper()
    return "mx" if ("MX" in p and "FP8" in p) else ("bf16" if p.strip() == "BF16" else "other")


def nemo_recompute_modules(model_name: str, system: str, precision: str, release: str) -> tuple[str, ...] | None:
    """The recompute_modules of the row's config (nemo_recompute_ranges(); () = none), or None when no entry."""
    entry = _nemo_config_entry(nemo_recompute_ranges(), model_name, system, precision, release)
    return None if entry is None else entry[5]


def nemo_expert_tp(model_name: str, etp_cell: int | None, tp: int) -> int:
    """Expert tensor parallelism of a MoE row: the table's etp cell, else the config's
    (nemo_expert_tp_by_model()), else tp."""
    return etp_cell or nemo_expert_tp_by_model().get(model_name) or tp


def parse_pipeline_layout(layout: str) -> tuple[tuple[int, ...], int]:
    """Transformer layers per virtual pipeline stage of a Megatron-Core pipeline_model_parallel_layout string, and
    the MTP modules ('m') of its last stage. ``(x)*n`` and ``c*n`` repeat, '|' ends a virtual stage, ',' is only a
    separator. The embedding ('E') must open the first stage and the loss ('L') close the last, as trainsim places
    them (Layout.stage_layers)."""
    s = re.sub(r"[\s,]", "", layout)
    group = re.compile(r"\(([^()]*)\)\*(\d+)")
    while (g := group.search(s)) is not None:
        s = s[:g.start()] + g.group(1) * int(g.group(2)) + s[g.end():]
    if "(" in s or ")" in s:
        raise ValueError(f"unbalanced parentheses in pipeline layout {layout!r}")
    s = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    if set(s) - set("EtmL|"):
        raise ValueError(f"pipeline layout {layout!r}: unknown symbols {sorted(set(s) - set('EtmL|'))}")
    stages = s.split("|")
    if s.count("E") != 1 or not stages[0].startswith("E"):
        raise ValueError(f"pipeline layout {layout!r}: the embedding must open the first virtual stage")
    if s.count("L") != 1 or not stages[-1].endswith("L"):
        raise ValueError(f"pipeline layout {layout!r}: the loss must close the last virtual stage")
    if s.count("m") != stages[-1].count("m"):
        raise ValueError(f"pipeline layout {layout!r}: MTP modules only on the last virtual stage")
    return tuple(st.count("t") for st in stages), stages[-1].count("m")


def nemo_mtp_layers(model_cell: str | None) -> int:
    """MTP modules of a DeepSeek-V3 / Kimi K2 row from its model cell's label (nemo_mtp_labels(),
    nemo_mtp_default())."""
    name = first_value(model_cell)
    tag = re.search(r"\(([^)]*)\)", model_cell or "")
    return nemo_mtp_labels().get(tag.group(1).strip().lower() if tag else "", nemo_mtp_default()[name])


def nemo_stage_layers(model_name: str, pp: int, vp: int, mtp_layers: int) -> tuple[tuple[int, ...] | None, str]:
    """Layout.stage_layers of a (pp, vp) from nemo_pipeline_layouts(), or (None, why not)."""
    layout = nemo_pipeline_layouts()[model_name].get((pp, vp))
    if layout is None:
        return None, (f"pp={pp} vp={vp}: no pipeline_model_parallel_layout for this (pp, vp) in the Megatron-Bridge "
                      f"{model_name} recipes or performance configs, and their fallback (no layout, embedding and "
                      f"loss not counted as layers) cannot split 61 layers over {pp * vp} virtual stages: the run's "
                      "split is unknown")
    if mtp_layers == 0:
        layout = layout.replace("m", "")
    layers, _ = parse_pipeline_layout(layout)
    return layers, layout


def first_value(text: str | None) -> str:
    """A cell's primary value: the text before any parenthesised alternative or footnote marker."""
    return re.split(r"[(\[]", text or "")[0].strip()
