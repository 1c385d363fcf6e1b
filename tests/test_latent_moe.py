"""LatentMoE (ModelSpec.moe_latent_size; Megatron-Core MoELayer fc1_latent_proj / fc2_latent_proj): Nemotron 3
Super's parameter counts against its released checkpoint, the latent MoE layer's FLOPs, all-to-all bytes and saved
activations in closed form, and the refusals."""

import pytest

from trainsim.specs import load_model
from trainsim.specs.errors import SpecError

SUPER = "nemotron-3-super-120b-a12b"
# The config.json of nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 (the keys trainsim reads; values as the release
# prints them, quoted verbatim by public test fixtures: read_file ids 70608027248, 70181782850).
SUPER_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "attention_bias": False, "head_dim": 128,
    "chunk_size": 128, "conv_kernel": 4, "expand": 2, "hidden_size": 4096,
    "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
    "intermediate_size": 2688, "mamba_head_dim": 64, "mamba_num_heads": 128, "mamba_proj_bias": False,
    "max_position_embeddings": 262144, "mlp_bias": False, "mlp_hidden_act": "relu2", "moe_intermediate_size": 2688,
    "moe_latent_size": 1024, "moe_shared_expert_intermediate_size": 5376, "mtp_hybrid_override_pattern": "*E",
    "n_groups": 8, "n_routed_experts": 512, "n_shared_experts": 1, "num_attention_heads": 32,
    "num_experts_per_tok": 22, "num_hidden_layers": 88, "num_key_value_heads": 2, "num_nextn_predict_layers": 1,
    "ssm_state_size": 128, "tie_word_embeddings": False, "use_bias": False, "use_conv_bias": True,
    "vocab_size": 131072,
}
# Safetensors headers of that checkpoint (read_file id 70181782850): BF16 weights 123,611,012,096, of which the MTP
# module's 2,942,324,736 (the fp32 e_score_correction_bias buffers are not weights).
CHECKPOINT_BF16 = 123_611_012_096
CHECKPOINT_MTP = 2_942_324_736


def test_super_total_params_are_the_checkpoint_count_exactly():
    """Backbone = checkpoint less its MTP module; every LatentMoE term (512 experts at width 1024, the two
    4096 x 1024 projections, router, 5376 shared expert) is needed for the exact match. The release names it
    120B total (Megatron-Bridge docs/models/nemotron/nemotron3-super.md @067f987d)."""
    m = load_model(SUPER)
    assert m.total_params() == CHECKPOINT_BF16 - CHECKPOINT_MTP
    assert abs(m.total_params() - m.published_params) <= 0.01 * m.published_params
    assert m.hybrid_counts() == {"M": 40, "E": 40, "*": 8}


def test_super_mtp_module_is_the_checkpoint_count():
    """One shared MTP depth ('*E': attention + LatentMoE layer, eh_proj 2h x h, three norms) on one rank."""
    from trainsim.cost_models import memory
    assert sum(memory.mtp_params_per_rank(load_model(SUPER), 1, 1)) == CHECKPOINT_MTP


def test_super_active_params():
    """Per token: top-22 experts at latent width + router + shared expert + both projections per MoE layer, all
    Mamba and attention layers, embeddings: 12.77B; the release's figure is "12B active"."""
    m = load_model(SUPER)
    h, l, f = 4096, 1024, 2688
    moe_active = 22 * 2 * l * f + 512 * h + 2 * h * 5376 + 2 * h * l + h
    assert m.active_params() == (m.total_params() - 40 * (512 * 2 * l * f + 512 * h + 2 * h * 5376 + 2 * h * l + h)
                                 + 40 * moe_active)
    assert abs(m.active_params() - m.published_active_params) <= 0.07 * m.published_active_params


def test_super_config_json_maps_to_the_preset():
    m, preset = load_model(SUPER_HF), load_model(SUPER)
    assert (m.moe_latent_size, m.mtp_pattern, m.mtp_shared) == (1024, "*E", True)
    assert m.total_params() == preset.total_params() and m.active_params() == preset.active_params()


def _super_moe_layer(dtype="bf16", **layout):
    from trainsim.cost_models.shapes import block_kinds
    from trainsim.specs.loaders import build_scenario
    scn = build_scenario({"model": SUPER, "cluster": "dgx-b200", "gpus": 64, "layout": layout or {"tp": 1, "ep": 64},
                          "training": {"seq_len": 8192, "global_batch": 512, "micro_batch": 1, "dtype": dtype,
                                       "recompute": "none"}})
    return next(s for s, _ in block_kinds(scn) if s.model.hybrid_pattern == "E")


def test_latent_moe_layer_flops_closed_form():
    """Forward matmul FLOPs of one LatentMoE layer on one rank, T = 8192 tokens, ep 64 (8 local experts, T·k/8
    tokens each): router 2·T·h·E, fc1_latent_proj 2·T·h·l, the experts 2·T·k·(l·f + f·l), fc2_latent_proj 2·T·l·h,
    the shared expert 2·T·(h·fs + fs·h); backward twice that."""
    from trainsim.cost_models import flops
    T, h, l, f, fs, E, k = 8192, 4096, 1024, 2688, 5376, 512, 22
    ops = {op.name: op for op in flops.layer_ops(_super_moe_layer())}
    assert ops["moe_latent_fc1"].fwd_flops == 2 * T * h * l == ops["moe_latent_fc2"].fwd_flops
    assert ops["expert_fc1"].fwd_flops == 2 * T * k * l * f == ops["expert_fc2"].fwd_flops
    fwd = 2 * T * h * E + 2 * T * h * l + 2 * T * k * 2 * l * f + 2 * T * l * h + 2 * T * 2 * h * fs
    mm = [op for op in ops.values() if op.kind == "gemm"]
    assert sum(op.fwd_flops for op in mm) == fwd
    assert sum(op.bwd_flops for op in mm) == 2 * fwd
    assert ops["moe_permute"].fwd_bytes == 2 * 2 * T * k * l  # routed tokens are latent-wide


def test_latent_moe_all_to_all_is_latent_wide(monkeypatch):
    """The dispatch and combine move T·k tokens of the latent width l (Megatron-Core token_dispatcher.py sizes its
    buffers by moe_latent_size), 2 bytes each in bf16: 4 all-to-alls per layer (forward and backward)."""
    from trainsim.simulator import block
    from trainsim.topologies.placement import place
    sent = []
    monkeypatch.setattr(block, "_coll", lambda kind, nbytes, *a: sent.append((kind, nbytes)) or (0.0,))
    scn = _super_moe_layer()
    block._ep_exposed(scn, {"ep": place(scn).group("ep")}, None)
    assert sent == [("all_to_all", 2 * 8192 * 22 * 1024)]


def test_latent_moe_saved_activations_closed_form():
    """bf16, no recompute: against the same layer at full width (l = h), the routed tensors saved by the experts'
    fc1 (input) and the combine (expert outputs) shrink from h to l per token-copy, and fc2_latent_proj saves its
    latent input (T·l); fc1_latent_proj's input is the router's, saved once."""
    from dataclasses import replace

    from trainsim.cost_models.mamba import hybrid_activation_bytes
    from trainsim.cost_models.shapes import layer_shape
    shp = layer_shape(_super_moe_layer())
    T, k, h, l = 8192, 22, 4096, 1024
    latent = hybrid_activation_bytes(shp, "fused").total
    wide = hybrid_activation_bytes(replace(shp, lat=0), "fused").total
    assert latent - wide == 2 * T * k * 2 * (l - h) + 2 * T * l


@pytest.mark.parametrize("update, match", [
    ({"hybrid_pattern": None, "mtp_layers": 0, "mtp_pattern": None, "mtp_shared": False, "block_norms": 2},
     "hybrid stacks"),
    ({"bias": True}, "biases"),
])
def test_latent_moe_refusals(update, match):
    fields = load_model(SUPER).model_dump(exclude={"published_params", "published_active_params"})
    with pytest.raises((SpecError, ValueError), match=match):
        load_model({**fields, **update})


def test_latent_moe_needs_experts():
    from pydantic import ValidationError

    from trainsim.specs.model import ModelSpec
    with pytest.raises(ValidationError, match="moe_latent_size"):
        ModelSpec(num_layers=2, hidden=64, num_heads=4, vocab_size=100, hybrid_pattern="M*", block_norms=1,
                  moe_latent_size=16)
