"""Executor pieces in one process (fast): the torch model from a ModelSpec, name-seeded weights, the
saved-activation meter against closed forms, timing statistics, stage assignment and failure messages."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from trainsim.kernels.executor import failure_message
from trainsim.kernels.measure import SavedActivationMeter, timing_stats
from trainsim.kernels.parallelize import layers_of, stage_ids_of
from trainsim.kernels.torch_model import ModelOptions, build_chunk, synthetic_batch
from trainsim.specs import build_scenario, load_model

LLAMA = {"num_layers": 2, "hidden": 64, "num_heads": 4, "num_kv_heads": 2, "ffn_hidden": 96, "vocab_size": 100,
         "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
         "tie_embeddings": False}
QWEN_LIKE = {**LLAMA, "qkv_bias": True}
CPU = torch.device("cpu")


@pytest.mark.parametrize("spec", ["tiny-gpt", LLAMA, QWEN_LIKE, {**LLAMA, "tie_embeddings": True}],
                         ids=["gpt", "llama", "qwen-qkv-bias", "tied"])
def test_parameter_count_equals_model_spec(spec):
    m = load_model(spec)
    model = build_chunk(m, list(range(m.num_layers)), True, True, ModelOptions(), 0, CPU)
    assert sum(p.numel() for p in model.parameters()) == m.total_params()


def test_a_chunk_holds_exactly_the_full_models_weights():
    m = load_model("tiny-gpt")
    full = dict(build_chunk(m, [0, 1, 2, 3], True, True, ModelOptions(), 7, CPU).named_parameters())
    tail = dict(build_chunk(m, [2, 3], False, True, ModelOptions(), 7, CPU).named_parameters())
    assert set(tail) < set(full) and "layers.2.attn.q.weight" in tail and "embed.tok.weight" not in tail
    for name, p in tail.items():
        assert torch.equal(p, full[name]), name
    other_seed = dict(build_chunk(m, [2, 3], False, True, ModelOptions(), 8, CPU).named_parameters())
    assert not torch.equal(other_seed["layers.2.attn.q.weight"], tail["layers.2.attn.q.weight"])


def _saved_bytes(spec, recompute: str, b: int = 2, s: int = 32, naive: bool = False):
    m = load_model(spec)
    block = build_chunk(m, [0], False, False, ModelOptions(recompute), 0, CPU)
    x = torch.randn(b, s, m.hidden, requires_grad=True)
    with SavedActivationMeter([block]) as meter:
        block(x).sum().backward()
    return meter.summary()


def test_meter_is_byte_exact_for_a_gpt_block():
    """Notes (torch-distributed-on-cpu.md): a dropout-free SDPA GPT block saves 16·e·s·b·h
    + LayerNorm mean/rstd (2 norms x 2 x 4 B per token) + the fp32 logsumexp 4·b·a·s."""
    b, s, h, a, e = 2, 32, 128, 4, 4
    got = _saved_bytes("tiny-gpt", "none", b, s)
    assert got["saved_per_microbatch_bytes"] == 16 * e * s * b * h + 2 * 2 * 4 * b * s + 4 * b * a * s
    assert got["forward_calls"] == [1]
    # Full recompute (torch.utils.checkpoint per block): only the block input stays.
    assert _saved_bytes("tiny-gpt", "full", b, s)["saved_per_microbatch_bytes"] == e * s * b * h
    # Selective (attention core checkpointed): the logsumexp is not saved.
    assert _saved_bytes("tiny-gpt", "selective", b, s)["saved_per_microbatch_bytes"] == \
        16 * e * s * b * h + 2 * 2 * 4 * b * s


def test_meter_counts_live_peak_and_releases_after_backward():
    m = load_model("tiny-gpt")
    block = build_chunk(m, [0], False, False, ModelOptions(), 0, CPU)
    with SavedActivationMeter([block]) as meter:
        ys = [block(torch.randn(2, 32, 128, requires_grad=True)) for _ in range(3)]  # 3 micro-batches in flight
        for y in ys:
            y.sum().backward()
    one = meter.per_chunk_bytes()[0]
    assert meter.peak_live_bytes == 3 * one
    assert meter.live_bytes == 0


def test_meter_counts_a_micro_batchs_own_token_ids_not_the_whole_batch():
    m = load_model("tiny-gpt")
    emb = build_chunk(m, [], True, False, ModelOptions(), 0, CPU)
    ids, targets = synthetic_batch(0, 0, 8, 32, m.vocab_size)
    with SavedActivationMeter([emb], inputs=(ids, targets)) as meter:
        emb(ids[:2]).sum().backward()
    # token ids of 2 sequences (int64) + the position ids of the learned position embedding
    assert meter.per_chunk_bytes() == [2 * 32 * 8 + 32 * 8]


def test_timing_stats():
    st = timing_stats([0.3, 0.1, 0.2, 0.5, 0.4])
    assert (st["median_s"], st["min_s"], st["p99_s"], st["n"]) == (0.3, 0.1, 0.5, 5)
    assert timing_stats([0.1] * 200)["p99_s"] == 0.1


def test_stage_assignment_loops_and_follows_the_scenario_split():
    assert stage_ids_of(1, pp=2, vpp=2) == [1, 3]
    even = build_scenario({"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 2},
                          {"pp": 2, "vpp": 2, "schedule": "interleaved", "dtype": "fp32", "seq_len": 32,
                           "global_batch": 4})
    assert [layers_of(i, even.stage_layers) for i in range(4)] == [[0], [1], [2], [3]]
    uneven = build_scenario({"model": {**LLAMA, "num_layers": 6}, "cluster": "cpu-host", "gpus": 4},
                            {"pp": 4, "dtype": "fp32", "seq_len": 32, "global_batch": 4})
    split = [layers_of(i, uneven.stage_layers) for i in range(4)]
    assert [i for part in split for i in part] == list(range(6)) and len(split[0]) == len(split[-1]) == 1


def test_failure_message_names_the_failed_rank_in_one_line():
    stderr = """[rank 1] injected fault: die
error: rank 0: RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4776. This is typically caused by a remote worker crashing.
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_23:54:24
  rank      : 1 (local_rank: 1)
  exitcode  : 17 (pid: 14410)
"""
    msg = failure_message(stderr, 1, 2)
    assert msg == ("2-process run failed: rank 1 failed first (exit code 17); [rank 1] injected fault: die; "
                   "rank 0: RuntimeError: Connection closed by peer")


def test_execute_command_does_not_import_torch():
    code = "import sys, trainsim.cli.execute, trainsim.kernels.executor; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mixed_precision_prediction_uses_torch_amp_state_bytes():
    """On CUDA with bf16 the executor keeps fp32 weights and gradients (autocast / FSDP2 MixedPrecisionPolicy)
    and Adam keeps m and v: 4 + 4 + 8 bytes per parameter, which the prediction it compares against must use."""
    from trainsim.cost_models.memory import stage_memory
    from trainsim.kernels.exec_config import ExecJob
    from trainsim.kernels.executor import prediction_scenario
    from trainsim.specs import build_scenario

    s = build_scenario({"model": "tiny-gpt", "cluster": "dgx-h100", "gpus": 2, "layout": {"tp": 2},
                        "training": {"global_batch": 2, "seq_len": 128, "dtype": "bf16"}})
    job = ExecJob(scenario=s.model_dump(mode="json"), device="cuda", optimizer="adam")
    pred = prediction_scenario(job)
    mem = stage_memory(pred, 0)
    params = mem.weights / 4
    assert (pred.training.param_bytes, pred.training.grad_bytes) == (4, 4)
    assert mem.grads == pytest.approx(4 * params) and mem.optimizer == pytest.approx(8 * params)


@pytest.mark.parametrize("training, field", [
    ({"offload_activation_layers": 1}, "training.offload_activation_layers"),
    ({"flash_attention": False}, "training.flash_attention"),
    ({"flash_attention_version": 1}, "training.flash_attention"),
    ({"overlap_p2p": True}, "training.overlap_p2p"),
])
def test_executor_refuses_settings_it_would_not_run(training, field):
    """A setting the executor cannot honour is refused by name, not predicted and then silently not run."""
    from trainsim.kernels.exec_config import check_job, make_job
    from trainsim.specs import SpecError, build_scenario

    s = build_scenario({"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 2,
                        "training": {"seq_len": 64, "global_batch": 4, "dtype": "fp32", **training}})
    with pytest.raises(SpecError) as ei:
        check_job(make_job(s, device="cpu"))
    assert ei.value.field == field


@pytest.mark.parametrize("model, field", [
    ({"activation": "geglu"}, "model.activation"),
    ({"block_norms": 4}, "model.block_norms"),
    ({"qk_norm": True}, "model.qk_norm"),
    ({"sliding_window": 16}, "model.sliding_window"),
    ({"final_softcap": 30.0}, "model.final_softcap"),
    ({"embed_proj_dim": 32}, "model.embed_proj_dim"),
    ({"attn_sinks": True}, "model.attn_sinks"),
    ({"activation": "swiglu", "swiglu_limit": 7.0}, "model.swiglu_limit"),
])
def test_executor_refuses_block_features_it_does_not_build(model, field):
    """A Gemma/Qwen3/OPT feature the executor's block lacks is refused by name, not run as another model."""
    from trainsim.kernels.exec_config import check_job, make_job
    from trainsim.specs import SpecError, build_scenario

    s = build_scenario({"model": {"preset": "tiny-gpt", **model}, "cluster": "cpu-host", "gpus": 2,
                        "training": {"seq_len": 64, "global_batch": 4, "dtype": "fp32"}})
    with pytest.raises(SpecError) as ei:
        check_job(make_job(s, device="cpu"))
    assert ei.value.field == field


def test_hsdp_prediction_uses_the_shard_group():
    """An HSDP run (--hsdp R) is predicted as the layout it runs: shard groups of dp/R ranks, R replicas."""
    from trainsim.kernels.exec_config import make_job
    from trainsim.kernels.executor import prediction_scenario
    from trainsim.specs import build_scenario

    s = build_scenario({"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 4,
                        "training": {"seq_len": 64, "global_batch": 4, "dtype": "fp32", "zero": 3}})
    assert prediction_scenario(make_job(s, device="cpu")).dp_shard == 4
    scn = prediction_scenario(make_job(s, device="cpu", hsdp=2))
    assert scn.dp == 4 and scn.dp_shard == 2 and scn.dp_replicas == 2
