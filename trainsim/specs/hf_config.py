"""Hugging Face ``config.json`` -> ModelSpec fields, for an allow-list of decoder-only architectures.

Each accepted ``model_type`` is mapped as its modelling code in transformers builds it (``HF_ARCHS``): attention
(MHA / GQA / MQA, Falcon's ``multi_query`` and ``new_decoder_architecture``, DeepSeek's MLA), MLP (gated from the
architecture: SwiGLU or GeGLU; two matrices for GPT-2, Falcon and OPT), tied embeddings by the architecture's
default, biases, norms per block, QK-norm, sliding-window and local/global attention layers, logit soft-capping,
OPT's embedding projection and gpt-oss's attention sinks, biased router and clamped SwiGLU. Anything else -- an encoder, an unknown ``model_type``, an ``architectures`` entry
another class, or a key describing a feature ModelSpec cannot represent -- is a SpecError naming the field: a
dropped feature would be a model with other parameter counts and other per-token work, predicted without a
warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SpecError
from .hf_nemotron_h import nemotron_h_bias_fields, nemotron_h_fields
from .spec_config import MAX_NAME_CHARS

# Activation names of config.json -> (gated kind, ungated kind); None where the architecture cannot use it.
_HF_ACT_KIND = {"silu": "silu", "swish": "silu", "swiglu": "silu", "gelu": "gelu", "gelu_new": "gelu",
                "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_python": "gelu", "relu": "relu",
                "relu2": "relu"}  # relu2: squared ReLU (Nemotron-H), an ungated two-matrix MLP


@dataclass(frozen=True)
class HFArch:
    """What one transformers architecture builds, where config.json leaves it to the class's defaults.

    ``tied``: ``tie_word_embeddings`` default of its config class; ``head_dim``: the class's head_dim default when
    the key is absent (None: hidden / heads); ``global_every``: period of full-attention blocks among local ones
    when ``layer_types`` is absent (None: every block local when ``sliding_window`` is set, 0: no window read);
    ``required``: keys the file must spell out (null allowed) because the config class defaults them to a value of
    its own that the mapping's fallback is not (``_HF_CLASS_DEFAULTED``); ``ffn_key``: the one key its MLP width is
    read from (absent: 4 x hidden for GPT-2's and Falcon's two-matrix MLPs, refused for a gated class); ``gqa``:
    whether it reads ``num_key_value_heads`` (GPT-2 and OPT build every head's keys and values);
    ``reads_head_dim``: whether it reads ``head_dim`` (GPT-2, OPT and Falcon use hidden / heads);
    ``expert_width``: the key its experts' width is read from (None: ``intermediate_size``, as Mixtral's and
    gpt-oss's experts); ``expert_keys``: the keys its expert count is read from (the config class's
    own and its attribute_map alias); ``window_pattern``: whether ``sliding_window_pattern`` sets global_every
    (Gemma 3; Gemma 2 always alternates)."""

    classes: tuple[str, ...]
    gated: bool
    norm: str = "rmsnorm"
    position: str = "rope"
    tied: bool = False
    act: str = "silu"
    block_norms: int = 2
    qk_norm: bool = False
    qkv_bias: bool = False
    moe: bool = False
    head_dim: int | None = None
    global_every: int | None = 0
    softcap: bool = False
    required: tuple[str, ...] = ()
    ffn_key: str = "intermediate_size"
    gqa: bool = True
    reads_head_dim: bool = True
    expert_width: str | None = "moe_intermediate_size"
    expert_keys: tuple[str, ...] = ()
    window_pattern: bool = False


# Read against transformers' modelling code (models/<type>/modeling_<type>.py, configuration_<type>.py):
# Llama/Mistral/Mixtral/Qwen/Phi-3: SwiGLU (Phi3MLP's fused gate_up_proj is the same two h x f matrices), RMSNorm,
# RoPE, untied by default. Mistral, Mixtral and Phi-3 pass config.sliding_window to every layer's attention;
# Qwen2/Qwen3 only with use_sliding_window (refused). Qwen2: q/k/v biases (Qwen2Attention bias=True, o_proj
# bias=False). Qwen3: q_norm/k_norm (RMSNorm of head_dim), head_dim default 128. Gemma: GeGLU
# (gelu_pytorch_tanh on the gate), RMSNorm, tied, head_dim 256; Gemma 2/3 add post-attention and
# post-feedforward norms (4 per block), Gemma 2 alternates local (even index) and global blocks and soft-caps
# attention and output logits; Gemma 3 has QK-norm and one global block in 6 (sliding_window_pattern 6).
# GPT-2: learned positions, LayerNorm, biases, tied, fc + proj. Falcon: LayerNorm, rotary, tied, two-matrix GeLU
# MLP, ``bias`` on every linear; OPT: learned positions, LayerNorm, ReLU two-matrix MLP, ``enable_bias``, tied.
# Keys whose absence the config class fills with a default of its own, where the mapping's fallback differs
# (num_key_value_heads -> num_attention_heads, no window, no soft-cap, top-2 routing, experts as wide as the dense
# MLP, no shared or leading dense blocks). transformers' MistralConfig: num_key_value_heads 8, sliding_window 4096
# (read_file id 52091264498); Gemma2Config: num_key_value_heads 4, sliding_window 4096, soft-caps 50.0 / 30.0
# (id 66181675041); Gemma3TextConfig: num_key_value_heads 4, sliding_window 4096 (id 65907536900);
# Qwen3MoeConfig: num_key_value_heads 4, num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768
# (id 51836514800); GptOssConfig: num_key_value_heads 8, sliding_window 128, num_experts_per_tok 4,
# attention_bias true (id 68807404104). LlamaConfig and Phi3Config (id 51859939896) default num_key_value_heads to
# num_attention_heads, as the mapping does. Refusing the absent key, rather than copying each class's
# default, keeps a partial config from being costed with a guess of the transformers version.
_KV = ("num_key_value_heads",)
# Expert-count keys per config class, its own first (transformers 5.24.0 configuration_<type>.py attribute_map):
# MixtralConfig, GptOssConfig and Qwen3MoeConfig num_local_experts (alias num_experts); Qwen2MoeConfig num_experts;
# DeepseekV2Config n_routed_experts (alias num_experts); DeepseekV3Config, Glm4MoeConfig n_routed_experts (alias
# num_local_experts).
_LOCAL, _ROUTED = ("num_local_experts", "num_experts"), ("n_routed_experts", "num_local_experts")
_HF_CLASS_DEFAULTED = {
    "mistral": (*_KV, "sliding_window"), "mixtral": _KV, "qwen2": _KV, "qwen3": _KV, "gemma": _KV,
    "qwen2_moe": (*_KV, "moe_intermediate_size", "num_experts_per_tok", "shared_expert_intermediate_size"),
    "qwen3_moe": (*_KV, "moe_intermediate_size", "num_experts_per_tok"),
    "gemma2": (*_KV, "sliding_window", "attn_logit_softcapping", "final_logit_softcapping"),
    "gemma3_text": (*_KV, "sliding_window"),
    "deepseek": ("moe_intermediate_size", "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace"),
    "glm4_moe": (*_KV, "moe_intermediate_size", "num_experts_per_tok", "n_shared_experts", "first_k_dense_replace"),
    "gpt_oss": (*_KV, "sliding_window", "num_experts_per_tok", "attention_bias"),
    "opt": ("ffn_dim",),  # OPTConfig: ffn_dim 3072 whatever hidden_size is (4 x hidden only at OPT-125m's 768)
}

HF_ARCHS: dict[str, HFArch] = {
    "llama": HFArch(("LlamaForCausalLM",), gated=True),
    "mistral": HFArch(("MistralForCausalLM",), gated=True, global_every=None,
                      required=_HF_CLASS_DEFAULTED["mistral"]),
    "mixtral": HFArch(("MixtralForCausalLM",), gated=True, moe=True, global_every=None, expert_width=None,
                      expert_keys=_LOCAL, required=_HF_CLASS_DEFAULTED["mixtral"]),
    "phi3": HFArch(("Phi3ForCausalLM",), gated=True, global_every=None),
    "qwen2": HFArch(("Qwen2ForCausalLM",), gated=True, qkv_bias=True, required=_HF_CLASS_DEFAULTED["qwen2"]),
    "qwen2_moe": HFArch(("Qwen2MoeForCausalLM",), gated=True, qkv_bias=True, moe=True, expert_keys=("num_experts",),
                        required=_HF_CLASS_DEFAULTED["qwen2_moe"]),
    "qwen3": HFArch(("Qwen3ForCausalLM",), gated=True, qk_norm=True, head_dim=128,
                    required=_HF_CLASS_DEFAULTED["qwen3"]),
    "qwen3_moe": HFArch(("Qwen3MoeForCausalLM",), gated=True, qk_norm=True, head_dim=128, moe=True,
                        expert_keys=_LOCAL, required=_HF_CLASS_DEFAULTED["qwen3_moe"]),
    "gemma": HFArch(("GemmaForCausalLM",), gated=True, tied=True, act="gelu_pytorch_tanh", head_dim=256,
                    required=_HF_CLASS_DEFAULTED["gemma"]),
    "gemma2": HFArch(("Gemma2ForCausalLM",), gated=True, tied=True, act="gelu_pytorch_tanh", head_dim=256,
                     block_norms=4, global_every=2, softcap=True, required=_HF_CLASS_DEFAULTED["gemma2"]),
    "gemma3_text": HFArch(("Gemma3ForCausalLM",), gated=True, tied=True, act="gelu_pytorch_tanh", head_dim=256,
                          block_norms=4, qk_norm=True, global_every=6, softcap=True, window_pattern=True,
                          required=_HF_CLASS_DEFAULTED["gemma3_text"]),
    "deepseek_v2": HFArch(("DeepseekV2ForCausalLM",), gated=True, moe=True,
                          expert_keys=("n_routed_experts", "num_experts"), required=_HF_CLASS_DEFAULTED["deepseek"]),
    "deepseek_v3": HFArch(("DeepseekV3ForCausalLM",), gated=True, moe=True, expert_keys=_ROUTED,
                          required=_HF_CLASS_DEFAULTED["deepseek"]),
    # Kimi K2 is the DeepSeek-V3 architecture
    "kimi_k2": HFArch(("DeepseekV3ForCausalLM",), gated=True, moe=True, expert_keys=_ROUTED,
                      required=_HF_CLASS_DEFAULTED["deepseek"]),
    "glm4_moe": HFArch(("Glm4MoeForCausalLM",), gated=True, moe=True, expert_keys=_ROUTED,
                       required=_HF_CLASS_DEFAULTED["glm4_moe"]),
    # gpt-oss: sliding-window blocks at even indices, full attention at odd ones (GptOssConfig's layer_types
    # default), head_dim 64 (_gpt_oss_fields says the rest)
    "gpt_oss": HFArch(("GptOssForCausalLM",), gated=True, moe=True, head_dim=64, global_every=2, expert_width=None,
                      expert_keys=_LOCAL, required=_HF_CLASS_DEFAULTED["gpt_oss"]),
    # GPT-2, OPT and Falcon: head_dim = hidden // heads (GPT2Attention, OPTAttention: embed_dim // num_heads;
    # FalconConfig.head_dim is that property); the MLP width is GPT-2's n_inner (GPT2MLP: else 4 x hidden), OPT's
    # ffn_dim (fc1/fc2), Falcon's ffn_hidden_size (FalconConfig: else 4 x hidden); GPT-2 and OPT have no GQA
    # (Falcon's key/value heads: _falcon_fields). transformers 5.24.0, models/<type>/modeling_<type>.py.
    "gpt2": HFArch(("GPT2LMHeadModel",), gated=False, norm="layernorm", position="learned", tied=True,
                   act="gelu_new", ffn_key="n_inner", gqa=False, reads_head_dim=False),
    "falcon": HFArch(("FalconForCausalLM",), gated=False, norm="layernorm", tied=True, act="gelu",
                     ffn_key="ffn_hidden_size", reads_head_dim=False),
    "opt": HFArch(("OPTForCausalLM",), gated=False, norm="layernorm", position="learned", tied=True, act="relu",
                  ffn_key="ffn_dim", gqa=False, reads_head_dim=False, required=_HF_CLASS_DEFAULTED["opt"]),
    # Nemotron-H / Nemotron 3 hybrid Mamba stacks: specs/hf_nemotron_h.py maps the pattern, Mamba dims and experts.
    "nemotron_h": HFArch(("NemotronHForCausalLM",), gated=False, position="none", act="relu2", block_norms=1),
}

# Encoders and encoder-decoders: bidirectional attention, other heads and losses than a causal LM's.
_HF_ENCODERS = frozenset({
    "bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "camembert",
    "mpnet", "ernie", "modernbert", "t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper",
    "encoder-decoder", "switch_transformers"})

# model_type of a vision-language model whose language model is a config of its own: cost that one.
_HF_TEXT_CONFIG_OF = {"gemma3": "gemma3_text"}


def is_hf_config(d: Mapping) -> bool:
    """Whether a mapping reads as a Hugging Face config.json (a layer count, model_type or architectures)."""
    return any(k in d for k in ("num_hidden_layers", "n_layer", "model_type", "architectures"))


def hf_architecture(d: Mapping) -> tuple[str, HFArch]:
    """The allow-listed architecture of config ``d``; SpecError naming ``model_type`` or ``architectures``."""
    model_type = d.get("model_type")
    if model_type is None:
        raise SpecError("model.model_type", "missing: a Hugging Face config.json names its architecture in "
                                            f"model_type (accepted: {', '.join(sorted(HF_ARCHS))})")
    model_type = str(model_type).lower()
    if model_type in _HF_ENCODERS:
        raise SpecError("model.model_type", f"{model_type!r} is an encoder or encoder-decoder model; only "
                                            "decoder-only causal LMs are modelled")
    if model_type in _HF_TEXT_CONFIG_OF:
        raise SpecError("model.model_type", f"{model_type!r} is a vision-language model; the vision tower is not "
                                            f"modelled (its text_config, model_type "
                                            f"{_HF_TEXT_CONFIG_OF[model_type]!r}, is)")
    arch = HF_ARCHS.get(model_type)
    if arch is None:
        raise SpecError("model.model_type", f"architecture {model_type!r} is not modelled (accepted: "
                                            f"{', '.join(sorted(HF_ARCHS))})")
    classes = d.get("architectures")
    if classes is not None:
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise SpecError("model.architectures", f"must be a list of class names, got {classes!r}")
        other = [c for c in classes if c not in arch.classes]
        if other:
            raise SpecError("model.architectures", f"{other[0]!r} is not {model_type!r}'s causal LM "
                                                   f"({', '.join(arch.classes)}); only that class is modelled")
    return model_type, arch


def _get(d: Mapping, *keys: str, default=None):
    """The first of ``keys`` present with a value (config.json spells the same field differently per model)."""
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return default


def _first_key(d: Mapping, *keys: str) -> str:
    return next((k for k in keys if d.get(k) is not None), keys[0])


# config.json switches the mapping reads as true/false (here and in hf_nemotron_h.py).
_HF_BOOL_KEYS = ("tie_word_embeddings", "use_qk_norm", "bias", "enable_bias", "alibi", "new_decoder_architecture",
                 "multi_query", "parallel_attn", "attention_bias", "mlp_bias", "use_sliding_window",
                 "add_cross_attention", "is_encoder_decoder", "use_bidirectional_attention",
                 "layer_norm_elementwise_affine", "use_conv_bias", "mtp_use_repeated_layer", "use_bias",
                 "mamba_proj_bias")


def _refuse_non_booleans(d: Mapping) -> None:
    """SpecError naming the first switch that is neither true, false nor null: the mapping tests them by truth, so
    a quoted "false" (or 0.0, []) would read as true (or false) whatever was meant."""
    for key in _HF_BOOL_KEYS:
        if d.get(key) is not None and not isinstance(d[key], bool):
            raise SpecError(f"model.{key}", f"must be true or false, got {d[key]!r}")


def _model_name(name: str) -> str:
    """The model's name from a config's ``_name_or_path``: save_pretrained writes the local checkpoint directory
    there, which may run to PATH_MAX; past MAX_NAME_CHARS its end (the directory's own name) is kept behind an
    ellipsis, as the name of the model rather than a refusal of a config transformers reads."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    return "\u2026" + name[-(MAX_NAME_CHARS - 1):]


def model_from_hf(d: Mapping, name: str = "hf-model") -> dict:
    """Map a Hugging Face ``config.json`` of an allow-listed architecture (``HF_ARCHS``) to ModelSpec fields."""
    _refuse_non_booleans(d)
    _refuse_unmodelled(d)
    model_type, arch = hf_architecture(d)
    _refuse_class_defaulted(d, model_type, arch)
    # GPT2Config maps the canonical names onto n_layer / n_embd / n_head (attribute_map; the canonical one wins when
    # both are given); every other class reads the canonical names only
    aliases = model_type == "gpt2"
    layers, hidden, heads = (_get(d, "num_hidden_layers", *("n_layer",) * aliases),
                             _get(d, "hidden_size", *("n_embd",) * aliases),
                             _get(d, "num_attention_heads", *("n_head",) * aliases))
    if model_type == "falcon" and d.get("n_embed") is not None:
        hidden = d["n_embed"]  # FalconConfig pops the old n_embed, which overrides hidden_size
    if layers is None or hidden is None or heads is None:
        missing = [k for k, v in (("num_hidden_layers", layers), ("hidden_size", hidden),
                                  ("num_attention_heads", heads)) if v is None]
        raise SpecError("model", f"Hugging Face config lacks {', '.join(missing)}")
    if d.get("vocab_size") is None:
        raise SpecError("model", "Hugging Face config lacks vocab_size")
    activation = _activation(d, arch)
    if not isinstance(_get(d, "_name_or_path", default=name), str):  # a model is named by text, not a repr
        raise SpecError("model._name_or_path", f"must be a string, got {d['_name_or_path']!r}")
    out: dict[str, Any] = {
        "name": _model_name(_get(d, "_name_or_path", default=name) or name),
        "num_layers": layers, "hidden": hidden, "num_heads": heads,
        "num_kv_heads": _get(d, "num_key_value_heads", default=heads) if arch.gqa else heads,
        "ffn_hidden": _ffn_hidden(d, arch, hidden),
        "vocab_size": d["vocab_size"],
        "activation": activation,
        "norm": arch.norm, "position_embedding": arch.position,
        "max_seq_len": _get(d, "max_position_embeddings", "n_positions", "n_ctx", default=2048),
        "tie_embeddings": bool(_get(d, "tie_word_embeddings", default=arch.tied)),
        "block_norms": arch.block_norms,
        "qk_norm": arch.qk_norm or bool(model_type == "glm4_moe" and d.get("use_qk_norm")),
        **_bias_fields(d, model_type, arch),
        **_window_fields(d, arch, layers),
    }
    head_dim = _get(d, "head_dim", default=arch.head_dim) if arch.reads_head_dim else None
    if head_dim is not None:
        out["head_dim"] = head_dim
    if arch.softcap:
        out.update({k: d[key] for k, key in (("attn_softcap", "attn_logit_softcapping"),
                                             ("final_softcap", "final_logit_softcapping")) if d.get(key) is not None})
    if model_type == "falcon":
        out.update(_falcon_fields(d, heads))
    if model_type == "opt":
        out.update(_opt_fields(d, hidden))
    out.update(_experts(d, model_type, arch))
    out.update(_hf_architecture_fields(d, model_type, out))
    return out


def _refuse_class_defaulted(d: Mapping, model_type: str, arch: HFArch) -> None:
    """SpecError naming the first key the file leaves to its config class's own default (``HFArch.required``), and
    the expert count of a MoE architecture when missing, null, zero or false (every config class defaults it to a
    count of its own; without one the model would be costed dense)."""
    for key in arch.required:
        if key not in d:
            raise SpecError(f"model.{key}", f"missing: transformers' {model_type!r} config class defaults it to a "
                                            "value of its own, not the one assumed without it; state it")
    if not arch.moe:
        return
    keys = arch.expert_keys
    if not any(k in d for k in keys):
        raise SpecError("model.num_experts", f"missing: {model_type!r} is a mixture-of-experts architecture; state "
                                             f"its expert count ({' / '.join(keys)})")
    for key in (k for k in keys if k in d):  # null, 0 or false would cost the model dense
        count = d[key]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SpecError(f"model.{key}", f"{model_type!r} is a mixture-of-experts architecture; the expert count "
                                            f"must be a positive integer, got {count!r}")


def _activation(d: Mapping, arch: HFArch) -> str:
    """ModelSpec activation: the architecture says gated or not, the config which function (Gemma 2/3 read
    hidden_activation first, as their modelling code does)."""
    key = _first_key(d, "hidden_activation", "hidden_act", "activation_function", "activation")
    act = str(_get(d, key, default=arch.act)).lower()
    kind = _HF_ACT_KIND.get(act)
    if kind is None or (arch.gated and kind == "relu"):
        known = sorted(a for a, k in _HF_ACT_KIND.items() if not (arch.gated and k == "relu"))
        raise SpecError(f"model.{key}", f"unsupported activation {act!r} (known: {', '.join(known)})")
    if not arch.gated:
        return "gelu"  # two-matrix MLP; GeLU and ReLU differ only in the elementwise op between
    return "swiglu" if kind == "silu" else "geglu"


def _ffn_hidden(d: Mapping, arch: HFArch, hidden: Any) -> Any:
    """The MLP width from the one key the architecture's class reads (``HFArch.ffn_key``); others are ignored, as
    transformers ignores them."""
    if d.get(arch.ffn_key) is not None:
        return d[arch.ffn_key]
    if arch.gated:
        raise SpecError(f"model.{arch.ffn_key}", "missing (the MLP width of a gated architecture has no default)")
    return 4 * hidden if isinstance(hidden, int) and not isinstance(hidden, bool) else None  # GPT-2/Falcon/OPT


def _bias_fields(d: Mapping, model_type: str, arch: HFArch) -> dict:
    """Biases as each architecture places them: GPT-2 on every linear, Falcon's ``bias`` and OPT's ``enable_bias``
    on every linear, Qwen2 on q/k/v only, none in a nemotron_h hybrid stack (hf_nemotron_h refuses its bias keys);
    the Llama family's ``attention_bias`` (q, k, v and o, not the MLP) and ``mlp_bias`` have no ModelSpec
    equivalent and are refused (DeepSeek and GLM-4.5 map theirs in _hf_architecture_fields)."""
    if model_type == "gpt2":
        return {"bias": True}
    if model_type == "falcon":
        return {"bias": bool(d.get("bias", False))}
    if model_type == "opt":
        return {"bias": bool(d.get("enable_bias", True))}
    if model_type in _HF_DEEPSEEK_MOE_TYPES:
        return {"bias": False}
    if model_type == "gpt_oss":
        return _gpt_oss_bias(d)
    if model_type == "nemotron_h":
        return nemotron_h_bias_fields(d)
    for key in ("attention_bias", "mlp_bias"):
        if d.get(key):
            raise SpecError(f"model.{key}", f"biases on the attention projections only (q, k, v and o) or on the "
                                            f"MLP only are not modelled for model_type {model_type!r}")
    return {"bias": False, **({"qkv_bias": True} if arch.qkv_bias else {})}


def _window_fields(d: Mapping, arch: HFArch, layers: Any) -> dict:
    """Sliding-window (local) attention: every block (Mistral, Mixtral, Phi-3 pass ``sliding_window`` to every
    layer), or local blocks with one global block every k (Gemma 2: k = 2, Gemma 3: ``sliding_window_pattern``,
    default 6; or spelled out per block in ``layer_types``). A ``layer_types`` pattern of another shape, or one on
    an architecture that reads no window, is refused."""
    types = d.get("layer_types")
    if arch.global_every == 0:
        if isinstance(types, list) and any(t != "full_attention" for t in types):
            raise SpecError("model.layer_types", "per-layer attention types (sliding-window, linear or chunked "
                                                 "attention layers, attention sinks) are not modelled for this "
                                                 "model_type")
        return {}
    window = _hf_int(d, "sliding_window")
    if types is not None and arch.global_every is None:
        # Mistral, Mixtral and Phi-3 pass sliding_window to every layer and read no layer_types (MistralConfig
        # warns that a layer_types list needs the Ministral classes; read_file id 52091264498)
        uniform = "sliding_attention" if window is not None else "full_attention"
        if not isinstance(types, list) or any(t != uniform for t in types):
            raise SpecError("model.layer_types", f"this model_type applies sliding_window={window} to every layer and "
                                                 f"reads no per-layer types: every entry must be {uniform!r}")
        return {"sliding_window": window} if window is not None else {}
    if types is not None:
        return _layer_types_fields(types, window, layers)
    if window is None:
        return {}
    if arch.global_every is None:
        return {"sliding_window": window}
    every = _window_pattern(d) if arch.window_pattern else arch.global_every
    return {"sliding_window": window, "global_every": every} if every > 1 else {}


def _window_pattern(d: Mapping) -> int:
    """Gemma 3's period of global blocks: ``sliding_window_pattern`` (Gemma3TextConfig: layer i global when
    (i + 1) % pattern == 0, default 6; 1: every block global); a pattern below 1 is refused (0 divides by zero in
    transformers, a negative one is no period). ``_sliding_window_pattern``, the attribute transformers writes next
    to ``layer_types`` when it saves a config, is read in its absence (transformers 5.24.0 itself falls back to 6
    there; a re-saved file's ``layer_types``, read before this, settles its pattern)."""
    key = _first_key(d, "sliding_window_pattern", "_sliding_window_pattern")
    every = _hf_int(d, key)
    if every is None:
        return 6
    if every < 1:
        raise SpecError(f"model.{key}", f"must be a positive integer (one global layer every k), got {every!r}")
    return every


def _layer_types_fields(types: Any, window: int | None, layers: Any) -> dict:
    kinds = ("full_attention", "sliding_attention")
    if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
        raise SpecError("model.layer_types", f"must list {' or '.join(kinds)} for each of the {layers} layers")
    local = [t == "sliding_attention" for t in types]
    if not any(local):
        return {}
    if window is None:
        raise SpecError("model.sliding_window", "layer_types has sliding_attention layers but no window size")
    if all(local):
        return {"sliding_window": window}
    every = local.index(False) + 1
    if any(local[i] != bool((i + 1) % every) for i in range(len(local))):
        raise SpecError("model.layer_types", "local and global layers other than one global layer every k "
                                             "(layer i global when (i + 1) % k == 0) are not modelled")
    return {"sliding_window": window, "global_every": every}


def _falcon_fields(d: Mapping, heads: Any) -> dict:
    """Falcon (transformers FalconAttention / FalconDecoderLayer): key/value heads are ``num_kv_heads`` with
    ``new_decoder_architecture`` (Falcon-40B/180B), 1 with ``multi_query`` (Falcon-7B), else every head. Norms per
    block as FalconDecoderLayer builds them: 2 in the sequential block (``parallel_attn`` false); in the parallel
    block ln_attn and ln_mlp when ``num_ln_in_parallel_attn`` is 2 (its default in the new architecture), one
    input_layernorm for any other value. A ``head_dim`` key is refused, as FalconConfig refuses it. ALiBi
    (``alibi``) is refused: the rotary path is the one modelled."""
    if d.get("alibi"):
        raise SpecError("model.alibi", "ALiBi position biases are not modelled (rotary Falcon configs are)")
    if d.get("head_dim") is not None:  # FalconConfig.head_dim is a property without a setter: transformers raises
        raise SpecError("model.head_dim", "Falcon's head_dim is hidden_size // num_attention_heads (FalconConfig "
                                          "derives it and cannot load a config that sets it); remove the key")
    new_arch = bool(d.get("new_decoder_architecture"))
    if new_arch:
        kv = _get(d, "num_kv_heads", default=heads)
    else:
        kv = 1 if d.get("multi_query", True) else heads
    parallel_norms = _hf_int(d, "num_ln_in_parallel_attn")
    if parallel_norms is None and new_arch:
        parallel_norms = 2
    norms = 2 if not d.get("parallel_attn", True) or parallel_norms == 2 else 1
    return {"num_kv_heads": kv, "block_norms": norms}


def _opt_fields(d: Mapping, hidden: Any) -> dict:
    """OPT (transformers OPTDecoder): word embeddings of ``word_embed_proj_dim`` with bias-free project_in /
    project_out when it differs from hidden_size (OPT-350m: 512 vs 1024). Not counted, 2 x hidden each: the
    two reserved rows of the learned positions (OPTLearnedPositionalEmbedding's offset) and, for a post-norm
    model (``do_layer_norm_before`` false), the final LayerNorm it does not have (2e-6 and 6e-6 of OPT-350m)."""
    if d.get("layer_norm_elementwise_affine") is False:
        raise SpecError("model.layer_norm_elementwise_affine", "LayerNorm without weights is not modelled")
    proj = _hf_int(d, "word_embed_proj_dim")
    return {"embed_proj_dim": proj} if proj and proj != hidden else {}


def _experts(d: Mapping, model_type: str, arch: HFArch) -> dict:
    if model_type == "nemotron_h":  # experts only where the hybrid pattern has MoE layers (hf_nemotron_h.py)
        return {}
    key = _first_key(d, *(arch.expert_keys or ("num_local_experts", "num_experts", "n_routed_experts")))
    experts = d.get(key)
    if not experts:
        return {}
    if not arch.moe:
        raise SpecError(f"model.{key}", f"experts are not read for model_type {model_type!r} (a dense architecture)")
    # num_experts_per_tok: every MoE config class's routing key; its absence is refused where the class's default
    # is not MixtralConfig's 2 (_HF_CLASS_DEFAULTED)
    fields = {"num_experts": experts, "top_k": _get(d, "num_experts_per_tok", default=2)}
    if arch.expert_width is not None and d.get(arch.expert_width) is not None:
        fields["moe_ffn_hidden"] = d[arch.expert_width]
    return fields


# model_types whose config.json keys for shared experts, leading dense blocks and MLA were read against the modelling
# code and the released configs (see _hf_architecture_fields); elsewhere the same key names are refused, not guessed.
_HF_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")  # Kimi K2 is the DeepSeek-V3 architecture
_HF_DEEPSEEK_MOE_TYPES = _HF_MLA_TYPES + ("glm4_moe",)

# key -> (what it describes, the model_types it is mapped for)
_HF_MAPPED_ONLY_FOR: dict[str, tuple[str, tuple[str, ...]]] = {
    "n_shared_experts": ("shared experts", (*_HF_DEEPSEEK_MOE_TYPES, "nemotron_h")),
    "first_k_dense_replace": ("dense layers among MoE layers", _HF_DEEPSEEK_MOE_TYPES),
    "kv_lora_rank": ("multi-head latent attention", _HF_MLA_TYPES),
    "q_lora_rank": ("multi-head latent attention", _HF_MLA_TYPES),
    "shared_expert_intermediate_size": ("shared experts", ("qwen2_moe",)),
    "num_shared_experts": ("shared experts", ()),
    "hybrid_override_pattern": ("hybrid Mamba / attention stacks", ("nemotron_h",)),
}

# Keys that put MoE on every n-th block only (Qwen2-MoE/Qwen3-MoE decoder_sparse_step, DeepSeek moe_layer_freq,
# Llama 4 interleave_moe_layer_step): ModelSpec's MoE blocks are all blocks after first_dense_layers, so only 1 is.
_HF_MOE_STEP_KEYS = ("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step")


def _refuse_unmodelled(d: Mapping) -> None:
    """SpecError naming the first config.json key that describes an architecture ModelSpec cannot represent (the
    structural features first, before the allow-list, so a DeepSeek-V3.2 config is refused for its sparse
    attention and a Llama 4 config for its interleaved MoE).

    Mapped, not refused: ``num_nextn_predict_layers`` (DeepSeek-V3/GLM-4.5 multi-token-prediction modules ->
    ``mtp_layers``; not counted in total_params, as in the published totals). Deliberately not refused (they
    change neither a weight count nor the matmul work ModelSpec costs): ``partial_rotary_factor``, router options
    (``n_group``, ``topk_group``, ``norm_topk_prob``, ``scoring_func``) and the router's expert-bias vector.
    Qwen2/Qwen3's explicit ``use_sliding_window`` (windows on the layers from ``max_window_layers``) is refused.
    """
    model_type = str(d.get("model_type", "")).lower()
    for key in _HF_MOE_STEP_KEYS:
        step = d.get(key)
        if step is not None and (isinstance(step, bool) or step != 1):
            raise SpecError(f"model.{key}", f"MoE on every n-th layer only is not modelled (got {step!r}; ModelSpec "
                                            "has MoE in every block after the first first_k_dense_replace)")
    if d.get("mlp_only_layers"):
        raise SpecError("model.mlp_only_layers", "dense layers at chosen indices among MoE layers are not modelled")
    if d.get("add_cross_attention"):  # GPT2Block adds crossattention + ln_cross_attn: an encoder-decoder's decoder
        raise SpecError("model.add_cross_attention", "cross-attention blocks (a decoder attending to an encoder) are "
                                                     "not modelled")
    for key in ("is_encoder_decoder", "use_bidirectional_attention"):  # EmbeddingGemma, encoder-decoder wrappers
        if d.get(key):
            raise SpecError(f"model.{key}", "bidirectional (encoder) attention is not modelled; only causal "
                                            "decoder-only LMs are")
    if d.get("use_sliding_window"):
        raise SpecError("model.use_sliding_window", "sliding-window attention from max_window_layers on is not "
                                                    "modelled")
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
    if model_type == "gpt_oss":
        return _gpt_oss_fields(d)
    if model_type == "nemotron_h":
        return nemotron_h_fields(d)
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


# gpt-oss's expert clamp when config.json does not state swiglu_limit: transformers' GptOssExperts fixes
# ``self.limit = 7.0`` (modeling_gpt_oss.py, read_file id 44441688634) and GptOssConfig defaults swiglu_limit to 7.0.
_GPT_OSS_SWIGLU_LIMIT = 7.0


def _gpt_oss_bias(d: Mapping) -> dict:
    """gpt-oss (transformers GptOssAttention / GptOssExperts): ``attention_bias`` puts biases on q, k, v and o,
    and every expert's gate_up_proj and down_proj carry biases whatever it says. ModelSpec's ``bias`` is one
    switch for both, so only attention_bias true (the released models') is mapped."""
    if not d.get("attention_bias"):
        raise SpecError("model.attention_bias", "gpt-oss experts always carry biases; attention without them "
                                                "(attention_bias false) is not modelled")
    return {"bias": True}


def _gpt_oss_fields(d: Mapping) -> dict:
    """gpt-oss (transformers modeling_gpt_oss.py, read_file id 44441688634; OpenAI's model card, arXiv:2508.10925):
    a learned sink logit per head in every attention softmax (GptOssAttention.sinks), a router with a bias
    (GptOssTopKRouter.bias) and the clamped SwiGLU of the experts (``swiglu_limit``; alpha 1.702). YaRN RoPE
    (``rope_scaling`` rope_type yarn) changes no weight; it is recorded (rope_yarn) because Megatron runs it unfused."""
    limit = d.get("swiglu_limit", _GPT_OSS_SWIGLU_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit <= 1_000_000:
        raise SpecError("model.swiglu_limit", f"must be a number in (0, 1e6], got {limit!r}")
    scaling = d.get("rope_scaling")
    yarn = isinstance(scaling, Mapping) and (scaling.get("rope_type") or scaling.get("type")) == "yarn"
    return {"attn_sinks": True, "router_bias": True, "swiglu_limit": float(limit), "rope_yarn": yarn}
