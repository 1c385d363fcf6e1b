"""Hugging Face ``config.json`` of a Nemotron-H / Nemotron 3 hybrid model (model_type ``nemotron_h``,
NemotronHForCausalLM) -> the ModelSpec fields of its hybrid stack.

Keys as Megatron-Bridge's NemotronHBridge maps them to Megatron-Core (src/megatron/bridge/models/nemotronh/
nemotron_h_bridge.py @067f987d, CONFIG_MAPPING and provider_bridge): hybrid_override_pattern -> the layer pattern,
mamba_num_heads, mamba_head_dim, n_groups, ssm_state_size, chunk_size, conv_kernel; attention_head_dim (or
head_dim) -> kv_channels; no position embedding; squared-ReLU MLPs; n_routed_experts, num_experts_per_tok,
moe_intermediate_size and moe_shared_expert_intermediate_size (one shared expert: n_shared_experts 1) for the MoE
layers (``E``), read only when the pattern has them; num_nextn_predict_layers MTP depths of mtp_hybrid_override_pattern's layers, sharing one module's weights
unless mtp_use_repeated_layer is false (the bridge's _hf_mtp_config and its default True); moe_latent_size ->
LatentMoE's latent width (provider_bridge sets provider.moe_latent_size from it). Refused: biases (use_bias,
mamba_proj_bias, attention_bias, mlp_bias; ``nemotron_h_bias_fields``, which the shared mapper's bias step calls), a
conv without its bias (use_conv_bias false) or more than one shared expert, which the parameter count does not
describe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import SpecError

_REQUIRED = ("hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size",
             "num_key_value_heads")
_MOE_REQUIRED = ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")
_BIAS_KEYS = ("use_bias", "mamba_proj_bias", "attention_bias", "mlp_bias")  # Mamba, attention and MLP linears
_OPTIONAL = {"chunk_size": "mamba_chunk_size", "conv_kernel": "mamba_conv_kernel", "expand": "mamba_expand"}


def nemotron_h_bias_fields(d: Mapping) -> dict[str, Any]:
    """ModelSpec bias fields of a nemotron_h config: none; SpecError naming the first bias key set (module doc)."""
    for key in _BIAS_KEYS:
        if d.get(key):
            raise SpecError(f"model.{key}", "biases in a hybrid Mamba stack are not modelled")
    return {"bias": False}


def _refuse(d: Mapping) -> None:
    """SpecError naming the first key of a layer the hybrid stack's parameter count does not describe."""
    if d.get("n_shared_experts", 1) != 1:
        raise SpecError("model.n_shared_experts", "a nemotron_h MoE layer has one shared expert of "
                                                  "moe_shared_expert_intermediate_size; more are not modelled")
    if d.get("use_conv_bias") is False:
        raise SpecError("model.use_conv_bias", "a Mamba conv1d without its bias is not modelled (MambaMixer has one)")


def nemotron_h_fields(d: Mapping) -> dict[str, Any]:
    """ModelSpec fields of a nemotron_h config (module doc); SpecError naming the first missing or refused key."""
    _refuse(d)
    for key in _REQUIRED:
        if d.get(key) is None:
            raise SpecError(f"model.{key}", "missing: a nemotron_h config names its hybrid stack with it")
    pattern = d["hybrid_override_pattern"]
    out: dict[str, Any] = {
        "hybrid_pattern": pattern, "mamba_heads": d["mamba_num_heads"], "mamba_head_dim": d["mamba_head_dim"],
        "mamba_groups": d["n_groups"], "mamba_state_dim": d["ssm_state_size"],
        **{field: d[key] for key, field in _OPTIONAL.items() if d.get(key) is not None},
    }
    head_dim = d.get("attention_head_dim") or d.get("head_dim")
    if head_dim is not None:
        out["head_dim"] = head_dim
    if isinstance(pattern, str) and "E" in pattern:
        for key in _MOE_REQUIRED:
            if d.get(key) is None:
                raise SpecError(f"model.{key}", "missing: the hybrid pattern has MoE layers (E)")
        out.update(num_experts=d["n_routed_experts"], top_k=d["num_experts_per_tok"],
                   moe_ffn_hidden=d["moe_intermediate_size"])
        if d.get("moe_latent_size"):
            out["moe_latent_size"] = d["moe_latent_size"]
        if d.get("moe_shared_expert_intermediate_size"):
            out["shared_expert_ffn"] = d["moe_shared_expert_intermediate_size"]
    if d.get("num_nextn_predict_layers"):
        if not d.get("mtp_hybrid_override_pattern"):
            raise SpecError("model.mtp_hybrid_override_pattern", "missing: num_nextn_predict_layers > 0 needs the "
                                                                 "layers of one MTP depth")
        out.update(mtp_layers=d["num_nextn_predict_layers"], mtp_pattern=d["mtp_hybrid_override_pattern"],
                   mtp_shared=bool(d.get("mtp_use_repeated_layer", True)))
    return out
