"""The loss's memory as each cross-entropy implementation allocates it, held against closed forms and against
torch's own memory tracker running the eager loss under FakeTensorMode (nothing allocated)."""

from __future__ import annotations

import pytest

from trainsim.cost_models import activations as act
from trainsim.cost_models.memory import stage_memory
from trainsim.specs import SpecError, build_scenario

SEQ, VOCAB = 2048, 32000
MODEL = {"name": "w1024", "num_layers": 2, "hidden": 1024, "num_heads": 8, "num_kv_heads": 8, "ffn_hidden": 2816,
         "vocab_size": VOCAB, "max_seq_len": SEQ, "norm": "rmsnorm", "position_embedding": "rope",
         "activation": "swiglu", "bias": False, "tie_embeddings": False}


def scen(gpus=1, layout=None, **training):
    training = {"seq_len": SEQ, "global_batch": gpus, "micro_batch": 1, **training}
    return build_scenario({"model": MODEL, "cluster": "dgx-h100", "gpus": gpus, "layout": layout or {},
                           "training": training})


@pytest.mark.parametrize("framework,cross_entropy,per_logit", [
    ("megatron", None, 2),            # vocab-parallel: the 16-bit logits beside the in-place fp32 softmax
    ("pytorch-fsdp", None, 2),        # fused kernel: the 16-bit logit gradient
    ("torch", None, 8),               # eager F.cross_entropy on fp32: nll grad + log_softmax backward, fp32
    ("torch", "fused", 2),            # torch.compile'd loss
    ("pytorch-fsdp", "eager_fp32", 8),
    ("megatron", "vocab_parallel", 2),
    ("torch", "eager_fp32_kept", 12),  # the same with the caller's fp32 logits alive through the backward
])
def test_logits_workspace_per_implementation(framework, cross_entropy, per_logit):
    extra = {"cross_entropy": cross_entropy} if cross_entropy else {}
    s = scen(framework=framework, **extra)
    assert act.logits_workspace_bytes(s) == per_logit * SEQ * VOCAB


def test_loss_parallel_workspace_on_the_vocabulary_shard():
    """loss_parallel's forward holds three fp32 tensors of the rank's vocabulary shard (the fp32 copy, the shifted
    logits and their exp, DTensor's _log_softmax) beside the caller's bf16 logits -- 2 + 12 bytes per logit, above
    its fused backward's three fp32 tensors (12)."""
    s = scen(gpus=2, layout={"tp": 2}, framework="torch")
    assert act.LOSS_PARALLEL_BACKWARD_BYTES == 12 and act.LOSS_PARALLEL_FORWARD_BYTES == 12
    assert act.logits_workspace_bytes(s) == (2 + 12) * SEQ * VOCAB / 2
    assert act.logits_workspace_bytes(scen(gpus=2, layout={"tp": 2})) == 2 * SEQ * VOCAB / 2  # Megatron


def test_workspace_counts_only_beyond_the_recompute_working_set():
    """The loss's backward runs and frees its temporaries before the last block is recomputed."""
    for recompute in ("none", "full"):
        s = scen(framework="torch", recompute=recompute)
        sm = stage_memory(s, 0)
        working = act.recompute_working_bytes(s)
        assert sm.details["recompute_working"] == working
        assert sm.details["logits_workspace"] == max(0.0, act.logits_workspace_bytes(s) - working)
    assert act.recompute_working_bytes(scen(framework="torch", recompute="none")) == 0.0


def test_unknown_cross_entropy_is_refused():
    with pytest.raises(SpecError, match="cross_entropy"):
        scen(cross_entropy="chunked")


@pytest.mark.torch
def test_eager_fp32_loss_matches_torch_memory_tracker():
    """torch's MemTracker over ``F.cross_entropy(logits.float(), y)`` and its backward: the saved fp32 log-softmax
    (ACT, 4 bytes per logit) and, at the peak, 8 bytes per logit of temporaries -- the model's workspace."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    T, V = 1024, 8000
    with FakeTensorMode():
        logits = torch.randn(T, V, dtype=torch.bfloat16, requires_grad=True)  # the model's 16-bit output
        y = torch.randint(0, V, (T,))
        tracker = MemTracker()
        with tracker:
            F.cross_entropy(logits.float(), y).backward()
        (peak,) = tracker.get_tracker_snapshot("peak").values()
    by_name = {str(k).rsplit(".", 1)[-1]: v for k, v in peak.items()}
    assert by_name["ACT"] == pytest.approx(4 * T * V, rel=0.01)
    assert by_name["TEMP"] == pytest.approx(act.EAGER_CE_BACKWARD_BYTES * T * V, rel=0.01)


@pytest.mark.torch
def test_kept_fp32_logits_loss_matches_torch_memory_tracker():
    """torchtitan of early 2024 (pytorch/torchtitan 83c879f18): the model returns ``self.output(h).float()`` and
    the loop keeps ``pred`` through ``loss.backward()``. torch's MemTracker over that head and loss: 8 bytes per
    logit saved (the kept fp32 logits and the fp32 log-softmax) and 8 of temporaries at the peak, 16 in all --
    the model's saved log-softmax (4) plus its workspace (``eager_fp32_kept``: 12)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    T, V, H = 1024, 8000, 256
    with FakeTensorMode():
        head = torch.nn.Linear(H, V, bias=False, dtype=torch.bfloat16)
        x = torch.randn(T, H, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, V, (T,))
        tracker = MemTracker()
        tracker.track_external(head)
        with tracker:
            pred = head(x).float()
            F.cross_entropy(pred, y).backward()
        (peak,) = tracker.get_tracker_snapshot("peak").values()
    by_name = {str(k).rsplit(".", 1)[-1]: v for k, v in peak.items()}
    assert by_name["ACT"] - x.numel() * 2 == pytest.approx(8 * T * V, rel=0.001)
    assert by_name["TEMP"] == pytest.approx(8 * T * V, rel=0.001)
    s = scen(framework="torch", cross_entropy="eager_fp32_kept")
    model_peak = act.STAT_BYTES + act.logits_workspace_bytes(s) / (SEQ * VOCAB)
    assert model_peak == 16


def test_kept_fp32_logits_need_whole_logits():
    with pytest.raises(SpecError, match="cross_entropy"):
        scen(gpus=2, layout={"tp": 2}, framework="torch", cross_entropy="eager_fp32_kept")


@pytest.mark.parametrize("framework", ["megatron", "megatron-2021", "megatron-2022", "megatron-deepspeed",
                                       "deepspeed", "deepspeed-2021"])
def test_kept_fp32_logits_are_a_torch_loop_not_megatrons_loss(framework):
    """Megatron's GPT (and the DeepSpeed GPTs built on it) computes its vocab-parallel loss inside the model: no
    caller keeps fp32 logits, so the torch loop's setting is refused there, naming the field, not costed."""
    with pytest.raises(SpecError, match="cross_entropy: eager_fp32_kept .* framework " + framework):
        scen(framework=framework, cross_entropy="eager_fp32_kept")
    scen(framework="pytorch-fsdp", cross_entropy="eager_fp32_kept")  # torch loops keep them: accepted


def test_kept_fp32_logits_refused_from_the_command_line(tmp_path, capsys):
    from trainsim.cli.main import main
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\n"
                 "training: {seq_len: 4096, global_batch: 8, framework: megatron, cross_entropy: eager_fp32_kept}\n")
    assert main(["predict", str(f), "--fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cross_entropy" in err[0] and "megatron" in err[0]


def test_deepspeed_pipeline_keeps_each_inflight_output_megatron_frees_it():
    """DeepSpeed's pipeline engine keeps every in-flight micro-batch's stage output for its backward
    (pipe_buffers['outputs']); Megatron deallocates it after the send. The last stage's output is the loss."""
    base = dict(gpus=4, layout={"pp": 4}, global_batch=16, recompute="full", dropout=False)
    ds, meg = scen(framework="deepspeed", **base), scen(framework="megatron", **base)
    out = 2 * SEQ * MODEL["hidden"]
    assert act.pipeline_output_bytes(ds) == out
    for stage in range(4):
        extra = (stage_memory(ds, stage).details["activations_per_microbatch"]
                 - stage_memory(meg, stage).details["activations_per_microbatch"])
        assert extra == (0 if stage == 3 else out)
    inflight = stage_memory(ds, 0).inflight_microbatches
    assert inflight == 4


def test_measured_cuda_context_replaces_the_derived_one():
    derived = stage_memory(scen(), 0).details["cuda_context"]
    measured = stage_memory(scen(cuda_context_bytes=1573 << 20), 0).details["cuda_context"]
    assert measured == 1573 << 20 and derived < measured
    with pytest.raises(SpecError, match="cuda_context_bytes"):
        scen(cuda_context_bytes=-1)


def test_allocator_caches_the_last_blocks_temporaries_and_the_eager_losss_16_bit_logits():
    """At the loss's peak the last block's freed forward temporaries (its recompute working set) are cached and
    too small for the logits-sized requests; torch's eager fp32 loss also leaves its freed 16-bit logits' block
    idle while the fp32 gradients take new segments (allocator_reserve.py)."""
    from trainsim.cost_models.allocator_reserve import loss_stage_cached_bytes
    assert loss_stage_cached_bytes(working=3.0, loss_workspace=8.0, logits_bytes=2.0, eager_loss=True,
                                   vocab=32000, ffn=2816) == 5.0
    assert loss_stage_cached_bytes(working=9.0, loss_workspace=8.0, logits_bytes=2.0, eager_loss=False,
                                   vocab=32000, ffn=2816) == 8.0
    assert loss_stage_cached_bytes(working=3.0, loss_workspace=8.0, logits_bytes=2.0, eager_loss=True,
                                   vocab=2048, ffn=2816) == 0.0
    base = dict(gpus=2, layout={"pp": 2}, global_batch=4, recompute="full")
    torch_s, meg = scen(framework="torch", **base), scen(framework="megatron", **base)
    logits = 2 * SEQ * VOCAB
    for s, eager in ((torch_s, True), (meg, False)):
        first, last = stage_memory(s, 0), stage_memory(s, 1)
        working = last.details["recompute_working"]
        assert first.allocator_cached == 0.0
        assert last.allocator_cached == min(working, act.logits_workspace_bytes(s)) + (logits if eager else 0.0)


def test_reserved_and_device_counters_add_the_cached_bytes_the_fit_check_does_not():
    from trainsim.simulator.predict import predict
    s = scen(framework="torch", recompute="full")
    pred = predict(s)
    cached = stage_memory(s, 0).allocator_cached
    assert cached > 0 and pred.allocator_cached_bytes == pytest.approx(cached)
    assert pred.peak_reserved_bytes == pytest.approx(pred.peak_allocated_bytes + cached)
    assert pred.peak_device_bytes == pytest.approx(pred.peak_bytes + cached)
    assert pred.free_bytes == pred.gpu_memory_bytes - pred.peak_bytes
    assert pred.to_json()["memory"]["peak_reserved_bytes"] == pred.peak_reserved_bytes
