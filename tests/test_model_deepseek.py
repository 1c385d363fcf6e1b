"""DeepSeek-style architectures from a Hugging Face config.json: multi-head latent attention, shared experts and
leading dense blocks are mapped for DeepSeek-V2/V2-Lite/V3, Kimi K2, GLM-4.5 and Qwen2-MoE; the presets' parameter
counts match the published ones; what ModelSpec cannot represent is refused by name; and such a model runs
through `trainsim predict` (and is refused by `trainsim execute`)."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.specs import ModelSpec, SpecError, load_model

# --- released config.json files, as published on the Hugging Face Hub -----------------------------------------------
# Each dict is the repo's config.json (JSON true/false/null written as True/False/None). None of the Hub repos is
# in reach of this project's sources; the values were read in public code that reproduces the files, cited per dict.

# deepseek-ai/DeepSeek-V3. The config.json of deepseek-ai/DeepSeek-R1 (same DeepseekV3ForCausalLM architecture and
# shapes), reproduced verbatim in a public parameter-counting script; its fields agree with the DeepSeek-V3 values
# quoted by other public code ("first_k_dense_replace 3, kv_lora_rank 512, qk_rope_head_dim 64, dense
# intermediate_size 18432", "n_routed_experts 256, n_shared_experts 1, num_experts_per_tok 8").
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModel": "modeling_deepseek.DeepseekV3Model",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.46.3",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}

# deepseek-ai/DeepSeek-V2-Lite: the copy in mlc-ai/pith-train examples/pretrain_lm/deepseek-v2-lite/config.json,
# which drops max_position_embeddings and rewrites rope_scaling; those two are the Hub file's as quoted by a public
# loader test ("The numbers are the real config's": 163840, YaRN factor 40, mscale 0.707).
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
    "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
}

# deepseek-ai/DeepSeek-V2: reproduced in a public Megatron bridge test fixture (DeepSeekV2Bridge) and a Rust loader
# test; the same shapes as DeepSeek-V2.5's config.json (YaRN mscale 1.0 there) printed in a public parameter counter.
DEEPSEEK_V2 = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "ep_size": 1,
    "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
    "intermediate_size": 12288, "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
    "moe_intermediate_size": 1536, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 160,
    "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 128, "num_experts_per_tok": 6,
    "num_hidden_layers": 60, "num_key_value_heads": 128, "pretraining_tp": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 16.0, "scoring_func": "softmax", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 3, "topk_method": "group_limited_greedy", "torch_dtype": "bfloat16",
    "transformers_version": "4.39.3", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
}

# moonshotai/Kimi-K2-Instruct: the raw config.json as printed in a public model report (with the checkpoint's
# tensor inventory used in test_kimi_k2_total_is_the_checkpoints_weight_count).
KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModel": "modeling_deepseek.DeepseekV3Model",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585, "first_k_dense_replace": 1,
    "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 131072, "model_type": "kimi_k2", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
    "num_nextn_predict_layers": 0, "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06, "rope_theta": 50000.0, "routed_scaling_factor": 2.827,
    "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False, "topk_group": 1,
    "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.48.3", "use_cache": True,
    "v_head_dim": 128, "vocab_size": 163840,
}

# Qwen/Qwen1.5-MoE-A2.7B: fields of Qwen/Qwen1.5-MoE-A2.7B-Chat's config.json (printed in full in a public model
# dump of its GPTQ-Int4 variant: same architecture) with the base model's max_position_embeddings 8192 (quoted
# from the base config by a public loader test; also transformers' Qwen2MoeConfig default).
QWEN15_MOE = {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 5632, "sliding_window": 32768, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}

# Qwen/Qwen2-57B-A14B: reproduced verbatim in TensorRT-LLM's Qwen-MoE unit test (QWEN2_57B_A14B_CONFIG).
QWEN2_57B = {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
    "max_window_layers": 28, "model_type": "qwen2_moe", "moe_intermediate_size": 2560, "norm_topk_prob": False,
    "num_attention_heads": 28, "num_experts": 64, "num_experts_per_tok": 8, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 20480, "sliding_window": 131072,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}

# zai-org/GLM-4.5: the glm4_moe config reproduced in a public converter test (FULL_CFG, a GLM-4.5/4.6 shape) with
# GLM-4.5's max_position_embeddings 131072 (GLM-4.6 raised it to 202752); the same shapes as slime's GLM-4.5
# Megatron recipe scripts/models/glm4.5-355B-A32B.sh (copy in zyzshishui/slime: 3 dense + 89 MoE layers, 96 heads,
# 8 query groups, kv-channels 128, ffn 12288, 160 experts of 1536 + a shared expert of 1536, --add-qkv-bias,
# --disable-bias-linear, rotary-percent 0.5).
GLM45 = {
    "architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "eos_token_id": [151329, 151336, 151338],
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "partial_rotary_factor": 0.5,
    "intermediate_size": 12288, "max_position_embeddings": 131072, "model_type": "glm4_moe",
    "moe_intermediate_size": 1536, "norm_topk_prob": True, "num_attention_heads": 96, "n_group": 1, "topk_group": 1,
    "n_routed_experts": 160, "n_shared_experts": 1, "routed_scaling_factor": 2.5, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "num_hidden_layers": 92, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
    "rope_scaling": None, "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "use_qk_norm": True, "vocab_size": 151552,
}

# meta-llama/Llama-4-Maverick-17B-128E text_config, reproduced in TensorRT-LLM's Llama 4 test (there cut to 2 of
# the 48 layers): MoE on every 2nd layer, chunked local attention.
LLAMA4_MAVERICK_TEXT = {
    "attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 2, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576, "model_type": "llama4_text",
    "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8,
    "num_local_experts": 128, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
    "use_qk_norm": False, "vocab_size": 202048,
}

# config -> the preset it must equal (architecture fields; name and published_params aside)
PRESET_OF = {"deepseek-v3": DEEPSEEK_V3, "deepseek-v2-lite": DEEPSEEK_V2_LITE, "deepseek-v2": DEEPSEEK_V2,
             "kimi-k2": KIMI_K2, "qwen1.5-moe-a2.7b": QWEN15_MOE}


def architecture(m: ModelSpec) -> dict:
    """A ModelSpec's fields that define the network (not its name or the published count)."""
    return m.model_dump(exclude={"name", "published_params"})


# --- mapping ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", sorted(PRESET_OF))
def test_hf_config_maps_to_the_preset(preset):
    assert architecture(load_model(PRESET_OF[preset])) == architecture(load_model(preset))


def test_deepseek_v3_fields():
    m = load_model(DEEPSEEK_V3)
    assert (m.num_experts, m.top_k, m.moe_ffn_hidden, m.ffn_hidden) == (256, 8, 2048, 18432)
    assert (m.shared_expert_ffn, m.first_dense_layers) == (1 * 2048, 3)
    assert (m.kv_lora_rank, m.q_lora_rank, m.head_dim, m.qk_rope_head_dim, m.v_head_dim) == (512, 1536, 128, 64, 128)
    assert (m.bias, m.norm, m.position_embedding, m.tie_embeddings, m.activation) == (
        False, "rmsnorm", "rope", False, "swiglu")
    assert m.mtp_layers == 1  # num_nextn_predict_layers: trained, though outside the 671B
    assert m.total_params() == 671_026_404_352


def test_deepseek_v2_lite_has_a_full_rank_query():
    m = load_model(DEEPSEEK_V2_LITE)
    assert m.is_mla and m.q_lora_rank is None and m.kv_lora_rank == 512
    assert (m.shared_expert_ffn, m.first_dense_layers, m.num_experts, m.top_k) == (2 * 1408, 1, 64, 6)


def test_deepseek_v2_fields():
    m = load_model(DEEPSEEK_V2)
    assert (m.num_heads, m.q_lora_rank, m.shared_expert_ffn, m.num_experts, m.top_k) == (128, 1536, 2 * 1536, 160, 6)


def test_kimi_k2_is_mapped_as_deepseek_v3():
    m, v3 = load_model(KIMI_K2), load_model(DEEPSEEK_V3)
    assert (m.num_heads, m.num_experts, m.first_dense_layers, m.vocab_size) == (64, 384, 1, 163840)
    same = ("hidden", "head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank", "q_lora_rank", "moe_ffn_hidden",
            "shared_expert_ffn", "ffn_hidden", "top_k")
    assert {k: getattr(m, k) for k in same} == {k: getattr(v3, k) for k in same}
    # model_type deepseek_v3 (as transformers re-saves it) maps the same way
    assert architecture(load_model({**KIMI_K2, "model_type": "deepseek_v3"})) == architecture(m)


def test_mla_head_dim_is_qk_nope_head_dim_even_when_a_head_dim_key_is_present():
    """transformers' DeepseekV3Config carries its own head_dim (= qk_rope_head_dim) into re-saved configs."""
    assert load_model({**DEEPSEEK_V3, "head_dim": 64}).head_dim == 128


def test_qwen15_moe_shared_expert():
    m = load_model(QWEN15_MOE)
    assert (m.num_experts, m.top_k, m.moe_ffn_hidden, m.shared_expert_ffn, m.first_dense_layers) == (
        60, 4, 1408, 5632, 0)
    assert m.qkv_bias and not m.bias and not m.is_mla


def test_qwen2_57b_a14b_maps_and_counts():
    """Qwen2 model card: 57B total, 14B activated (the shared expert's 1-output sigmoid gate, 3584 weights per
    layer, is not counted: 2e-6 of the total)."""
    m = load_model(QWEN2_57B)
    assert (m.num_kv_heads, m.moe_ffn_hidden, m.shared_expert_ffn, m.num_experts, m.top_k) == (4, 2560, 20480, 64, 8)
    assert m.total_params() == pytest.approx(57e9, rel=0.02)
    assert m.active_params() == pytest.approx(14e9, rel=0.02)


def test_glm45_maps_gqa_with_qkv_biases_and_shared_expert():
    m = load_model(GLM45)
    assert not m.is_mla and (m.num_kv_heads, m.head_dim) == (8, 128)
    assert m.qkv_bias and not m.bias  # q/k/v biases only (Glm4MoeAttention: o_proj bias=False)
    assert (m.num_experts, m.top_k, m.moe_ffn_hidden, m.shared_expert_ffn, m.first_dense_layers) == (
        160, 8, 1536, 1536, 3)
    # zai-org/GLM-4.5 README: 355B total (MTP layer and QK-norm weights not counted here)
    assert m.total_params() == pytest.approx(355e9, rel=0.02)


# --- parameter counts of the presets ----------------------------------------------------------------------------

# preset -> (published total, published activated per token)
PUBLISHED = {
    "deepseek-v3": (671e9, 37e9),        # arXiv:2412.19437, abstract
    "deepseek-v2": (236e9, 21e9),        # arXiv:2405.04434, abstract
    "deepseek-v2-lite": (15.7e9, 2.4e9),  # arXiv:2405.04434 App. B; deepseek-ai/DeepSeek-V2-Lite model card
    "kimi-k2": (1.04e12, 32e9),          # Kimi K2 tech report (arXiv:2507.20534); model card: "1T" / "32B"
    "qwen1.5-moe-a2.7b": (14.3e9, 2.7e9),  # Qwen/Qwen1.5-MoE-A2.7B model card
}

# ModelSpec.active_params() counts the input embedding table (V x h) as activated. Qwen (2.7B, with a separate
# "2.0B non-embedding") and Mistral (Mixtral's 12.9B) count it too; DeepSeek's and Moonshot's figures do not.
INPUT_TABLE_NOT_ACTIVATED = "the published figure does not count the V x h input embedding table as activated"


@pytest.mark.parametrize("preset", sorted(PUBLISHED))
def test_total_matches_published(preset):
    m = load_model(preset)
    assert m.published_params == PUBLISHED[preset][0]
    assert m.total_params() == pytest.approx(PUBLISHED[preset][0], rel=0.02)


@pytest.mark.parametrize("preset", [
    "deepseek-v3", "deepseek-v2", "qwen1.5-moe-a2.7b",
    pytest.param("kimi-k2", marks=pytest.mark.xfail(strict=True, reason=f"32.86B vs 32B: {INPUT_TABLE_NOT_ACTIVATED}")),
    pytest.param("deepseek-v2-lite", marks=pytest.mark.xfail(
        strict=True, reason=f"2.66B vs 2.4B: {INPUT_TABLE_NOT_ACTIVATED}, and 2.45B is still 2.1% off")),
])
def test_active_matches_published(preset):
    assert load_model(preset).active_params() == pytest.approx(PUBLISHED[preset][1], rel=0.02)


@pytest.mark.parametrize("preset", ["deepseek-v3", "deepseek-v2", "kimi-k2"])
def test_deepseek_and_moonshot_activated_counts_leave_out_the_input_embedding_table(preset):
    """Without the V x h table a token only reads one row of, ModelSpec's active count lands on theirs (V3 36.6B,
    V2 20.9B, K2 31.7B); DeepSeek-V2-Lite's 2.45B stays 2.1% above its printed 2.4B."""
    m = load_model(preset)
    assert m.active_params() - m.vocab_size * m.hidden == pytest.approx(PUBLISHED[preset][1], rel=0.02)


def test_deepseek_v3_total_is_671_026_404_352():
    """Closed form from the architecture (arXiv:2412.19437 Sec. 2.1 and 4.2; the config above), by hand."""
    h, layers, dense, vocab = 7168, 61, 3, 129280
    heads, nope, rope, v_dim, q_rank, kv_rank = 128, 128, 64, 128, 1536, 512
    experts, expert_ffn, shared_ffn, dense_ffn = 256, 2048, 2048, 18432
    attention = (h * q_rank + q_rank                      # W_DQ, RMSNorm of the q latent
                 + q_rank * heads * (nope + rope)         # W_UQ and W_QR
                 + h * (kv_rank + rope) + kv_rank         # W_DKV and W_KR, RMSNorm of the kv latent
                 + kv_rank * heads * (nope + v_dim)       # W_UK and W_UV
                 + heads * v_dim * h)                     # W_O
    norms = 2 * h
    dense_block = attention + norms + 3 * h * dense_ffn  # SwiGLU: gate, up, down
    moe_block = attention + norms + experts * 3 * h * expert_ffn + 3 * h * shared_ffn + experts * h  # + router
    total = dense * dense_block + (layers - dense) * moe_block + 2 * vocab * h + h  # untied head, final norm
    assert total == 671_026_404_352
    assert load_model("deepseek-v3").total_params() == total


def test_kimi_k2_total_is_the_checkpoints_weight_count():
    """moonshotai/Kimi-K2-Instruct's 61 safetensors files (tensor inventory printed in a public model report) hold
    1,026,470,731,056 elements: the weights below, plus float32 fp8 block scales (weight_scale_inv, one per 128 x 128
    block), the rotary inv_freq buffers and the routers' e_score_correction_bias -- none a weight ModelSpec counts."""
    h, vocab, layers, moe_layers, experts = 7168, 163840, 61, 60, 384
    attention = (h * 1536 + 1536 + 12288 * 1536         # q_a_proj, q_a_layernorm, q_b_proj
                 + h * 576 + 512 + 16384 * 512           # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
                 + h * 8192)                              # o_proj
    weights = (2 * vocab * h + h                          # embed_tokens, lm_head, final norm
               + layers * (attention + 2 * h)             # + input/post-attention layernorms
               + 3 * h * 18432                            # layer 0: dense MLP
               + moe_layers * (experts * 3 * 2048 * h + experts * h + 3 * 2048 * h))  # experts, gate, shared
    scales = (layers * (12 * 56 + 96 * 12 + 5 * 56 + 128 * 4 + 56 * 64)  # q_a, q_b, kv_a, kv_b, o
              + 3 * 144 * 56                                           # layer 0 gate/up/down
              + moe_layers * (experts + 1) * 3 * 16 * 56)              # routed and shared experts
    buffers = layers * 56 + moe_layers * experts          # inv_freq [56], e_score_correction_bias [384]
    assert weights + scales + buffers == 1_026_470_731_056
    assert load_model("kimi-k2").total_params() == weights


# --- refusals ---------------------------------------------------------------------------------------------------

def refused_field(cfg: dict) -> str:
    with pytest.raises(SpecError) as err:
        load_model(cfg)
    return err.value.field


@pytest.mark.parametrize("cfg, field", [
    ({**DEEPSEEK_V2, "moe_layer_freq": 2}, "model.moe_layer_freq"),
    ({**QWEN15_MOE, "mlp_only_layers": [0, 1]}, "model.mlp_only_layers"),
    ({**QWEN2_57B, "decoder_sparse_step": 2}, "model.decoder_sparse_step"),
    (LLAMA4_MAVERICK_TEXT, "model.interleave_moe_layer_step"),
    # Llama 4 Scout: MoE in every layer, but chunked attention (and a shared expert this loader does not map)
    ({**LLAMA4_MAVERICK_TEXT, "interleave_moe_layer_step": 1, "num_local_experts": 16}, "model.attention_chunk_size"),
    ({**DEEPSEEK_V3, "num_key_value_heads": 16}, "model.num_key_value_heads"),
    ({**DEEPSEEK_V2_LITE, "attention_bias": True}, "model.attention_bias"),
    ({**DEEPSEEK_V3, "model_type": "deepseek_v32", "index_topk": 2048}, "model.index_topk"),
    ({**QWEN2_57B, "use_sliding_window": True}, "model.use_sliding_window"),
    ({**QWEN2_57B, "layer_types": ["sliding_attention", "full_attention"] * 14}, "model.layer_types"),
    # the DeepSeek keys mean what they mean only for the architectures read against their modelling code
    ({**QWEN15_MOE, "model_type": "some_moe", "n_shared_experts": 1}, "model.n_shared_experts"),
    ({**DEEPSEEK_V3, "model_type": "llama"}, "model.n_shared_experts"),
    ({**DEEPSEEK_V3, "model_type": "llama", "n_shared_experts": 0}, "model.first_k_dense_replace"),
    ({**QWEN2_57B, "num_shared_experts": 1}, "model.num_shared_experts"),
    ({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}, "model.kv_lora_rank"),
    ({k: v for k, v in DEEPSEEK_V3.items() if k != "v_head_dim"}, "model.v_head_dim"),
])
def test_unmodelled_architecture_is_refused_by_name(cfg, field):
    assert refused_field(cfg) == field


@pytest.mark.parametrize("cfg, field", [
    ({**DEEPSEEK_V3, "q_lora_rank": "big"}, "model.q_lora_rank"),
    ({**DEEPSEEK_V3, "kv_lora_rank": -512}, "model.kv_lora_rank"),
    ({**DEEPSEEK_V3, "qk_rope_head_dim": True}, "model.qk_rope_head_dim"),
    ({**DEEPSEEK_V2_LITE, "n_shared_experts": "2"}, "model.n_shared_experts"),
    ({**DEEPSEEK_V2_LITE, "first_k_dense_replace": 27}, "model"),  # every layer dense: not a MoE model
])
def test_bad_values_name_the_field(cfg, field):
    assert refused_field(cfg) == field


def test_bad_value_in_a_config_file_is_one_line_on_the_cli(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DEEPSEEK_V2_LITE, "q_lora_rank": "full"}))
    code = main(["predict", "--model", str(path), "--cluster", "dgx-h100"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "model.q_lora_rank" in err[0] and "Traceback" not in err[0]


# --- the CLI ------------------------------------------------------------------------------------------------------

def test_predict_runs_a_deepseek_v2_lite_config_json(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V2_LITE))
    code = main(["predict", "--model", str(path), "--cluster", "dgx-h100", "--gpus", "8", "--ep", "8",
                 "--seq-len", "4096", "--global-batch", "64", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["layout"]["ep"] == 8 and result["step_time_s"] > 0 and result["exposed_comm_s"]["ep"] > 0


def test_execute_refuses_a_dense_mla_model(tmp_path, capsys, monkeypatch):
    """The executor's model has multi-head/grouped-query attention only: refused before any process starts."""
    from trainsim.kernels import launch

    def forbidden(*a, **k):
        raise AssertionError("torchrun was started for a model the executor cannot build")
    monkeypatch.setattr(launch, "run_torchrun", forbidden)
    path = tmp_path / "tiny-mla.yaml"
    path.write_text("num_layers: 4\nhidden: 128\nnum_heads: 4\nhead_dim: 32\nkv_lora_rank: 64\nqk_rope_head_dim: 16\n"
                    "v_head_dim: 32\nffn_hidden: 512\nvocab_size: 1024\nmax_seq_len: 256\nbias: false\n"
                    "tie_embeddings: false\n")
    assert not load_model(str(path)).is_moe and load_model(str(path)).is_mla
    code = main(["execute", "--model", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and "model.kv_lora_rank" in err[0], err
