"""torchtitan's per-op selective activation checkpointing (recompute_modules op_sac).

Truth: the policy of torchtitan's ``_apply_ac_to_transformer_block`` (``_save_list`` = aten.mm, flash /
efficient SDPA, reduce_scatter_tensor; every second aten.mm of a block recomputed), applied by hand to the
matmul order of a Llama block: wq, wk, wv, wo, w1, w3, w2 -> outputs of wq, wv, w1, w2 saved, plus the
block input and SDPA's output and fp32 logsumexp.
"""

import pytest
from pydantic import ValidationError

from trainsim.cost_models.activations import layer_activation_bytes, recompute_working_bytes
from trainsim.cost_models.flops import _layer_ops, recompute_ops
from trainsim.cost_models.shapes import LayerShape
from trainsim.specs.training import TrainingSpec

# Llama 3.1 8B (h 4096, 32 heads of 128, 8 KV heads, SwiGLU 14336), local batch 2 at 8192 tokens, bf16
LLAMA8B = dict(b=2, s=8192, h=4096, a=32, kv=8, d=128, f=14336, gated=True, norm="rmsnorm", rope=True, bias=False,
               experts=0, top_k=0, fe=0, vocab=128256)


def _shape(**kw) -> LayerShape:
    return LayerShape(**{**LLAMA8B, "recompute": "selective", "rc_modules": frozenset({"op_sac"}), **kw})


def test_llama_block_keeps_input_q_v_w1_w2_and_sdpa_output():
    T, e = 2 * 8192, 2
    per_token = 4096 + 4096 + 1024 + 14336 + 4096 + 4096  # input, q, v, w1 out, w2 out, SDPA out
    got = layer_activation_bytes(_shape())
    assert got.main == e * T * per_token
    assert got.small == 4 * 2 * 32 * 8192  # flash logsumexp, fp32 per query and head
    # under half of what Megatron's attention-core selective recompute keeps for the same block
    core = layer_activation_bytes(_shape(rc_modules=frozenset({"core_attn"})))
    assert got.total < 0.5 * core.total
    # the transient of one block's recompute is the rest of its unsaved activations
    none = layer_activation_bytes(_shape(recompute="none", rc_modules=frozenset()))
    assert recompute_working_bytes(_shape()) == pytest.approx(none.total - got.total)


def test_gelu_block_saves_matmuls_one_three_five():
    # wq, wk, wv, wo, fc1, fc2: q, v and fc1's output saved; no flash: SDPA's math path saves nothing
    got = layer_activation_bytes(_shape(gated=False, flash=False, kv=32))
    T, e = 2 * 8192, 2
    assert got.main == e * T * (4096 + 4096 + 4096 + 14336) and got.small == 0


def test_sequence_parallel_saves_the_two_reduce_scatter_outputs():
    base = layer_activation_bytes(_shape(tp=4)).main
    sp = layer_activation_bytes(_shape(tp=4, sp=True)).main
    T, e = 2 * 8192, 2
    # the block input is sequence-sharded (-3/4 of it) and each reduce-scatter output keeps T*h/tp
    assert sp - base == pytest.approx(-e * T * 4096 * 3 / 4 + 2 * e * T * 4096 / 4)


def test_recompute_reruns_every_unsaved_op():
    ops = _layer_ops(_shape())
    names = [op.name for op in recompute_ops(ops, "selective", frozenset({"op_sac"}))]
    assert "out_proj" in names and "swiglu" in names and "norm1" in names
    assert not {"qkv", "attention", "fc1", "fc2"} & set(names)


def test_recompute_reruns_the_second_fourth_and_sixth_matmul():
    # matmuls re-run: wk (T x 1024 x 4096), wo (T x 4096 x 4096), w3 (T x 14336 x 4096); wq, wv, w1, w2 saved
    T = 2 * 8192
    rerun = recompute_ops(_layer_ops(_shape()), "selective", frozenset({"op_sac"}))
    gemms = sorted(g for op in rerun for g in op.fwd_gemms)
    assert gemms == sorted([(T, 1024, 4096), (T, 4096, 4096), (T, 14336, 4096)])
    flops = sum(op.fwd_flops for op in rerun if op.fwd_gemms)
    assert flops == 2 * T * 4096 * (1024 + 4096 + 14336)
    # GeLU: the 2nd, 4th and 6th matmuls are wk, wo and fc2 (fc1 saved whole)
    gelu = recompute_ops(_layer_ops(_shape(gated=False, kv=32)), "selective", frozenset({"op_sac"}))
    assert sorted(g for op in gelu for g in op.fwd_gemms) == sorted([(T, 4096, 4096), (T, 4096, 4096),
                                                                     (T, 4096, 14336)])


def test_op_sac_is_torchtitan_only_and_alone():
    TrainingSpec(framework="torch", recompute="selective", recompute_modules=("op_sac",))
    with pytest.raises(ValidationError, match="framework megatron has no such policy"):
        TrainingSpec(framework="megatron", recompute="selective", recompute_modules=("op_sac",))
    with pytest.raises(ValidationError, match="list it alone"):
        TrainingSpec(framework="torch", recompute="selective", recompute_modules=("op_sac", "mlp"))
