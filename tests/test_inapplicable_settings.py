"""Settings a framework's code does not have are refused with one line naming the field, not priced: Megatron-Core's
TP and expert-parallel communication overlaps outside Megatron, DeepSpeed's ZeRO-Offload without a ZeRO stage.
Each was accepted and moved the prediction (tp_comm_overlap under deepspeed or pytorch-fsdp: a 6 % shorter step;
ep_comm_overlap under deepspeed: 7 %; offload_optimizer with deepspeed zero 0: 119.7 GiB on the host)."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.specs import SpecError, build_scenario


def scen(model="llama3-8b", gpus=8, layout=None, **training):
    training = {"seq_len": 4096, "global_batch": gpus, "micro_batch": 1, **training}
    return build_scenario({"model": model, "cluster": "dgx-h100", "gpus": gpus, "layout": layout or {},
                           "training": training})


@pytest.mark.parametrize("framework", ["deepspeed", "pytorch-fsdp", "torch"])
def test_tp_comm_overlap_outside_megatron_is_refused(framework):
    with pytest.raises(SpecError) as ei:
        scen(layout={"tp": 2}, framework=framework, sequence_parallel=True, tp_comm_overlap=True)
    assert ei.value.field == "training.tp_comm_overlap" and framework in str(ei.value)
    scen(layout={"tp": 2}, sequence_parallel=True, tp_comm_overlap=True)  # megatron runs it


@pytest.mark.parametrize("framework", ["deepspeed", "pytorch-fsdp", "torch"])
def test_ep_comm_overlap_outside_megatron_is_refused(framework):
    layout = {"tp": 2, "pp": 4, "vpp": 2, "ep": 8}
    base = {"sequence_parallel": True, "zero": 1, "schedule": "interleaved"}
    with pytest.raises(SpecError) as ei:
        scen("mixtral-8x7b", 64, layout, framework=framework, ep_comm_overlap=True, **base)
    assert ei.value.field == "training.ep_comm_overlap"
    scen("mixtral-8x7b", 64, layout, ep_comm_overlap=True, **base)  # megatron runs it


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed"])
def test_deepspeed_optimizer_offload_needs_a_zero_stage(framework):
    with pytest.raises(SpecError) as ei:
        scen(framework=framework, zero=0, offload_optimizer=True)
    assert ei.value.field == "training.offload_optimizer"
    assert scen(framework=framework, zero=1, offload_optimizer=True).training.offload_optimizer


def test_refusals_are_one_line_exit_2(capsys):
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32",
            "--seq-len", "4096", "--framework", "deepspeed", "--offload-optimizer"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.offload_optimizer" in err[0]


def test_torch_context_parallelism_defaults_to_torchs_all_gather(capsys):
    """Under framework torch an unset cp_comm is torch's context_parallel default, the all-gather rotation
    (_ContextParallelOptions.rotate_method = ALL_GATHER; torchtitan's context_parallel_rotate_method "allgather"),
    costed as torch runs it and stated; a stated cp_comm, or Megatron's default ring, says nothing."""
    import json

    from trainsim.simulator.predict import cp_default_warning

    def scenario(**kw):
        return scen(layout={"cp": 2}, global_batch=4, seq_len=8192, **kw)
    torch_default = scenario(framework="torch")
    assert torch_default.training.cp_exchange == "torch_allgather"
    assert "cp_comm torch_allgather assumed" in cp_default_warning(torch_default)[0]
    assert cp_default_warning(scenario(framework="torch", cp_comm="p2p")) == []
    assert scenario().training.cp_exchange == "p2p" and cp_default_warning(scenario()) == []
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "4",
                 "--seq-len", "8192", "--cp", "2", "--framework", "torch", "--fast", "--json"]) == 0
    assert any(w.startswith("cp_comm torch_allgather assumed")
               for w in json.loads(capsys.readouterr().out)["warnings"])
    with pytest.raises(SpecError) as ei:  # torch's rotation is torch's
        scenario(cp_comm="torch_allgather")
    assert ei.value.field == "training.cp_comm"


def test_torch_all_gather_rotation_is_costed_as_torch_runs_it():
    """torch's all-gather rotation: one K/V all-gather hidden behind the local block's attention (forward and
    backward), and cp fp32 dK/dV ring passes in backward, the last one exposed -- the closed form of
    exposures._torch_allgather_cp_s from the same collective and attention times."""
    from trainsim.cost_models import compute
    from trainsim.cost_models.shapes import layer_shape
    from trainsim.simulator import exposures
    from trainsim.topologies.placement import place
    s = scen(layout={"cp": 4}, gpus=8, global_batch=4, seq_len=32768, framework="torch")
    shp, group = layer_shape(s), place(s).group("cp")
    kv = shp.e * shp.tokens * shp.kv * (shp.dqk + shp.dvh) / s.layout.tp
    gather = sum(exposures._coll("all_gather", 4 * kv, group, s, None))
    dkv = sum(exposures._coll("send_recv", kv * 4 / shp.e, group, s, None))
    blk = exposures._attention_fwd_s(s, None) / 4
    bwd = compute.FLASH_BWD_FACTOR * blk
    fwd_s, bwd_s = exposures._cp_exchange_s(s, None, group, shp.e, shp.tokens, shp)
    assert fwd_s == pytest.approx(max(0.0, gather - blk))
    assert bwd_s == pytest.approx(max(0.0, gather - bwd) + 3 * max(0.0, dkv - bwd) + dkv)
    assert bwd_s >= dkv > 0  # the last dK/dV pass is always exposed
    # cp_comm allgather stays Llama 3's exposed all-gather (arXiv:2407.21783 Sec. 3.3.2), under torch too
    for fw in ("torch", "megatron"):
        m = scen(layout={"cp": 4}, gpus=8, global_batch=4, seq_len=32768, cp_comm="allgather", framework=fw)
        scatter = sum(exposures._coll("reduce_scatter", 4 * kv, group, m, None))
        assert exposures._cp_exchange_s(m, None, group, shp.e, shp.tokens, shp) == pytest.approx(
            (gather, gather + scatter))


def test_fsdp1_stack_has_no_context_parallelism(capsys):
    """pytorch-fsdp (Composer + llm-foundry, torch FSDP1): Composer's ParallelismConfig holds fsdp and tp only."""
    with pytest.raises(SpecError) as ei:
        scen(layout={"cp": 2}, framework="pytorch-fsdp", zero=3, global_batch=4, seq_len=8192)
    assert ei.value.field == "layout.cp" and "framework torch" in ei.value.reason
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "4",
                 "--seq-len", "8192", "--cp", "2", "--framework", "pytorch-fsdp", "--fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layout.cp" in err[0]


@pytest.mark.parametrize("flags", [["--dp-bucket-mb", "1"], ["--no-overlap-grad-reduce"]])
def test_data_parallel_settings_at_dp_1_are_stated_inert(capsys, flags):
    """A bucket size or grad-reduce overlap with one data-parallel rank moves nothing (no DP gradient reduction):
    predict says so, and the step is the one without the setting."""
    import json
    base = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--tp", "8",
            "--global-batch", "8", "--seq-len", "4096", "--fast", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] == plain["step_time_s"]
    name = "dp_bucket_mb" if "--dp-bucket-mb" in flags else "overlap_grad_reduce"
    assert any(w.startswith(f"{name} changes nothing here: with dp = 1") for w in out["warnings"])
    assert not any("changes nothing" in w for w in plain["warnings"])
    assert main([*base[:8], "4", *base[9:], *flags]) == 0  # tp 4: dp 2 reduces, nothing to state
    assert not any("changes nothing" in w for w in json.loads(capsys.readouterr().out)["warnings"])


@pytest.mark.parametrize("framework,zero,field_text", [
    ("deepspeed", 0, "ZeRO stage 1-3"), ("deepspeed-2023", 1, "PR #7700"), ("deepspeed-2021", 2, "PR #7700"),
    ("megatron-deepspeed", 1, "PR #7700")])
def test_pure_bf16_where_deepspeed_has_no_bf16_master(framework, zero, field_text):
    with pytest.raises(SpecError) as ei:
        scen(framework=framework, zero=zero, master_weights=False)
    assert ei.value.field == "training.master_weights" and field_text in ei.value.reason
    with pytest.raises(SpecError):
        scen(framework="deepspeed", zero=1, master_weights=False, grad_dtype="fp32")


def test_deepspeed_pure_bf16_keeps_a_bf16_master_partition():
    """DeepSpeed's bf16_master_weights_and_grads (ZeRO 1-3) clones the bf16 partition into a bf16 master partition
    beside bf16 Adam states: 2 + 2 + (2 + 4) bytes per parameter, where torchtune's pure bf16 is 2 + 2 + 4."""
    from trainsim.cost_models import model_states
    ds = model_states.state_bytes(scen(framework="deepspeed", zero=1, master_weights=False).training)
    assert (ds.weights, ds.grads, ds.optimizer) == (2, 2, 6) and "bf16 master partition" in ds.note
    tt = model_states.state_bytes(scen(framework="torch", zero=3, master_weights=False).training)
    assert (tt.weights, tt.grads, tt.optimizer) == (2, 2, 4)


@pytest.mark.parametrize("training,field", [
    # each was accepted and predicted the step and peak of the run without it
    ({"framework": "deepspeed", "zero": 1, "offload_optimizer": True, "optimizer_offload_fraction": 0.5},
     "optimizer_offload_fraction"),
    ({"framework": "torch", "fsdp_reduce_scatter_input": "reduce_scatter_stream"}, "fsdp_reduce_scatter_input"),
    ({"framework": "torch", "fsdp_unsharded_after_forward": "root"}, "fsdp_unsharded_after_forward"),
    ({"framework": "pytorch-fsdp", "zero": 3, "fsdp_unsharded_after_forward": "root"}, "fsdp_unsharded_after_forward"),
    ({"flash_attention": False, "flash_attention_version": 1}, "flash_attention_version"),
    # costed as ZeRO-1 while DeepSpeed has no Megatron DistributedOptimizer (peak 156 -> 62 GiB)
    ({"framework": "deepspeed", "distributed_optimizer": True}, "distributed_optimizer"),
    ({"framework": "deepspeed-2023", "distributed_optimizer": True}, "distributed_optimizer"),
])
def test_settings_with_nothing_to_act_on_are_refused(training, field):
    with pytest.raises(SpecError) as ei:
        scen(**training)
    assert ei.value.field == f"training.{field}"


def test_what_the_refused_settings_need_still_runs():
    scen(offload_optimizer=True, distributed_optimizer=True, optimizer_offload_fraction=0.5)  # Megatron-Core
    scen(framework="torch", zero=3, fsdp_reduce_scatter_input="reduce_scatter_stream")
    scen(framework="torch", zero=3, fsdp_unsharded_after_forward="root_and_last_block")
    scen(flash_attention_version=1)
    scen(framework="deepspeed", zero=1)


def test_pipeline_overlap_with_one_stage_is_stated_inert():
    from trainsim.simulator.predict import predict
    plain, given = predict(scen(), fast=True), predict(scen(overlap_p2p=True), fast=True)
    assert given.step_time_s == plain.step_time_s
    assert any(w.startswith("overlap_p2p changes nothing here: with pp = 1") for w in given.warnings)
    staged = predict(scen(layout={"pp": 2}, overlap_p2p=True), fast=True)
    assert not any(w.startswith("overlap_p2p") for w in staged.warnings)


@pytest.mark.parametrize("section,method,expected", [
    (None, None, "torch_allgather"), ("parallelism", "allgather", "torch_allgather"),
    ("parallelism", "alltoall", "p2p"), ("experimental", "alltoall", "p2p")])
def test_a_torchtitan_run_keeps_the_rotate_method_its_toml_states(section, method, expected):
    """A torchtitan job TOML with context parallelism is costed with the rotation it ran (its default all-gather,
    or "alltoall", the ring), not with trainsim's default."""
    from pathlib import Path

    from trainsim.validation.titan_logs import read_toml, titan_scenario_parts
    toml = Path(__file__).parent / "data" / "runs" / "llama3_8b.toml"
    cfg = read_toml(toml)
    if section:
        cfg[section] = {**cfg.get(section, {}), "context_parallel_rotate_method": method}
    deg = {"data_parallel_replicate": 1, "data_parallel_shard": 4, "context_parallel": 2, "tensor_parallel": 1,
           "pipeline_parallel": 1}
    assert titan_scenario_parts(cfg, toml, deg)[2]["cp_comm"] == expected
    cfg["parallelism"] = {**cfg.get("parallelism", {}), "context_parallel_rotate_method": "ring"}
    with pytest.raises(SpecError, match="context_parallel_rotate_method"):
        titan_scenario_parts(cfg, toml, deg)
