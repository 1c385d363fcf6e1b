"""The host cost of the Python wrappers around Megatron's legacy layer (cost_models/legacy_layer_wrappers.py): the
per-call prices are the committed measurement's, the counts are the layer code's, and the benchmark's arithmetic and
stand-ins are what its docstring says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainsim.cost_models import host_issue as hi
from trainsim.cost_models import legacy_layer_wrappers as lw
from trainsim.cost_models.shapes import layer_shape
from trainsim.specs import build_scenario

MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "host_wrappers_cpu.json"


def test_prices_are_the_committed_measurement():
    """Each constant is the median of benchmarks/data/host_wrappers_cpu.json's trials (python -m
    trainsim.kernels.host_wrappers_bench); the RNG fork's backward, measured at or below 0, is none."""
    units = json.loads(MEASURED.read_text())["units_per_call"]
    assert units["function_identity"] == pytest.approx(lw.FUNCTION_IDENTITY, abs=5e-4)
    assert units["function_wrap"] == pytest.approx(lw.FUNCTION_WRAP, abs=5e-4)
    assert units["script_call"] == pytest.approx(lw.SCRIPT_CALL, abs=5e-4)
    assert units["reentrant_checkpoint"] == pytest.approx(lw.REENTRANT_CHECKPOINT, abs=5e-4)
    assert units["rng_fork"][0] == pytest.approx(lw.RNG_FORK[0], abs=5e-4)
    assert units["rng_fork"][1] <= 0 and lw.RNG_FORK[1] == 0


def test_median_of_trials_is_what_the_file_keeps():
    data = json.loads(MEASURED.read_text())
    for key, (f, b) in data["units_per_call"].items():
        fs = sorted(t[key][0] for t in data["trials"])
        bs = sorted(t[key][1] for t in data["trials"])
        assert (f, b) == (fs[len(fs) // 2], bs[len(bs) // 2])


@pytest.mark.parametrize(("async_linears", "tp", "hidden", "fused", "dropout", "expected"), [
    # Megatron-DeepSpeed before its 2023 merge / Megatron-LM 2021: copy-to before both column-parallel linears and
    # reduce-from after both row-parallel ones at every TP; the layer norm Function x2, fused softmax, GeLUFunction;
    # two bias-dropout-adds and bias_gelu scripted
    (False, 1, 2048, True, True, lw.WrapperCalls(4, 4, 3, 1)),
    (False, 8, 2048, True, True, lw.WrapperCalls(4, 4, 3, 1)),
    (False, 1, 2048, False, True, lw.WrapperCalls(4, 3, 3, 1)),     # eager softmax path: plain ops, no Function
    (False, 1, 2048, True, False, lw.WrapperCalls(4, 4, 3, 0)),     # no attention dropout, no RNG fork
    # Megatron-LM 2022: LinearWithGradAccumulationAndAsyncCommunication per linear; the column side skips copy-to
    # only where the asynchronous all-reduce is on, which needs TP > 1; the layer output's viewless Function, and
    # one after each layer norm at the persistent kernel's widths (2048 is one, 2000 is not)
    (True, 2, 2048, True, True, lw.WrapperCalls(2 + 3, 8, 3, 1)),
    (True, 1, 2048, True, True, lw.WrapperCalls(4 + 3, 8, 3, 1)),
    (True, 2, 2000, True, True, lw.WrapperCalls(2 + 1, 8, 3, 1)),
])
def test_calls_per_block_follow_the_layer_code(async_linears, tp, hidden, fused, dropout, expected):
    assert lw.layer_calls(async_linears=async_linears, tp=tp, hidden=hidden, fused_softmax=fused,
                          dropout=dropout) == expected


def test_other_block_styles_pay_no_gpt_wrappers():
    """A Llama-style block (RMSNorm, SwiGLU, no biases) under a legacy-layer framework runs other Python wrappers
    than the GPT layer's; none are priced, rather than the GPT layer's."""
    model = {"name": "l", "num_layers": 4, "hidden": 1024, "num_heads": 16, "ffn_hidden": 2816, "vocab_size": 32000,
             "max_seq_len": 1024, "norm": "rmsnorm", "activation": "swiglu", "position_embedding": "rope",
             "bias": False}
    s = build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 1, "training": {
        "seq_len": 1024, "global_batch": 8, "micro_batch": 1, "framework": "megatron-deepspeed", "recompute": "full",
        "flash_attention": False, "dtype": "fp16"}})
    counted = hi.block_issue("rmsnorm-swiglu-rope", recompute_full=True)
    assert hi.scenario_block_issue(s).fwd_s == pytest.approx(counted.fwd_s * hi.MODULE_FRAME_RATIO)


def test_block_seconds_are_calls_times_prices():
    """Forward pass: each wrapper's forward half and the checkpoint call's; backward pass: their backward halves;
    under full recompute the layer's wrappers' forward halves again, apart (paced as a forward)."""
    calls = lw.WrapperCalls(4, 4, 3, 1)
    w_f = 4 * 1.283 + 4 * 0.867 + 3 * 0.433 + 1.211
    w_b = 4 * 0.789 + 4 * 0.566 + 3 * 0.898
    got = lw.block_wrapper_s(calls, True, 2.0)
    assert (got.fwd_s, got.bwd_s, got.recompute_s) == pytest.approx((2 * (w_f + 6.719), 2 * (w_b + 10.365), 2 * w_f))
    got = lw.block_wrapper_s(calls, False, 2.0)
    assert (got.fwd_s, got.bwd_s, got.recompute_s) == pytest.approx((2 * w_f, 2 * w_b, 0.0))
    # selective recompute of the core attention: one reentrant checkpoint call, and the core's softmax Function
    # and RNG fork forward halves again before the backward
    got = lw.block_wrapper_s(calls, False, 2.0, selective_core={"function_wrap": 1, "rng_fork": 1})
    assert (got.fwd_s, got.bwd_s, got.recompute_s) == pytest.approx((2 * (w_f + 6.719), 2 * (w_b + 10.365),
                                                                      2 * (0.867 + 1.211)))


def test_a_calibration_measurement_replaces_the_prices():
    """Seconds per call a GPU calibration measured (CalibrationProfile.host_wrappers_s) replace the kinds it holds;
    the others keep their prices."""
    calls = lw.WrapperCalls(4, 4, 3, 0)
    measured = {"function_identity": (10e-6, 5e-6), "reentrant_checkpoint": (40e-6, 60e-6)}
    u = 3.3e-6
    f = 4 * 10e-6 + 4 * 0.867 * u + 3 * 0.433 * u
    b = 4 * 5e-6 + 4 * 0.566 * u + 3 * 0.898 * u
    got = lw.block_wrapper_s(calls, True, u, measured)
    assert (got.fwd_s, got.bwd_s, got.recompute_s) == pytest.approx((f + 40e-6, b + 60e-6, f))


def _gpt(framework: str, recompute: str = "full", dropout: bool = True):
    model = {"name": "g", "num_layers": 4, "hidden": 1024, "num_heads": 16, "ffn_hidden": 4096, "vocab_size": 50304,
             "max_seq_len": 1024}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 1, "training": {
        "seq_len": 1024, "global_batch": 8, "micro_batch": 1, "framework": framework, "recompute": recompute,
        "dropout": dropout, "flash_attention": False, "dtype": "fp16"}})


def test_seconds_per_block_at_the_dispatch_price():
    """A Megatron-DeepSpeed block with dropout and the fused softmax, at ATEN_DISPATCH_S per unit aten op."""
    s = _gpt("megatron-deepspeed")
    calls = lw.WrapperCalls(4, 4, 3, 1)
    w = hi.legacy_wrapper_s(s, layer_shape(s))
    assert w == lw.block_wrapper_s(calls, True, hi.ATEN_DISPATCH_S)
    assert w.fwd_s + w.bwd_s + w.recompute_s == pytest.approx(0.16e-3, abs=0.005e-3)  # README's "0.16 ms per block"
    s = _gpt("megatron-deepspeed", recompute="none")
    assert hi.legacy_wrapper_s(s, layer_shape(s)) == lw.block_wrapper_s(calls, False, hi.ATEN_DISPATCH_S)


def test_a_profile_with_wrapper_timings_prices_the_block(tmp_path):
    """`trainsim calibrate --device cuda` stores the wrappers' seconds (host_wrappers_s, kept through the JSON file);
    a scenario predicted with that profile pays them."""
    from trainsim.cost_models.profile import CalibrationProfile, load_profile, save_profile

    prof = CalibrationProfile(host_wrappers_s={k: (20e-6, 30e-6) for k in lw.PRICES})
    prof = load_profile(save_profile(prof, tmp_path / "p.json"))
    assert prof.host_wrappers_s == {k: (20e-6, 30e-6) for k in lw.PRICES}
    s = _gpt("megatron-deepspeed")
    got = hi.legacy_wrapper_s(s, layer_shape(s), prof)
    # 12 calls per forward (4 + 4 + 3 + 1) and the checkpoint's; their 12 backward halves (the profile's fork has
    # one) and the checkpoint's; the recomputed forward's 12
    assert (got.fwd_s, got.bwd_s, got.recompute_s) == pytest.approx((13 * 20e-6, 13 * 30e-6, 12 * 20e-6))


def test_only_the_legacy_layer_pays_them():
    """The legacy layer's block issue is Megatron-Core's counted issue (the executor's GPT block at the legacy
    layer's op counts and frame ratios aside) plus exactly its wrappers; Megatron-Core's Transformer Engine layer
    runs none of them."""
    legacy, core = _gpt("megatron-deepspeed"), _gpt("megatron")
    assert hi.scenario_block_issue(core).fwd_s == pytest.approx(
        hi.block_issue("layernorm-gelu-learned", recompute_full=True).fwd_s)
    w = hi.legacy_wrapper_s(legacy, layer_shape(legacy))
    counted = hi.block_issue("megatron-gpt-unfused", recompute_full=True)  # the syncs are PassIssue fields apart
    assert hi.scenario_block_issue(legacy).fwd_s == pytest.approx(counted.fwd_s * hi.MODULE_FRAME_RATIO + w.fwd_s)


@pytest.mark.torch
def test_benchmark_stand_ins_compute_what_they_stand_for():
    """The wrapping Function returns the bare op's values and gradients, the scripted bias-dropout-add the eager
    one's under one seed, and the reentrant checkpoint the plain call's gradient: the benchmark times wrappers
    around the same work."""
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint

    from trainsim.kernels import host_wrappers_bench as hb
    x = torch.randn(8, 1, hb.WIDTH, dtype=torch.float64, requires_grad=True)
    b = torch.randn(hb.WIDTH, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(hb._Scale.apply, (x,))
    assert torch.equal(hb._Scale.apply(x), torch.mul(x, 2.0))
    torch.manual_seed(1)
    eager = hb._bias_dropout_add(x, b, x, 0.1)
    torch.manual_seed(1)
    assert torch.equal(hb.scripted_bias_dropout_add()(x, b, x, 0.1), eager)
    y = x.detach().requires_grad_(True)
    checkpoint(hb._OneOp(), y, use_reentrant=True).sum().backward()
    assert torch.equal(y.grad, torch.ones_like(y))
    assert torch.equal(hb._Identity.apply(x), x)


def test_ratio_arithmetic():
    """Each ratio is a per-call time over the unit op's forward; the wrapping and script prices are differences
    against the bare op, the checkpoint's backward less the plain backward and the recomputed forward."""
    from trainsim.kernels.host_wrappers_bench import ratios
    t = {"unit_aten_op": (2.0, 3.0), "identity_function": (2.5, 1.5), "scale": (3.0, 4.0),
         "scale_function": (6.0, 7.0), "bias_dropout_add_eager": (8.0, 8.0),
         "bias_dropout_add_script": (9.0, 10.0), "one_op_checkpointed": (16.0, 25.0), "one_op_forked": (4.0, 3.0)}
    r = ratios(t)
    assert r == {"function_identity": [1.25, 0.75], "function_wrap": [1.5, 1.5], "script_call": [0.5, 1.0],
                 "reentrant_checkpoint": [7.0, 10.0], "rng_fork": [1.0, 0.0]}


def test_torchs_reentrant_checkpoint_stands_for_deepspeeds_within_its_measured_gap():
    """benchmarks/data/host_wrappers_deepspeed_cpu.json (python -m trainsim.kernels.host_wrappers_bench --deepspeed,
    DeepSpeed 0.14.4): DeepSpeed's checkpoint costs no more than torch's reentrant one, the stand-in the prices use,
    and the stand-in's price is that run's within its trial spread."""
    data = json.loads((MEASURED.parent / "host_wrappers_deepspeed_cpu.json").read_text())
    assert data["fingerprint"]["deepspeed"] == "0.14.4"
    units = data["units_per_call"]
    ds, torch_ = units["deepspeed_checkpoint"], units["reentrant_checkpoint"]
    assert ds[0] <= torch_[0] and ds[1] <= torch_[1] * 1.02
    assert torch_ == pytest.approx(lw.REENTRANT_CHECKPOINT, rel=0.05)
