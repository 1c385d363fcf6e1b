"""Inductor's bytes for torchtitan's compiled block (cost_models/inductor_bytes.py) against Inductor's own count.

The measured half compiles kernels/titan_block.TitanBlock with Inductor on CPU (kernels/compiled_bytes.py), which
needs a C++ compiler; it is skipped, saying so, where there is none.
"""

from __future__ import annotations

import shutil

import pytest

from trainsim.cost_models import inductor_bytes as ib
from trainsim.cost_models.flops import layer_ops
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs.loaders import build_scenario

SEQ = 256


def _scenario(compile_: bool = True, **training):
    return build_scenario({
        "model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8,
        "training": {"framework": "torch", "seq_len": 4096, "global_batch": 8, "micro_batch": 1, "zero": 3,
                     "compile": compile_, **training}})


def _predicted_regions(hidden: int, heads: int, kv: int, ffn: int) -> dict[str, tuple[float, float]]:
    """The module's constants over one TitanBlock pass of SEQ tokens (tp 1)."""
    d = hidden // heads
    q, k = (ib.ROPE_Q_BYTES, ib.ROPE_KV_BYTES) if kv < heads else (ib.ROPE_MHA_BYTES, ib.ROPE_MHA_BYTES)
    return {"rope": tuple(q[i] * SEQ * heads * d + k[i] * SEQ * kv * d for i in (0, 1)),
            "swiglu": tuple(ib.SWIGLU_BYTES[i] * SEQ * ffn for i in (0, 1)),
            "norms": tuple(ib.NORM_RESIDUAL_BYTES[i] * SEQ * hidden for i in (0, 1))}


@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")),
                    reason="Inductor's CPU code generation needs a C++ compiler; none on PATH")
@pytest.mark.parametrize("shape", [(768, 12, 3, 1536), (512, 8, 8, 1536)])
def test_constants_match_inductors_count_of_the_compiled_block(shape):
    """Per region, the constants give Inductor's byte count of a compiled TitanBlock forward and backward within
    2 % (the grouped-query shape is one the fit used, the multi-head one is measured alone)."""
    from trainsim.kernels.compiled_bytes import region_bytes

    measured = region_bytes(*shape, seq=SEQ)
    for region, want in _predicted_regions(*shape).items():
        for got, expected in zip(measured[region], want):
            assert got == pytest.approx(expected, rel=0.02), (region, measured[region], want)


def test_a_compiled_torchtitan_block_carries_inductors_rope_and_norm_bytes():
    """Llama 3 8B (32 query, 8 KV heads of 128) at 4,096 tokens: RoPE moves 24.65 B per query element and 20.71
    per key-value element forward (25.29 / 21.41 backward); the norms and residual adds 18.03 / 38.18 B per
    tokens x hidden element together; SwiGLU and the GEMMs are the uncompiled-fused model's."""
    compiled, fused = layer_ops(_scenario()), layer_ops(_scenario(block_code="fused"))
    assert layer_shape(_scenario()).titan_compiled and not layer_shape(_scenario(block_code="fused")).titan_compiled
    by, ref = {op.name: op for op in compiled}, {op.name: op for op in fused}
    t, q, kv = 4096, 4096 * 32 * 128, 4096 * 8 * 128
    assert by["rope"].fwd_bytes == pytest.approx(24.65 * q + 20.71 * kv)
    assert by["rope"].bwd_input_bytes == pytest.approx(25.29 * q + 21.41 * kv)
    norms = [by[n] for n in ib.NORM_RESIDUAL_OPS]
    assert sum(op.fwd_bytes for op in norms) == pytest.approx(18.03 * t * 4096)
    assert sum(op.bwd_input_bytes + op.bwd_weight_bytes for op in norms) == pytest.approx(38.18 * t * 4096)
    for name in ("qkv", "attention", "out_proj", "fc1", "swiglu", "fc2"):
        assert by[name] == ref[name]


@pytest.mark.parametrize("training, compiled", [({}, True), ({"host_issue": "compile"}, True),
                                                ({"titan_norm": "fused_rmsnorm"}, False),
                                                ({"block_code": "fused"}, False)])
def test_which_blocks_get_inductors_bytes(training, compiled):
    """torchtitan's code under torch.compile (or host_issue compile) with its own RMSNorm; not its Triton
    fused_rmsnorm (not compiled) nor a fused block stated as such."""
    compile_ = training.get("host_issue") != "compile"
    assert layer_shape(_scenario(compile_, **training)).titan_compiled is compiled


def test_an_eager_block_is_unchanged():
    """Uncompiled, the block is torchtitan's eager op chains (titan_ops.py), not Inductor's."""
    shp = layer_shape(_scenario(False))
    assert shp.titan and not shp.titan_compiled
