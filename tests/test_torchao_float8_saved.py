"""Saved activations of torchao float8 blocks (cost_models/activations.py, module doc), against closed forms built
from the model's widths: Llama 3 8B (h 4096, 32 heads, 8 K/V heads of 128, f 14336), 4096 tokens per micro-batch,
bf16 activations (e = 2).

Eager, ``Float8Linear`` saves its 16-bit input; compiled (tensorwise, rowwise) the partitioner rebuilds the norm
outputs and the SwiGLU product and saves a 1-byte copy only of an input nothing else keeps (the unfused attention's
output); rowwise_with_gw_hp saves the 16-bit block's set; per-op SAC keeps what it keeps in 16 bits."""

from __future__ import annotations

import pytest

from trainsim.cost_models.activations import layer_activation_bytes
from trainsim.specs.loaders import build_scenario

E, T, H, A, KV, D, F = 2, 4096, 4096, 32, 8, 128, 14336


def _act(dtype="fp8", layout=None, **training):
    s = build_scenario({
        "model": "llama3-8b", "cluster": {"preset": "dgx-h100", "num_gpus": 8}, "layout": layout or {},
        "training": {"seq_len": T, "global_batch": 8, "micro_batch": 1, "dtype": dtype, "zero": 3,
                     "framework": "torch", **training}})
    return layer_activation_bytes(s)


# The 16-bit fused block (flash): norm inputs and outputs, q k v, the attention output, SwiGLU gate, up, product.
FUSED = E * T * (4 * H + (A + 2 * KV) * D + A * D + 3 * F)
RECOMPUTED = E * T * (2 * H + F)  # both norm outputs and the product: rebuilt from kept tensors when compiled


def test_eager_float8_saves_the_16_bit_inputs():
    """Eager, the block is torchtitan's eager code with Float8Linear in place of nn.Linear: the bf16 eager block's
    saved set; with fused block code, the fused 16-bit set."""
    assert _act().main == _act("bf16").main
    assert _act(block_code="fused").main == FUSED


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_compiled_float8_rebuilds_the_inputs_kept_tensors_give(recipe):
    assert _act(compile=True, fp8_recipe=recipe).main == FUSED - RECOMPUTED


def test_compiled_high_precision_weight_gradient_saves_the_16_bit_set():
    assert _act(compile=True, fp8_recipe="rowwise_with_gw_hp").main == FUSED
    assert _act(compile=True, fp8_recipe="rowwise_with_gw_hp").main == _act("bf16", compile=True).main


@pytest.mark.parametrize("recipe, scale", [("tensorwise", 4), ("rowwise", E * A * D)])
def test_unfused_attention_output_saved_as_its_float8_copy(recipe, scale):
    """Unfused attention: the value GEMM's output, kept by nothing else, is saved as 1 byte per element and its
    scale (one fp32 tensorwise, a 16-bit amax per column rowwise) instead of 16 bits; the rest as with flash."""
    bf16 = _act("bf16", compile=True, flash_attention=False).main
    fp8 = _act(compile=True, flash_attention=False, fp8_recipe=recipe).main
    assert bf16 - fp8 == RECOMPUTED + E * T * A * D - (T * A * D + scale)


def test_op_sac_and_full_ac_keep_the_16_bit_tensors():
    sac = {"recompute": "selective", "recompute_modules": ["op_sac"], "compile": True}
    assert _act(**sac).total == _act("bf16", **sac).total
    assert _act(recompute="full", compile=True).main == E * T * H


def test_tensor_parallel_tensorwise_saves_the_float8_inputs():
    """tp 2, no sequence parallelism: torchao's float8 TP casts every linear input to float8 before the linear,
    which saves it: norm outputs and the fc2 input 1 byte, the attention output 1 byte beside flash's 16-bit copy."""
    tp = 2
    closed = (2 * E * T * H + 2 * T * H + E * T * (A + 2 * KV) * D / tp + (1 + E) * T * A * D / tp
              + E * T * 2 * F / tp + T * F / tp)
    assert _act(compile=True, layout={"tp": tp}).main == closed
    assert _act(compile=True, layout={"tp": tp}, fp8_recipe="rowwise").main > closed  # regular TP: 16-bit inputs
