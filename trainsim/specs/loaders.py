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

from pydantic import BaseModel, ValidationError

from .errors import SpecError, from_validation_error
from .hardware import ClusterSpec, GPUSpec
from .model import ModelSpec
from .presets import preset, preset_names
from .safe_read import MAX_INPUT_BYTES, read_structured
from .scenario import Scenario, resolve
from .training import Layout, TrainingSpec


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
        raise from_validation_error(e, field) from None


# --- models -----------------------------------------------------------------------------------

_HF_ACT = {"silu": "swiglu", "swiglu": "swiglu", "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu",
           "gelu_pytorch_tanh": "gelu", "relu": "gelu"}


def is_hf_config(d: Mapping) -> bool:
    return any(k in d for k in ("num_hidden_layers", "n_layer", "model_type", "architectures"))


def model_from_hf(d: Mapping, name: str = "hf-model") -> dict:
    """Map a Hugging Face ``config.json`` to ModelSpec fields: Llama/Mistral/Mixtral/Qwen names, GPT-2 ``n_*``, and
    the MoE/MLA architectures of ``_hf_architecture_fields`` (DeepSeek-V2/V3, Kimi K2, GLM-4.5, Qwen2-MoE).

    What ModelSpec cannot represent is refused by name (``_refuse_unmodelled``) rather than dropped: a dropped
    feature would be a model with other parameter counts and other per-token work, predicted without a warning.
    """
    def get(*keys, default=None):
        for k in keys:
            if k in d and d[k] is not None:
                return d[k]
        return default

    gpt2 = "n_layer" in d
    layers = get("num_hidden_layers", "n_layer")
    hidden = get("hidden_size", "n_embd", "d_model")
    heads = get("num_attention_heads", "n_head")
    if layers is None or hidden is None or heads is None:
        missing = [k for k, v in (("num_hidden_layers", layers), ("hidden_size", hidden), ("num_attention_heads", heads)) if v is None]
        raise SpecError("model", f"Hugging Face config lacks {', '.join(missing)}")
    act = str(get("hidden_act", "activation_function", default="gelu_new" if gpt2 else "silu")).lower()
    if act not in _HF_ACT:
        raise SpecError("model.hidden_act", f"unsupported activation {act!r} (known: {', '.join(sorted(_HF_ACT))})")
    model_type = str(get("model_type", default="gpt2" if gpt2 else "llama")).lower()
    llama_like = not gpt2 and model_type not in ("gpt2", "gpt_neox", "gptj", "opt", "bloom")
    out: dict[str, Any] = {
        "name": str(get("_name_or_path", default=name)) or name,
        "num_layers": layers,
        "hidden": hidden,
        "num_heads": heads,
        "num_kv_heads": get("num_key_value_heads", default=heads),
        "ffn_hidden": get("intermediate_size", "n_inner", default=4 * hidden if isinstance(hidden, int) else None),
        "vocab_size": get("vocab_size"),
        "activation": _HF_ACT[act],
        "norm": "rmsnorm" if llama_like else "layernorm",
        "position_embedding": "rope" if llama_like else "learned",
        "max_seq_len": get("max_position_embeddings", "n_positions", "n_ctx", default=2048),
        "bias": bool(get("attention_bias", default=not llama_like)) if llama_like else True,
        "tie_embeddings": bool(get("tie_word_embeddings", default=gpt2 or not llama_like)),
    }
    if model_type.startswith("qwen2"):
        out["qkv_bias"] = True  # Qwen2: biases on q, k, v projections only
    if get("head_dim") is not None:
        out["head_dim"] = get("head_dim")
    _refuse_unmodelled(d, model_type)
    experts = get("num_local_experts", "num_experts", "n_routed_experts")
    if experts:
        out["num_experts"] = experts
        out["top_k"] = get("num_experts_per_tok", "top_k", default=2)
        if get("moe_intermediate_size") is not None:
            out["moe_ffn_hidden"] = get("moe_intermediate_size")
    out.update(_hf_architecture_fields(d, model_type, out))
    if out["vocab_size"] is None:
        raise SpecError("model", "Hugging Face config lacks vocab_size")
    return out


# model_types whose config.json keys for shared experts, leading dense blocks and MLA were read against the modelling
# code and the released configs (see _hf_architecture_fields); elsewhere the same key names are refused, not guessed.
_HF_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")  # Kimi K2 is the DeepSeek-V3 architecture
_HF_DEEPSEEK_MOE_TYPES = _HF_MLA_TYPES + ("glm4_moe",)

# key -> (what it describes, the model_types it is mapped for)
_HF_MAPPED_ONLY_FOR: dict[str, tuple[str, tuple[str, ...]]] = {
    "n_shared_experts": ("shared experts", _HF_DEEPSEEK_MOE_TYPES),
    "first_k_dense_replace": ("dense layers among MoE layers", _HF_DEEPSEEK_MOE_TYPES),
    "kv_lora_rank": ("multi-head latent attention", _HF_MLA_TYPES),
    "q_lora_rank": ("multi-head latent attention", _HF_MLA_TYPES),
    "shared_expert_intermediate_size": ("shared experts", ("qwen2_moe",)),
    "num_shared_experts": ("shared experts", ()),
}

# Keys that put MoE on every n-th block only (Qwen2-MoE/Qwen3-MoE decoder_sparse_step, DeepSeek moe_layer_freq,
# Llama 4 interleave_moe_layer_step): ModelSpec's MoE blocks are all blocks after first_dense_layers, so only 1 is.
_HF_MOE_STEP_KEYS = ("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step")


def _refuse_unmodelled(d: Mapping, model_type: str) -> None:
    """SpecError naming the first config.json key that describes an architecture ModelSpec cannot represent (the
    structural features first, so a DeepSeek-V3.2 config is refused for its sparse attention, not its expert keys).

    Mapped, not refused: ``num_nextn_predict_layers`` (DeepSeek-V3/GLM-4.5 multi-token-prediction modules ->
    ``mtp_layers``; not counted in total_params, as in the published totals). Deliberately not refused (they
    change neither a weight count nor the matmul work ModelSpec costs): ``partial_rotary_factor``, ``use_qk_norm``/QK-norm weights (2 x head_dim per block), router
    options (``n_group``, ``topk_group``, ``norm_topk_prob``, ``scoring_func``) and the router's expert-bias vector.
    A ``sliding_window`` with every layer using it (Mistral-7B-v0.1) is accepted and costed as full causal attention,
    as this loader always has; an explicit ``use_sliding_window`` or a per-layer ``layer_types`` pattern is refused.
    """
    for key in _HF_MOE_STEP_KEYS:
        step = d.get(key)
        if step is not None and (isinstance(step, bool) or step != 1):
            raise SpecError(f"model.{key}", f"MoE on every n-th layer only is not modelled (got {step!r}; ModelSpec "
                                            "has MoE in every block after the first first_k_dense_replace)")
    if d.get("mlp_only_layers"):
        raise SpecError("model.mlp_only_layers", "dense layers at chosen indices among MoE layers are not modelled")
    layer_types = d.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        raise SpecError("model.layer_types", "per-layer attention types (sliding-window, linear or chunked attention "
                                             "layers, attention sinks) are not modelled")
    if d.get("use_sliding_window"):
        raise SpecError("model.use_sliding_window", "sliding-window attention is not modelled (attention is costed "
                                                    "as full causal attention)")
    if d.get("attention_chunk_size"):
        raise SpecError("model.attention_chunk_size", "chunked local attention (Llama 4) is not modelled")
    if d.get("index_topk"):
        raise SpecError("model.index_topk", "sparse attention with a top-k indexer (DeepSeek-V3.2, GLM-5) is not "
                                            "modelled")
    for key, (what, types) in _HF_MAPPED_ONLY_FOR.items():
        if d.get(key) and model_type not in types:
            read_for = f"read for model_type {', '.join(types)} only" if types else "ModelSpec reads no such key"
            raise SpecError(f"model.{key}", f"{what} are not modelled for model_type {model_type!r} ({read_for})")


def _hf_int(d: Mapping, key: str) -> int | None:
    """An integer config.json value the mapping computes with (None when absent); SpecError naming the key otherwise
    (``"2" * 1408`` would be a string, ``True * 1408`` a silent 1408)."""
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"model.{key}", f"must be an integer, got {value!r}")
    return value


def _is_moe(out: Mapping) -> bool:
    experts = out.get("num_experts")
    return isinstance(experts, int) and not isinstance(experts, bool) and experts > 1


def _hf_architecture_fields(d: Mapping, model_type: str, out: Mapping) -> dict:
    """ModelSpec fields of the MoE/MLA architectures mapped by model_type (none for the others)."""
    if model_type in _HF_MLA_TYPES:
        return {**_deepseek_mla_fields(d, out), **_deepseek_moe_fields(d, out)}
    if model_type == "glm4_moe":
        return {**_glm4_moe_attention_fields(d), **_deepseek_moe_fields(d, out)}
    if model_type == "qwen2_moe":
        return _qwen2_moe_fields(d, out)
    return {}


def _deepseek_moe_fields(d: Mapping, out: Mapping) -> dict:
    """DeepSeekMoE as DeepSeek-V2/V3, Kimi K2 and GLM-4.5 configure it.

    ``n_shared_experts`` shared experts of ``moe_intermediate_size`` each run as one MLP of their summed width
    (DeepSeek's modeling_deepseek.py DeepseekV2MoE/DeepseekV3MoE and transformers' Glm4MoeMoE:
    ``intermediate_size=config.moe_intermediate_size * config.n_shared_experts``), so shared_expert_ffn is the
    product; the first ``first_k_dense_replace`` blocks have a dense MLP of ``intermediate_size`` (already
    ffn_hidden). ``moe_layer_freq`` > 1 is refused before this.
    """
    if not _is_moe(out):
        return {}
    fields: dict[str, Any] = {"first_dense_layers": d.get("first_k_dense_replace") or 0}
    mtp = _hf_int(d, "num_nextn_predict_layers")
    if mtp:  # multi-token-prediction modules: trained compute on the loss stage (not in the published totals)
        fields["mtp_layers"] = mtp
    n_shared = _hf_int(d, "n_shared_experts")
    if n_shared:
        width = _hf_int(d, "moe_intermediate_size")
        if width is None:
            raise SpecError("model.moe_intermediate_size", "n_shared_experts needs the expert width "
                                                           "moe_intermediate_size")
        fields["shared_expert_ffn"] = n_shared * width
    return fields


def _deepseek_mla_fields(d: Mapping, out: Mapping) -> dict:
    """Multi-head latent attention of DeepSeek-V2/V3 and Kimi K2 (DeepSeek-V2 paper Sec. 2.1; transformers
    DeepseekV3Attention): q_lora_rank null means a full-rank q projection (DeepSeek-V2-Lite); qk_nope_head_dim is
    ModelSpec's head_dim. Keys and values are expanded to every head and the projections carry no biases, so
    num_key_value_heads != num_attention_heads or attention_bias true are refused by name.
    """
    if d.get("kv_lora_rank") is None:
        raise SpecError("model.kv_lora_rank", f"model_type {d.get('model_type')!r} uses multi-head latent "
                                              "attention; kv_lora_rank is missing")
    for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if d.get(key) is None:
            raise SpecError(f"model.{key}", "multi-head latent attention needs it (kv_lora_rank is set)")
    kv_heads = d.get("num_key_value_heads")
    if kv_heads is not None and kv_heads != out["num_heads"]:
        raise SpecError("model.num_key_value_heads", f"multi-head latent attention expands keys and values to every "
                                                     f"head: must equal num_attention_heads={out['num_heads']}, got "
                                                     f"{kv_heads!r}")
    if d.get("attention_bias"):
        raise SpecError("model.attention_bias", "biases on multi-head latent attention projections are not modelled")
    # head_dim: a re-saved config may carry transformers' own head_dim (= qk_rope_head_dim); ModelSpec's is the
    # no-RoPE part, qk_nope_head_dim.
    return {"kv_lora_rank": d["kv_lora_rank"], "q_lora_rank": d.get("q_lora_rank"),
            "head_dim": d["qk_nope_head_dim"], "qk_rope_head_dim": d["qk_rope_head_dim"],
            "v_head_dim": d["v_head_dim"], "num_kv_heads": None, "bias": False, "qkv_bias": None}


def _glm4_moe_attention_fields(d: Mapping) -> dict:
    """GLM-4.5 (glm4_moe): attention_bias puts biases on q, k and v only, none on the output projection or the
    MLPs (transformers Glm4MoeAttention; slime's Megatron GLM-4.5 recipe: --add-qkv-bias --disable-bias-linear).
    GQA with an explicit head_dim; partial RoPE and QK-norm change no weight count ModelSpec keeps (see
    _refuse_unmodelled)."""
    return {"qkv_bias": bool(d.get("attention_bias")), "bias": False}


def _qwen2_moe_fields(d: Mapping, out: Mapping) -> dict:
    """Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): one shared expert MLP of shared_expert_intermediate_size in
    every MoE block, always run.

    Not exact: its output is scaled by a sigmoid gate, a Linear(hidden, 1) of ``hidden`` weights per block, which
    ModelSpec has no term for; that is 2048 x 24 = 49,152 weights of Qwen1.5-MoE-A2.7B's 14.3B (3e-6) and
    3584 x 28 of Qwen2-57B-A14B's 57.4B (2e-6), and one h-wide dot product per token -- accepted and left out.
    Dense blocks (decoder_sparse_step > 1, mlp_only_layers) are refused before this.
    """
    shared = d.get("shared_expert_intermediate_size")
    return {"shared_expert_ffn": shared} if shared and _is_moe(out) else {}


def load_model(spec: str | Mapping | ModelSpec) -> ModelSpec:
    """A ModelSpec from a preset name, a path (YAML/JSON/HF config.json) or a mapping."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
        raw = preset("models", spec)
        if raw is None:
            if not (os.path.sep in spec or spec.endswith((".yaml", ".yml", ".json")) or Path(spec).exists()):
                raise SpecError("model", f"unknown preset {spec!r} (known: {', '.join(preset_names('models'))})")
            data = read_mapping(spec, "model")
            raw = model_from_hf(data, Path(spec).stem) if is_hf_config(data) else data
            raw.setdefault("name", Path(spec).stem)
        return _validate(ModelSpec, raw, "model")
    if isinstance(spec, Mapping):
        if "preset" in spec:
            base = load_model(str(spec["preset"])).model_dump()
            return _validate(ModelSpec, {**base, **{k: v for k, v in spec.items() if k != "preset"}}, "model")
        raw = model_from_hf(spec) if is_hf_config(spec) else dict(spec)
        return _validate(ModelSpec, raw, "model")
    raise SpecError("model", f"expected a preset name, a file or a mapping, got {type(spec).__name__}")


# --- clusters ---------------------------------------------------------------------------------

def load_gpu(spec: str | Mapping) -> GPUSpec:
    if isinstance(spec, str):
        raw = preset("gpus", spec)
        if raw is None:
            raise SpecError("cluster.gpu", f"unknown GPU preset {spec!r} (known: {', '.join(preset_names('gpus'))})")
        return _validate(GPUSpec, raw, "cluster.gpu")
    if isinstance(spec, Mapping):
        if "preset" in spec:
            base = load_gpu(str(spec["preset"])).model_dump()
            return _validate(GPUSpec, {**base, **{k: v for k, v in spec.items() if k != "preset"}}, "cluster.gpu")
        return _validate(GPUSpec, spec, "cluster.gpu")
    raise SpecError("cluster.gpu", f"expected a preset name or a mapping, got {type(spec).__name__}")


def _deep_merge(base: Mapping, top: Mapping) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def load_cluster(spec: str | Mapping | ClusterSpec, gpus: int | None = None) -> ClusterSpec:
    """A ClusterSpec from a preset name, a YAML/JSON file or a mapping (``preset:`` + overrides); ``gpus`` sets its size."""
    if isinstance(spec, ClusterSpec):
        raw: dict = spec.model_dump()
    elif isinstance(spec, str):
        found = preset("clusters", spec)
        if found is None:
            if not (os.path.sep in spec or spec.endswith((".yaml", ".yml", ".json")) or Path(spec).exists()):
                raise SpecError("cluster", f"unknown preset {spec!r} (known: {', '.join(preset_names('clusters'))})")
            data = read_mapping(spec, "cluster")
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
            raw = _deep_merge(base, raw)
    else:
        raise SpecError("cluster", f"expected a preset name, a file or a mapping, got {type(spec).__name__}")
    if isinstance(raw.get("gpu"), (str, Mapping)):
        raw["gpu"] = load_gpu(raw["gpu"]).model_dump()
    if gpus is not None:
        raw["num_gpus"] = gpus
    elif "num_gpus" not in raw:
        raw["num_gpus"] = raw.get("gpus_per_node", 8)
    return _validate(ClusterSpec, raw, "cluster")


# --- scenarios --------------------------------------------------------------------------------

SCENARIO_KEYS = {"name", "description", "model", "cluster", "gpus", "layout", "training"}
LAYOUT_KEYS = set(Layout.model_fields)
TRAINING_KEYS = set(TrainingSpec.model_fields)


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
        raise SpecError(f"scenario.{min(map(str, unknown))}", f"unknown key (allowed: {', '.join(sorted(SCENARIO_KEYS))})")
    base = Path(path).parent
    for key in ("model", "cluster"):  # relative file references are relative to the scenario
        v = data.get(key)
        if isinstance(v, str) and preset("models" if key == "model" else "clusters", v) is None and not os.path.isabs(v):
            cand = base / v
            if cand.exists():
                data[key] = str(cand)
    return data


def build_scenario(raw: Mapping | None = None, overrides: Mapping | None = None) -> Scenario:
    """Merge a raw scenario mapping with flat overrides (CLI flags; ``None`` = not given) and resolve it.

    Override keys: model, cluster, gpus, name, and any Layout or TrainingSpec field.
    """
    raw = dict(raw or {})
    ov = {k: v for k, v in (overrides or {}).items() if v is not None}
    for k in ov:
        if k not in LAYOUT_KEYS | TRAINING_KEYS | {"model", "cluster", "gpus", "name"}:
            raise SpecError(k, "unknown setting")
    model_in = ov.get("model", raw.get("model"))
    if model_in is None:
        raise SpecError("model", "no model given (use --model NAME|PATH or a scenario file)")
    cluster_in = ov.get("cluster", raw.get("cluster"))
    if cluster_in is None:
        raise SpecError("cluster", "no cluster given (use --cluster NAME|PATH or a scenario file)")
    gpus = ov.get("gpus", raw.get("gpus"))
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int)):
        raise SpecError("gpus", f"must be an integer, got {gpus!r}")
    if gpus is not None and not (0 < gpus <= 10_000_000):
        raise SpecError("gpus", f"must be between 1 and 10,000,000, got {gpus}")
    layout_raw = raw.get("layout") or {}
    training_raw = raw.get("training") or {}
    for key, val in (("layout", layout_raw), ("training", training_raw)):
        if not isinstance(val, Mapping):
            raise SpecError(key, f"must be a mapping, got {type(val).__name__}")
    layout_raw = {**layout_raw, **{k: v for k, v in ov.items() if k in LAYOUT_KEYS}}
    training_raw = {**training_raw, **{k: v for k, v in ov.items() if k in TRAINING_KEYS}}
    model = load_model(model_in)
    cluster = load_cluster(cluster_in, gpus)
    layout = _validate(Layout, layout_raw, "layout")
    training = _validate(TrainingSpec, training_raw, "training")
    name = str(ov.get("name", raw.get("name", f"{model.name}@{cluster.name}")))
    return resolve(model, cluster, layout, training, name=name)
