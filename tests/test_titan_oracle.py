"""torchtitan's eager Llama block, run by torch's autograd, against activations.py ``impl="titan"``.

The block below is written from torchtitan's model code (pytorch/torchtitan torchtrain/models/llama/model.py
@ 83c879f18; torchtitan/models/norms.py ``RMSNorm`` and models/llama/model.py @ ba2469780): its own RMSNorm
``self._norm(x.float()).type_as(x) * self.weight``, RoPE by complex multiplication in fp32 with a shared
``freqs_cis`` buffer, ``repeat_kv`` by expand + reshape, SDPA, ``output.transpose(1, 2).contiguous()``, and
``w2(F.silu(w1(x)) * w3(x))``; parameters in bf16 as FSDP2's MixedPrecisionPolicy(param_dtype=bf16) casts them,
no autocast, so the residual stream is bf16. Saved tensors are collected with
``torch.autograd.graph.saved_tensors_hooks`` and deduplicated by storage, parameters and the ``freqs_cis``
buffer excluded. The attention output's ``transpose(1, 2).contiguous()`` is a view here as on CUDA: flash
attention (CPU and CUDA) allocates its output in the layout of the (b, s, a, d) query RoPE leaves, which the test
checks.
"""

from __future__ import annotations

import pytest

from trainsim.cost_models import activations as act
from trainsim.cost_models.shapes import LayerShape

torch = pytest.importorskip("torch")
from trainsim.kernels.titan_block import TitanBlock as _Block
from trainsim.kernels.titan_block import block_forward as _forward


def _saved_bytes(h, a, kv, f, b, s) -> int:
    """Bytes the block saves for backward."""
    torch.manual_seed(0)
    block = _Block(h, a, kv, f).to(torch.bfloat16)
    d = h // a
    freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
    freqs_cis = torch.polar(torch.ones(s, d // 2), torch.outer(torch.arange(s).float(), freqs))
    excluded = {p.untyped_storage().data_ptr() for p in block.parameters()} | {freqs_cis.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in excluded:
            seen[st.data_ptr()] = st.nbytes()
        return t

    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _forward(block, x, freqs_cis)
    out.float().sum().backward()
    return sum(seen.values())


def _shape(h, a, kv, f, b, s) -> LayerShape:
    return LayerShape(b=b, s=s, h=h, a=a, kv=kv, d=h // a, f=f, gated=True, norm="rmsnorm", rope=True, bias=False,
                      experts=0, top_k=0, fe=0, vocab=1024, dtype="bf16", flash=True, titan=True)


@pytest.mark.parametrize("dims", [(128, 8, 2, 352, 2, 64), (128, 4, 4, 256, 1, 32)], ids=["gqa", "mha"])
def test_titan_block_saves_what_torch_saves(dims):
    """Exact to the byte: 2 norms x ((4 + 2)·h + 4) + 2 norm outputs, q and the repeat_kv k, v copies (3·a·d),
    SDPA's output (the out-projection's input) and fp32 logsumexp, SwiGLU's 4·f."""
    measured = _saved_bytes(*dims)
    assert measured == act.layer_activation_bytes(_shape(*dims), "fused").total
    assert measured == act.layer_activation_bytes(_shape(*dims), "titan").total


def test_titan_differs_from_fused_and_eager_where_the_code_does():
    """GQA: the titan block saves more than Megatron's fused kernels (fp32 norm copies, k/v at the query heads,
    SwiGLU 4·f) and less than the executor's fp32 eager RMSNorm."""
    shp = _shape(128, 8, 2, 352, 2, 64)
    from dataclasses import replace
    fused = act.layer_activation_bytes(replace(shp, titan=False), "fused").total
    titan = act.layer_activation_bytes(shp, "fused").total
    T, h, f, a, kv, d = 128, 128, 352, 8, 2, 16
    assert titan - fused == 2 * 4 * T * h + 2 * T * f + 2 * 2 * T * (a - kv) * d


def _scenario(**training):
    from trainsim.specs import build_scenario
    model = {"activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
             "vocab_size": 1024, "num_layers": 2, "hidden": 128, "num_heads": 8, "num_kv_heads": 2,
             "ffn_hidden": 352, "max_seq_len": 64}
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": 1, "layout": {},
                           "training": {"seq_len": 64, "global_batch": 2, "micro_batch": 2, "dtype": "bf16",
                                        **training}})


def test_framework_torch_costs_uncompiled_llama_blocks_as_torchtitan():
    """framework torch, bf16, uncompiled: the default costing is the measured titan block; compiled, autocast or
    Megatron keep the fused one."""
    from trainsim.cost_models.shapes import layer_shape
    measured = _saved_bytes(128, 8, 2, 352, 2, 64)
    assert layer_shape(_scenario(framework="torch")).titan
    # FSDP2's MixedPrecisionPolicy: fp32 sharded parameters, bf16 compute, no autocast
    assert layer_shape(_scenario(framework="torch", zero=3, param_dtype_bytes=4)).titan
    assert act.layer_activation_bytes(_scenario(framework="torch")).total == measured
    for other in ({"framework": "torch", "compile": True}, {"framework": "torch", "mixed_precision": "autocast", "param_dtype_bytes": 4},
                  {"framework": "megatron"}):
        assert not layer_shape(_scenario(**other)).titan
