"""Step-time costs of torchtitan's eager FSDP2 step: the eager block's memory-bound aten ops (titan_ops.py) and FSDP2's
compute-stream copies around its collectives (framework_behaviour ``fsdp2_copies``).

Truth: the aten op sequence of torchtitan's RMSNorm and RoPE as torch's own trace of the block records it (the
outputs of each op: cost_models/op_sac_trace.py ``FORWARD_GQA`` / ``BACKWARD_GQA``, kernels/alloc_trace.py), with the
reads of each op written out by hand from torchtitan's code; FSDP2's copies from _fsdp_collectives.py (read and
write the gathered parameter per unshard; read the 16-bit gradient, write the reduce dtype per reduction).
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import compute, op_sac_trace, titan_ops
from trainsim.cost_models.flops import _layer_ops
from trainsim.cost_models.framework import fsdp2_copy_bytes_per_param
from trainsim.cost_models.shapes import LayerShape
from trainsim.simulator import builder
from trainsim.simulator.step_context import _step_context
from trainsim.specs import build_scenario

LLAMA8B = dict(b=1, s=8192, h=4096, a=32, kv=8, d=128, f=14336, gated=True, norm="rmsnorm", rope=True, bias=False,
               experts=0, top_k=0, fe=0, vocab=128256)
T, H, K, F = 8192, 4096, 1024, 14336


def _op(shp: LayerShape, name: str):
    return next(op for op in _layer_ops(shp) if op.name == name)


def test_eager_rmsnorm_bytes_and_kernels_match_the_trace():
    # forward: _to_copy, pow, mean, add, rsqrt, mul, _to_copy, mul (the trace's first 8 ops of a block)
    fwd = op_sac_trace.FORWARD_GQA[:8]
    assert len(fwd) == titan_ops.NORM_LAUNCHES[0]
    th_writes = sum(int(tok[-1]) for op in fwd for tok in op if tok[:3] == "+Th")
    assert th_writes == 4 + 4 + 4 + 2 + 2  # _to_copy, pow, mul in fp32; _to_copy and the weight mul in bf16
    # reads: x (2), xf for pow (4), its square for mean (4), xf for mul (4), y for _to_copy (4), yb for mul (2)
    assert titan_ops.norm_rw(2)[0] == th_writes + 2 + 4 + 4 + 4 + 4 + 2 == 36
    # backward of ffn_norm (the first norm the backward meets): the trace's 16 ops from the weight mul's two
    # gradients (+Th2, +Th2) and the weight's sum (+h2) to the last ToCopyBackward (+Th2)
    bwd = op_sac_trace.BACKWARD[38:54]
    assert [op[0] for op in bwd[:3]] == ["+Th2", "+Th2", "+h2"] and bwd[-1][0] == "+Th2"
    assert len(bwd) == titan_ops.NORM_LAUNCHES[1]
    th_writes = sum(int(tok[-1]) for op in bwd for tok in op if tok[:3] == "+Th")
    assert th_writes == 38
    # reads: g (2) | g, yb (4) | the product (2) | g (2) | g4 (4) | g4, xf (8) | that product (4) | the expanded
    # mean gradient: none (div writes) | xf (4) | its power (4) | it and the gradient (8) | two gradients (8) | (4)
    assert titan_ops.norm_rw(2)[1] == th_writes + 2 + 4 + 2 + 2 + 4 + 8 + 4 + 4 + 4 + 8 + 8 + 4 == 92


def test_titan_block_costs_the_eager_ops_fused_blocks_do_not():
    titan, fused = LayerShape(**LLAMA8B, titan=True), LayerShape(**LLAMA8B)
    assert _op(titan, "norm1").fwd_bytes == 36 * T * H and _op(titan, "norm1").bwd_input_bytes == 92 * T * H
    assert _op(fused, "norm1").fwd_bytes == 4 * T * H + 4 * T  # read x, write y, fp32 rstd
    # RoPE on q and k in fp32: _to_copy (2 + 4), complex mul (4 + 4), _to_copy back (4 + 2) per element
    assert _op(titan, "rope").fwd_bytes == 20 * T * (H + K) == _op(titan, "rope").bwd_input_bytes
    # repeat_kv: two copies of the 1024-wide k and v to the 4096 query width, summed back in backward
    assert _op(titan, "repeat_kv").fwd_bytes == pytest.approx(2 * 2 * T * (K + H))
    assert not [op for op in _layer_ops(LayerShape(**{**LLAMA8B, "kv": 32}, titan=True)) if op.name == "repeat_kv"]
    # SwiGLU as silu and a multiply: 5e forward, 9e backward per element (fused: 3e, 5e)
    assert _op(titan, "swiglu").fwd_bytes == 10 * T * F and _op(fused, "swiglu").fwd_bytes == 6 * T * F
    # every matmul is the same op either way
    for name in ("qkv", "attention", "out_proj", "fc1", "fc2"):
        assert _op(titan, name) == _op(fused, name)


# Llama 3 8B FSDP2 on 16 H100 (2 nodes), local batch 1 x 8192: framework torch, ZeRO-3.
FSDP2 = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16, "layout": {},
         "training": {"seq_len": 8192, "global_batch": 16, "zero": 3, "framework": "torch", "recompute": "full"}}


def test_fsdp2_copies_are_the_gathered_and_reduced_bytes_on_the_compute_stream():
    assert fsdp2_copy_bytes_per_param(2, 4) == (4.0, 6.0)  # torchtitan's fp32 reduce-scatter of bf16 gradients
    scn = build_scenario(FSDP2, {})
    st = _step_context(scn, None)
    params, blocks = 8.0e9, 7.0e9
    fwd, bwd = builder._fsdp2_copies_s(st, params, (blocks, 0.0), 0)
    tr = scn.training
    out, copy_in = 2 * tr.param_bytes, tr.param_bytes + tr.grad_bytes
    assert fwd == pytest.approx(compute.memory_time_s(params * out, st.hw) * st.slowest)
    assert bwd == pytest.approx(compute.memory_time_s(blocks * out + params * copy_in, st.hw) * st.slowest)
    # FSDP1 (pytorch-fsdp) all-gathers into its flat parameter: no copy-out, none of these copies
    fsdp1 = build_scenario({**FSDP2, "training": {**FSDP2["training"], "framework": "pytorch-fsdp"}}, {})
    assert builder._fsdp2_copies_s(_step_context(fsdp1, None), params, (blocks, 0.0), 0) == (0.0, 0.0)


def test_fused_rmsnorm_is_one_triton_pass_each_way_and_saves_the_input():
    """torchtitan's ``norm_type = "fused_rmsnorm"`` (TritonFusedRMSNorm, torchtitan/models/norms.py at 1ea476e9f):
    the forward kernel reads x and writes y, the backward kernel reads x and dy and writes dx, plus the fp32 rstd
    per token; ``save_for_backward(x, weight, rstd)`` keeps the 16-bit input, not the eager chain's fp32 copy."""
    from trainsim.cost_models import activations
    fused_norm = LayerShape(**LLAMA8B, titan=True, titan_fused_norm=True)
    eager_norm = LayerShape(**LLAMA8B, titan=True)
    op = _op(fused_norm, "norm1")
    assert op.fwd_bytes == 2 * 2 * T * H + 4 * T and op.bwd_input_bytes == 3 * 2 * T * H + 4 * T
    assert op.launches == titan_ops.FUSED_NORM_LAUNCHES == (1, 3)
    # the rest of torchtitan's eager block stays: RoPE in fp32 and the repeat_kv copies
    assert _op(fused_norm, "rope").fwd_bytes == _op(eager_norm, "rope").fwd_bytes == 20 * T * (H + K)
    assert activations._norm_bytes(fused_norm, T, "titan") == (2 * T * H, 4 * T)
    assert activations._norm_bytes(eager_norm, T, "titan") == ((4 + 2) * T * H, 4 * T)


def test_titan_norm_reaches_the_block_only_where_torchtitans_code_runs():
    base = dict(model="llama3-8b", cluster="dgx-h100", gpus=8, layout={"tp": 1},
                training={"global_batch": 8, "seq_len": 4096, "framework": "torch", "zero": 3,
                          "titan_norm": "fused_rmsnorm"})
    from trainsim.cost_models.shapes import layer_shape
    shp = layer_shape(build_scenario(base))
    assert shp.titan and shp.titan_fused_norm
    fused_code = layer_shape(build_scenario({**base, "training": {**base["training"], "block_code": "fused"}}))
    assert not fused_code.titan and not fused_code.titan_fused_norm


def test_probe_rows_take_the_norm_type_of_their_torchtitan_config():
    """docs/probe_runs.csv states titan_norm per torchtitan row from its table's train_configs at 1ea476e9f:
    llama3_8b.toml and llama2_13b.toml set norm_type fused_rmsnorm, the 70B configs rmsnorm."""
    from trainsim.validation.common_run_cases import load_common_runs
    from trainsim.validation.residual_sources import REPO
    ds = load_common_runs(REPO / "docs" / "probe_runs.csv", name="probe_runs")
    norm = {c.row_id: c.scenario.training.titan_norm for c in ds.active if c.row_id.startswith("tt_a100")}
    assert norm == {"tt_a100_l3_8b_sacop": "fused_rmsnorm", "tt_a100_l2_13b_noac": "fused_rmsnorm",
                    "tt_a100_l3_70b_full": "rmsnorm", "tt_a100_l2_70b_full": "rmsnorm"}


def test_full_sharding_has_no_unsharded_gradient_accumulation_pass():
    """FSDP2 full sharding (ZeRO-3) frees the unsharded gradient after its reduce-scatter every micro-batch, so no
    ``grad += new`` pass over whole gradients; plain autograd (ZeRO-0) and unsharded-parameter FSDP (ZeRO-2) keep
    AccumulateGrad's pass: read both, write one, 3 x grad_bytes per parameter."""
    from trainsim.cost_models.framework import grad_accumulation_bytes_per_param
    from trainsim.specs.training import TrainingSpec
    for zero, want in ((0, 3 * 4), (2, 3 * 4), (3, 0.0)):
        tr = TrainingSpec(global_batch=64, seq_len=4096, framework="torch", zero=zero, grad_dtype_bytes=4)
        assert grad_accumulation_bytes_per_param(tr, 4) == want
