"""LoRA fine-tuning (training.lora_rank): closed forms for the FLOPs, the adapter parameters, the model states, the
saved activations, the gradient reduction and the host issue, and the refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainsim.cost_models import activations, flops, host_issue, memory, model_flops
from trainsim.cost_models.ddp_buckets import chunk_dp_buckets
from trainsim.cost_models.lora import ISSUE_PER_TARGET
from trainsim.cost_models.shapes import layer_shape
from trainsim.reports.whatif import ReportOptions, checkpoint_seconds
from trainsim.simulator.planner import PlanRequest
from trainsim.simulator.planner import checkpoint_seconds as plan_checkpoint_seconds
from trainsim.simulator.search_space import SearchLimits
from trainsim.specs import SpecError, load_cluster, load_model
from trainsim.specs.loaders import build_scenario
from trainsim.specs.lora import LORA_TARGETS

# Llama 3 70B (Meta-Llama-3-70B config.json): h 8192, 64 heads of 128, 8 KV heads, SwiGLU 28672, 80 layers, vocab
# 128256 -- the trainsim preset llama3-70b.
H, A, KV, D, F, L, V = 8192, 64, 8, 128, 28672, 80, 128256
Q = A * D


def _scenario(tp=1, pp=1, gpus=8, **training):
    raw = {"model": "llama3-70b", "cluster": {"preset": "dgx-h100"}, "gpus": gpus, "layout": {"tp": tp, "pp": pp},
           "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1, "dtype": "bf16",
                        "distributed_optimizer": True, "sequence_parallel": tp > 1, **training}}
    return build_scenario(raw)


def _dims(target: str) -> tuple[int, int]:
    """(d_in, d_out) of Megatron-Core's fused linears, written out from the Llama 3 70B config."""
    return {"linear_qkv": (H, Q + 2 * KV * D), "linear_proj": (Q, H), "linear_fc1": (H, 2 * F),
            "linear_fc2": (F, H)}[target]


def test_adapter_parameters_closed_form():
    """rank x (d_in + d_out) per target per layer: Llama 3 70B at rank 16 on the four default targets holds
    16 x (18432 + 16384 + 65536 + 36864) = 2,195,456 per layer, 175,636,480 in all; split over TP."""
    per_layer = sum(16 * sum(_dims(t)) for t in LORA_TARGETS)
    assert per_layer == 2_195_456
    held = memory.rank_param_shards(_scenario(lora_rank=16), 0).held
    assert held == pytest.approx(L * per_layer) == 175_636_480
    assert memory.rank_param_shards(_scenario(tp=8, lora_rank=16), 0).held == pytest.approx(L * per_layer / 8)


def test_model_flops_closed_form():
    """Base GEMMs keep their forward and input gradient but lose the weight gradient; the attention core (no
    weights) keeps all three passes; each adapter adds 3 x 2 x T x rank x (d_in + d_out)."""
    T, r, n_micro = 4096, 16, 32
    weights = H * (Q + 2 * KV * D) + Q * H + H * 2 * F + F * H  # per layer
    attn_fwd = 2 * T * A * T * (D + D)  # QK^T and PV over the full s x s matrix (flops.py convention)
    logits = 2 * T * H * V
    full = n_micro * (L * (3 * 2 * T * weights + 3 * attn_fwd) + 3 * logits)
    assert model_flops.model_flops_per_step(_scenario()) == pytest.approx(full, rel=1e-12)
    for targets in (("linear_qkv",), LORA_TARGETS):
        adapters = sum(6 * T * r * sum(_dims(t)) for t in targets)
        lora = n_micro * (L * (2 * 2 * T * weights + 3 * attn_fwd + adapters) + 2 * logits)
        got = model_flops.model_flops_per_step(_scenario(lora_rank=r, lora_target_modules=list(targets)))
        assert got == pytest.approx(lora, rel=1e-12)
    # the base model's GEMMs alone: (fwd + dgrad) / (fwd + dgrad + wgrad) = 2/3
    ops = flops.layer_ops(layer_shape(_scenario(lora_rank=r)))
    base = [op for op in ops if op.name in ("qkv", "out_proj", "fc1", "fc2")]
    assert sum(op.total_flops for op in base) / (3 * 2 * T * weights) == pytest.approx(2 / 3)


def test_model_states_only_adapters_train():
    """No gradient or optimizer byte for a base parameter: grads = adapters x 4 (fp32 main grads), optimizer =
    adapters x 12 / dp (distributed optimizer), weights = (base + adapters) x 2, or base x 1 with fp8 base weights."""
    full = _scenario()
    base = memory.rank_param_shards(full, 0).held
    adapters = L * sum(16 * sum(_dims(t)) for t in LORA_TARGETS)
    sm = memory.stage_memory(_scenario(lora_rank=16), 0)
    assert sm.grads == pytest.approx(adapters * 4)
    assert sm.optimizer == pytest.approx(adapters * 12 / 8)
    assert sm.weights == pytest.approx((base + adapters) * 2)
    fp8 = memory.stage_memory(_scenario(lora_rank=16, dtype="fp8", lora_fp8_base_weights=True), 0)
    assert fp8.weights == pytest.approx(base * 1 + adapters * 2)


def test_saved_activations_closed_form():
    """A frozen linear saves no input; an adapted one's adapter saves it 16-bit, and each adapter its B input
    (T x rank). With adapters on linear_qkv only, fc1's input (the second norm's output, T x h / tp with SP) and
    fc2's (T x f / tp) go; with all four targets nothing goes and 4 B inputs come."""
    tp, T, r, e = 8, 4096, 16, 2
    full = activations.layer_activation_bytes(_scenario(tp=tp)).total
    qkv = activations.layer_activation_bytes(_scenario(tp=tp, lora_rank=r, lora_target_modules=["linear_qkv"]))
    assert qkv.total == pytest.approx(full - e * T * H / tp - e * T * F / tp + e * T * r)
    every = activations.layer_activation_bytes(_scenario(tp=tp, lora_rank=r)).total
    assert every == pytest.approx(full + 4 * e * T * r)
    # fp8: the base linears saved 1-byte inputs; the adapter's 16-bit copy replaces the QKV input's
    full8 = activations.layer_activation_bytes(_scenario(tp=tp, dtype="fp8")).total
    qkv8 = activations.layer_activation_bytes(_scenario(tp=tp, dtype="fp8", lora_rank=r,
                                                        lora_target_modules=["linear_qkv"])).total
    dropped = T * H / tp + T * F / tp + T * Q / tp  # fc1, fc2 and out-projection fp8 inputs (1 byte)
    assert qkv8 == pytest.approx(full8 - dropped + (e - 1) * T * H / tp + e * T * r)


def test_gradient_reduction_holds_adapters_only():
    """Megatron-Core DDP buckets hold requires_grad parameters: the adapters' gradients of each chunk."""
    scn = _scenario(pp=2, gpus=16, lora_rank=16)  # dp 8
    elems = sum(b.elems for b in chunk_dp_buckets(scn, 0, 0, 8, None))
    assert elems == pytest.approx(40 * sum(16 * sum(_dims(t)) for t in LORA_TARGETS))


def test_host_issue_adds_adapter_kernels():
    """Each target adds its counted eager ops and launches to the block's forward and backward."""
    d, k = host_issue.op_seconds("x86")
    plain = host_issue.scenario_block_issue(_scenario())
    lora = host_issue.scenario_block_issue(_scenario(lora_rank=16, lora_target_modules=["linear_qkv", "linear_fc2"]))
    f_ops, f_k, b_ops, b_k = ISSUE_PER_TARGET
    assert lora.fwd_s - plain.fwd_s == pytest.approx(2 * (f_ops * d + f_k * k))
    assert lora.bwd_s - plain.bwd_s == pytest.approx(2 * (b_ops * d + b_k * k))


@pytest.mark.parametrize("training, field", [
    ({"lora_rank": 16, "framework": "torch", "distributed_optimizer": False}, "training.lora_rank"),
    ({"lora_rank": 16, "zero": 3, "distributed_optimizer": False}, "training.lora_rank"),
    ({"lora_rank": 16, "lora_fp8_base_weights": True}, "training.lora_fp8_base_weights"),
    ({"lora_rank": 16, "lora_target_modules": []}, "training.lora_target_modules"),
    ({"lora_rank": 16, "lora_target_modules": ["linear_qkv", "linear_qkv"]}, "training.lora_target_modules"),
    ({"lora_fp8_base_weights": True}, "training.lora_rank"),
    ({"lora_rank": 16, "schedule": "zb"}, "training.lora_rank"),
    ({"lora_rank": 20000}, "training.lora_rank"),
    ({"lora_rank": 16, "dtype": "nvfp4"}, "training.dtype"),  # refused by lora.py before any GPU check
])
def test_refusals_name_the_field(training, field):
    with pytest.raises(SpecError) as err:
        _scenario(**training)
    assert err.value.field == field


def test_rank_must_divide_over_tp_and_moe_is_refused():
    with pytest.raises(SpecError, match="divisible by tp"):
        _scenario(tp=8, lora_rank=12)
    raw = {"model": "mixtral-8x7b", "cluster": {"preset": "dgx-h100"}, "gpus": 8, "layout": {"tp": 1, "ep": 8},
           "training": {"seq_len": 4096, "global_batch": 32, "distributed_optimizer": True, "lora_rank": 16}}
    with pytest.raises(SpecError, match="dense MHA/GQA"):
        build_scenario(raw)


def test_nemo_lora_rows_take_the_release_settings(tmp_path):
    """A LoRA Performance row of release 26.06 maps to LoRA with its performance config's adapters (nemo_lora.csv:
    rank 16, alpha 32, linear_qkv only); one of a release with no entry is skipped, naming why. Hand-written rows in
    the table's column layout (no unbundled data needed)."""
    import csv

    from trainsim.validation.nemo import load_nemo

    cols = ["row_id", "nemo_container", "section", "model", "system", "num_gpus", "precision", "gbs", "mbs",
            "seq_len", "fsdp", "tp", "pp", "cp", "vp", "ep", "etp", "ga", "tokens_per_s_per_gpu", "model_tflops_per_gpu"]
    path = tmp_path / "nemo.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for rid, release in (("r_lora", "26.06"), ("r_undated", "25.09")):
            w.writerow({"row_id": rid, "nemo_container": release, "section": "LoRA Performance",
                        "model": "LLAMA3_70B", "system": "DGX-H100", "num_gpus": 8, "precision": "FP8", "gbs": 32,
                        "mbs": 1, "seq_len": 4096, "tp": 2, "pp": 4, "cp": 1, "vp": 20, "ep": "n/a",
                        "tokens_per_s_per_gpu": 2600, "model_tflops_per_gpu": 720})
    cases = {c.row_id: c for c in load_nemo(path).cases}
    t = cases["r_lora"].scenario.training
    assert (t.lora_rank, t.lora_alpha, t.lora_target_modules) == (16, 32.0, ("linear_qkv",))
    assert t.framework == "megatron" and t.distributed_optimizer and t.grad_dtype == "bf16"
    assert cases["r_undated"].scenario is None and "nemo_lora.csv" in cases["r_undated"].skip_reason


def test_execute_refuses_lora(capsys):
    """The executor trains every parameter, so a LoRA scenario is refused in one line, exit status 2."""
    from trainsim.cli.main import main

    assert main(["execute", "--model", "tiny-gpt", "--cluster", "cpu-host", "--gpus", "1", "--global-batch", "2",
                 "--lora-rank", "4"]) == 2
    assert "training.lora_rank: LoRA fine-tuning is simulated only" in capsys.readouterr().err


def test_full_recompute_reruns_the_adapters():
    """Full recompute keeps only the block input and re-runs the whole forward, adapters included: hardware FLOPs
    exceed model FLOPs by one forward of the base GEMMs, the attention core and the adapters."""
    T, r, n_micro = 4096, 16, 32
    full_rc = _scenario(recompute="full", lora_rank=r)
    assert (activations.layer_activation_bytes(full_rc).total
            == activations.layer_activation_bytes(_scenario(recompute="full")).total)
    weights = H * (Q + 2 * KV * D) + Q * H + H * 2 * F + F * H
    fwd = 2 * T * weights + 2 * T * A * T * (D + D) + sum(2 * T * r * sum(_dims(t)) for t in LORA_TARGETS)
    extra = model_flops.hardware_flops_per_step(full_rc) - model_flops.model_flops_per_step(full_rc)
    assert extra == pytest.approx(n_micro * L * fwd, rel=1e-12)


def test_hybrid_mamba_stack_is_refused():
    """A hybrid Mamba stack has no uniform dense block to carry the four adapters: refused, naming lora_rank."""
    raw = {"model": "nemotron-h-8b", "cluster": {"preset": "dgx-h100"}, "gpus": 8, "layout": {"tp": 1},
           "training": {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "distributed_optimizer": True,
                        "lora_rank": 16}}
    with pytest.raises(SpecError) as err:
        build_scenario(raw)
    assert err.value.field == "training.lora_rank" and "hybrid" in str(err.value)


def test_a_profiled_block_keeps_the_adapters_host_issue():
    """A calibration profile times the executor's block, which has no adapters: the adapters' ops and launches are
    issued on top of the measured seconds (``ATEN_DISPATCH_S`` per op, ``KERNEL_LAUNCH_S`` more per kernel)."""
    from trainsim.cost_models.host_issue import block_issue, op_seconds
    dispatch, launch = op_seconds("x86")
    extra = (12, 4, 14, 6)
    issue = block_issue("rmsnorm-swiglu-rope", recompute_full=False, measured=(1e-3, 2e-3), extra=extra)
    assert issue.fwd_s == pytest.approx(1e-3 + 12 * dispatch + 4 * launch)
    assert issue.bwd_s == pytest.approx(2e-3 + 14 * dispatch + 6 * launch)
    bare = block_issue("rmsnorm-swiglu-rope", recompute_full=False, measured=(1e-3, 2e-3))
    assert (bare.fwd_s, bare.bwd_s) == (1e-3, 2e-3)


def test_checkpoint_holds_the_adapters_only():
    """Megatron-Bridge's PEFT checkpoint saves the adapters' weights and optimizer states only (docs/training/peft.md:
    "Only adapter states are saved"): Llama 3 70B at rank 16 on the four default targets, 175,636,480 adapter
    parameters x (2 B bf16 weight + 12 B fp32 master, m, v) = 2,458,910,720 B, written at the report's and the
    planner's storage bandwidth; without LoRA the whole model's."""
    want = 175_636_480 * (2 + 12)
    assert want == 2_458_910_720
    opts = ReportOptions()
    assert checkpoint_seconds(_scenario(lora_rank=16), opts) == pytest.approx(want / opts.storage_write_Bps, rel=1e-12)
    full = _scenario()
    assert checkpoint_seconds(full, opts) == pytest.approx(full.model.total_params() * 14 / opts.storage_write_Bps,
                                                           rel=1e-12)
    req = PlanRequest(model=load_model("llama3-70b"), cluster=load_cluster("dgx-h100"), gpu_counts=(8,),
                      global_batch=32, seq_len=4096, tokens=1e9, limits=SearchLimits(training_extra={"lora_rank": 16}))
    assert plan_checkpoint_seconds(req) == pytest.approx(want / req.storage_write_Bps, rel=1e-12)
    qkv_only = replace(req, limits=SearchLimits(training_extra={"lora_rank": 16, "lora_target_modules": ("linear_qkv",)}))
    assert plan_checkpoint_seconds(qkv_only) == pytest.approx(L * 16 * sum(_dims("linear_qkv")) * 14 / req.storage_write_Bps,
                                                         rel=1e-12)
