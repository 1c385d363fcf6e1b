"""Settings that would change nothing are refused with one line naming the field (issue 21, item 8), never
accepted and silently ignored."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.specs import SpecError, build_scenario

BASE = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "2048",
        "--global-batch", "8", "--fast", "--json"]


def _scen(tp: int, **training):
    return build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"tp": tp},
                           "training": {"seq_len": 2048, "global_batch": 8, **training}})


@pytest.mark.parametrize("tp", [1, 2])
def test_tp_comm_overlap_without_sequence_parallelism_is_refused(tp):
    """Megatron-LM's arguments.py asserts 'Tensor parallel communication/GEMM overlap can happen only when
    sequence parallelism is enabled': userbuffers overlap the SP all-gathers and reduce-scatters."""
    with pytest.raises(SpecError) as ei:
        _scen(tp, tp_comm_overlap=True)
    assert ei.value.field.startswith("training") and "sequence_parallel" in str(ei.value)


def test_tp_comm_overlap_refusal_is_one_line_exit_2(capsys):
    assert main([*BASE, "--tp", "2", "--tp-comm-overlap"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tp_comm_overlap" in err[0] and "sequence_parallel" in err[0]


def test_tp_comm_overlap_with_sequence_parallelism_still_shortens_the_step(capsys):
    import json
    steps = []
    for extra in ([], ["--tp-comm-overlap"]):
        assert main([*BASE, "--tp", "2", "--sequence-parallel", *extra]) == 0
        steps.append(json.loads(capsys.readouterr().out)["step_time_s"])
    assert steps[1] < steps[0]


def test_plan_applies_a_files_tp_comm_overlap_to_its_sequence_parallel_candidates(tmp_path, capsys):
    """A plan file's tp_comm_overlap is not refused for the search's non-SP candidates: they run without it
    and the table says so (search_space.dropped_settings)."""
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\n"
                 "training: {seq_len: 2048, global_batch: 8, tp_comm_overlap: true}\n")
    assert main(["plan", str(f), "--top", "2", "--tp", "1"]) == 0
    assert "tp_comm_overlap not applied" in capsys.readouterr().out


def test_predict_states_the_host_memory_offload_needs(capsys):
    """ZeRO-3 with parameter and optimizer offload (DeepSpeed ZeRO-Infinity): the host holds each rank's partition
    of the fp32 master weights, Adam m and v (12 bytes), its fp32 gradient partition (4) and the bf16 parameters
    (2): 18 bytes x 8.03e9 / 8 ranks per GPU, times the node's 8 GPUs; the text output states it (item 6)."""
    import json
    off = ["--framework", "deepspeed", "--zero", "3", "--offload-optimizer", "--offload-params"]
    assert main([*BASE, *off]) == 0
    pred = json.loads(capsys.readouterr().out)
    params = pred["model"]["total_params"]
    assert pred["memory"]["host_bytes"] == pytest.approx(18 * params / 8, rel=1e-3)
    assert main([*BASE[:-1], *off]) == 0
    out = " ".join(capsys.readouterr().out.split())
    gib = pred["memory"]["host_bytes"] / 2**30
    assert f"host memory (offload): {gib:.1f} GiB per GPU, {8 * gib:.1f} GiB per node" in out
    assert main(BASE[:-1]) == 0
    assert "host memory (offload)" not in capsys.readouterr().out


def _refusal(capsys, *flags) -> str:
    assert main([*BASE, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def test_megatron_cpu_optimizer_offload_without_the_distributed_optimizer_is_refused(capsys):
    """Megatron-LM arguments.py asserts --optimizer-cpu-offload needs --use-precision-aware-optimizer, and
    get_megatron_optimizer (megatron/core/optimizer/__init__.py) raises '--use-precision-aware-optimizer only
    supported with distributed optimizer': the zero-0 offload run does not exist."""
    line = _refusal(capsys, "--offload-optimizer")
    assert "offload_optimizer" in line and "distributed_optimizer" in line
    assert main([*BASE, "--offload-optimizer", "--distributed-optimizer"]) == 0
    assert main([*BASE, "--offload-optimizer", "--zero", "3"]) == 0  # Megatron-FSDP runs on the distributed optimizer
    capsys.readouterr()
    with pytest.raises(SpecError) as ei:
        _scen(1, offload_optimizer=True)
    assert "distributed_optimizer" in str(ei.value)


@pytest.mark.parametrize("framework", ["torch", "pytorch-fsdp"])
def test_torch_frameworks_refuse_megatrons_distributed_optimizer(capsys, framework):
    """Megatron-LM asserts '--use-torch-fsdp2 is not supported with MCore's distributed optimizer'; torch's own
    ZeRO-1 (ZeroRedundancyOptimizer) is --zero 1, not a renamed flag."""
    line = _refusal(capsys, "--framework", framework, "--distributed-optimizer")
    assert "distributed_optimizer" in line and "zero 1" in line
    assert main([*BASE, "--framework", "torch", "--zero", "1"]) == 0


@pytest.mark.parametrize("zero,strategy", [(2, "optim_grads"), (3, "optim_grads_params")])
def test_distributed_optimizer_beside_zero_2_or_3_is_stated(capsys, zero, strategy):
    """ZeRO-2/3 shard the optimizer states as the distributed optimizer does and more: the step is ZeRO-N's
    (identical to --zero N alone), and the output says so, in --json's assumptions and in the text."""
    import json
    flags = ["--zero", str(zero), "--distributed-optimizer"]
    assert main([*BASE, *flags]) == 0
    both = json.loads(capsys.readouterr().out)
    assert main([*BASE, "--zero", str(zero)]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert both["step_time_s"] == alone["step_time_s"]
    note = both["memory"]["assumptions"]["optimizer_sharding"]
    assert f"costed as ZeRO-{zero}" in note and strategy in note
    assert "optimizer_sharding" not in alone["memory"]["assumptions"]
    assert main([*BASE[:-1], *flags]) == 0
    assert f"optimizer sharding: distributed_optimizer with zero {zero}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("framework", ["megatron-2022", "megatron-deepspeed", "deepspeed", "torch", "pytorch-fsdp"])
def test_a_megatron_module_list_is_refused_outside_megatron_core(framework, capsys):
    """--recompute-modules is Megatron-Core's (framework megatron); the other presets' code has no module list
    (specs/framework_era.py: what a framework's code lacks is refused), torchtitan's per-op policy being op_sac."""
    assert main([*BASE, "--framework", framework, "--recompute-modules", "core_attn,mlp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: training.recompute_modules: core_attn, mlp: a module "
                                                   "list is Megatron-Core's --recompute-modules")
    assert ("op_sac" in err) is (framework in ("torch", "pytorch-fsdp"))


def test_a_megatron_module_list_runs_under_megatron_core_and_op_sac_under_torch(capsys):
    assert main([*BASE, "--recompute-modules", "core_attn,mlp"]) == 0
    capsys.readouterr()
    assert main([*BASE, "--framework", "torch", "--recompute-modules", "op_sac"]) == 0
