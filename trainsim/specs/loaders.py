"""Turn user input (preset names, YAML/JSON files, Hugging Face config.json, CLI flags) into specs.

Files are read by safe_read (safe YAML/JSON, size, depth and alias limits, no duplicate keys); every failure is a
SpecError naming the field.
"""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import SpecError, did_you_mean, from_validation_error, unknown_name, yaml11_hint
from .hardware import ClusterSpec, GPUSpec, PoolSpec, ScaleOutSpec, ScaleUpSpec
from .hf_config import is_hf_config, model_from_hf
from .layout import Layout
from .model import ModelSpec
from .presets import preset, preset_names
from .safe_read import MAX_INPUT_BYTES, read_structured
from .scenario import Scenario, resolve
from .spec_config import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from .training import TrainingSpec


def read_mapping(path: str | os.PathLike, field: str) -> dict:
    """Read a YAML or JSON file that must hold a mapping (through the one safe reader, safe_read)."""
    p = Path(path)
    data = read_structured(p, field, MAX_INPUT_BYTES)
    if not isinstance(data, dict):
        raise SpecError(field, f"{p} must hold a mapping, not {type(data).__name__}")
    return data


def check_finite(data: Any, field: str) -> None:
    """Reject NaN/inf anywhere (YAML accepts .nan); pydantic would pass some of them through."""
    if isinstance(data, float) and not math.isfinite(data):
        raise SpecError(field, f"must be a finite number, got {data}")
    if isinstance(data, Mapping):
        for k, v in data.items():
            check_finite(v, f"{field}.{k}")
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            check_finite(v, f"{field}[{i}]")


def _numeric_field(annotation) -> bool:
    """True for int/float fields (also ``int | None``, ``dict[str, float]`` values), never for bool fields."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:  # Literal[1, 2] (flash_attention_version): true == 1
        return bool(args) and all(type(a) in (int, float) for a in args)
    if typing.get_origin(annotation) is dict:
        return _numeric_field(args[1])
    if typing.get_origin(annotation) is tuple:  # tuple[int, ...] (stage_layers): its items
        return bool(args) and _numeric_field(args[0])
    if args:
        return any(_numeric_field(a) for a in args if a is not type(None)) and bool not in args
    return annotation in (int, float)


def check_no_bools(cls, data: Any, field: str) -> None:
    """Reject true/false where a number is expected: pydantic's lax mode reads ``tp: true`` as tp=1 and
    ``num_layers: yes`` as one layer, a silently wrong scenario."""
    if not isinstance(data, Mapping):
        return
    for name, info in cls.model_fields.items():
        if name not in data:
            continue
        value, ann = data[name], info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            check_no_bools(ann, value, f"{field}.{name}")
        elif _numeric_field(ann):
            if isinstance(value, Mapping):
                values = value.items()
            elif isinstance(value, (list, tuple)):
                values = list(enumerate(value))
            else:
                values = [(None, value)]
            for key, v in values:
                if isinstance(v, bool):
                    where = f"{field}.{name}" + (f"[{key}]" if isinstance(key, int) else f".{key}" if key is not None
                                                 else "")
                    raise SpecError(where, f"must be a number, got {str(v).lower()}")


def _validate(cls, data: Mapping, field: str):
    check_finite(data, field)
    check_no_bools(cls, data, field)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, field, cls) from None


def _read_preset_file(spec: str, kind: str, field: str) -> dict:
    """The mapping of the file ``spec`` names where it is no preset of ``kind``: refused as an unknown preset
    name (with the close names) unless it looks like a path (a separator, a YAML/JSON suffix, or an existing file)."""
    if not (os.path.sep in spec or spec.endswith((".yaml", ".yml", ".json")) or Path(spec).exists()):
        raise unknown_name(field, "preset", spec, preset_names(kind))
    data = read_mapping(spec, field)
    if isinstance(data.get("preset"), str):  # a file it builds on is read beside it, as a scenario's files are
        data["preset"] = _next_to(Path(spec).parent, data["preset"], kind)
    return data


def _overridden(base: BaseModel, spec: Mapping) -> dict:
    """``base``'s fields with ``spec``'s keys (other than ``preset``) in their place: a preset plus overrides."""
    return {**base.model_dump(), **{k: v for k, v in spec.items() if k != "preset"}}


# --- models -----------------------------------------------------------------------------------

def load_model(spec: str | Mapping | ModelSpec) -> ModelSpec:
    """A ModelSpec from a preset name, a path (YAML/JSON/HF config.json) or a mapping."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
        raw = preset("models", spec)
        if raw is None:
            data = _read_preset_file(spec, "models", "model")
            raw = model_from_hf(data, Path(spec).stem) if is_hf_config(data) else data
            raw.setdefault("name", Path(spec).stem)
        return _validate(ModelSpec, raw, "model")
    if isinstance(spec, Mapping):
        if "preset" in spec:
            return _validate(ModelSpec, _overridden(load_model(str(spec["preset"])), spec), "model")
        raw = model_from_hf(spec) if is_hf_config(spec) else dict(spec)
        return _validate(ModelSpec, raw, "model")
    raise SpecError("model", f"expected a preset name, a file or a mapping, got {type(spec).__name__}")


# --- clusters ---------------------------------------------------------------------------------

def load_gpu(spec: str | Mapping) -> GPUSpec:
    """A GPUSpec from a preset name or a mapping (``preset: NAME`` plus overrides, or a full spec); SpecError
    naming cluster.gpu otherwise."""
    if isinstance(spec, str):
        raw = preset("gpus", spec)
        if raw is None:
            raise unknown_name("cluster.gpu", "GPU preset", spec, preset_names("gpus"))
        return _validate(GPUSpec, raw, "cluster.gpu")
    if isinstance(spec, Mapping):
        if "preset" in spec:
            return _validate(GPUSpec, _overridden(load_gpu(str(spec["preset"])), spec), "cluster.gpu")
        return _validate(GPUSpec, spec, "cluster.gpu")
    raise SpecError("cluster.gpu", f"expected a preset name or a mapping, got {type(spec).__name__}")


def _deep_merge(base: Mapping, top: Mapping) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def load_cluster(spec: str | Mapping | ClusterSpec, gpus: int | None = None) -> ClusterSpec:
    """A ClusterSpec from a preset name, a YAML/JSON file or a mapping (``preset:`` + overrides); ``gpus``
    sets its size."""
    if isinstance(spec, ClusterSpec):
        raw: dict = spec.model_dump()
    elif isinstance(spec, str):
        found = preset("clusters", spec)
        if found is None:
            data = _read_preset_file(spec, "clusters", "cluster")
            data.setdefault("name", Path(spec).stem)
            return load_cluster(data, gpus)
        raw = found
    elif isinstance(spec, Mapping):
        raw = dict(spec)
        if "preset" in raw:
            base_name = raw.pop("preset")
            if not isinstance(base_name, str):
                raise SpecError("cluster.preset", "must be a preset name")
            base = load_cluster(base_name).model_dump()
            base.pop("num_gpus", None)
            gpu_over = raw.get("gpu")
            if isinstance(gpu_over, str) or (isinstance(gpu_over, Mapping) and "preset" in gpu_over):
                base.pop("gpu")  # another GPU preset (+ overrides) replaces the cluster's, not merged into it
            up = raw.get("scale_up")
            if isinstance(up, Mapping) and up.get("kind", "nvswitch") != "nvswitch" and "nvls" not in up:
                # NVLink SHARP belongs to the preset's NVSwitch: another in-node fabric does not inherit it
                base["scale_up"].update(nvls=False, nvls_efficiency=None)
            raw = _deep_merge(base, raw)
    else:
        raise SpecError("cluster", f"expected a preset name, a file or a mapping, got {type(spec).__name__}")
    if isinstance(raw.get("gpu"), (str, Mapping)):
        raw["gpu"] = load_gpu(raw["gpu"]).model_dump()
    load = None
    if raw.get("pools") is not None:
        overrides = preset_overrides(spec)
        load = (overrides.get("scale_out") or {}).get("background_load")
        merged = {k: raw[k] for k in overrides}
        raw = _with_pools(raw, gpus)
        check_top_level_kept(overrides, merged, raw["pools"][0])
    if gpus is not None:
        if raw.get("num_gpus") is not None:  # resized, but an unreadable size is still a slip, refused by name
            try:
                gpu_count(raw["num_gpus"])
            except SpecError as e:
                raise SpecError("cluster.num_gpus", e.reason) from None
        raw["num_gpus"] = gpus
    elif "num_gpus" not in raw:
        raw["num_gpus"] = raw.get("gpus_per_node", 8)
    cluster = _validate(ClusterSpec, raw, "cluster")
    # the fabric's other traffic loads every node type's NICs, as --background-load spreads it
    return with_background_load(cluster, load) if isinstance(load, Mapping) else cluster


def _cluster_mapping(spec: Any) -> dict:
    """A scenario's cluster as the mapping it was written as: a mapping as is, a cluster file's contents, {} for a
    preset name or a loaded cluster."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, str) and preset("clusters", spec) is None:
        return _read_preset_file(spec, "clusters", "cluster")
    return {}


def preset_overrides(spec: Any) -> dict:
    """The ``gpu``, ``scale_up`` and ``scale_out`` a cluster mapping sets over its preset (a mapping without a preset,
    as a dumped cluster is, describes its base node itself: none)."""
    if not isinstance(spec, Mapping) or "preset" not in spec:
        return {}
    return {k: spec[k] for k in ("gpu", "scale_up", "scale_out") if isinstance(spec.get(k), Mapping)
            or (k == "gpu" and isinstance(spec.get(k), str))}


POOL_KEYS = {"name", "node", "gpu", "nodes", "scale_up", "scale_out"}
MAX_POOLS = 16


def _pool(entry: Any, i: int, base: Mapping) -> dict:
    """One resolved ``cluster.pools`` entry: a node preset's (or the cluster's) GPU and fabrics, then
    overrides."""
    field = f"cluster.pools[{i}]"
    if not isinstance(entry, Mapping):
        raise SpecError(field, f"must be a mapping like {{node: dgx-h100, nodes: 16}}, got {entry!r}")
    unknown = set(map(str, entry)) - POOL_KEYS
    if unknown:
        key = min(unknown)
        raise SpecError(f"{field}.{key}", f"unknown key{did_you_mean(key, sorted(POOL_KEYS))}")
    if entry.get("name") is not None and not isinstance(entry["name"], str):  # a pool is named by text, not a repr
        raise SpecError(f"{field}.name", f"must be a string, got {entry['name']!r}")
    resolved = all(entry.get(k) is not None for k in ("gpu", "scale_up", "scale_out"))  # a loaded pool, dumped
    if not resolved and (entry.get("node") is not None) == (entry.get("gpu") is not None):
        raise SpecError(field, "give either node (a cluster preset: a node type) or gpu (a GPU preset on the "
                               "cluster's node)")
    nodes = entry.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes <= 0:
        raise SpecError(f"{field}.nodes", f"must be a positive whole number of nodes, got {nodes!r}")
    src, name = dict(base), entry.get("name")
    if entry.get("node") is not None:
        node = entry["node"]
        found = preset("clusters", node) if isinstance(node, str) else None
        if found is None:
            raise unknown_name(f"{field}.node", "cluster preset", node, preset_names("clusters"))
        if found.get("gpus_per_node", 8) != base.get("gpus_per_node", 8):
            raise SpecError(f"{field}.node", f"{node} has {found.get('gpus_per_node', 8)} GPUs per node, the "
                                             f"cluster {base.get('gpus_per_node', 8)}: pools must share one node size")
        src = {**src, **{k: found[k] for k in ("gpu", "scale_up", "scale_out")}}
        name = name or node
    gpu_in = entry.get("gpu") or src.get("gpu")
    try:
        gpu = load_gpu(gpu_in).model_dump()
    except SpecError as e:
        raise SpecError(e.field.replace("cluster.gpu", f"{field}.gpu", 1), e.reason) from None
    out = {"name": str(name or (gpu_in if isinstance(gpu_in, str) else gpu["name"])), "gpu": gpu, "nodes": nodes,
           "node": entry.get("node"),
           "scale_up": _deep_merge(src["scale_up"], entry.get("scale_up") or {}),
           "scale_out": _deep_merge(src.get("scale_out") or ScaleOutSpec().model_dump(), entry.get("scale_out") or {})}
    return _validate(PoolSpec, out, field).model_dump()


def _with_pools(raw: dict, gpus: int | None) -> dict:
    """The cluster mapping with its ``pools`` resolved; the top-level GPU and fabrics become the first pool's and
    the job's GPU count the pools' (SpecError when ``gpus`` says otherwise)."""
    pools = raw["pools"]
    if not isinstance(pools, (list, tuple)) or not 1 <= len(pools) <= MAX_POOLS:
        got = f"{len(pools)} pools" if isinstance(pools, (list, tuple)) else repr(pools)[:80]
        raise SpecError("cluster.pools", f"must be a list of 1 to {MAX_POOLS} pools, got {got}")
    if any(k not in raw for k in ("gpu", "scale_up")):
        # no base cluster: the first pool's node preset is it (its node size, host and fabrics)
        first = pools[0] if isinstance(pools[0], Mapping) else {}
        node = preset("clusters", first["node"]) if isinstance(first.get("node"), str) else None
        if node is None:
            raise SpecError("cluster.pools", "needs a base cluster (preset: NAME) or a first pool given by node")
        node.pop("num_gpus", None)
        node["gpu"] = load_gpu(node["gpu"]).model_dump()
        label = " + ".join(str(e.get("name") or e.get("node") or e.get("gpu")) for e in pools if isinstance(e, Mapping))
        # a label made here, not a name given: shortened to the names' limit (16 pools of long names exceed it)
        node["name"] = label if len(label) <= MAX_NAME_CHARS else label[:MAX_NAME_CHARS - 1] + "…"
        raw = {**node, **raw}
    resolved = [_pool(e, i, raw) for i, e in enumerate(pools)]
    names = [p["name"] for p in resolved]
    for j, name in enumerate(names):
        if name in names[:j]:
            raise SpecError(f"cluster.pools[{j}].name", f"{name!r} names pools[{names.index(name)}] too: outputs "
                                                        "tell pools apart by name (merge them into one pool or give "
                                                        "each a name in the scenario file)")
    kinds = [p["gpu"].get("kind", "gpu") for p in resolved]
    if len(set(kinds)) > 1:
        j = kinds.index(next(k for k in kinds if k != kinds[0]))
        raise SpecError(f"cluster.pools[{j}].gpu", f"is a {kinds[j]} where pools[0] is a {kinds[0]}: one job's ranks "
                                                  "are GPUs or host CPU processes, not both (NCCL or gloo)")
    total = sum(p["nodes"] for p in resolved) * raw.get("gpus_per_node", 8)
    if gpus is not None and gpus != total:
        raise SpecError("cluster.pools", f"the pools hold {total} GPUs but the job asks for gpus={gpus}")
    first = resolved[0]
    return {**raw, "pools": resolved, "num_gpus": total,
            **{k: first[k] for k in ("gpu", "scale_up", "scale_out")}}


def check_top_level_kept(overrides: Mapping, merged: Mapping, first: Mapping) -> None:
    """With pools the top-level ``gpu``, ``scale_up`` and ``scale_out`` are the first pool's. A pool given by ``node``
    takes its node preset's GPU and fabrics, a pool given by ``gpu`` its GPU on the cluster's fabrics: an override
    (``overrides``: what the scenario sets over its preset; ``merged``: the cluster's values with them) that the first
    pool replaces so would be dropped without a word, so it is refused, pointing at the pool entries.
    ``scale_out.background_load`` is the fabric's and loads every pool (load_cluster)."""
    specs = {"gpu": GPUSpec, "scale_up": ScaleUpSpec, "scale_out": ScaleOutSpec}
    for key in overrides:
        if key != "gpu" and first.get("node") is None:
            continue  # a pool on the cluster's node takes the cluster's fabrics, these overrides included
        given = overrides[key]
        own = (set(given) if isinstance(given, Mapping) else set(GPUSpec.model_fields)) \
            - ({"background_load", "preset"})
        try:
            kept = all(getattr(specs[key].model_validate(merged[key]), k, None)
                       == getattr(specs[key].model_validate(first[key]), k, None) for k in own)
        except ValidationError:
            kept = False
        if not kept:
            raise SpecError(f"cluster.{key}", "with pools each pool has its own GPU and fabrics (the top level is the "
                                              "first pool's), so this top-level setting would be dropped: give it in "
                                              f"the pool entries (cluster.pools[i].{key})")


def with_background_load(cluster: ClusterSpec, load: Mapping[str, float]) -> ClusterSpec:
    """The cluster with the given tiers of ``scale_out.background_load`` replaced (others kept); SpecError naming
    the tier on an unknown tier or a fraction outside [0, 1)."""
    if not isinstance(load, Mapping):
        raise SpecError("cluster.scale_out.background_load", f"must be a mapping of tier to fraction, got {load!r}")
    raw = cluster.model_dump()
    raw["scale_out"]["background_load"] = {**raw["scale_out"]["background_load"], **dict(load)}
    for pool in raw.get("pools") or ():  # every node type's NICs share the one fabric
        pool["scale_out"]["background_load"] = {**pool["scale_out"]["background_load"], **dict(load)}
    return _validate(ClusterSpec, raw, "cluster")


# --- scenarios --------------------------------------------------------------------------------

SCENARIO_KEYS = {"name", "description", "model", "cluster", "gpus", "layout", "training"}
LAYOUT_KEYS = set(Layout.model_fields)
TRAINING_KEYS = set(TrainingSpec.model_fields)


def gpu_count(value: Any) -> int:
    """A scenario's ``gpus`` read as the spec fields read integers (pydantic's lax int: "16" and 16.0 are 16; a
    boolean, 16.5 or "sixteen" is refused)."""
    if isinstance(value, bool):
        raise SpecError("gpus", f"must be an integer, got {str(value).lower()}")
    try:
        return TypeAdapter(int).validate_python(value)
    except ValidationError:
        raise SpecError("gpus", f"must be an integer, got {value!r}{yaml11_hint(value)}") from None


def load_layout(data: Mapping) -> Layout:
    """A Layout from a mapping (a scenario's ``layout``); SpecError naming the field."""
    if not isinstance(data, Mapping):
        raise SpecError("layout", f"must be a mapping, got {type(data).__name__}")
    return _validate(Layout, data, "layout")


def load_training(data: Mapping) -> TrainingSpec:
    """A TrainingSpec from a mapping (a scenario's ``training``); SpecError naming the field."""
    if not isinstance(data, Mapping):
        raise SpecError("training", f"must be a mapping, got {type(data).__name__}")
    return _validate(TrainingSpec, data, "training")


def load_scenario_file(path: str | os.PathLike) -> dict:
    """Read a scenario YAML/JSON into its raw mapping (resolved later with any CLI overrides)."""
    data = read_mapping(path, "scenario")
    unknown = set(data) - SCENARIO_KEYS
    if unknown:
        # str(): YAML keys may be numbers or booleans (``1: 2``), which do not sort with strings.
        key = min(map(str, unknown))
        raise SpecError(f"scenario.{key}", f"unknown key{did_you_mean(key, sorted(SCENARIO_KEYS))} "
                                           f"(allowed: {', '.join(sorted(SCENARIO_KEYS))})")
    base = Path(path).parent
    for key in ("model", "cluster"):  # relative file references are relative to the scenario
        kind = "models" if key == "model" else "clusters"
        v = data.get(key)
        if isinstance(v, str):
            data[key] = _next_to(base, v, kind)
        elif isinstance(v, Mapping) and isinstance(v.get("preset"), str):  # {preset: FILE, ...overrides}
            data[key] = {**v, "preset": _next_to(base, v["preset"], kind)}
    return data


def _next_to(base: Path, ref: str, kind: str) -> str:
    """A scenario's model or cluster reference: a relative file beside the scenario is read from there (not from
    the working directory); a preset name or an absolute path stays as it is."""
    if preset(kind, ref) is not None or os.path.isabs(ref):
        return ref
    cand = base / ref
    return str(cand) if cand.exists() else ref


def _check_one_gpu_count(raw: Mapping) -> None:
    """A scenario states its GPU count once: top-level ``gpus`` and a ``cluster: {preset: ..., num_gpus: ...}``
    written beside it that disagree are refused (a command-line ``--gpus`` overrides either; a cluster file's or a
    whole cluster mapping's own size is what ``gpus`` resizes)."""
    cluster = raw.get("cluster")
    inner = cluster.get("num_gpus") if isinstance(cluster, Mapping) and "preset" in cluster else None
    top = raw.get("gpus")
    if top is None or inner is None:
        return
    try:
        same = gpu_count(top) == gpu_count(inner)
    except SpecError:
        return  # an unreadable count is refused where it is read (load_cluster names cluster.num_gpus)
    if not same:
        raise SpecError("gpus", f"the scenario gives gpus: {top} and cluster.num_gpus: {inner}; state one")


def build_scenario(raw: Mapping | None = None, overrides: Mapping | None = None) -> Scenario:
    """Merge a raw scenario mapping with flat overrides (CLI flags; ``None`` = not given) and resolve it.

    Override keys: model, cluster, gpus, name, background_load (a mapping of tier -> fraction laid over the
    cluster's ``scale_out.background_load``), pools and pool_placement (the cluster's ``pools`` and ``placement``),
    and any Layout or TrainingSpec field.
    """
    raw = dict(raw or {})
    ov = {k: v for k, v in (overrides or {}).items() if v is not None}
    for k in ov:
        if k not in LAYOUT_KEYS | TRAINING_KEYS | {"model", "cluster", "gpus", "name", "background_load", "pools",
                                                      "pool_placement"}:
            raise SpecError(k, "unknown setting")
    model_in = ov.get("model", raw.get("model"))
    if model_in is None:
        raise SpecError("model", "no model given (use --model NAME|PATH or a scenario file)")
    model = load_model(model_in)  # before the cluster: `--model x` alone lists the model presets
    cluster_in = ov.get("cluster", raw.get("cluster"))
    if cluster_in is None:
        raise SpecError("cluster", "no cluster given (use --cluster NAME|PATH or a scenario file)")
    gpus = ov.get("gpus", raw.get("gpus"))
    if gpus is not None:
        gpus = gpu_count(gpus)
    if gpus is not None and not (0 < gpus <= 10_000_000):
        raise SpecError("gpus", f"must be between 1 and 10,000,000, got {gpus}")
    if "gpus" not in ov:
        _check_one_gpu_count(raw)
    layout_raw = raw.get("layout") or {}
    training_raw = raw.get("training") or {}
    for key, val in (("layout", layout_raw), ("training", training_raw)):
        if not isinstance(val, Mapping):
            raise SpecError(key, f"must be a mapping, got {type(val).__name__}")
    layout_raw = {**layout_raw, **{k: v for k, v in ov.items() if k in LAYOUT_KEYS}}
    training_raw = {**training_raw, **{k: v for k, v in ov.items() if k in TRAINING_KEYS}}
    cluster = load_cluster(cluster_in, None if "pools" in ov else gpus)
    if "pools" in ov or "pool_placement" in ov:
        pooled = {**cluster.model_dump(), **({"pools": ov["pools"]} if "pools" in ov else {}),
                  **({"placement": ov["pool_placement"]} if "pool_placement" in ov else {})}
        cluster = load_cluster(pooled, gpus if "pools" in ov else None)
        given = _cluster_mapping(cluster_in) if "pools" in ov else {}
        if overrides := preset_overrides(given):  # the scenario's overrides of its preset, as load_cluster checks
            check_top_level_kept(overrides, load_cluster({**given, "pools": None}).model_dump(),
                                 cluster.pools[0].model_dump())
    if "background_load" in ov:
        cluster = with_background_load(cluster, ov["background_load"])
    layout = _validate(Layout, layout_raw, "layout")
    training = _validate(TrainingSpec, training_raw, "training")
    for key, limit in (("name", MAX_NAME_CHARS), ("description", MAX_DESCRIPTION_CHARS)):
        value = ov.get(key, raw.get(key))
        if value is not None and not isinstance(value, str):  # a list or a mapping would print as its repr
            raise SpecError(key, f"must be a string, got {value!r}")
        if value is not None and len(value) > limit:
            raise SpecError(key, f"must be at most {limit} characters, got {len(value)}")
    name = ov.get("name") or raw.get("name") or f"{model.name}@{cluster.name}"
    return resolve(model, cluster, layout, training, name=name)
