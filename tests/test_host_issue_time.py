"""Host issue time in the step (cost_models/host_issue.py): op counts held against the executor's block under a
dispatch-mode counter, the closed form of the issue time, and where the builder makes the GPU wait for it."""

from __future__ import annotations

import pytest

from trainsim.cost_models import compute, loss_issue
from trainsim.cost_models import host_issue as hi
from trainsim.cost_models.memory import rank_param_shards
from trainsim.cost_models.shapes import layer_shape
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import ModelSpec, build_scenario

GPT = {"activation": "gelu", "norm": "layernorm", "position_embedding": "learned"}
LLAMA = {"activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
         "tie_embeddings": False}


def small(tp=8, mb=1, hidden=512, layers=8, **training):
    model = {"name": "tiny-gpt", "num_layers": layers, "hidden": hidden, "num_heads": 8, "ffn_hidden": 4 * hidden,
             "vocab_size": 32000, "max_seq_len": 256}
    training = {"seq_len": 256, "global_batch": 8 * mb, "micro_batch": mb, "framework": "megatron-2022",
                **training}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 8, "layout": {"tp": tp},
                           "training": training})


@pytest.mark.torch
@pytest.mark.parametrize(("style", "arch"), [("layernorm-gelu-learned", GPT), ("rmsnorm-swiglu-rope", LLAMA)])
def test_block_counts_match_the_dispatch_counter(style, arch):
    """BLOCK_OPS is what the executor's block dispatches in eager mode, at any width."""
    pytest.importorskip("torch")
    from trainsim.kernels.op_count import count_block_ops
    for hidden in (256, 1024):
        spec = ModelSpec(name="b", num_layers=2, hidden=hidden, num_heads=4, ffn_hidden=4 * hidden, vocab_size=1000,
                         max_seq_len=64, **arch)
        assert count_block_ops(spec).as_tuple() == hi.BLOCK_OPS[style]


def test_linear_forward_matches_the_measured_host_time():
    """Independent check of the per-op constants: an nn.Linear forward (t, view, addmm: 3 dispatches, 1 kernel)
    costs 13.7 us by them; Transformer Engine issue #2053 measured 13.5 us on a Xeon 8480C."""
    assert 3 * hi.ATEN_DISPATCH_S + hi.KERNEL_LAUNCH_S == pytest.approx(13.5e-6, rel=0.05)


def test_issue_time_closed_form():
    f_ops, f_k, b_ops, b_k = hi.BLOCK_OPS["layernorm-gelu-learned"]
    d, k = hi.ATEN_DISPATCH_S, hi.KERNEL_LAUNCH_S
    eager = hi.block_issue("layernorm-gelu-learned", recompute_full=False)
    assert eager.fwd_s == pytest.approx(f_ops * d + f_k * k)
    assert eager.bwd_s == pytest.approx(b_ops * d + b_k * k)
    full = hi.block_issue("layernorm-gelu-learned", recompute_full=True, tp_collectives=(2, 2))
    fwd_tp = (f_ops + 2) * d + (f_k + 2) * k
    assert full.fwd_s == pytest.approx(fwd_tp)
    assert full.bwd_s == pytest.approx((b_ops + 2) * d + (b_k + 2) * k + fwd_tp)
    graphs = hi.block_issue("layernorm-gelu-learned", recompute_full=False, mode="cuda_graphs")
    assert graphs.fwd_s == graphs.bwd_s == pytest.approx(d + k)
    comp = hi.block_issue("layernorm-gelu-learned", recompute_full=False, mode="compile")
    c_f, c_b = hi.compiled_kernel_count("layernorm-gelu-learned", (f_k, b_k), (f_k, b_k))  # Inductor's fused kernels
    assert (comp.fwd_s, comp.bwd_s) == pytest.approx((c_f * k, c_b * k))
    grace = hi.block_issue("layernorm-gelu-learned", recompute_full=False, host_cpu="grace")
    assert grace.fwd_s == pytest.approx(eager.fwd_s * 35 / 13.5)


def test_a_host_bound_chunk_waits_for_its_host():
    """Tiny blocks at TP 8: each pass lasts the host's issue time; the GPU idles for the difference."""
    s = small()
    issue = hi.scenario_block_issue(s)
    ch = build_cost_table(s).stages[0].chunks[0]
    n = ch.layers
    assert ch.host_idle_fwd_s > 0 and ch.host_idle_bwd_s > 0
    # the forward pass (compute + exposed TP) lasts exactly the host's issue time of its blocks and of the
    # output head and loss it ends with (cost_models.loss_issue), after the lead-in of get_batch's sync
    head_f, head_b = loss_issue.head_loss_issue_s(s)
    assert head_f > 0 and head_b > 0 and issue.microbatch_sync_s > 0
    assert ch.fwd_s + ch.tp_fwd_s == pytest.approx(n * issue.fwd_s + head_f + issue.microbatch_sync_s)
    assert ch.bwd_s + ch.tp_bwd_s == pytest.approx(n * issue.bwd_s + head_b)
    graphs = build_cost_table(small(host_issue="cuda_graphs")).stages[0].chunks[0]
    assert graphs.host_idle_fwd_s == graphs.host_idle_bwd_s == 0.0
    assert predict(small(host_issue="cuda_graphs")).step_time_s < predict(s).step_time_s


def test_large_kernels_hide_the_host():
    """GPU-bound blocks hide their issue: the forward idles only for the lead-in after get_batch's sync."""
    s = small(tp=1, mb=8, hidden=4096, layers=2)
    ch = build_cost_table(s).stages[0].chunks[0]
    assert ch.host_idle_fwd_s == pytest.approx(hi.scenario_block_issue(s).microbatch_sync_s)
    assert ch.host_idle_bwd_s == 0.0


def test_cpu_ranks_and_moe_are_not_modelled_apart():
    cpu = build_scenario({"model": {"name": "t", "num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 256,
                                    "vocab_size": 100, "max_seq_len": 32}, "cluster": "cpu-host", "gpus": 1,
                          "training": {"seq_len": 32, "global_batch": 1, "micro_batch": 1}})
    assert hi.scenario_block_issue(cpu) is None


def test_predict_says_how_long_the_gpu_waits_for_its_host():
    from trainsim.simulator.predict import host_idle_share
    s = small()
    pred = predict(s)
    table = build_cost_table(s)
    share = host_idle_share(table, pred.step_time_s)
    ch = table.stages[0].chunks
    assert share == pytest.approx((sum(c.host_idle_fwd_s + c.host_idle_bwd_s for c in ch) * table.num_microbatches
                                   + table.stages[0].optimizer_host_idle_s) / pred.step_time_s)
    assert 0.01 < share < 1
    assert any(w.startswith("host-bound: GPU idle waiting for the host: ") for w in pred.warnings)
    big = predict(small(tp=1, mb=8, hidden=4096, layers=2))
    assert not any("GPU idle waiting for the host" in w for w in big.warnings)


def test_plan_ranks_small_batch_layouts_with_the_host_in_the_step():
    """`plan` predicts through the same cost table: a tiny model on 8 A100 at TP 8 is host-bound, so its row carries
    the idle note and its step includes the wait; the TP 1 layout (8x the work per kernel) ranks faster."""
    from trainsim.simulator.planner import PlanRequest, plan
    from trainsim.simulator.search_space import SearchLimits
    from trainsim.specs import load_cluster
    model = small().model
    rows = {}
    for tp in (1, 8):
        req = PlanRequest(model=model, cluster=load_cluster("dgx-a100"), gpu_counts=(8,), global_batch=8, seq_len=256,
                          top_k=1, limits=SearchLimits(fixed={"tp": tp, "pp": 1, "cp": 1, "ep": 1, "micro_batch": 1},
                                                       training_extra={"framework": "megatron-2022"}))
        rows[tp] = plan(req).rows[0]
    assert any("GPU idle waiting for the host" in w for w in rows[8].warnings)
    eight = small(tp=8)
    idle = predict(eight).step_time_s - predict(small(tp=8, host_issue="cuda_graphs")).step_time_s
    assert idle > 0 and rows[8].step_time_s > rows[1].step_time_s


def test_a_gpu_profile_measured_host_issue_replaces_the_count():
    """`trainsim calibrate --device cuda` stores the tiny blocks' times (CalibrationProfile.host_issue): they are
    the host issue time of a block pass and replace the counted seconds; the ops' own GPU times do not change."""
    from trainsim.cost_models import compute
    from trainsim.cost_models.profile import CalibrationProfile, EagerBlockOverhead, Stats

    def st(s):
        return Stats(min_s=s, median_s=s, p99_s=s, reps=30)
    prof = CalibrationProfile(host_issue={"layernorm-gelu-learned": EagerBlockOverhead(
        fwd=st(400e-6), bwd=st(900e-6), fwd_ops=13, bwd_ops=13)})
    s = small(recompute="full")
    issue = hi.scenario_block_issue(s, prof)
    hooks = hi.ddp_hook_adds(s) * (hi.ATEN_DISPATCH_S + hi.KERNEL_LAUNCH_S)  # Megatron's DDP hooks, outside the block
    # the legacy layer's Python wrappers are not in the executor's measured block: added on top (the profile's
    # spread of 0 sets the TP pace to 1)
    w = hi.legacy_wrapper_s(s, layer_shape(s))
    assert (issue.fwd_s, issue.bwd_s) == pytest.approx((400e-6 + w.fwd_s,
                                                        900e-6 + 400e-6 + hooks + w.bwd_s + w.recompute_s))
    assert compute.layer_times(s, prof) == compute.layer_times(s, CalibrationProfile())
    assert prof.measured()["host_issue"]
    assert prof.host_issue_block_s("rmsnorm-swiglu-rope") is None


def test_breakdown_and_predict_table_show_the_host_idle():
    s = small()
    pred = predict(s)
    table = build_cost_table(s)
    idle = table.num_microbatches * sum(c.host_idle_fwd_s + c.host_idle_bwd_s for c in table.stages[0].chunks)
    assert pred.breakdown_s["host_idle"] == pytest.approx(idle)
    graphs = predict(small(host_issue="cuda_graphs"))
    assert graphs.breakdown_s["host_idle"] == 0.0
    # the GPU's own compute is the same either way: the idle is split off it, not added to it
    assert pred.breakdown_s["compute"] == pytest.approx(graphs.breakdown_s["compute"], rel=1e-9)


def test_graphs_or_compile_where_they_cannot_be_costed_are_refused(capsys, tmp_path):
    from trainsim.cli.main import main
    from trainsim.specs import SpecError
    with pytest.raises(SpecError, match="training.host_issue"):
        build_scenario({"model": "qwen3-30b-a3b", "cluster": "dgx-h100", "gpus": 8, "layout": {"ep": 8},
                        "training": {"seq_len": 4096, "global_batch": 8, "host_issue": "cuda_graphs"}})
    f = tmp_path / "s.yaml"
    f.write_text("model: {name: t, num_layers: 2, hidden: 64, num_heads: 4, ffn_hidden: 256, vocab_size: 100, "
                 "max_seq_len: 32}\ncluster: cpu-host\ngpus: 1\n"
                 "training: {seq_len: 32, global_batch: 1, micro_batch: 1, host_issue: compile}\n")
    assert main(["predict", str(f)]) == 2
    err = capsys.readouterr().err
    assert "training.host_issue" in err and "Traceback" not in err


@pytest.mark.torch
def test_megatron_layer_counts_match_the_dispatch_counter():
    """BLOCK_OPS["megatron-gpt-unfused"] is what the op-for-op replica of Megatron's GPT layer
    (kernels/megatron_block.py) dispatches, at any width and sequence length."""
    pytest.importorskip("torch")
    from trainsim.kernels.op_count import count_megatron_layer_ops

    for hidden, heads, seq in ((256, 4, 64), (2048, 16, 128)):
        counted = count_megatron_layer_ops(hidden, heads, 4 * hidden, seq_len=seq)
        assert counted.as_tuple() == hi.BLOCK_OPS["megatron-gpt-unfused"]


@pytest.mark.torch
def test_the_op_count_command_recounts_every_style(capsys):
    """`python -m trainsim.kernels.op_count` counts every BLOCK_OPS style from its block and finds the table."""
    pytest.importorskip("torch")
    from trainsim.kernels.op_count import counted_block_ops, main
    assert {s: c.as_tuple() for s, c in counted_block_ops().items()} == hi.BLOCK_OPS
    assert main() == 0
    out = capsys.readouterr().out
    assert out.count("same") == len(hi.BLOCK_OPS) and "differs" not in out


@pytest.mark.torch
def test_megatron_eager_softmax_path_adds_its_casts_scale_and_mask():
    """Where Megatron's fused softmax kernel does not apply, FusedScaleMaskSoftmax's eager path replaces the one
    softmax op by the fp32 cast, the scale, masked_fill_, softmax and the fp16 cast: 4 more ops and kernels each
    way, at any width, sequence and micro-batch (megatron_block, fused_softmax=False)."""
    pytest.importorskip("torch")
    from trainsim.kernels.op_count import count_megatron_layer_ops

    for hidden, heads, seq, mb in ((256, 4, 64, 1), (2048, 16, 128, 2)):
        eager = count_megatron_layer_ops(hidden, heads, 4 * hidden, seq_len=seq, micro_batch=mb,
                                         fused_softmax=False).as_tuple()
        assert eager == hi.BLOCK_OPS["megatron-gpt-unfused-eager-softmax"]
        assert [e - f for e, f in zip(eager, hi.BLOCK_OPS["megatron-gpt-unfused"])] == [4, 4, 4, 4]


@pytest.mark.parametrize(("tp", "mb", "dtype", "fused"), [(8, 1, "fp16", False), (8, 2, "fp16", True),
                                                          (4, 1, "fp16", True), (1, 1, "bf16", True),
                                                          (8, 3, "fp16", False), (4, 1, "fp32", False)])
def test_megatron_fused_softmax_needs_attention_batches_in_fours(tp, mb, dtype, fused):
    """16 heads: b * np = mb * 16 / tp must be a multiple of 4 and the scores fp16/bf16 (Megatron's
    FusedScaleMaskSoftmax), so TP 8 at micro-batch 1 (2 attention batches) takes the eager softmax path."""
    from trainsim.cost_models.shapes import layer_shape
    model = {"name": "gpt", "num_layers": 2, "hidden": 1024, "num_heads": 16, "ffn_hidden": 4096,
             "vocab_size": 32000, "max_seq_len": 256}
    training = {"seq_len": 256, "global_batch": 8 * mb, "micro_batch": mb, "framework": "megatron-2022",
                "dtype": dtype, "flash_attention": False}
    s = build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 8, "layout": {"tp": tp},
                        "training": training})
    assert hi.megatron_fused_softmax(layer_shape(s)) is fused
    style = hi.issue_style("layernorm-gelu-learned", megatron_layer=True, flash=False, fused_softmax=fused)
    assert style == ("megatron-gpt-unfused" if fused else "megatron-gpt-unfused-eager-softmax")


def test_megatron_layer_count_applies_to_its_frameworks_without_flash():
    assert hi.issue_style("layernorm-gelu-learned", megatron_layer=True, flash=False) == "megatron-gpt-unfused"
    assert hi.issue_style("layernorm-gelu-learned", megatron_layer=True, flash=True) == "layernorm-gelu-learned"
    assert hi.issue_style("layernorm-gelu-learned", megatron_layer=False, flash=False) == "layernorm-gelu-learned"
    assert hi.issue_style("rmsnorm-swiglu-rope", megatron_layer=True, flash=False) == "rmsnorm-swiglu-rope"


@pytest.mark.parametrize(("framework", "counted"), [("megatron-2021", "megatron-gpt-unfused"),
                                                    ("megatron-2022", "megatron-gpt-unfused"),
                                                    ("megatron", "layernorm-gelu-learned")])
def test_scenario_issue_time_of_megatron_layer_closed_form(framework, counted):
    """Full recompute at TP 2 without FlashAttention: forward = ops x 3.3 us + kernels x 3.8 us (2 all-reduces
    added), backward = its own ops plus the recomputed forward's plus Megatron's local-DDP hooks' main_grad.add_
    (2021: all 12 tensors of the layer; 2022: its 4 biases and 4 norm tensors; Megatron-Core: none counted); the
    legacy Python layer (2021, 2022) at the measured whole-pass ratios, forward 0.329 ms for the executor's GPT block
    on a GPU host against its counted 39 x 3.3 + 12 x 3.8 us, backward (hooks included) 1.225 ms per block inside a
    running backward against its counted 94 x 3.3 + 26 x 3.8 us; each pass at the pace of the slower of the 2 ranks'
    hosts: for two log-normal draws E[max] / E = 2 Phi(sigma / sqrt 2)."""
    from statistics import NormalDist

    from trainsim.cost_models.host_jitter import DEFAULT_SIGMA
    s = small(tp=2, framework=framework, recompute="full", flash_attention=False)
    f_ops, f_k, b_ops, b_k = hi.BLOCK_OPS[counted]
    d, k = hi.ATEN_DISPATCH_S, hi.KERNEL_LAUNCH_S
    f_pace, b_pace = (2 * NormalDist().cdf(sg / 2 ** 0.5) for sg in DEFAULT_SIGMA)
    frames = 0.3289760053157806e-3 / (39 * 3.3e-6 + 12 * 3.8e-6) if framework != "megatron" else 1.0
    bwd_frames = 1.225295960903168e-3 / (94 * 3.3e-6 + 26 * 3.8e-6) if framework != "megatron" else 1.0
    fwd = ((f_ops + 2) * d + (f_k + 2) * k) * frames * f_pace
    # the legacy layer's Python wrappers (cost_models.legacy_layer_wrappers), in unit aten ops per call: 2021 has the
    # four TP region mappings (identity Functions), both layer norms, the fused softmax and the bias-GeLU as wrapping
    # Functions; 2022's async linears are four more wrapping Functions and replace the two column-side mappings, and
    # its layer output passes a viewless-tensor Function (width 512: no persistent layer norm); three TorchScript
    # calls; no dropout, so no RNG fork; one reentrant checkpoint call per block under full recompute
    identity, wrapping = {"megatron-2021": (4, 4), "megatron-2022": (3, 8), "megatron": (0, 0)}[framework]
    scripts, legacy = (3, 1.0) if framework != "megatron" else (0, 0.0)
    w_f = (identity * 1.283 + wrapping * 0.867 + scripts * 0.433) * d
    w_b = (identity * 0.789 + wrapping * 0.566 + scripts * 0.898) * d
    ck_f, ck_b = legacy * 6.719 * d, legacy * 10.365 * d
    issue = hi.scenario_block_issue(s)
    assert issue.fwd_s == pytest.approx(fwd + (w_f + ck_f) * f_pace)
    hooks = {"megatron-2021": 12, "megatron-2022": 8, "megatron": 0}[framework]
    # the recomputed forward, its wrappers included, at the forward's pace
    assert issue.bwd_s == pytest.approx(((b_ops + 2 + hooks) * d + (b_k + 2 + hooks) * k) * bwd_frames * b_pace + fwd
                                        + (w_b + ck_b) * b_pace + w_f * f_pace)


def test_megatron_forward_issue_lies_within_a_measured_tp8_bracket():
    """Independent bracket for the counted forward of Megatron's layer at TP 8 (59 aten ops, 30 kernels, and the two
    TP all-reduces): facebookresearch/metaseq PR #270 measured OPT-175B (96 Megatron-style layers, TP 8, 8 Azure
    A100s) at ~95 ms per decoded token eager and ~66 ms with the step captured as one CUDA graph. The 29 ms the graph
    removed is host time that was exposed, 0.30 ms per layer forward; the whole eager step, 0.99 ms per layer, bounds
    the host's issue time from above."""
    issue = hi.block_issue("megatron-gpt-unfused", recompute_full=False, tp_collectives=(2, 2))
    assert 29e-3 / 96 <= issue.fwd_s <= 95e-3 / 96
    assert issue.fwd_s == pytest.approx(61 * hi.ATEN_DISPATCH_S + 32 * hi.KERNEL_LAUNCH_S)


@pytest.mark.torch
def test_sync_lead_in_is_what_the_dispatch_counter_sees():
    """After Megatron-DeepSpeed's first scalar copy returns, the host issues the second one and dense_h_to_4h's
    ``torch.matmul(x, weight.t())`` up to its GEMM: lift_fresh, _to_copy (the copy), t, view, mm (the kernel)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainsim.kernels.op_count import VIEW_OPS

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    x, w = torch.randn(4, 1, 8, device="meta"), torch.randn(16, 8, device="meta")
    with Ops() as ops:
        torch.tensor(0.0).to("meta")  # a Python scalar copied to a device, as torch.tensor(0.0, device=...)
        torch.matmul(x, w.t())
    lead = ops.names[:ops.names.index("mm") + 1]
    assert lead == ["lift_fresh", "_to_copy", "t", "view", "mm"]
    assert hi.SYNC_LEAD_BLOCK == (len(lead), sum(n not in VIEW_OPS and n != "lift_fresh" for n in lead))


def test_sync_lead_closed_form():
    d, k = hi.ATEN_DISPATCH_S, hi.KERNEL_LAUNCH_S
    f, b, mb = hi.sync_leads(1, 1, tp=1, recompute_full=True)
    assert (f, b, mb) == pytest.approx((5 * d + 2 * k, 5 * d + 2 * k, 45 * d + 18 * k))
    assert f == pytest.approx(24.1e-6)
    _, b0, mb8 = hi.sync_leads(1, 1, tp=8, recompute_full=False)
    assert b0 == 0.0 and mb8 == pytest.approx(53 * d + 26 * k)
    assert hi.sync_leads(0, 0, tp=8, recompute_full=True) == (0.0, 0.0, 0.0)


def test_megatron_deepspeed_syncs_add_their_lead_ins_to_the_step():
    """The same GPU-bound job under megatron-deepspeed and megatron-2021 (identical but for the block syncs and the
    gradient accumulation; both sync in get_batch): the first chunk idles for one micro-batch lead-in (both) plus a
    block lead-in per block and pass with a recomputed forward (megatron-deepspeed), each at the legacy layer's
    measured whole-pass ratio; with one micro-batch per step
    megatron-deepspeed's AccumulateGrad adds nothing (the gradient is stolen), megatron-2021's hooks add every
    gradient into main_grad (read, read, write: 3 x 2 bytes per parameter)."""
    kw = {"tp": 1, "mb": 8, "hidden": 4096, "layers": 2, "recompute": "full", "dtype": "fp16"}
    ds = build_cost_table(small(framework="megatron-deepspeed", **kw))
    ref = build_cost_table(small(framework="megatron-2021", **kw))
    a, r = ds.stages[0].chunks[0], ref.stages[0].chunks[0]
    f, b, mb = (x * hi.MODULE_FRAME_RATIO for x in hi.sync_leads(1, 1, tp=1, recompute_full=True))
    assert r.host_idle_fwd_s == pytest.approx(mb) and r.host_idle_bwd_s == 0.0
    assert a.host_idle_fwd_s == pytest.approx(2 * f + mb)
    assert a.host_idle_bwd_s == pytest.approx(2 * b)
    assert a.fwd_s - r.fwd_s == pytest.approx(2 * f)
    s_ds, s_ref = small(framework="megatron-deepspeed", **kw), small(framework="megatron-2021", **kw)
    m = s_ds.training.global_batch // (s_ds.dp * s_ds.training.micro_batch)
    # their gradient reductions differ in calls (Megatron-LM 2021's one all-reduce of the chunk's buffer,
    # cost_models/ddp_buckets.py; DeepSpeed's engine its own), both exposed after the backward: set apart
    hw = compute.hw_of(s_ds.cluster.gpu, "fp16")
    assert m == 1
    p_ds, p_ref = predict(s_ds), predict(s_ref)
    saved = sum(p_ref.breakdown_s[k] - p_ds.breakdown_s[k] for k in ("compute", "compute_slowest_gpu"))
    assert saved == pytest.approx(3 * 2 * rank_param_shards(s_ds, 0).grad_params / hw.mem_Bps, rel=0.05)
    step = (p_ds.step_time_s - p_ds.exposed_comm_s["dp"]) - (p_ref.step_time_s - p_ref.exposed_comm_s["dp"])
    assert step + saved == pytest.approx(m * 4 * f, rel=0.02)


def test_chunk_sync_lead_is_the_micro_batch_lead_without_the_embedding():
    """A chunk that does not start the micro-batch runs get_batch's sync and its lead-in without the word and
    position embeddings (6 dispatches, 5 launches) and the checkpoint's RNG copies (3 dispatches): 36 / 13."""
    assert hi.SYNC_LEAD_CHUNK == (36, 13)
    assert hi.issue_s(*hi.SYNC_LEAD_CHUNK) == pytest.approx(36 * hi.ATEN_DISPATCH_S + 13 * hi.KERNEL_LAUNCH_S)
    assert hi.issue_s(*hi.SYNC_LEAD_CHUNK) == pytest.approx(168.2e-6)


def _pipelined(framework: str):
    model = {"name": "gpt", "num_layers": 8, "hidden": 4096, "num_heads": 32, "ffn_hidden": 16384,
             "vocab_size": 32000, "max_seq_len": 2048}
    training = {"seq_len": 2048, "global_batch": 16, "micro_batch": 1, "framework": framework,
                "schedule": "interleaved"}
    return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 2,
                           "layout": {"tp": 1, "pp": 2, "vpp": 2}, "training": training})


def test_megatron_lm_syncs_in_every_chunk_forward():
    """Megatron-LM 2021-2022 (285068c8 megatron/schedules.py): every model chunk's forward on every stage calls
    get_batch, whose broadcast_data reads the sizes back (sizes_cuda.cpu()): the chunk that starts the micro-batch
    idles for the micro-batch lead-in, every other chunk for the chunk lead-in, each at the legacy layer's
    whole-pass ratio; GPU-bound blocks hide the rest of the host. Megatron-Core's schedules sync in neither."""
    s = _pipelined("megatron-2022")
    issue = hi.scenario_block_issue(s)
    chunk = hi.issue_s(*hi.SYNC_LEAD_CHUNK) * hi.MODULE_FRAME_RATIO
    assert issue.chunk_sync_s == pytest.approx(chunk)
    assert issue.microbatch_sync_s == pytest.approx(hi.sync_leads(0, 1, tp=1, recompute_full=False)[2]
                                                    * hi.MODULE_FRAME_RATIO)
    table = build_cost_table(s)
    (first, c1), (c2, c3) = (st.chunks for st in table.stages)
    assert first.host_idle_fwd_s == pytest.approx(issue.microbatch_sync_s)
    for ch in (c1, c2, c3):
        assert ch.host_idle_fwd_s == pytest.approx(chunk) and ch.host_idle_bwd_s == 0.0
    core = build_cost_table(_pipelined("megatron"))
    assert all(ch.host_idle_fwd_s == 0.0 for st in core.stages for ch in st.chunks)


def test_torch_non_reentrant_checkpoint_hooks_cost_what_the_h200_host_measured():
    """Full recompute under framework torch (trainsim execute's and torchtitan's non-reentrant checkpoint): the
    block's backward pays the hooks' host time the H200 calibration measured for the executor's own blocks --
    full-recompute backward less backward less forward (benchmarks/data/profile_h200.json host_issue_chunk), the
    autocast measurement under autocast -- with or without a profile's plain block timing."""
    import json
    from pathlib import Path

    from trainsim.cost_models.profile import CalibrationProfile, EagerBlockOverhead, Stats

    chunk = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "profile_h200.json")
                       .read_text())["host_issue_chunk"]
    for key, v in chunk.items():
        extra = v["block_bwd_full_recompute_s"] - v["block_bwd_s"] - v["block_fwd_s"]
        assert hi.CHECKPOINT_HOOKS_S[key] == pytest.approx(extra)
    model = {"name": "tiny-llama", "num_layers": 4, "hidden": 512, "num_heads": 8, "ffn_hidden": 1536,
             "vocab_size": 32000, "max_seq_len": 256, "norm": "rmsnorm", "activation": "swiglu",
             "position_embedding": "rope", "bias": False}

    def sc(recompute, **extra):
        return build_scenario({"model": model, "cluster": "dgx-a100", "gpus": 1, "training": {
            "seq_len": 256, "global_batch": 1, "micro_batch": 1, "framework": "torch", "recompute": recompute,
            **extra}})
    f_ops, f_k, b_ops, b_k = hi.BLOCK_OPS["rmsnorm-swiglu-rope"]
    fwd = f_ops * hi.ATEN_DISPATCH_S + f_k * hi.KERNEL_LAUNCH_S
    bwd = b_ops * hi.ATEN_DISPATCH_S + b_k * hi.KERNEL_LAUNCH_S
    hooks = chunk["rmsnorm-swiglu-rope"]
    hooks = hooks["block_bwd_full_recompute_s"] - hooks["block_bwd_s"] - hooks["block_fwd_s"]
    assert hi.scenario_block_issue(sc("full")).bwd_s == pytest.approx(bwd + fwd + hooks)
    assert hi.scenario_block_issue(sc("none")).bwd_s == pytest.approx(bwd)
    cast = chunk["rmsnorm-swiglu-rope+autocast-bf16"]
    cast = cast["block_bwd_full_recompute_s"] - cast["block_bwd_s"] - cast["block_fwd_s"]
    assert hi.checkpoint_hooks_s("rmsnorm-swiglu-rope", True) == pytest.approx(cast)
    # a profile's plain per-block timing (no checkpoint in it) replaces the counted seconds, not the hooks
    st = Stats(min_s=1e-4, median_s=1e-4, p99_s=1e-4, reps=30)
    prof = CalibrationProfile(host_issue={"rmsnorm-swiglu-rope": EagerBlockOverhead(fwd=st, bwd=st, fwd_ops=9,
                                                                                    bwd_ops=9)})
    assert hi.scenario_block_issue(sc("full"), prof).bwd_s == pytest.approx(2e-4 + hooks)


@pytest.mark.torch
def test_recomputed_module_counts_match_the_dispatch_counter():
    """RECOMPUTED_MODULE_OPS is what each recomputed module's forward dispatches (executor block and Megatron's legacy
    layer), at any width and micro-batch."""
    pytest.importorskip("torch")
    from trainsim.kernels.op_count import count_recomputed_module_ops
    for style, want in hi.RECOMPUTED_MODULE_OPS.items():
        assert count_recomputed_module_ops(style) == want, style
        assert count_recomputed_module_ops(style, 512, 8, micro_batch=2, seq_len=32) == want, style


@pytest.mark.parametrize("modules", [None, ["core_attn", "mlp", "layernorm"], ["mlp"]])
def test_selective_recompute_issues_its_modules_again(modules):
    """Selective recompute re-issues the recomputed modules' forward ops before the backward: per block, one rank
    (TP 1, framework megatron: no frame ratios), the backward grows by exactly their dispatch and launch seconds;
    full recompute re-issues the whole forward, more."""
    def issue(recompute, mods=None):
        t = {"framework": "megatron", "recompute": recompute, **({"recompute_modules": mods} if mods else {})}
        return hi.scenario_block_issue(small(tp=1, **t))
    plain, sel, full = issue("none"), issue("selective", modules), issue("full")
    ops = [hi.RECOMPUTED_MODULE_OPS["layernorm-gelu-learned"][m] for m in modules or ["core_attn"]]
    n_ops, n_k = sum(o for o, _ in ops), sum(k for _, k in ops)
    assert sel.bwd_s - plain.bwd_s == pytest.approx(n_ops * hi.ATEN_DISPATCH_S + n_k * hi.KERNEL_LAUNCH_S)
    assert sel.fwd_s == plain.fwd_s and full.bwd_s > sel.bwd_s
