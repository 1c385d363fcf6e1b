"""torch.compile's kernel count in the host's issue time (cost_models/compiled_issue.py): the table held against
the regions counted in the graphs AOTAutograd hands to Inductor, the closed form, and a host-bound step that
compile shortens but never below the GPU's own work."""

from __future__ import annotations

import pytest

from trainsim.cost_models import host_issue as hi
from trainsim.cost_models.compiled_issue import COMPILED_BLOCK_KERNELS, compiled_kernel_count
from trainsim.simulator.predict import predict
from trainsim.specs import build_scenario


@pytest.mark.torch
def test_llama_block_kernels_match_the_captured_graphs():
    """The Llama-style block: q, k, v, o, gate, up, down (7 GEMMs) + SDPA forward; the rest fused by region."""
    pytest.importorskip("torch")
    from trainsim.kernels.compiled_count import counted_compiled_kernels
    counted = counted_compiled_kernels(hidden=128, heads=2, styles=("rmsnorm-swiglu-rope",))
    assert counted["rmsnorm-swiglu-rope"] == COMPILED_BLOCK_KERNELS["rmsnorm-swiglu-rope"]
    assert set(COMPILED_BLOCK_KERNELS) == set(hi.BLOCK_OPS)


@pytest.mark.slow
@pytest.mark.torch
def test_every_style_matches_the_captured_graphs():
    """The GPT block and Megatron's legacy layer too (about 10 s of CPU: three compiles)."""
    pytest.importorskip("torch")
    from trainsim.kernels.compiled_count import counted_compiled_kernels
    assert counted_compiled_kernels(hidden=128, heads=2) == COMPILED_BLOCK_KERNELS


def test_compiled_counts_are_fewer_than_eager_and_at_least_the_gemms():
    """Fusion only removes pointwise/norm launches: the GEMMs (forward one per linear, backward two) and the
    attention call stay. GPT block: 6 linears + SDPA; Llama: 7 linears + SDPA."""
    for style, (f, b) in COMPILED_BLOCK_KERNELS.items():
        _, f_k, _, b_k = hi.BLOCK_OPS[style]
        assert f <= f_k and b <= b_k, style
    gemms = {"layernorm-gelu-learned": 6, "rmsnorm-swiglu-rope": 7}
    for style, n in gemms.items():
        f, b = COMPILED_BLOCK_KERNELS[style]
        assert f >= n + 1 and b >= 2 * n + 1, style


def test_collectives_pass_through_the_compiled_count():
    """TP collectives issued from Python stay one launch each: eager count minus the block's own kernels."""
    block = hi.BLOCK_OPS["rmsnorm-swiglu-rope"][1::2]
    f, b = compiled_kernel_count("rmsnorm-swiglu-rope", (block[0] + 4, block[1] + 4), block)
    assert (f, b) == (COMPILED_BLOCK_KERNELS["rmsnorm-swiglu-rope"][0] + 4,
                      COMPILED_BLOCK_KERNELS["rmsnorm-swiglu-rope"][1] + 4)
    comp = hi.block_issue("rmsnorm-swiglu-rope", recompute_full=False, tp_collectives=(4, 4), mode="compile")
    assert comp.fwd_s == pytest.approx(f * hi.KERNEL_LAUNCH_S) and comp.fwd_ops == f


def small_llama(**training):
    model = {"name": "tiny-llama", "num_layers": 8, "hidden": 512, "num_heads": 8, "ffn_hidden": 1408,
             "vocab_size": 32000, "max_seq_len": 256, "activation": "swiglu", "norm": "rmsnorm",
             "position_embedding": "rope", "bias": False, "tie_embeddings": False}
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": 8, "layout": {},
                           "training": {"seq_len": 256, "global_batch": 8, "micro_batch": 1, "framework": "torch",
                                        **training}})


def test_compile_shortens_a_host_bound_step_but_not_below_the_gpu_work():
    """A small Llama-style model at micro-batch 1 is host-bound in eager mode (48 + 73 launches per block); under
    torch.compile its host issues 16 + 28 kernels, so the step shortens, yet it cannot beat the GPU's own work
    (the compiled blocks' kernels, which fuse the eager code's norm, RoPE and SwiGLU chains (titan_ops.py), issued
    by one CUDA-graph launch per block pass, where the GPU never waits)."""
    eager = predict(small_llama())
    compiled = predict(small_llama(compile=True))
    floor = predict(small_llama(compile=True, host_issue="cuda_graphs"))
    assert eager.breakdown_s["host_idle"] > 0
    assert compiled.step_time_s < eager.step_time_s
    assert compiled.step_time_s >= floor.step_time_s
    assert compiled.breakdown_s["host_idle"] < eager.breakdown_s["host_idle"]
    # compile: true and host_issue: compile issue the same kernels
    assert predict(small_llama(host_issue="compile")).step_time_s == pytest.approx(compiled.step_time_s)
