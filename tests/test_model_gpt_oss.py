"""gpt-oss is costed as gpt-oss: parameters, attention sinks, biased router and experts, clamped SwiGLU, alternating
128-key sliding-window blocks, and the Megatron-Bridge GPT OSS 120B rows of the nemo dataset.

Independent truth: OpenAI's model card (arXiv:2508.10925, Table 1: 116.83B total / 5.13B active for gpt-oss-120b,
20.91B / 3.61B for gpt-oss-20b, active counting the unembedding but not the embedding), the closed forms of the
causal window's query-key pairs, and (tests/test_hf_transformers_oracle.py, with these fixtures) transformers' own
GptOssForCausalLM counted on the meta device: equal to the parameter.
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import memory
from trainsim.cost_models.flops import layer_ops
from trainsim.cost_models.param_tensors import block_tensors
from trainsim.specs import SpecError, build_scenario, load_model

# openai/gpt-oss-20b config.json as released (a verbatim copy in another project's test, read_file id 35443043162);
# gpt-oss-120b's differs in num_hidden_layers 36, num_local_experts 128 and its 36 layer_types.
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0, "eos_token_id": 200002,
    "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
    "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True, "vocab_size": 201088,
}
GPT_OSS_120B = {**GPT_OSS_20B, "num_hidden_layers": 36, "num_local_experts": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18}

# Model card Table 1 (total, active); active = every parameter a token touches but the input embedding table.
PUBLISHED = {"gpt-oss-120b": (116.83e9, 5.13e9), "gpt-oss-20b": (20.91e9, 3.61e9)}


def _card_active(m) -> int:
    return m.active_params() - m.vocab_size * m.embed_dim


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_presets_hold_the_model_cards_counts(name):
    m = load_model(name)
    total, active = PUBLISHED[name]
    assert m.total_params() == pytest.approx(total, rel=0.005)
    assert _card_active(m) == pytest.approx(active, rel=0.005)


@pytest.mark.parametrize("cfg,name", [(GPT_OSS_120B, "gpt-oss-120b"), (GPT_OSS_20B, "gpt-oss-20b")])
def test_released_config_maps_to_the_preset(cfg, name):
    hf, preset = load_model(cfg), load_model(name)
    assert hf.total_params() == preset.total_params() and hf.active_params() == preset.active_params()
    assert (hf.attn_sinks, hf.router_bias, hf.bias, hf.swiglu_limit, hf.rope_yarn) == (True, True, True, 7.0, True)
    assert (hf.sliding_window, hf.global_every, hf.num_global_layers) == (128, 2, cfg["num_hidden_layers"] // 2)
    assert (hf.num_experts, hf.top_k, hf.dhead, hf.kv_heads, hf.tie_embeddings) == (
        cfg["num_local_experts"], 4, 64, 8, False)


def test_the_parts_of_one_block_by_hand():
    m = load_model("gpt-oss-120b")
    h, q, kv = 2880, 64 * 64, 8 * 64
    # q, k, v, o weights + their biases + 64 sinks (GptOssAttention)
    assert m.attention_params() == 2 * h * q + 2 * h * kv + (q + 2 * kv + h) + 64
    # per expert gate_up (h x 2f + 2f) and down (f x h + h); the router h x E + E (GptOssExperts, GptOssTopKRouter)
    assert m.mlp_params(2880) == h * 2 * 2880 + 2 * 2880 + 2880 * h + h
    assert m.router_params() == 128 * (h + 1)
    # Table 1's "Attention" row: 0.96B over 36 blocks
    assert 36 * m.attention_params() == pytest.approx(0.96e9, rel=0.005)


@pytest.mark.parametrize("edit,field", [
    ({"attention_bias": False}, "model.attention_bias"),
    ({"attention_bias": None}, "model.attention_bias"),
    ({"sliding_window": None}, "model.sliding_window"),
    ({"swiglu_limit": "7"}, "model.swiglu_limit"),
    ({"layer_types": ["full_attention", "sliding_attention"] * 12}, "model.layer_types"),
    ({"architectures": ["GptOssModel"]}, "model.architectures"),
])
def test_what_cannot_be_costed_is_refused(edit, field):
    with pytest.raises(SpecError) as ei:
        load_model({**GPT_OSS_20B, **edit})
    assert ei.value.field == field


@pytest.mark.parametrize("key", ["num_key_value_heads", "sliding_window", "num_experts_per_tok", "attention_bias"])
def test_keys_left_to_the_class_default_are_refused(key):
    with pytest.raises(SpecError) as ei:
        load_model({k: v for k, v in GPT_OSS_20B.items() if k != key})
    assert ei.value.field == f"model.{key}"


def test_spec_refuses_the_new_fields_out_of_place():
    base = load_model("gpt-oss-20b").model_dump()
    for edit in ({"num_experts": 1, "top_k": 1}, {"activation": "geglu"}, {"activation": "gelu"}):
        with pytest.raises(ValueError):
            load_model({**base, **edit})


def _scenario(seq=4096, flash=True, tp=1, ep=1, gpus=8):
    return build_scenario({"model": "gpt-oss-20b", "cluster": {"preset": "dgx-h100", "num_gpus": gpus},
                           "layout": {"tp": tp, "ep": ep},
                           "training": {"seq_len": seq, "global_batch": gpus // tp, "micro_batch": 1,
                                        "flash_attention": flash, "sequence_parallel": tp > 1}})


def test_window_blocks_count_only_the_window():
    s, w, heads, d = 4096, 128, 64, 64
    attn = next(op for op in layer_ops(_scenario(s)) if op.name == "attention")
    # full-matrix convention (flops.py): a global block 4·a·s²·d; a local one that times its share of the causal
    # query-key pairs, w(w+1)/2 + (s-w)w of s(s+1)/2; half the blocks each
    local = (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
    assert attn.fwd_flops == pytest.approx(4 * heads * s * s * d * (0.5 * local + 0.5), rel=1e-12)
    assert attn.work_fraction == 0.5  # the kernel computes the causal half of it


def test_sinks_and_clamp_are_elementwise_work():
    ops = {op.name: op for op in layer_ops(_scenario(512, flash=False))}
    b, heads, s = 1, 64, 512
    assert ops["attn_sinks"].fwd_flops == 3.0 * b * heads * s  # one exp-and-add per score row and head
    act = ops["expert_swiglu"]
    plain = load_model({**load_model("gpt-oss-20b").model_dump(), "swiglu_limit": None})
    sc = build_scenario({"model": plain.model_dump(), "cluster": {"preset": "dgx-h100", "num_gpus": 8},
                         "training": {"seq_len": 512, "global_batch": 8, "micro_batch": 1, "flash_attention": False}})
    unclamped = next(op for op in layer_ops(sc) if op.name == "expert_swiglu")
    assert act.fwd_flops == pytest.approx(unclamped.fwd_flops * 11 / 6)
    assert "attn_sinks" not in {op.name for op in layer_ops(_scenario(512))}  # inside the fused kernel


@pytest.mark.parametrize("tp,ep", [(1, 1), (2, 4)])
def test_per_rank_parameters_add_sinks_and_router_bias(tp, ep):
    m = load_model("gpt-oss-20b")
    dense, expert = memory.layer_params_per_rank(m, tp, ep, 1)
    tensors = block_tensors(m, tp, ep, 1, "fused")
    assert dense + expert == pytest.approx(sum(t.elems for t in tensors))
    assert any(t.name.endswith(".sinks") and t.elems == 64 / tp for t in tensors)
    assert any(t.name.endswith("router.bias") and t.elems == 32 for t in tensors)
    if (tp, ep) == (1, 1):
        assert dense + expert == m.layer_params()


def _megatron_ops(fused_grouped_mlp=False, framework="megatron", seq=512, dispatcher=None, dtype="bf16"):
    sc = build_scenario({"model": "gpt-oss-20b", "cluster": {"preset": "dgx-h100", "num_gpus": 8},
                         "layout": {"ep": 8},
                         "training": {"seq_len": seq, "global_batch": 8, "micro_batch": 1, "framework": framework,
                                      "fused_grouped_mlp": fused_grouped_mlp, "moe_token_dispatcher": dispatcher,
                                      "dtype": dtype}})
    return {op.name: op for op in layer_ops(sc)}


def test_megatron_eager_expert_passes_by_hand():
    """Megatron-Core's TEGroupedMLP (flops.py MCORE_GLU_CLAMP_RW, MCORE_EXPERT_BIAS_RW): the clamp over fc1's
    output (2 x 2880 per routed token) and the per-expert fc2 bias over its output (2880), bf16; 512 tokens x top-4
    routed to this rank with ep 8 (balanced). RoPE runs Megatron's unfused sequence on q and k (64 + 8 heads of 64)."""
    ops, e, routed = _megatron_ops(), 2, 512 * 4
    clamp, bias, rope = ops["expert_glu_clamp"], ops["expert_fc2_bias"], ops["rope"]
    assert (clamp.fwd_bytes, clamp.bwd_input_bytes) == (4 * e * routed * 5760, 5 * e * routed * 5760)
    assert "moe_act" in clamp.modules  # inside the moe_act checkpoint: recomputed with it
    assert (bias.fwd_bytes, bias.bwd_input_bytes) == (6 * e * routed * 2880, 8 * e * routed * 2880)
    assert (rope.fwd_bytes, rope.bwd_input_bytes) == (12 * e * 512 * 72 * 64, 13 * e * 512 * 72 * 64)


def test_flex_dispatcher_fp32_probs_promote_the_bias_pass():
    """The flex dispatcher (HybridEP / DeepEP) hands TEGroupedMLP fp32 probabilities, so ``t + b * p`` of
    _apply_bias runs in fp32 and ``.to(bf16)`` casts back (mcore_experts.py). Per element of fc2's bf16 output:
    forward b*p write 4, add read 2 + 4 write 4, cat 4 + 4, cast 4 + 2 = 28 bytes; backward the cast's gradient
    2 + 4, the add's gradient cast 4 + 2, the split join 2 + 2, bias and probability gradients 3 x 4 each = 40."""
    routed = 512 * 4
    flex, a2a = _megatron_ops(dispatcher="flex")["expert_fc2_bias"], _megatron_ops(dispatcher="alltoall")
    assert (flex.fwd_bytes, flex.bwd_input_bytes) == (28 * routed * 2880, 40 * routed * 2880)
    bias = a2a["expert_fc2_bias"]  # 16-bit probabilities: the e-byte count of MCORE_EXPERT_BIAS_RW
    assert (bias.fwd_bytes, bias.bwd_input_bytes) == (6 * 2 * routed * 2880, 8 * 2 * routed * 2880)
    assert _megatron_ops()["expert_fc2_bias"] == bias  # dispatcher unstated: 16-bit, as alltoall


def test_fp32_bias_bytes_reduce_to_the_16bit_count_at_4_bytes():
    """With 4-byte activations the promotion changes nothing: no casts, every tensor fp32, so the fp32 count is
    MCORE_EXPERT_BIAS_RW x 4 (a closed-form consistency check of both counts)."""
    from trainsim.cost_models.mcore_experts import MCORE_EXPERT_BIAS_RW, fp32_expert_bias_bytes
    assert fp32_expert_bias_bytes(4) == (MCORE_EXPERT_BIAS_RW[0] * 4, MCORE_EXPERT_BIAS_RW[1] * 4)
    assert fp32_expert_bias_bytes(2) == (28, 40)


def test_op_fuser_experts_drop_the_eager_passes():
    """use_transformer_engine_op_fuser (TrainingSpec.fused_grouped_mlp): bias and clamp inside TE's ops."""
    fused, eager = _megatron_ops(fused_grouped_mlp=True), _megatron_ops()
    assert "expert_glu_clamp" not in fused and "expert_fc2_bias" not in fused
    assert fused["rope"] == eager["rope"]  # the RoPE choice is the model's, not the experts'
    assert set(eager) - set(fused) == {"expert_glu_clamp", "expert_fc2_bias"}


def test_op_fuser_needs_megatron():
    with pytest.raises(SpecError, match="fused_grouped_mlp"):
        _megatron_ops(fused_grouped_mlp=True, framework="torch")


def test_op_fuser_needs_moe_experts():
    """A dense model has no experts for TE's op fuser to run: refused, naming the field."""
    with pytest.raises(SpecError) as err:
        build_scenario({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "num_gpus": 8},
                        "training": {"seq_len": 512, "global_batch": 8, "framework": "megatron",
                                     "fused_grouped_mlp": True}})
    assert err.value.field == "training.fused_grouped_mlp" and "dense" in str(err.value)


def test_eager_clamp_keeps_fc1_output_unless_moe_act_is_recomputed():
    """The two clamps save fc1's raw output (2 x 2880 per routed token, bf16) besides the clamped copy the fused
    activation saves; under moe_act recompute the checkpoint keeps only fc1's output, as without the clamp."""
    from trainsim.cost_models.activations import layer_activation_bytes

    def act(fused, rc=()):
        sc = build_scenario({"model": "gpt-oss-20b", "cluster": {"preset": "dgx-h100", "num_gpus": 8},
                             "layout": {"ep": 8},
                             "training": {"seq_len": 512, "global_batch": 8, "micro_batch": 1,
                                          "fused_grouped_mlp": fused,
                                          **({"recompute": "selective", "recompute_modules": list(rc)} if rc else {})}})
        return layer_activation_bytes(sc).main

    assert act(False) - act(True) == 2 * (512 * 4) * 2 * 2880
    assert act(False, ("moe_act",)) == act(True, ("moe_act",))
