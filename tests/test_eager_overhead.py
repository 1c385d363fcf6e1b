"""Eager-execution overhead and torch.optim costs from a CPU profile (cost_models.eager, compute, profile).

Truth: closed forms of the documented charging rule, and the executor's own torch model for the counts.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from trainsim.cost_models import compute
from trainsim.cost_models.eager import block_style, count_passes, modelled_ops, stage_param_tensors
from trainsim.cost_models.flops import layer_ops
from trainsim.cost_models.profile import (
    CalibrationProfile,
    EagerBlockOverhead,
    OptimizerFit,
    Stats,
    load_profile,
    profile_to_dict,
)
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import SpecError, build_scenario

HAS_TORCH = importlib.util.find_spec("torch") is not None
GPT = "layernorm-gelu-learned"


def st(t: float) -> Stats:
    return Stats(min_s=t, median_s=t, p99_s=t, reps=10)


TINY_LLAMA = {"name": "tiny-llama", "num_layers": 4, "hidden": 64, "num_heads": 4, "num_kv_heads": 2,
              "ffn_hidden": 128, "vocab_size": 256, "max_seq_len": 128, "activation": "swiglu", "norm": "rmsnorm",
              "position_embedding": "rope", "bias": False, "tie_embeddings": False}


def scenario(gpus: int = 1, model="tiny-gpt", **over):
    return build_scenario({"model": model, "cluster": "cpu-host", "gpus": gpus},
                          {"dtype": "fp32", "seq_len": 128, "global_batch": 8, **over})


def profile(**extra) -> CalibrationProfile:
    n_f, n_b = modelled_ops(scenario())
    eager = {GPT: EagerBlockOverhead(fwd=st(n_f * 13e-6), bwd=st(n_b * 25e-6), fwd_ops=n_f, bwd_ops=n_b),
             f"{GPT}+tp": EagerBlockOverhead(fwd=st(n_f * 100e-6), bwd=st(n_b * 200e-6), fwd_ops=n_f, bwd_ops=n_b),
             f"{GPT}+fsdp": EagerBlockOverhead(fwd=st(n_f * 40e-6), bwd=st(n_b * 80e-6), fwd_ops=n_f, bwd_ops=n_b)}
    optim = {"adam": OptimizerFit(per_tensor_s=20e-6, elements_per_s=0.5e9, zero_grad_per_tensor_s=0.3e-6),
             "adam-dtensor": OptimizerFit(per_tensor_s=100e-6, elements_per_s=0.3e9)}
    return CalibrationProfile(dispatch_overhead=st(3e-6), eager_overhead=eager, optimizer_fits=optim, **extra)


def test_block_is_charged_per_modelled_op_beyond_the_bare_dispatch():
    s = scenario()
    n_f, n_b = count_passes(layer_ops(layer_shape(s)))
    base = compute.layer_times(s, CalibrationProfile(dispatch_overhead=st(3e-6)))
    with_eager = compute.layer_times(s, profile())
    assert with_eager.fwd_s - base.fwd_s == pytest.approx(n_f * (13e-6 - 3e-6))
    assert with_eager.bwd_s - base.bwd_s == pytest.approx(n_b * (25e-6 - 3e-6))
    # Tensor parallelism uses the DTensor-wrapped block's measurement.
    s_tp = scenario(2, tp=2)
    base_tp = compute.layer_times(s_tp, CalibrationProfile(dispatch_overhead=st(3e-6)))
    assert compute.layer_times(s_tp, profile()).fwd_s - base_tp.fwd_s == pytest.approx(n_f * (100e-6 - 3e-6))


def test_fsdp_wrapper_adds_the_difference_to_the_plain_block():
    n_f, n_b = modelled_ops(scenario())
    f, b = compute.wrapper_overhead_s(scenario(2, dp=2, zero=3), profile(), "fsdp")
    assert (f, b) == pytest.approx((n_f * 27e-6, n_b * 55e-6))
    assert compute.wrapper_overhead_s(scenario(2, dp=2, zero=3), None, "fsdp") == (0.0, 0.0)


def test_without_eager_measurements_nothing_changes():
    s = scenario()
    assert compute.eager_overhead_s(layer_shape(s), None) == (0.0, 0.0)
    assert compute.eager_overhead_s(layer_shape(s), CalibrationProfile()) == (0.0, 0.0)


def test_optimizer_time_is_per_tensor_plus_per_element():
    s = scenario()
    plain, dt = stage_param_tensors(s, 0)
    assert (plain, dt) == (69, 0)  # tiny-gpt: 4 x 16 block tensors + tok, pos, final norm w/b, head
    n = s.model.total_params()
    expected = 69 * (20e-6 + 0.3e-6) + n / 0.5e9
    assert compute.optimizer_step_time(s, 0, profile()) == pytest.approx(expected)
    # FSDP2: every parameter is a DTensor holding half the elements.
    fs = scenario(2, dp=2, zero=3)
    assert stage_param_tensors(fs, 0) == (0, 69)
    assert compute.optimizer_step_time(fs, 0, profile()) == pytest.approx(69 * 100e-6 + n / 2 / 0.3e9)


def test_schema_1_profiles_still_load_and_unknown_versions_fail_clearly(tmp_path):
    d = profile_to_dict(CalibrationProfile())
    d["schema_version"] = 1
    d.pop("eager_overhead")
    d.pop("optimizer_fits")
    d.pop("dtensor_collective_overhead_s", None)  # schema 2 fields, absent from a real schema-1 file
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(d))
    assert load_profile(path).eager_overhead == {}
    d = profile_to_dict(CalibrationProfile())  # schema 2: no per-rank GEMM rates (added in 3)
    d["schema_version"] = 2
    d.pop("rank_gemm_flops")
    path.write_text(json.dumps(d))
    assert load_profile(path).speed_spread_cv is None
    d["schema_version"] = 99
    path.write_text(json.dumps(d))
    with pytest.raises(SpecError, match="schema_version 99 is not supported"):
        load_profile(path)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
@pytest.mark.parametrize("model", ["tiny-gpt", TINY_LLAMA])
@pytest.mark.parametrize("over", [{}, {"tp": 2}, {"tp": 2, "sequence_parallel": True}, {"pp": 2}])
def test_parameter_tensor_counts_match_the_executor_model(over, model):
    """stage_param_tensors counts what torch_model builds (plain + DTensor), per stage."""
    from trainsim.kernels.parallelize import layers_of
    from trainsim.kernels.torch_model import ModelOptions, build_chunk

    s = scenario(2 if over else 1, model, **over)
    for stage in range(s.layout.pp):
        chunk = build_chunk(s.model, layers_of(stage, s.stage_layers), stage == 0, stage == s.layout.pp - 1,
                            ModelOptions(), 0, None)
        assert sum(stage_param_tensors(s, stage)) == len(list(chunk.parameters()))
    assert block_style(layer_shape(s)) == (GPT if model == "tiny-gpt" else "rmsnorm-swiglu-rope")


def test_torch_tp_reduces_each_column_parallel_input_separately():
    """framework torch (parallelize_module): 4 backward all-reduces per GeLU block (q, k, v, fc1) against
    Megatron's 2 per region; forward 2 either way (counted in a torch.profiler trace, framework.py)."""
    from trainsim.simulator.builder import build_cost_table
    from trainsim.simulator.step_context import _step_context

    def chunk(fw: str, **over):
        return build_cost_table(scenario(2, tp=2, framework=fw, **over)).stages[0].chunks[0]

    def blocks_tp(fw: str, **over) -> tuple[float, float]:
        """The chunk's TP seconds less Megatron's vocabulary-parallel layers' (simulator/vocab_tp.py), which
        torch's TP plans do not shard."""
        c, v = chunk(fw, **over), _step_context(scenario(2, tp=2, framework=fw, **over), None).vocab_tp
        return c.tp_fwd_s - v.emb_fwd_s - v.head_fwd_s, c.tp_bwd_s - v.head_bwd_s

    # megatron-2021 waits for its 2 backward all-reduces (Megatron-Core hides them behind wgrad GEMMs).
    meg, tor = blocks_tp("megatron-2021"), blocks_tp("torch")
    assert tor == pytest.approx((meg[0], 2 * meg[1]))
    # With SP: the same gathers/scatters plus the norm weights' gradient all-reduces (LayerNorm: 4 tensors).
    meg_sp, tor_sp = blocks_tp("megatron", sequence_parallel=True), blocks_tp("torch", sequence_parallel=True)
    assert tor_sp[0] == pytest.approx(meg_sp[0])
    assert tor_sp[1] > meg_sp[1]


def test_dtensor_redistribution_overhead_is_added_per_tp_collective():
    """framework torch + a CPU profile's DTensor overhead: + ov per collective (2 forward, 4 backward per block)."""
    from trainsim.simulator.builder import build_cost_table

    ov = {"all_reduce": 300e-6, "all_gather": 200e-6, "reduce_scatter": 100e-6}
    s = scenario(2, tp=2, framework="torch")
    base = build_cost_table(s, profile=CalibrationProfile()).stages[0].chunks[0]
    more = build_cost_table(s, profile=CalibrationProfile(dtensor_collective_overhead_s=ov)).stages[0].chunks[0]
    n = base.layers
    assert more.tp_fwd_s - base.tp_fwd_s == pytest.approx(n * 2 * 300e-6)
    assert more.tp_bwd_s - base.tp_bwd_s == pytest.approx(n * 4 * 300e-6)
    # Megatron's TP has no DTensor layer: unchanged.
    m = scenario(2, tp=2)
    assert (build_cost_table(m, profile=CalibrationProfile(dtensor_collective_overhead_s=ov)).stages[0].chunks[0].tp_bwd_s
            == pytest.approx(build_cost_table(m, profile=CalibrationProfile()).stages[0].chunks[0].tp_bwd_s))
