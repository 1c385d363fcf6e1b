"""Inductor's bytes for torchtitan's compiled block (cost_models/inductor_bytes.py) against Inductor's own count.

The measured half compiles kernels/titan_block.TitanBlock with Inductor on CPU (kernels/compiled_bytes.py), which
needs torch, a C++ compiler and Python's headers; it is skipped, saying why, where Inductor cannot build a kernel.
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import inductor_bytes as ib
from trainsim.cost_models.flops import layer_ops
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import SpecError
from trainsim.specs.loaders import build_scenario

SEQ = 256


@pytest.fixture(scope="module")
def inductor():
    """Inductor, once it has built a CPU kernel here; skipped with the reason where it cannot."""
    torch = pytest.importorskip("torch")
    try:
        torch.compile(lambda x: x.sin() + 1)(torch.ones(8))
    except Exception as e:  # noqa: BLE001 -- any failure to build a kernel means: no Inductor on this machine
        pytest.skip(f"Inductor cannot build a CPU kernel here: {type(e).__name__}: {str(e)[:200]}")
    finally:
        torch._dynamo.reset()


def _scenario(compile_: bool = True, layout: dict | None = None, **training):
    return build_scenario({
        "model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": layout or {},
        "training": {"framework": "torch", "seq_len": 4096, "global_batch": 8, "micro_batch": 1, "zero": 3,
                     "compile": compile_, **training}})


def _predicted_regions(hidden: int, heads: int, kv: int, ffn: int) -> dict[str, tuple[float, float]]:
    """The module's constants over one TitanBlock pass of SEQ tokens (tp 1)."""
    d = hidden // heads
    q, k = (ib.ROPE_Q_BYTES, ib.ROPE_KV_BYTES) if kv < heads else (ib.ROPE_MHA_BYTES, ib.ROPE_MHA_BYTES)
    return {"rope": tuple(q[i] * SEQ * heads * d + k[i] * SEQ * kv * d + ib.ROPE_FREQS_BYTES[i] * SEQ * d
                          for i in (0, 1)),
            "swiglu": tuple(ib.SWIGLU_BYTES[i] * SEQ * ffn for i in (0, 1)),
            "norms": tuple(ib.NORM_RESIDUAL_BYTES[i] * SEQ * hidden for i in (0, 1))}


@pytest.mark.torch
@pytest.mark.parametrize("shape", [(2048, 16, 4, 7168), (1024, 8, 8, 3584)])
def test_constants_match_inductors_count_of_a_block_they_were_not_fitted_on(inductor, shape):
    """Per region, the constants give Inductor's byte count of a compiled TitanBlock forward and backward within
    1 % at shapes outside the fit (compiled_bytes.SHAPES, MHA_SHAPES): grouped-query with head dim 128, and
    multi-head; nothing falls outside the block's regions."""
    from trainsim.kernels.compiled_bytes import SHAPES, region_bytes

    assert shape not in SHAPES
    measured = region_bytes(*shape, seq=SEQ)
    for region, want in _predicted_regions(*shape).items():
        for got, expected in zip(measured[region], want):
            assert got == pytest.approx(expected, rel=0.01), (region, measured[region], want)
    assert max(measured["other"]) < 0.002 * sum(measured["norms"])


@pytest.mark.parametrize("layout, training, tokens, tp, seq_shards", [
    ({}, {}, 4096, 1, 1),
    ({}, {"micro_batch": 2, "global_batch": 16}, 8192, 1, 1),
    ({"tp": 2}, {"sequence_parallel": True, "recompute": "full"}, 4096, 2, 2),
    ({"cp": 2}, {}, 2048, 1, 1),
])
def test_a_compiled_torchtitan_block_carries_inductors_rope_and_norm_bytes(layout, training, tokens, tp,
                                                                           seq_shards):
    """Llama 3 8B (32 query, 8 KV heads of 128): RoPE moves 24 B per local query element, 20 per local KV element
    and 12 per token x head dim forward (24 / 20 / 16 backward); the norms and residual adds 18.03 / 38.05 B per
    tokens x hidden element on the rank (sequence-sharded under SP); SwiGLU and the GEMMs as the fused model has
    them. Per rank: TP divides the heads, CP and SP the tokens."""
    compiled = layer_ops(_scenario(layout=layout, **training))
    fused = layer_ops(_scenario(layout=layout, block_code="fused", **training))
    by, ref = {op.name: op for op in compiled}, {op.name: op for op in fused}
    q, kv, td = tokens * 32 * 128 / tp, tokens * 8 * 128 / tp, tokens * 128
    assert by["rope"].fwd_bytes == pytest.approx(24 * q + 20 * kv + 12 * td)
    assert by["rope"].bwd_input_bytes == pytest.approx(24 * q + 20 * kv + 16 * td)
    norms = [by[n] for n in ib.NORM_RESIDUAL_OPS]
    elems = tokens // seq_shards * 4096
    assert sum(op.fwd_bytes for op in norms) == pytest.approx(18.03 * elems)
    assert sum(op.bwd_input_bytes + op.bwd_weight_bytes for op in norms) == pytest.approx(38.05 * elems)
    for name in ("qkv", "attention", "out_proj", "fc1", "swiglu", "fc2"):
        assert by[name] == ref[name]


@pytest.mark.parametrize("training, compiled", [({"compile": True}, True),
                                                ({"compile": False, "host_issue": "compile"}, True),
                                                ({"compile": True, "block_code": "fused"}, False),
                                                ({"compile": False}, False)])
def test_which_blocks_get_inductors_bytes(training, compiled):
    """torchtitan's code under torch.compile (or host_issue compile); not a fused block stated as such, not the
    eager block (torchtitan's op chains, titan_ops.py)."""
    compile_ = training.pop("compile")
    shp = layer_shape(_scenario(compile_, **training))
    assert shp.titan_compiled is compiled
    assert shp.titan is (not compile_ and "host_issue" not in training and "block_code" not in training)


@pytest.mark.parametrize("training", [{"compile": True}, {"compile": False, "host_issue": "compile"}])
def test_fused_rmsnorm_under_compile_is_refused(training):
    """torchtitan raises NotImplementedError for its Triton fused_rmsnorm under torch.compile (apply_compile)."""
    compile_ = training.pop("compile")
    with pytest.raises(SpecError, match="titan_norm"):
        _scenario(compile_, titan_norm="fused_rmsnorm", **training)
