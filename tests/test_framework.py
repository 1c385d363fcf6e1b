"""TrainingSpec.framework: each documented software-stack behaviour, checked against closed forms.

Truth: the byte counts of the frameworks' own code (cost_models/framework.py docstring), the engine's
timeline (reduction after vs during backward) and the collective model's per-call latency.
"""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import activations as act
from trainsim.cost_models import collectives, framework, zero3_gathers
from trainsim.cost_models.flops import head_ops
from trainsim.cost_models.param_tensors import chunk_tensors
from trainsim.simulator.builder import build_cost_table
from trainsim.simulator.predict import predict
from trainsim.specs import SpecError, build_scenario, framework_behaviour
from trainsim.topologies.placement import place


def scen(**training):
    return build_scenario({"model": "llama3-8b", "cluster": "dgx-a100", "gpus": 32,
                           "layout": {"tp": 1, "pp": 1},
                           "training": {"seq_len": 2048, "global_batch": 64, "micro_batch": 1, **training}})


def test_default_is_megatron_and_unknown_is_rejected():
    assert scen().training.framework == "megatron"
    with pytest.raises(SpecError) as e:
        scen(framework="jax")
    assert "framework" in str(e.value)


def test_cross_entropy_bytes_per_logit():
    """Megatron's fp32 op sequence: e+36 fwd, e+12 bwd; fused kernel e+4 / 4+e (2-byte logits)."""
    assert framework.cross_entropy_bytes(False, 2) == (38.0, 14.0)
    assert framework.cross_entropy_bytes(True, 2) == (6.0, 6.0)
    for fw, fused in (("megatron", False), ("megatron-2021", False), ("deepspeed", False), ("pytorch-fsdp", True)):
        s = scen(framework=fw)
        ce = next(o for o in head_ops(s) if o.name == "cross_entropy")
        logits = 2048 * s.model.vocab_size
        assert ce.fwd_bytes == pytest.approx(logits * framework.cross_entropy_bytes(fused, 2)[0])
        assert ce.bwd_input_bytes == pytest.approx(logits * framework.cross_entropy_bytes(fused, 2)[1])


def test_loss_memory_follows_the_kernel():
    """Megatron saves the fp32 softmax (4 B/logit); a fused kernel saves the 16-bit logits (2 B/logit)."""
    meg, fsdp = scen(), scen(framework="pytorch-fsdp")
    logits = 2048 * meg.model.vocab_size
    diff = act.head_activation_bytes(meg) - act.head_activation_bytes(fsdp)
    assert diff == pytest.approx(2 * logits - 4 * 2048)
    assert act.logits_workspace_bytes(meg) == act.logits_workspace_bytes(fsdp) == 2 * logits


def test_megatron_2021_reduces_gradients_after_the_backward():
    """Local DDP: the whole all-reduce is exposed after the pipeline; overlapped DDP hides all but a tail."""
    new, old = predict(scen()), predict(scen(framework="megatron-2021"))
    table = build_cost_table(scen(framework="megatron-2021"))
    assert not table.overlap_grad_reduce and build_cost_table(scen()).overlap_grad_reduce
    total_dp = sum(b.time_s for ch in table.stages[0].chunks for b in ch.grad_buckets)
    assert old.exposed_comm_s["dp"] == pytest.approx(total_dp, rel=1e-6)
    # Megatron-Core overlaps all but the bucket the embedding closes (produced last) and what the reduction of
    # the earlier buckets cannot hide behind the rest of the backward
    last = build_cost_table(scen()).stages[0].chunks[0].grad_buckets[-1].time_s
    assert last <= new.exposed_comm_s["dp"] < total_dp
    # the closed-form path agrees on the exposed reduction
    fast = predict(scen(framework="megatron-2021"), fast=True)
    assert fast.exposed_comm_s["dp"] == pytest.approx(total_dp, rel=1e-6)


def test_zero3_gathers_pay_one_latency_per_collective():
    """FSDP: one all-gather per block (+ the root unit's embedding and head); DeepSpeed: the prefetcher's calls
    (zero3_gathers.prefetch_calls, hand-traced in test_zero3_reduce.py), fewer than its 7 x 32 + 2 submodules
    with gathered parameters (Hugging Face's Llama: q, k, v, o, gate, up, down; the embedding and the output
    layer; RMSNorm weights persist) because the 5e7-element prefetch bucket coalesces Llama-3-8B's
    attention projections and first MLP linear into one call."""
    base = {"zero": 3, "recompute": "full"}
    for fw in ("pytorch-fsdp", "deepspeed"):
        s = scen(framework=fw, **base)
        g = build_cost_table(s).stages[0].chunks[0].param_gather
        calls = (s.model.num_layers + 1 if fw == "pytorch-fsdp"
                 else zero3_gathers.gather_calls(chunk_tensors(s, 0), fw))
        assert fw == "pytorch-fsdp" or s.model.num_layers * 3 + 2 <= calls < s.model.num_layers * 7 + 2
        grp = place(s).group("dp")
        one = collectives.collective_time("all_gather", g.nbytes / calls, grp, s.cluster)
        assert g.latency_s == pytest.approx(calls * one.latency_s, rel=1e-9), fw


def test_deepspeed_reduce_scatter_per_reduce_bucket():
    """DeepSpeed ZeRO-3 reduces each 5e8-element bucket with one reduce-scatter over all 32 ranks, on the
    backward's critical path (zero3_reduce.py): its latency is calls x the ring's closed-form latency."""
    s = scen(framework="deepspeed", zero=3)
    chunk = build_cost_table(s).stages[0].chunks[0]
    assert chunk.grad_buckets == ()  # not engine transfers: serialized with the backward
    params = s.model.total_params()
    calls = -(-params // framework_behaviour.DEEPSPEED_REDUCE_BUCKET_PARAMS)
    grp = place(s).group("dp")
    one = collectives.collective_time("reduce_scatter", params * 2 / calls, grp, s.cluster)
    assert chunk.dp_bwd_s > calls * one.time_s


def test_cli_flag(capsys):
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "8",
                 "--framework", "megatron-2021", "--json"]) == 0
    assert '"step_time_s"' in capsys.readouterr().out
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-a100", "--gpus", "8",
                 "--framework", "jax"]) == 2
    assert "--framework" in capsys.readouterr().err


def test_megatron_2021_adds_each_micro_batchs_weight_gradients_in_a_separate_pass():
    """main_grad.add_(grad): 3 x grad_bytes per parameter per micro-batch on the weight-gradient pass."""
    from trainsim.cost_models import compute, memory
    s_new, s_old = scen(), scen(framework="megatron-2021")
    t_old = build_cost_table(s_old)
    new, old = build_cost_table(s_new).stages[0].chunks[0], t_old.stages[0].chunks[0]
    dense, expert = memory.layer_params_per_rank(s_old.model, 1, 1)
    params = s_old.model.num_layers * (dense + expert) + memory.stage_extra_params(s_old.model, 1, 1, 0)
    hw = compute.hw_of(s_old.cluster.gpu, "bf16")
    assert old.bwd_weight_s - new.bwd_weight_s == pytest.approx(
        compute.memory_time_s(3 * s_old.training.grad_bytes * params, hw) * t_old.slowest_gpu_factor, rel=1e-6)


def test_fp16_optimizer_unscales_and_framework_copies():
    """fp16 adds an 8 B/param unscale + inf check; megatron-2021 adds 12 B/param of grad/param copies."""
    from trainsim.cost_models import compute
    from trainsim.cost_models.memory import rank_param_shards
    # like for like: bf16 with 16-bit gradients (Megatron's default with bf16 is an fp32 main-grad buffer)
    bf, fp, old = scen(grad_dtype="bf16"), scen(dtype="fp16"), scen(dtype="fp16", framework="megatron-2021")
    p = rank_param_shards(fp, 0).optimizer_params
    hw = compute.hw_of(fp.cluster.gpu, "fp16")
    t_bf, t_fp, t_old = (compute.optimizer_step_time(x, 0) for x in (bf, fp, old))
    assert t_fp - t_bf == pytest.approx(8 * p / hw.mem_Bps, rel=1e-6)
    assert t_old - t_fp == pytest.approx(12 * p / hw.mem_Bps, rel=1e-6)


def test_composer_train_metrics_add_two_eager_loss_forwards():
    """pytorch-fsdp (Composer + llm-foundry MPT): LanguageCrossEntropy and LanguagePerplexity each run an
    eager fp32 cross-entropy forward per micro-batch: 2 x (e + 20) bytes per logit, no backward."""
    s = scen(framework="pytorch-fsdp")
    ops = {o.name: o for o in head_ops(s)}
    logits = 2048 * s.model.vocab_size
    assert ops["train_metrics"].fwd_bytes == pytest.approx(2 * 22 * logits)
    assert ops["train_metrics"].bwd_input_bytes == 0
    assert "train_metrics" not in {o.name for o in head_ops(scen())}


def test_deepspeed_zero3_keeps_few_parameters_gathered():
    """DeepSpeed gathers tensor by tensor (max live 1e9 elements, a tensor never split); FSDP a whole block
    and the prefetched next one (FSDP1 also holds the block's gradient twice during the split backward's
    concatenation). GPT 530B on 640 GPUs with ZeRO-3 ran in SC21 Table 2 [sc21_t2_4]."""
    from trainsim.cost_models import memory
    big = {"model": {"name": "gpt-530b", "num_layers": 105, "hidden": 20480, "num_heads": 128, "vocab_size": 51200},
           "cluster": "dgx-a100", "gpus": 640, "layout": {"tp": 1, "pp": 1},
           "training": {"seq_len": 2048, "global_batch": 2560, "micro_batch": 4, "dtype": "fp16", "zero": 3,
                        "recompute": "full", "flash_attention": False, "dropout": True}}
    ds = build_scenario({**big, "training": {**big["training"], "framework": "deepspeed"}})
    fsdp = build_scenario({**big, "training": {**big["training"], "framework": "pytorch-fsdp"}})
    h = 20480
    assert memory.largest_weight_tensor_params(ds.model) == 4 * h * h      # fc1 / fc2
    assert memory.stage_memory(ds, 0).details["zero3_gather_buffers"] == pytest.approx(4 * h * h * (2 + 2))
    # two unsharded blocks (2 B) and the block's gradient twice while FSDP1 concatenates it (flat 2 B + 2 B)
    assert memory.stage_memory(fsdp, 0).details["zero3_gather_buffers"] == pytest.approx(12 * h * h * (2 * 2 + 2 * 2),
                                                                                        rel=1e-3)
    assert memory.peak_bytes(ds) < ds.cluster.gpu.memory_bytes < memory.peak_bytes(fsdp)


def _raw(fw="megatron"):
    return {"model": "llama3-70b", "cluster": "dgx-a100", "gpus": 64, "layout": {"tp": 8, "pp": 4},
            "training": {"seq_len": 2048, "global_batch": 64, "micro_batch": 1, "framework": fw}}


def _pipelined(fw):
    return build_scenario(_raw(fw))


def _vocab_tp(sc):
    """The vocabulary-parallel layers' TP seconds per micro-batch (simulator/vocab_tp.py) the chunks carry."""
    from trainsim.simulator.step_context import _step_context
    return _step_context(sc, None).vocab_tp


def test_megatron_2021_pipeline_sends_block_and_are_gathered_over_tp():
    """Megatron 2021 p2p: the sender waits for its send (torch.cuda.synchronize); the receiver all-gathers
    the 1/t message over its TP group on the compute stream (scatter/gather, SC21 Sec. 4.1)."""
    new, old = _pipelined("megatron"), _pipelined("megatron-2021")
    t_new, t_old = build_cost_table(new), build_cost_table(old)
    assert t_old.blocking_p2p and t_new.blocking_p2p  # Megatron-Core's 1F1B p2p is batched + synchronized too
    grp = place(old).group("tp")
    msg = 2 * 2048 * old.model.hidden
    ag = collectives.collective_time("all_gather", msg, grp, old.cluster).time_s
    first, last = t_old.stages[0].chunks[0], t_old.stages[-1].chunks[0]
    # Equal stages (80 layers / pp4): the per-block TP time is the same on every stage, so what differs is
    # the receiver's gather -- stage 0 receives no activation but a gradient, the last stage the reverse -- and
    # the vocabulary-parallel collectives (the embedding's on stage 0, the logits' and loss's on the last).
    v_old, v_new = _vocab_tp(old), _vocab_tp(new)
    assert last.tp_fwd_s - first.tp_fwd_s == pytest.approx(ag + v_old.head_fwd_s - v_old.emb_fwd_s)
    assert first.tp_bwd_s - last.tp_bwd_s == pytest.approx(ag - v_old.head_bwd_s)
    n_new = t_new.stages[0].chunks[0]
    assert n_new.tp_fwd_s - v_new.emb_fwd_s == pytest.approx(  # Megatron-Core: no gather
        t_new.stages[-1].chunks[0].tp_fwd_s - v_new.head_fwd_s)
    # blocking sends are exposed pipeline time in the engine and in the closed form
    asyn = build_scenario({**_raw(), "training": {**_raw()["training"], "framework": "megatron",
                                                  "overlap_p2p": True}})
    assert not build_cost_table(asyn).blocking_p2p
    p_blk, p_async = predict(new), predict(asyn)
    assert p_blk.exposed_comm_s["pp"] > p_async.exposed_comm_s["pp"]
    assert predict(new, fast=True).step_time_s > predict(asyn, fast=True).step_time_s


def test_megatron_overlaps_p2p_only_in_the_interleaved_schedule():
    from trainsim.cost_models.framework import p2p_blocks
    inter = build_scenario({**_raw(), "layout": {"tp": 8, "pp": 4, "vpp": 2},
                            "training": {**_raw()["training"], "schedule": "interleaved"}})
    assert not p2p_blocks(inter.training) and p2p_blocks(_pipelined("megatron").training)
    assert p2p_blocks(build_scenario({**_raw(), "layout": {"tp": 8, "pp": 4, "vpp": 2},
                                      "training": {**_raw()["training"], "schedule": "interleaved",
                                                   "framework": "megatron-2021"}}).training)


def _ds2021(gpus):
    return build_scenario({"model": "llama3-8b", "cluster": "dgx-a100", "gpus": gpus, "layout": {"tp": 1, "pp": 1},
                           "training": {"seq_len": 2048, "global_batch": gpus, "micro_batch": 1, "zero": 3,
                                        "recompute": "full", "dtype": "fp16", "framework": "deepspeed-2021"}})


def test_deepspeed_2021_serializes_per_tensor_collectives_with_compute():
    """Blocking fetch + overlap_comm=False: gathers and reduce-scatters run on the compute stream, one per
    weight tensor, each with 2 host ops per rank (list-based collectives) -- a cost linear in the ranks."""
    from trainsim.cost_models import compute
    s = _ds2021(64)
    ch = build_cost_table(s).stages[0].chunks[0]
    assert ch.param_gather is None and ch.grad_buckets == ()
    calls = s.model.num_layers * 4 + 2  # Megatron's GPT: qkv, dense, fc1 (gate|up), fc2; embedding, output layer
    params = build_cost_table(scen(framework="deepspeed", zero=3)).stages[0].chunks[0].param_gather.nbytes / 2
    grp = place(s).group("dp")
    one = collectives.collective_time("all_gather", params * 2 / calls, grp, s.cluster)
    host = calls * 2 * 64 * s.cluster.gpu.kernel_overhead_s
    hw = compute.hw_of(s.cluster.gpu, "fp16")
    # the HBM copies are GPU work, at the pace of the slowest of the job's GPUs; the host ops are not
    from trainsim.cost_models.variation import slowest_gpu_factor
    cv = s.cluster.gpu.speed_spread_cv
    copy = compute.memory_time_s(3 * params * 2, hw) * slowest_gpu_factor(64, cv)
    assert ch.dp_fwd_s == pytest.approx(calls * one.time_s + host + copy, rel=1e-6)
    assert ch.dp_bwd_s > 2 * ch.dp_fwd_s  # recompute gather + backward gather + reduce-scatters
    # the host part grows linearly with the data-parallel size
    big = build_cost_table(_ds2021(128)).stages[0].chunks[0]
    grp2 = place(_ds2021(128)).group("dp")
    one2 = collectives.collective_time("all_gather", params * 2 / calls, grp2, s.cluster)
    copy128 = compute.memory_time_s(3 * params * 2, hw) * slowest_gpu_factor(128, cv)
    assert big.dp_fwd_s - calls * one2.time_s - copy128 == pytest.approx(2 * host, rel=1e-6)
    # engine: the whole DP communication is exposed
    p = predict(s)
    assert p.exposed_comm_s["dp"] >= s.num_microbatches * (ch.dp_fwd_s + ch.dp_bwd_s) * 0.999


def test_tp_dgrad_overlap_hides_column_parallel_reductions_behind_wgrad():
    """Megatron (Core and 2022) reduce a column-parallel layer's input gradient while its weight-gradient
    GEMM runs: per block the backward exposes max(0, all-reduce - wgrad) for QKV and the MLP-in GEMM;
    Megatron 2021 waits for both all-reduces (2 x all-reduce). Closed form from the op times."""
    from trainsim.simulator.builder import _op_times
    raw = {"model": "llama3-8b", "cluster": "dgx-a100", "gpus": 8, "layout": {"tp": 8},
           "training": {"seq_len": 2048, "global_batch": 8, "micro_batch": 1, "recompute": "none"}}
    old = build_scenario({**raw, "training": {**raw["training"], "framework": "megatron-2021"}})
    for fw in ("megatron", "megatron-2022"):
        sc = build_scenario({**raw, "training": {**raw["training"], "framework": fw}})
        grp = place(sc).group("tp")
        ar = collectives.collective_time("all_reduce", 2 * 2048 * sc.model.hidden, grp, sc.cluster).time_s
        ops = {o.name: o for o in _op_times(sc, None)}  # the job's pace: wgrad GEMMs of its slowest GPU
        slow = 16 / 108  # NCCL's SMs over the A100's: the wgrad GEMM runs slower while the all-reduce is in flight
        per_block = sum(max(0.0, ar - w) + slow * min(ar, w) for w in (ops["qkv"].bwd_weight_s, ops["fc1"].bwd_weight_s))
        layers, v = sc.model.num_layers, _vocab_tp(sc)  # one stage: the vocabulary-parallel collectives too
        assert build_cost_table(sc).stages[0].chunks[0].tp_bwd_s == pytest.approx(layers * per_block + v.head_bwd_s)
        assert build_cost_table(sc).stages[0].chunks[0].tp_fwd_s == pytest.approx(
            layers * 2 * ar + v.emb_fwd_s + v.head_fwd_s)
    assert build_cost_table(old).stages[0].chunks[0].tp_bwd_s == pytest.approx(
        layers * 2 * ar + _vocab_tp(old).head_bwd_s)


def test_bias_gradients_are_a_separate_pass_unless_fused_into_the_wgrad_gemm():
    """Megatron's local layers (2021/2022) and nn.Linear reduce each bias gradient over the tokens in its own
    kernel (one read of dY); Megatron-Core with Transformer Engine gets it from the wgrad GEMM's epilogue.
    Closed form for a GPT block (biases on QKV, out_proj, fc1, fc2), tp 2, b·s = 2048 tokens, fp16."""
    from trainsim.cost_models.flops import layer_ops
    raw = {"model": {"name": "g", "num_layers": 2, "hidden": 1024, "num_heads": 16, "vocab_size": 1000,
                     "max_seq_len": 2048}, "cluster": "dgx-a100", "gpus": 2, "layout": {"tp": 2},
           "training": {"seq_len": 2048, "global_batch": 1, "micro_batch": 1, "dtype": "fp16"}}
    h, T, t, e = 1024, 2048, 2, 2
    for fw, present in (("megatron-2021", True), ("megatron-2022", True), ("pytorch-fsdp", True),
                        ("megatron", False)):
        ops = {o.name: o for o in layer_ops(build_scenario({**raw, "training": {**raw["training"], "framework": fw}}))}
        assert ("bias_grads" in ops) == present, fw
        if present:
            assert ops["bias_grads"].bwd_weight_bytes == e * (T * 3 * h // t + T * 4 * h // t + 2 * T * h)
            assert ops["bias_grads"].fwd_bytes == 0 and ops["bias_grads"].bwd_input_bytes == 0
    no_bias = {**raw, "model": {**raw["model"], "bias": False}, "training": {**raw["training"], "framework": "torch"}}
    assert "bias_grads" not in {o.name for o in layer_ops(build_scenario(no_bias))}


def test_deepspeed_2021_regathers_persistent_params_after_the_step_rank_by_rank():
    """DeepSpeed 2021 ZeRO-3 ``_post_step``: every parameter under the 1e5-element persistence threshold (the
    4 LayerNorm tensors and 4 biases of a GPT block, the final LayerNorm's 2) is all-gathered again and copied
    back one rank at a time: count x dp eager copies after the optimizer step. Closed form on 2 nodes."""
    from trainsim.simulator.builder import _persistent_tensors
    raw = {"model": {"name": "g", "num_layers": 4, "hidden": 4096, "num_heads": 32, "vocab_size": 51200,
                     "max_seq_len": 2048}, "cluster": "dgx-a100", "gpus": 16, "layout": {},
           "training": {"seq_len": 2048, "global_batch": 16, "micro_batch": 1, "zero": 3, "dtype": "fp16",
                        "recompute": "full", "framework": "deepspeed-2021"}}
    old = build_scenario(raw)
    h = 4096
    count, elems = _persistent_tensors(old, 0)
    assert count == 4 * 8 + 2                                    # 3h = 12288 and 4h = 16384 are under 1e5
    assert elems == 4 * (4 * h + 3 * h + h + 4 * h + h) + 2 * h
    new = build_scenario({**raw, "training": {**raw["training"], "framework": "deepspeed"}})
    grp = place(old).group("dp")
    ag = collectives.collective_time("all_gather", elems * 2, grp, old.cluster).time_s
    host = count * 16 * old.cluster.gpu.kernel_overhead_s
    per_tensor = count * collectives.collective_time("all_gather", elems / count * 2, grp, old.cluster).time_s
    extra = build_cost_table(old).stages[0].optimizer_s - build_cost_table(new).stages[0].optimizer_s
    assert extra == pytest.approx(ag + host - per_tensor, rel=1e-6)


@pytest.mark.parametrize("framework_name", ["deepspeed", "deepspeed-2023"])
def test_deepspeed_regathers_each_persistent_param_over_all_ranks_after_the_step(framework_name):
    """DeepSpeed v0.10-0.12 and today (stage3.py ``step``: ``_partition_all_parameters``, then ``_post_step`` ->
    ``_allgather_params_coalesced``): one all_gather_into_tensor per persistent tensor over the data-parallel
    group. LLaMA-13B (RMSNorm, no biases) holds 2 x 40 block norms + the final norm = 81 tensors of 5,120
    elements; over 1,024 ranks each call pays its ring latency, 81 calls after the step against ZeRO-1's none."""
    from trainsim.simulator.builder import _persistent_tensors
    raw = {"model": {"name": "llama-13b", "num_layers": 40, "hidden": 5120, "num_heads": 40, "ffn_hidden": 13824,
                     "vocab_size": 32000, "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope",
                     "max_seq_len": 4096, "bias": False},
           "cluster": "dgx-a100", "gpus": 1024, "layout": {},
           "training": {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1, "zero": 3,
                        "framework": framework_name}}
    sc = build_scenario(raw)
    assert _persistent_tensors(sc, 0) == (81, 81 * 5120.0)
    one = collectives.collective_time("all_gather", 5120 * 2, place(sc).group("dp"), sc.cluster)
    assert one.latency_s > 0.5 * one.time_s                      # 10 KB over 1,024 ranks: latency-bound
    from trainsim.simulator.exposures import _persistent_regather_s
    assert _persistent_regather_s(sc, 0, place(sc).group("dp"), None, "per_tensor") == pytest.approx(81 * one.time_s)


def test_fsdp_gradient_divide_factors_follow_torchs_loop():
    """torch FSDP default_hooks.DefaultState: the pre-divide factor doubles while world % f == 0 and
    world / f > f; post = world / pre. Values worked out from that loop by hand."""
    table = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (4, 2), 16: (4, 4), 32: (8, 4), 64: (8, 8), 128: (16, 8),
             512: (32, 16), 6: (4, 1.5)}
    for world, (pre, post) in table.items():
        assert framework.fsdp_divide_factors(world) == (pre, post), world


def test_fsdp_prepares_each_units_gradient_every_micro_batch():
    """pytorch-fsdp (PyTorch 2.0 FSDP): per micro-batch and parameter, split-backward concatenation (read 2,
    write 2), in-place pre-divide of the bf16 flat gradient (2 + 2), and on the 1/32 shard the post-divide
    (2 + 2), the cast to the fp32 parameter dtype (2 + 4) and, with accumulation, the += (4 + 4 + 4).
    Compared with the torch framework (FSDP2, without these passes) on the weight-gradient pass."""
    from trainsim.cost_models import compute, memory
    kw = dict(zero=3, global_batch=64, micro_batch=1)
    fsdp, plain = scen(framework="pytorch-fsdp", **kw), scen(framework="torch", **kw)
    assert fsdp.num_microbatches == 2 and fsdp.dp == 32
    per_param = 4 + 4 + (4 + 6 + 12) / 32
    assert framework.fsdp_grad_prep_bytes_per_param(2, 2, 32, True) == pytest.approx(per_param)
    assert framework.fsdp_grad_prep_bytes_per_param(2, 4, 8, False) == pytest.approx(4 + 6 + 8 + 8 / 8)
    dense, expert = memory.layer_params_per_rank(fsdp.model, 1, 1)
    params = fsdp.model.num_layers * (dense + expert) + memory.stage_extra_params(fsdp.model, 1, 1, 0)
    t_fsdp = build_cost_table(fsdp)
    a, b = t_fsdp.stages[0].chunks[0], build_cost_table(plain).stages[0].chunks[0]
    # the gradient shards FSDP keeps are fp32 (cast to the parameter dtype), whatever the reduce dtype
    sh = memory.rank_param_shards(fsdp, 0)
    assert memory.stage_memory(fsdp, 0).grads == pytest.approx(4 * sh.grad_params)
    # FSDP2 (framework torch) keeps its gradient shards in the fp32 sharded parameters' dtype too
    assert memory.stage_memory(plain, 0).grads == pytest.approx(4 * sh.grad_params)
    # torch's FSDP2 path has instead FSDP2's backward copies: the re-gathered blocks' copy-out (2 + 2) and every
    # gradient's copy-in (2 + 2); its unsharded gradients are freed after each reduce-scatter (no grad += pass)
    hw = compute.hw_of(fsdp.cluster.gpu, "bf16")
    blocks = fsdp.model.num_layers * (dense + expert)
    copies = compute.memory_time_s(blocks * 4 + params * 4, hw)
    assert (a.bwd_weight_s - b.bwd_weight_s) == pytest.approx(t_fsdp.slowest_gpu_factor * (
        compute.memory_time_s(params * per_param, hw) - copies), rel=1e-6)


def test_composer_adamw_is_a_per_parameter_loop_and_fsdp_clipping_scales_every_gradient():
    """Composer DecoupledAdamW (eager ops over fp32 p, g, m, v): 80 bytes per parameter instead of a fused
    Adam's 2 x 12 + 2 + 2 (Megatron, bf16 gradients); FSDP's clip_grad_norm_ reads every fp32 gradient shard for the norm and reads and
    writes it again to scale it (12 bytes) where Megatron's clipping reads it once (2 bytes here)."""
    from trainsim.cost_models import compute
    from trainsim.cost_models.memory import rank_param_shards
    kw = dict(zero=3, global_batch=64, micro_batch=1)
    fsdp, meg = scen(framework="pytorch-fsdp", **kw), scen(framework="megatron", grad_dtype="bf16", **kw)
    sh = rank_param_shards(fsdp, 0)
    assert sh.optimizer_params == rank_param_shards(meg, 0).optimizer_params
    hw = compute.hw_of(fsdp.cluster.gpu, "bf16")
    expected = ((80 - 28) * sh.optimizer_params + (12 - 2) * sh.grad_params) / hw.mem_Bps
    assert compute.optimizer_step_time(fsdp, 0) - compute.optimizer_step_time(meg, 0) == pytest.approx(expected, rel=1e-6)


def test_te_fp8_casts_write_two_copies_and_cache_weights_only_when_asked():
    """Transformer Engine: X and dY are quantized into the fp8 tensor and its transpose (read 2, write 1 + 1);
    the weight too, on every forward for a bare te.Linear call (llm-foundry: pytorch-fsdp) and once per step when
    Megatron-Core passes is_first_microbatch (megatron): 1/m of it per micro-batch. QKV of llama3-8b (h 4096,
    q + 2 kv = 6144 outputs), 2,048 tokens, no TP, 4 micro-batches."""
    from trainsim.cost_models.flops import layer_ops
    raw = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"tp": 1},
           "training": {"seq_len": 2048, "global_batch": 32, "micro_batch": 1, "dtype": "fp8"}}
    T, h, n = 2048, 4096, 6144
    gemm_bytes = (T * h + h * n) * 1 + T * n * 2           # fp8 operands, 16-bit output
    for fw, casts in (("megatron", 1 / 4), ("pytorch-fsdp", 1.0)):
        s = build_scenario({**raw, "training": {**raw["training"], "framework": fw}})
        assert s.num_microbatches == 4
        qkv = {o.name: o for o in layer_ops(s)}["qkv"]
        assert qkv.fwd_bytes == pytest.approx(gemm_bytes + T * h * 4 + h * n * 4 * casts)
        assert qkv.bwd_input_bytes == pytest.approx((T * n + h * n) * 1 + T * h * 2 + T * n * 4)
