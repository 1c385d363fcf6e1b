"""Muon (TrainingSpec.optimizer muon; cost_models/muon.py) against closed forms and hand counts from Megatron-Core's
code: Newton-Schulz FLOPs, which parameters Muon takes, the fused-qkv split, dist_muon's ping-pong split, the
optimizer-state bytes, the gradient all-reduce and the refusals."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.cost_models import compute, framework, memory, muon
from trainsim.cost_models.param_tensors import ParamTensor, rank_tensors
from trainsim.specs.loaders import build_scenario

P = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8"]


def _scenario(model="llama3-8b", gpus=8, **training):
    ov = {"model": model, "cluster": "dgx-h100", "gpus": gpus, "optimizer": "muon", **training}
    return build_scenario({}, ov)


def test_newton_schulz_flops_of_one_matrix_by_hand():
    # A Kimi K2 expert's fc1 (gate + up: 2 x 2048 rows, 7168 columns), 5 iterations: per iteration
    # X Xᵀ 2·4096²·7168 = 240,518,168,576, A·A 2·4096³ = 137,438,953,472, B·X 240,518,168,576.
    per_iteration = 240_518_168_576 + 137_438_953_472 + 240_518_168_576
    assert muon.ns_flops(4096, 7168, 5) == 5 * per_iteration == 3_092_376_453_120
    assert muon.ns_flops(7168, 4096, 5) == muon.ns_flops(4096, 7168, 5)   # runs on the short side
    assert sum(2 * m * n * k for m, n, k in muon.ns_gemms(7168, 4096)) == per_iteration


def test_muon_takes_the_hidden_matrices_and_adam_the_rest_kimi_k2():
    scn = build_scenario({}, {"model": "kimi-k2", "cluster": "dgx-h100", "gpus": 256, "tp": 1, "pp": 1, "ep": 64,
                              "optimizer": "muon", "distributed_optimizer": True})
    tensors = rank_tensors(scn, 0)
    layer = [t for t in tensors if t.name.startswith("layers.1.")]   # a MoE block (layer 0 is dense)
    on_muon = [t.name.split(".", 2)[2] for t in layer if muon.is_muon_param(t)]
    # MLA q_down, q_up, kv_down, kv_up, proj; the router; the shared expert's fc1, fc2; 384/64 experts x 2
    assert len(on_muon) == 5 + 1 + 2 + 6 * 2 and "router.weight" in on_muon
    assert sorted(t.kind for t in layer if not muon.is_muon_param(t)) == ["norm"] * 4   # 2 block norms, q/kv norms
    ends = [t for t in tensors if t.kind in ("embedding", "head")]
    assert len(ends) == 2 and not any(muon.is_muon_param(t) for t in ends)


def test_fused_qkv_is_orthogonalised_as_q_k_v_on_the_tp_shard():
    scn = _scenario(tp=2)
    qkv = next(t for t in rank_tensors(scn, 0) if t.name.endswith("linear_qkv.weight"))
    # llama3-8b: 32 heads x 128 = 4096 q rows, 8 kv heads x 128 = 1024 k and v rows; TP 2 halves each (blockwise)
    assert qkv.shape == (3072, 4096)
    assert muon.muon_matrices(qkv, scn.model, "fused") == ((2048, 4096), (512, 4096), (512, 4096))


def test_ping_pong_split_is_megatrons_example():
    # layer_wise_optimizer.py _shard_params_ping_pong: 4 ranks, p0-p9 sorted ->
    # [[p0, p7, p8], [p1, p6, p9], [p2, p5], [p3, p4]]
    ps = [ParamTensor(f"p{i}", float(i + 1)) for i in reversed(range(10))]
    shards = muon._ping_pong(ps, 4)
    assert [[t.name for t in s] for s in shards] == [["p0", "p7", "p8"], ["p1", "p6", "p9"], ["p2", "p5"],
                                                      ["p3", "p4"]]


# llama3-8b by hand: 32 blocks of q/k/v/o (4096 x 6144 + 4096 x 4096) and SwiGLU (3 x 14336 x 4096) on Muon;
# the untied embedding and output layer (2 x 128256 x 4096) and 65 RMSNorm weights of 4096 on Adam.
MUON_ELEMS = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 14336 * 4096)
ADAM_ELEMS = 2 * 128256 * 4096 + 65 * 4096


@pytest.mark.parametrize("dtype,muon_b,adam_b", [("bf16", 8, 12), ("fp32", 4, 8)])
def test_optimizer_state_bytes_by_hand(dtype, muon_b, adam_b):
    """fp32 main + momentum (4 + 4) on Muon's matrices, fp32 main + Adam m, v (4 + 8) on the rest; fp32 training
    keeps no separate main copy."""
    assert MUON_ELEMS == 6_979_321_856 and ADAM_ELEMS == 1_050_939_392
    sm = memory.stage_memory(_scenario(dtype=dtype), 0)
    assert sm.optimizer == pytest.approx(muon_b * MUON_ELEMS + adam_b * ADAM_ELEMS, rel=1e-12)
    adam = build_scenario({}, {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "dtype": dtype})
    assert memory.stage_memory(adam, 0).optimizer - sm.optimizer == pytest.approx(4 * MUON_ELEMS, rel=1e-12)


def test_dist_muon_shards_whole_parameters_and_all_reduces_gradients():
    scn = _scenario(distributed_optimizer=True)
    dense, expert = muon.rank_shards(scn, 0)
    assert len(dense) == 8 and not any(s.muon_elems or s.adam_elems for s in expert)   # a dense model
    assert sum(s.muon_elems for s in dense) == MUON_ELEMS and sum(s.adam_elems for s in dense) == ADAM_ELEMS
    assert framework.grad_reduce_op(scn.training) == "all_reduce"       # DDP without use_distributed_optimizer
    adam = build_scenario({}, {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "distributed_optimizer": True})
    assert framework.grad_reduce_op(adam.training) == "reduce_scatter"


def test_step_time_grows_by_the_added_iterations_gemms():
    """Five more iterations add exactly the three bf16 GEMMs per iteration of every matrix (dp 1: one rank)."""
    five, ten = _scenario(gpus=1), _scenario(gpus=1, muon_ns_steps=10)
    hw = compute.hw_of(five.cluster.gpu, "bf16")
    mats = [m for t in rank_tensors(five, 0) for m in muon.muon_matrices(t, five.model, "fused")]
    assert len(mats) == 32 * (3 + 3)                                    # q, k, v, o, fc1, fc2 per block
    gemms = 5 * sum(compute.gemm_time_s(m, n, k, hw) for r, c in mats for m, n, k in muon.ns_gemms(r, c))
    assert muon.step_seconds(ten, 0) - muon.step_seconds(five, 0) == pytest.approx(gemms, rel=1e-9)
    assert compute.optimizer_step_time(five, 0) > muon.step_seconds(five, 0)   # + the grad-norm pass


@pytest.mark.parametrize("flags,field", [
    (["--optimizer", "muon", "--dtype", "fp16"], "optimizer"),
    (["--optimizer", "muon", "--framework", "torch"], "optimizer"),
    (["--optimizer", "muon", "--zero", "3", "--framework", "pytorch-fsdp"], "optimizer"),
    (["--optimizer", "muon", "--distributed-optimizer", "--offload-optimizer"], "offload_optimizer"),
    (["--optimizer", "muon", "--framework", "megatron", "--lora-rank", "16"], "optimizer"),  # adapters costed as AdamW
])
def test_unsupported_combinations_are_refused_in_one_line(flags, field, capsys):
    code = main(P + flags)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"training.{field}:" in err, err


@pytest.mark.parametrize("training,field", [({"muon_ns_steps": 3}, "muon_ns_steps"),
                                            ({"optimizer": "muon", "optimizer_bytes_per_param": 8},
                                             "optimizer_bytes_per_param")])
def test_settings_that_contradict_the_optimizer_are_refused(training, field, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("training:\n" + "".join(f"  {k}: {v}\n" for k, v in training.items()))
    code = main(P + [str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and field in err, err


def test_host_issues_muons_kernels_one_parameter_at_a_time():
    """llama3-8b on one rank: per block 4 Muon tensors (qkv, o, fc1, fc2) of 11 element-wise kernels each and
    6 matrices (q, k, v, o, fc1, fc2) of 3 GEMMs x 5 iterations: 32 x (44 + 90) launches beyond Adam's."""
    from trainsim.cost_models.step_host import scenario_step_host

    adam = build_scenario({}, {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 1})
    extra = scenario_step_host(_scenario(gpus=1), 0).launches - scenario_step_host(adam, 0).launches
    assert extra == 32 * (4 * 11 + 3 * 5 * 6) == 4288


def test_checkpoint_holds_muons_state_bytes():
    """A Muon checkpoint: the bf16 weights plus 8 B on the Muon matrices and 12 B on the rest (llama3-8b by hand)."""
    from trainsim.reports.whatif import ReportOptions, checkpoint_seconds
    from trainsim.simulator import goodput as gp

    scn = _scenario()
    assert muon.model_state_bytes_per_param(scn) == pytest.approx(
        (8 * MUON_ELEMS + 12 * ADAM_ELEMS) / (MUON_ELEMS + ADAM_ELEMS), rel=1e-12)
    opts = ReportOptions()
    want = gp.checkpoint_write_s(scn.model.total_params() * (2 + muon.model_state_bytes_per_param(scn)),
                                 opts.storage_write_Bps)
    assert checkpoint_seconds(scn, opts) == pytest.approx(want, rel=1e-12)



@pytest.mark.parametrize("training", [{"optimizer": "muon"}, {"param_dtype_bytes": 4}])
def test_plan_writes_the_checkpoint_the_report_writes(training):
    """plan's checkpoint write time (in every row's time to train) is the what-if report's for the same run:
    Muon's states (8 B on its matrices, 12 B elsewhere) and fp32 parameters (param_dtype_bytes 4) alike."""
    from trainsim.reports.whatif import ReportOptions, checkpoint_seconds
    from trainsim.simulator.planner import PlanRequest
    from trainsim.simulator.planner import checkpoint_seconds as plan_checkpoint_seconds
    from trainsim.simulator.search_space import SearchLimits
    from trainsim.specs import load_cluster, load_model

    scn = build_scenario({}, {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "seq_len": 4096,
                              "global_batch": 32, **training})
    req = PlanRequest(model=load_model("llama3-8b"), cluster=load_cluster("dgx-h100"), gpu_counts=(8,),
                      global_batch=32, seq_len=4096, tokens=1e9, limits=SearchLimits(training_extra=training))
    assert plan_checkpoint_seconds(req) == pytest.approx(checkpoint_seconds(scn, ReportOptions()), rel=1e-9)
    adam_bf16 = plan_checkpoint_seconds(PlanRequest(model=req.model, cluster=req.cluster, gpu_counts=(8,),
                                                    global_batch=32, seq_len=4096, tokens=1e9))
    per_param = 2 + muon.model_state_bytes_per_param(scn) if "optimizer" in training else 4 + 12
    assert plan_checkpoint_seconds(req) / adam_bf16 == pytest.approx(per_param / (2 + 12), rel=1e-9)


def test_duplicated_tp_mode_gathers_and_iterates_whole_matrices():
    """muon_tp_mode duplicated (newton_schulz_tp): each TP-sharded matrix's fp32 momentum is all-gathered over TP
    (q, k, v apart) and the whole matrix iterated on every TP rank -- the FLOPs of the unsharded model; blockwise
    iterates the TP 4 shards (a quarter of the rows or columns each)."""
    dup = _scenario(gpus=4, tp=4, muon_tp_mode="duplicated")
    block = _scenario(gpus=4, tp=4)
    whole = _scenario(gpus=1)
    (d_shard,), _ = muon.rank_shards(dup, 0)
    (b_shard,), _ = muon.rank_shards(block, 0)
    (w_shard,), _ = muon.rank_shards(whole, 0)
    assert sorted(d_shard.matrices) == sorted(w_shard.matrices)
    per_block = 4096 * 4096 + 2 * 1024 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336   # q, k, v, o, fc1, fc2
    assert len(d_shard.gathers) == 32 * 6 and sum(d_shard.gathers) == 32 * per_block * 4
    flops = [sum(muon.ns_flops(r, c, 5) for r, c in s.matrices) for s in (d_shard, b_shard)]
    assert flops[0] > 3 * flops[1] and not b_shard.gathers
    assert muon.step_seconds(dup, 0) > muon.step_seconds(block, 0)


def test_execute_refuses_muon(tmp_path, capsys):
    """The executor steps torch Adam or SGD only, so a muon scenario is refused in one line, exit status 2."""
    path = tmp_path / "s.yaml"
    path.write_text("training:\n  optimizer: muon\n  framework: megatron\n")
    code = main(["execute", "--model", "tiny-gpt", "--cluster", "cpu-host", "--gpus", "1", "--global-batch", "2",
                 str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "training.optimizer: muon is simulated only, not executed" in err, err


def test_plan_takes_the_optimizer_flag(capsys):
    """`plan --optimizer muon` puts the update rule into every candidate's training settings, as a scenario file's
    ``training.optimizer`` does; a rule that is not a choice is refused in one line (exit 2)."""
    from trainsim.cli.main import build_parser
    from trainsim.cli.plan import request_from_args
    flags = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--global-batch", "64",
             "--seq-len", "4096"]
    parser = build_parser()
    muon = request_from_args(parser.parse_args([*flags, "--optimizer", "muon"]))
    adam = request_from_args(parser.parse_args(flags))
    assert muon.limits.training_extra.get("optimizer") == "muon" and "optimizer" not in adam.limits.training_extra
    code = main([*flags, "--optimizer", "sgd"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--optimizer" in err, err
