"""Model states as each framework keeps them, held against the frameworks' own figures; runtime terms; offload
per framework; conflicting settings refused."""

from __future__ import annotations

import pytest

from trainsim.cost_models import model_states
from trainsim.cost_models import runtime_memory as rt
from trainsim.cost_models.memory import rank_param_shards, stage_memory
from trainsim.specs import SpecError, build_scenario

# Llama 3 (arXiv:2407.21783 Table 3): layers, hidden, heads, kv heads, ffn; vocabulary 128,256, untied.
LLAMA3 = {"llama3-8b": (32, 4096, 32, 8, 14336), "llama3-70b": (80, 8192, 64, 8, 28672),
          "llama3-405b": (126, 16384, 128, 8, 53248)}
VOCAB = 128256


def scen(model, gpus, layout, **training):
    training = {"seq_len": 8192, "global_batch": gpus, "micro_batch": 1, **training}
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": gpus, "layout": layout,
                           "training": training})


def megatron_estimator_bytes(model: str, tp: int, pp: int, dp: int, distributed_optimizer: bool,
                             first_stage_layers: int | None = None) -> float:
    """megatron/training/theoretical_memory_usage.py compute_weight_and_optimizer_memory for a dense SwiGLU
    RMSNorm model with untied embeddings, written out from its closed form (read_file id 52840860143):
    most-loaded shard = (transformer block / pp + embedding) / tp (+ the output layer when pp = 1), times 18
    bytes, or 6 + 12/DP with the distributed optimizer. The vocabulary is padded as Megatron pads it
    (--make-vocab-size-divisible-by 128, times tp). ``first_stage_layers``: the first stage's transformer layers
    where the split is uneven (the estimator assumes L/pp; Megatron's --decoder-first-pipeline-num-layers)."""
    L, h, a, kv, f = LLAMA3[model]
    mult = 128 * tp
    vocab = -(-VOCAB // mult) * mult
    self_attn = 2 * h * h * (1 + kv / a) * 1.0           # kv_channels * heads == hidden for Llama 3
    layer = 2 * h * (f * 1.5 + 1) + self_attn             # SwiGLU multiplier 3/2, RMSNorm norm_size 1
    block = L * layer + h                                 # + final layernorm
    emb = h * vocab
    stage_block = block / pp if first_stage_layers is None else first_stage_layers * layer
    shard = (stage_block + emb) / tp + (emb / tp if pp == 1 else 0)
    per_param = 6 + 12 / dp if distributed_optimizer else 18
    return shard * per_param


# (model, tp, pp, dp, per-stage layers where 126 does not split evenly: Llama 3 405B's pp16 puts fewer on the ends)
LAYOUTS = [("llama3-8b", 1, 1, 8, None), ("llama3-8b", 2, 1, 64, None), ("llama3-70b", 8, 4, 32, None),
           ("llama3-70b", 4, 8, 16, None), ("llama3-405b", 8, 16, 64, (7,) + (8,) * 14 + (7,)),
           ("llama3-405b", 8, 8, 8, (15,) + (16,) * 6 + (15,)), ("llama3-405b", 8, 9, 8, None)]


@pytest.mark.parametrize("model,tp,pp,dp,split", LAYOUTS)
@pytest.mark.parametrize("distopt", [False, True])
def test_megatron_model_states_match_megatron_estimator(model, tp, pp, dp, split, distopt):
    """Within 1 % of Megatron-LM's own estimator (the residue: it divides norms by tp, and pads the vocabulary)."""
    layout = {"tp": tp, "pp": pp, **({"stage_layers": split} if split else {})}
    s = scen(model, tp * pp * dp, layout, distributed_optimizer=distopt, sequence_parallel=tp > 1)
    ours = stage_memory(s, 0).model_states
    expected = megatron_estimator_bytes(model, tp, pp, dp, distopt, split[0] if split else None)
    assert ours == pytest.approx(expected, rel=0.01)


def test_gradient_dtype_setting_and_framework_defaults():
    base = ("llama3-8b", 8, {"tp": 1})
    rp = rank_param_shards(scen(*base), 0)
    fp32 = stage_memory(scen(*base), 0)
    bf16 = stage_memory(scen(*base, grad_dtype="bf16"), 0)
    assert fp32.grads == pytest.approx(4 * rp.held) and bf16.grads == pytest.approx(2 * rp.held)
    assert scen(*base).training.grad_bytes == 4 and scen(*base, dtype="fp16").training.grad_bytes == 2
    assert scen(*base, framework="deepspeed").training.grad_bytes == 2
    # Pure bf16 (torchtune): 2 + 2 + 4 bytes per parameter, no fp32 master.
    pure = stage_memory(scen(*base, master_weights=False), 0)
    assert pure.model_states == pytest.approx(8 * rp.held)
    assert "no fp32 master" in model_states.state_bytes(scen(*base, master_weights=False).training).note
    # FSDP2 (torch) / FSDP1 (pytorch-fsdp) under mixed precision: fp32 shards, fp32 grads, Adam m and v.
    for fw in ("torch", "pytorch-fsdp"):
        z3 = scen(*base, framework=fw, zero=3)
        sm, rp3 = stage_memory(z3, 0), rank_param_shards(z3, 0)
        assert (sm.weights, sm.grads, sm.optimizer) == pytest.approx((4 * rp3.weight_params, 4 * rp3.grad_params,
                                                                      8 * rp3.optimizer_params))


@pytest.mark.parametrize("bad,field", [
    ({"framework": "torch", "tp_comm_overlap": True, "sequence_parallel": True}, "training"),
    ({"grad_dtype": "bf16", "grad_dtype_bytes": 4}, "training"),
    ({"master_weights": False, "dtype": "fp8"}, "training"),
    ({"framework": "torch", "zero": 3, "offload_optimizer": True}, "training"),
    ({"zero": 3, "offload_params": True, "offload_optimizer": True}, "training"),   # megatron has no param offload
    ({"optimizer_offload_fraction": 0.5}, "training"),
])
def test_conflicting_settings_are_refused(bad, field):
    with pytest.raises(SpecError) as ei:
        scen("llama3-8b", 8, {"tp": 2}, **bad)
    assert ei.value.field.startswith(field)


def test_zero1_is_the_distributed_optimizer():
    a = stage_memory(scen("llama3-8b", 8, {"tp": 1}, distributed_optimizer=True), 0)
    b = stage_memory(scen("llama3-8b", 8, {"tp": 1}, zero=1), 0)
    assert a.model_states == b.model_states


def test_megatron_optimizer_offload_keeps_params_and_fp32_grad_buffer_on_gpu():
    """HybridDeviceOptimizer: the offloaded fraction's fp32 main params + Adam states go to the host with pinned
    fp32 gradient copies; bf16 params and the fp32 main-grad buffer stay."""
    base = {"distributed_optimizer": True}
    plain = stage_memory(scen("llama3-70b", 64, {"tp": 8, "pp": 1}, **base), 0)
    half = stage_memory(scen("llama3-70b", 64, {"tp": 8, "pp": 1}, offload_optimizer=True,
                             optimizer_offload_fraction=0.5, **base), 0)
    rp = rank_param_shards(scen("llama3-70b", 64, {"tp": 8, "pp": 1}, **base), 0)
    assert half.weights == plain.weights and half.grads == plain.grads == pytest.approx(4 * rp.held)
    assert half.optimizer == pytest.approx(plain.optimizer / 2)
    assert half.host == pytest.approx(0.5 * rp.optimizer_params * (12 + 4))
    assert half.pcie_d2h_bytes == half.pcie_h2d_bytes == pytest.approx(0.5 * rp.optimizer_params * 4)


def test_megatron_distributed_optimizer_start_up_peak_is_two_weight_copies_and_the_grad_buffer():
    """Megatron-Core DDP with the distributed optimizer allocates its 16-bit param buffer and fp32 grad buffer
    before it frees each parameter's old storage (param_and_grad_buffer.py ``del old_param_data``): 2 + 2 + 4
    bytes per held parameter. With the whole optimizer on the host (ms-swift's Qwen2.5-72B offload example:
    tp 8, full recompute, precision-aware optimizer) that start-up peak is above the step's, and the peak is it
    plus what lives outside the caching allocator; the step's own cached blocks fit in the freed storage."""
    s = scen("llama3-70b", 8, {"tp": 8, "pp": 1}, distributed_optimizer=True, offload_optimizer=True,
             recompute="full", sequence_parallel=True)
    sm, rp = stage_memory(s, 0), rank_param_shards(s, 0)
    outside = sum(sm.details[k] for k in rt.OUTSIDE_ALLOCATOR)
    assert sm.optimizer == 0 and sm.details["ddp_param_remap"] > 0
    assert sm.total - outside == pytest.approx(rp.held * (2 + 2 + 4))
    assert sm.allocator_cached == 0


@pytest.mark.parametrize("training", [{"distributed_optimizer": False}, {"framework": "megatron-2022",
                                                                        "distributed_optimizer": True},
                                      {"distributed_optimizer": True}])
def test_ddp_start_up_peak_only_where_it_exceeds_the_step(training):
    """No param buffer without the distributed optimizer (grads only) nor in the Megatron-LM of 2022 (its
    distributed optimizer gathers into views of the grad buffer); with optimizer states on the GPU the step's
    peak (6 + 12/DP bytes per parameter plus activations) is above 8 bytes per parameter at DP 8."""
    s = scen("llama3-70b", 64, {"tp": 8, "pp": 1}, **training)
    assert "ddp_param_remap" not in stage_memory(s, 0).details


def test_te_ring_context_parallel_saves_the_received_kv_block():
    """Transformer Engine's p2p context parallelism (AttnFuncWithCPAndKVP2P) saves q, the last received K/V block
    and the output; with learned positions and MHA, Megatron's q is a view of the fused QKV output, which stays
    alive, so the received block is 2·e·T·h per block beyond it (T = b·s/cp tokens). With RoPE, or with the
    all-gather exchange, nothing is added. Shapes: GPT-2 large (36 x 1280, 20 heads), mb 4, seq 1024, cp 2."""
    from trainsim.cost_models.activations import layer_activation_bytes
    gpt2l = {"name": "gpt2-large", "num_layers": 36, "hidden": 1280, "num_heads": 20, "ffn_hidden": 5120,
             "vocab_size": 50304, "activation": "gelu", "norm": "layernorm", "position_embedding": "learned",
             "bias": True, "tie_embeddings": True, "max_seq_len": 1024}

    def block(model, comm):
        s = build_scenario({"model": model, "cluster": "dgx-h100", "gpus": 2, "layout": {"cp": 2},
                            "training": {"seq_len": 1024, "global_batch": 4, "micro_batch": 4, "cp_comm": comm}})
        return layer_activation_bytes(s).total

    assert block(gpt2l, "p2p") - block(gpt2l, "allgather") == 2 * 2 * (4 * 1024 // 2) * 1280
    rope = {**gpt2l, "position_embedding": "rope"}
    assert block(rope, "p2p") == block(rope, "allgather")


def test_fsdp_cpu_offload_keeps_only_gathered_units_on_gpu():
    s = scen("llama3-8b", 8, {"tp": 1}, framework="torch", zero=3, offload_params=True, offload_optimizer=True)
    from trainsim.cost_models.fsdp2_peak import activation_peak_gather, fsdp2_of
    sm, rp = stage_memory(s, 0), rank_param_shards(s, 0)
    # the gathered units are all the GPU holds of the model: at the activation peak FSDP2's moment's own (here the
    # loss's backward, before any unit is gathered again: fsdp2_peak.py), the backward's root and blocks otherwise
    assert sm.model_states == 0 and fsdp2_of(s, rp).backward > 0
    assert sm.details["zero3_gather_buffers"] == activation_peak_gather(s, 0, rp, sm.details["recompute_working"])[1]
    assert sm.host == pytest.approx(rp.weight_params * (4 + 4 + 8))
    n_micro = s.num_microbatches
    assert sm.pcie_h2d_bytes == pytest.approx(2 * n_micro * 4 * rp.weight_params)


def test_runtime_terms_are_derived_from_documented_defaults():
    s = scen("llama3-70b", 64, {"tp": 8, "pp": 2}, distributed_optimizer=True, sequence_parallel=True)
    d = stage_memory(s, 0).details
    # H100 SXM: 132 SMs x 2048 threads x 1 KiB stack + 1 MiB printf FIFO + 8 MiB heap, plus the per-process
    # driver state and module images measured on an H200 (132 SMs as well: the whole measured 694 MiB).
    assert d["cuda_context"] == 132 * 2048 * 1024 + 9 * (1 << 20) + rt.CUDA_DRIVER_AND_MODULES_BYTES
    assert d["cuda_context"] == 694 * (1 << 20)
    assert d["cublas_workspace"] == 2 * 32 * (1 << 20)
    per_channel = 4 * (1 << 20) + 4915200 + 524288          # Simple + LL128 + LL buffers
    # Megatron: tp, dp, the world (pretrain's start-time all-reduce) and TP x PP (grad norm) communicators + p2p
    # ... and NCCL's per-process state (benchmarks/data/nccl_single_rank_memory_h200.json)
    assert d["nccl_buffers"] == 4 * 32 * per_channel + 2 * 2 * 4 * (1 << 20) + 170 * (1 << 20)
    sm = stage_memory(s, 0)
    assert sm.allocated == pytest.approx(sm.total - d["cuda_context"] - d["nccl_buffers"])
    assert rt.communicators(s.layout, s.dp) == {"tp": 8, "dp": 4}  # torch: one per parallel dimension
    mega = {"tp": 8, "dp": 4, "world": 64, "mp": 16}
    assert rt.communicators(s.layout, s.dp, framework="megatron", stage=0) == mega
    # tied embeddings: the embedding group on the first and the last stage only; DeepSpeed adds the pipe group
    assert rt.communicators(s.layout, s.dp, framework="megatron", stage=1, tied_embeddings=True) == {
        **mega, "embedding": 2}
    assert rt.communicators(s.layout, s.dp, framework="deepspeed", stage=0, tied_embeddings=True) == {
        **mega, "embedding": 2, "pp": 2}
    single = scen("llama3-8b", 1, {"tp": 1})
    assert rt.communicators(single.layout, single.dp, framework="megatron") == {}


def test_nccl_state_of_a_one_gpu_run_follows_the_measured_one_rank_communicator():
    """benchmarks/data/nccl_single_rank_memory_h200.json (NCCL 2.28.9, defaults): the first one-rank communicator
    adds 558 MiB outside the allocator, each further one 388-390 MiB; with cuMem off 684 and 512-514 MiB. The
    per-process part is the difference; a communicator's part is 64 channels x 3 device allocations x the 2 MiB
    cuMem granularity (NCCL src/channel.cc initChannel, src/include/alloc.h) plus a few MiB."""
    import json
    from pathlib import Path
    rec = json.loads((Path(__file__).parents[1] / "benchmarks/data/nccl_single_rank_memory_h200.json").read_text())
    MiB = 1 << 20
    for variant in (rec["variants"][0], rec["variants"][2]):  # defaults, NCCL_CUMEM_ENABLE=0
        m = [s["outside_mib"] for s in variant["steps"]]
        first, further = m[1] - m[0], m[3] - m[2]
        assert abs((first - further) * MiB - rt.NCCL_PROCESS_STATE_BYTES) <= 4 * MiB
    default = [s["outside_mib"] for s in rec["variants"][0]["steps"]]
    assert abs((default[3] - default[2]) * MiB - rt.NCCL_ONE_RANK_COMM_BYTES) <= 2 * MiB
    assert 0 <= rt.NCCL_ONE_RANK_COMM_BYTES - 64 * 3 * 2 * MiB <= 8 * MiB
    # Megatron's one-GPU run all-reduces its start time over the one-rank world group; torch's holds no NCCL
    mega = scen("llama3-8b", 1, {"tp": 1}, framework="megatron")
    assert stage_memory(mega, 0).details["nccl_buffers"] == rt.NCCL_ONE_RANK_COMM_BYTES + rt.NCCL_PROCESS_STATE_BYTES
    assert stage_memory(scen("llama3-8b", 1, {"tp": 1}, framework="torch"), 0).details["nccl_buffers"] == 0


def test_zero_0_beside_the_distributed_optimizer_is_refused_on_the_command_line(tmp_path, capsys):
    from trainsim.cli.main import main
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\ntraining: {seq_len: 2048, global_batch: 8, "
                 "distributed_optimizer: true}\n")
    assert main(["predict", str(f), "--fast", "--zero", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.zero" in err[0] and "distributed_optimizer" in err[0]
    assert main(["plan", str(f), "--zero", "0", "--top", "1"]) == 2
    assert "training.zero" in capsys.readouterr().err


def test_predict_json_states_the_dtypes_and_flags_set_them(capsys):
    import json

    from trainsim.cli.main import main
    args = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "2048",
            "--global-batch", "8", "--fast", "--json"]
    out = {}
    for name, extra in (("default", []), ("bf16", ["--grad-dtype", "bf16"]), ("pure", ["--pure-bf16"])):
        assert main([*args, *extra]) == 0
        out[name] = json.loads(capsys.readouterr().out)
    a = out["default"]["memory"]["assumptions"]
    assert (a["weights_bytes_per_param"], a["grads_bytes_per_param"], a["optimizer_bytes_per_param"]) == (2, 4, 12)
    assert a["grad_reduce_dtype"] == "fp32" and "fp32 grads" in a["note"]
    assert out["bf16"]["memory"]["assumptions"]["grads_bytes_per_param"] == 2
    assert out["pure"]["memory"]["assumptions"]["master_weights"] is False
    assert out["pure"]["memory"]["assumptions"]["optimizer_bytes_per_param"] == 4
    stage0 = [s["grads"] for s in (out[k]["memory"]["per_stage"][0] for k in ("default", "bf16"))]
    assert stage0[0] == pytest.approx(2 * stage0[1])
    assert out["default"]["model"]["total_params"] == pytest.approx(8.03e9, rel=1e-3)
    terms = out["default"]["memory"]["other_terms"]
    assert {"cuda_context", "cublas_workspace", "nccl_buffers", "logits_workspace"} <= set(terms)
    assert out["default"]["memory"]["free_bytes"] == pytest.approx(
        out["default"]["memory"]["gpu_bytes"] - out["default"]["memory"]["peak_bytes"])


def test_fsdp_shard_grad_op_keeps_the_16_bit_copy_and_the_fp32_shard():
    """ZeRO-2 under FSDP (SHARD_GRAD_OP): bf16 unsharded weights kept through the backward + fp32 shard."""
    s = scen("llama3-8b", 8, {"tp": 1}, framework="pytorch-fsdp", zero=2)
    sm, rp = stage_memory(s, 0), rank_param_shards(s, 0)
    assert sm.weights == pytest.approx(2 * rp.held + 4 * rp.held / 8)
    assert sm.grads == pytest.approx(4 * rp.held / 8) and sm.optimizer == pytest.approx(8 * rp.held / 8)


def test_deepspeed_bf16_optimizer_keeps_bf16_grads_beside_fp32_ones():
    # DeepSpeed's BF16_Optimizer (bf16, fp32 gradient accumulation, ZeRO 0/1, deepspeed/runtime/bf16_optimizer.py):
    # bf16 weights 2, bf16 .grad 2 + fp32 accumulation buffer 4 (both unsharded), fp32 master + Adam 12 over DP.
    base = ("llama3-8b", 8, {"tp": 1})
    bf16_opt = scen(*base, framework="deepspeed", zero=1, grad_dtype="fp32")
    sb = model_states.state_bytes(bf16_opt.training)
    assert (sb.weights, sb.grads, sb.optimizer) == (2, 6, 12) and "BF16_Optimizer" in sb.note
    rp = rank_param_shards(bf16_opt, 0)
    sm = stage_memory(bf16_opt, 0)
    assert sm.grads == pytest.approx(6 * rp.grad_params) and rp.grad_params == rp.weight_params
    # bf16 gradient accumulation is ZeRO's own optimizer (2 + 2 + 12), and so is ZeRO-2 with fp32 grads
    assert model_states.state_bytes(scen(*base, framework="deepspeed", zero=1).training).grads == 2
    assert model_states.state_bytes(scen(*base, framework="deepspeed", zero=2, grad_dtype="fp32").training).grads == 4


def test_deepspeed_bf16_pipeline_reduce_casts_the_whole_fp32_gradient_to_bf16():
    # PipelineEngine._bf16_reduce_grads all-reduces each group's flat fp32 gradient as one bucket, cast to bf16
    # (communication_data_type): a 2-byte copy of every held parameter after the last backward. The reserved
    # peak is the activation peak plus that copy; the allocated peak counts only what exceeds the activations.
    s = scen("llama3-70b", 64, {"tp": 8, "pp": 4}, framework="deepspeed", zero=1, grad_dtype="fp32",
             recompute="full", micro_batch=1, global_batch=64)
    for stage in (0, 3):  # not the loss stage's cached logits: stage 0; the last stage has 1 micro-batch in flight
        sm, rp = stage_memory(s, stage), rank_param_shards(s, stage)
        cast = 2 * rp.held
        beyond = max(0.0, cast - sm.activations)
        assert sm.details.get("grad_reduce_cast", 0.0) == pytest.approx(beyond)
        reserved = sm.total + sm.allocator_cached
        loss_cached = stage_memory(s.model_copy(update={"training": s.training.model_copy(
            update={"grad_dtype_bytes": 2})}), stage).allocator_cached if stage == 3 else 0.0
        assert reserved == pytest.approx(sm.model_states + sm.activations + sm.other - beyond + cast + loss_cached)
    assert stage_memory(s, 3).details["grad_reduce_cast"] > 0 and "grad_reduce_cast" not in stage_memory(s, 0).details
    # no copy without the pipeline engine, without data parallelism, or with ZeRO's own optimizer (bf16 grads)
    for other in (scen("llama3-70b", 64, {"tp": 8, "pp": 1}, framework="deepspeed", zero=1, grad_dtype="fp32"),
                  scen("llama3-70b", 64, {"tp": 8, "pp": 4}, framework="deepspeed", zero=1)):
        assert "grad_reduce_cast" not in stage_memory(other, 0).details


def test_embedding_norm_adds_its_parameters_and_saved_input_on_the_first_stage():
    # BLOOM's word_embeddings_layernorm (--embed-layernorm): LayerNorm weight + bias (2h) on the first stage; the
    # fused layer norm saves its 16-bit input (T x h) and an fp32 mean and inverse deviation per token.
    from trainsim.cost_models import activations as act
    bloom = {"name": "bloom-like", "num_layers": 4, "hidden": 1024, "num_heads": 16, "vocab_size": 250880,
             "max_seq_len": 2048, "position_embedding": "rope"}

    def s(norm):
        return build_scenario({"model": {**bloom, "embedding_norm": norm}, "cluster": "dgx-h100", "gpus": 2,
                               "layout": {"tp": 1, "pp": 2},
                               "training": {"seq_len": 2048, "global_batch": 8, "micro_batch": 2,
                                            "framework": "deepspeed"}})
    with_norm, without = s(True), s(False)
    assert with_norm.model.total_params() - without.model.total_params() == 2 * 1024
    tokens = 2 * 2048
    extra = act.embedding_activation_bytes(with_norm) - act.embedding_activation_bytes(without)
    assert extra == 2 * tokens * 1024 + 8 * tokens
    assert stage_memory(with_norm, 1).activations == stage_memory(without, 1).activations  # first stage only


def test_megatron_unfused_attention_keeps_a_persistent_scores_buffer_shared_with_the_sp_gather():
    # GlobalMemoryBuffer "mpu": baddbmm's beta=0 input of [b x heads/tp, s, s] under unfused attention; the same
    # named buffer serves the sequence-parallel gather, so one buffer of the larger size remains.
    base = ("llama3-8b", 8, {"tp": 2})
    fused = stage_memory(scen(*base, seq_len=4096, micro_batch=2, global_batch=8), 0).details
    unfused = stage_memory(scen(*base, seq_len=4096, micro_batch=2, global_batch=8, flash_attention=False), 0).details
    assert "attention_scores_buffer" not in fused
    assert unfused["attention_scores_buffer"] == 2 * 2 * (32 // 2) * 4096 * 4096
    sp = stage_memory(scen(*base, seq_len=4096, micro_batch=2, global_batch=8, flash_attention=False,
                           sequence_parallel=True), 0).details
    assert "sp_gather_buffer" not in sp and sp["attention_scores_buffer"] == unfused["attention_scores_buffer"]
    assert stage_memory(scen(*base, seq_len=4096, micro_batch=2, global_batch=8, sequence_parallel=True),
                        0).details["sp_gather_buffer"] == 2 * 2 * 4096 * 4096
    torch_fw = scen(*base, seq_len=4096, micro_batch=2, global_batch=8, flash_attention=False, framework="torch")
    assert "attention_scores_buffer" not in stage_memory(torch_fw, 0).details


def test_cuda_context_per_process_part_is_the_h200_measurement():
    """benchmarks/data/context_memory_h200.json (benchmarks/device/context_memory.py on one H200, torch 2.11.0+cu130):
    nvidia-smi's process memory less torch's reserved bytes once a training step's kernels ran (GEMM, SDPA, fused
    AdamW, cross-entropy) is the derived context of a 132-SM GPU; a GPU with fewer SMs keeps the per-process part
    and scales only the local memory (A100: 108 SMs)."""
    import json
    from pathlib import Path
    record = json.loads((Path(__file__).parents[1] / "benchmarks/data/context_memory_h200.json").read_text())
    assert "H200" in record["dev"]
    outside = {s["step"]: s["outside_mib"] for s in record["steps"] if "outside_mib" in s}
    assert rt.cuda_context_bytes(132) == outside["cross entropy"] * (1 << 20)
    assert outside["first call"] < outside["cross entropy"]  # module images load at each kernel's first launch
    assert rt.cuda_context_bytes(132) - rt.cuda_context_bytes(108) == 24 * 2048 * 1024


def test_state_rounding_follows_the_caching_allocator_segment_rules():
    """One Megatron parameter of 20,480,000 elements without the distributed optimizer (state_rounding.py): its
    bf16 tensor (40,960,000 B) gets a segment rounded up to 2 MiB (41,943,040 B) whose 983,040 B remainder is under
    kSmallSize (1 MiB), so the block keeps it and max_memory_allocated counts it; its fp32 main copy (81,920,000 B)
    leaves 1,966,080 B, which is split off and cached (reserved, not allocated); the bf16 clone is freed."""
    from trainsim.cost_models.state_rounding import _rounding
    assert _rounding((20_480_000,), (20_480_000,), 2) == 41_943_040 - 40_960_000
    assert _rounding((), (20_480_000,), 2) == 0  # distributed optimizer: contiguous bf16 buffer
    # GPT-2 XL on one GPU (memory_runs vs25_gpt2xl_1gpu): per-tensor bf16 and fp32 copies of 48 blocks; each tensor
    # keeps at most 1 MiB unsplit, and the fc1 / fc2 weights (10.24 M elements) keep 0.47 MiB (bf16) each at least
    from trainsim.validation.memory_runs import load_memory
    case = next(c for c in load_memory().cases if c.row_id == "vs25_gpt2xl_1gpu")
    rounding = stage_memory(case.scenario, 0).details["state_rounding"]
    big = 4 * 48 + 2  # fused QKV, out-projection, fc1, fc2 per block; embedding, output layer
    assert 2 * 48 * (20 * (1 << 20) - 20_480_000) <= rounding <= 2 * big * (1 << 20)
    for other in (scen("llama3-8b", 8, {}, framework="torch", zero=3),   # FSDP2: sharded DTensor parameters
                  scen("llama3-8b", 8, {}, framework="megatron", distributed_optimizer=True, offload_optimizer=True)):
        assert "state_rounding" not in stage_memory(other, 0).details
