"""Transformer Engine's quantized weight copies under fp8 training (cost_models/fp8_weights.py), held against closed
forms from the presets' own shapes: bf16 primary weights with TE's per-step cache (rowwise + columnwise fp8 on
Hopper, one buffer for both on Blackwell, two MXFP8 copies with e8m0 scales per 32 elements), and fp8 primary
weights (Megatron-Core --fp8-param-gather) that replace the 16-bit linear weights; plus the refusals."""

from __future__ import annotations

import pytest

from trainsim.cost_models.fp8_weights import copy_bytes
from trainsim.cost_models.memory import stage_memory
from trainsim.specs import SpecError
from trainsim.specs.loaders import build_scenario


def _scenario(cluster: str = "dgx-h100", dtype: str = "fp8", **training):
    return build_scenario({
        "model": "llama3-70b", "cluster": {"preset": cluster, "num_gpus": 64},
        "layout": {"tp": 4, "pp": 4},
        "training": {"seq_len": 4096, "global_batch": 128, "micro_batch": 1, "dtype": dtype,
                     "distributed_optimizer": True, **training}})


def _stage_linear_elems(s) -> float:
    """Linear weight elements of a rank of stage 1 (no embedding, no output layer): qkv, out-projection,
    gate|up, down, over tp."""
    m = s.model
    h, kv = m.hidden, m.kv_heads * m.dhead
    return (m.num_layers // 4) * (h * (h + 2 * kv) + h * h + 3 * h * m.ffn) / 4


@pytest.mark.parametrize("recipe, non_tn, expected", [("tensorwise", False, (1.0, 1.0)),
                                                      ("tensorwise", True, (1.0, 0.0)),
                                                      ("mxfp8", True, (33 / 32, 33 / 32))])
def test_copy_bytes_per_recipe_and_gpu(recipe, non_tn, expected):
    assert copy_bytes(recipe, non_tn) == expected


@pytest.mark.parametrize("cluster, recipe, per_elem", [("dgx-h100", "tensorwise", 2.0),
                                                       ("dgx-b200", "tensorwise", 1.0),
                                                       ("dgx-b200", "mxfp8", 2 * 33 / 32)])
def test_cached_workspace_is_resident_beside_bf16_weights(cluster, recipe, per_elem):
    s = _scenario(cluster, fp8_recipe=recipe)
    sm, bf = stage_memory(s, 1), stage_memory(_scenario(cluster, dtype="bf16"), 1)
    assert sm.details["fp8_weight_copies"] == pytest.approx(_stage_linear_elems(s) * per_elem)
    assert sm.weights == bf.weights  # bf16 primary weights stay


@pytest.mark.parametrize("cluster, recipe, weight_drop, copies", [("dgx-h100", "tensorwise", 1.0, 1.0),
                                                                  ("dgx-b200", "tensorwise", 1.0, 0.0),
                                                                  ("dgx-b200", "mxfp8", 2 - 33 / 32, 33 / 32)])
def test_fp8_primary_weights_replace_the_16bit_linear_weights(cluster, recipe, weight_drop, copies):
    s = _scenario(cluster, fp8_recipe=recipe, fp8_param_gather=True)
    sm, cached = stage_memory(s, 1), stage_memory(_scenario(cluster, fp8_recipe=recipe), 1)
    n = _stage_linear_elems(s)
    assert cached.weights - sm.weights == pytest.approx(n * weight_drop)
    assert sm.details.get("fp8_weight_copies", 0.0) == pytest.approx(n * copies)
    assert sm.optimizer == cached.optimizer and sm.grads == cached.grads  # fp32 main copy and grads unchanged


def test_refusals():
    with pytest.raises(SpecError) as err:
        _scenario("dgx-h100", fp8_recipe="mxfp8")
    assert err.value.field == "training.fp8_recipe"
    with pytest.raises(SpecError) as err:
        _scenario("dgx-h100", dtype="bf16", fp8_param_gather=True)
    assert "fp8_param_gather" in err.value.field
    with pytest.raises(SpecError) as err:
        _scenario("dgx-h100", fp8_param_gather=True, framework="torch")
    assert "fp8_param_gather" in err.value.field


def test_megatron_fsdp_keeps_non_unit_params_gathered_and_gathers_layers_in_fp8():
    """Megatron-FSDP (framework megatron, ZeRO-3): the embedding and output layer stay gathered in 16 bits
    (preserve_non_fsdp_units), two layers are gathered at a time -- their linear weights in fp8 with fp8 primary
    weights, no transpose on Blackwell -- and the larger of a layer's and the output layer's gradient is whole."""
    def fsdp(**training):
        return build_scenario({
            "model": "llama3-70b", "cluster": {"preset": "gb200-nvl72", "num_gpus": 64}, "layout": {"tp": 1},
            "training": {"seq_len": 8192, "global_batch": 128, "micro_batch": 1, "dtype": "fp8", "zero": 3,
                         "grad_dtype": "bf16", **training}})
    from trainsim.cost_models.memory import rank_param_shards, transient_terms
    m = fsdp().model
    h, kv, V = m.hidden, m.kv_heads * m.dhead, m.vocab_size
    linear = h * (h + 2 * kv) + h * h + 3 * h * m.ffn
    block = linear + 2 * h  # two RMSNorm weights
    root = 2 * V * h + h  # untied embedding and output layer, final norm
    for training, per_block in (({}, 2 * block), ({"fp8_param_gather": True}, linear + 2 * 2 * h)):
        s = fsdp(**training)
        got = transient_terms(s, 0, rank_param_shards(s, 0))["zero3_gather_buffers"]
        assert got == pytest.approx(2 * root + 2 * per_block + 2 * max(block, V * h))


def test_mxfp8_saved_linear_inputs_carry_their_scales():
    """Under MXFP8 each TE linear's saved input (the columnwise copy) is 1 + 1/32 bytes per element: the two norm
    outputs (qkv, fc1 inputs), the out-projection's and fc2's inputs of a dense Llama block."""
    from trainsim.cost_models import activations as act

    def llama(recipe):
        return build_scenario({"model": "llama3-8b", "cluster": {"preset": "dgx-b200", "num_gpus": 8}, "layout": {},
                               "training": {"seq_len": 4096, "global_batch": 8, "micro_batch": 1, "dtype": "fp8",
                                            "fp8_recipe": recipe}})
    m, T = llama("mxfp8").model, 4096
    extra = act.layer_activation_bytes(llama("mxfp8")).main - act.layer_activation_bytes(llama("tensorwise")).main
    assert extra == pytest.approx(T * (2 * m.hidden + m.num_heads * m.dhead + m.ffn) / 32)
