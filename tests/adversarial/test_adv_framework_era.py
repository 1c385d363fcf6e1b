"""Historic framework presets asked for features their code did not have: fp8, zero-bubble / DualPipe schedules,
TE's TP overlap, Megatron-Core's EP overlap, and sequence parallelism and selective recompute before 2022 (specs/framework_era.py) are
refused with one line naming the setting, from the command line, a scenario file and `plan`; the current presets
and the historic ones within their era still run; no bundled example or validation row needs such a combination."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, assert_refused, run_cli

from trainsim.specs import build_scenario, load_scenario_file
from trainsim.specs.framework_era import HISTORIC_FRAMEWORKS, era_refusal, feature_refusal

BASE = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096",
        "--global-batch", "32", "--fast"]

REFUSED = [
    ("megatron-2021", ["--dtype", "fp8"], "dtype=fp8"),
    ("megatron-2022", ["--dtype", "fp8"], "dtype=fp8"),
    ("deepspeed-2021", ["--dtype", "fp8"], "dtype=fp8"),
    ("megatron-2021", ["--pp", "2", "--schedule", "zb"], "schedule=zb"),
    ("megatron-2022", ["--pp", "2", "--schedule", "zb"], "schedule=zb"),
    ("deepspeed-2021", ["--pp", "2", "--schedule", "zb"], "schedule=zb"),
    ("megatron-2022", ["--pp", "2", "--schedule", "dualpipev"], "schedule=dualpipev"),
    ("megatron-2022", ["--tp", "2", "--sequence-parallel", "--tp-comm-overlap"], "tp_comm_overlap=true"),
    ("megatron-2021", ["--tp", "2", "--sequence-parallel"], "sequence_parallel=true"),
    ("deepspeed-2021", ["--tp", "2", "--sequence-parallel"], "sequence_parallel=true"),
    ("megatron-2021", ["--recompute", "selective"], "recompute=selective"),
    ("deepspeed-2021", ["--recompute", "selective"], "recompute=selective"),
    ("megatron-2021", ["--cp", "2"], "layout.cp"),
    ("megatron-2022", ["--cp", "2"], "layout.cp"),
    ("deepspeed-2021", ["--cp", "2"], "layout.cp"),
    ("megatron-2021", ["--distributed-optimizer"], "distributed_optimizer=true"),
    ("deepspeed-2021", ["--distributed-optimizer"], "distributed_optimizer=true"),
]
MOE = ["predict", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096",
       "--global-batch", "32", "--fast"]
MOE_REFUSED = [
    ("megatron-2021", [], "model.num_experts"),
    ("megatron-2022", [], "model.num_experts"),   # SwitchMLP (top-1, serial experts) is not the MoE layer costed
    ("deepspeed-2021", [], "model.num_experts"),  # deepspeed.moe came 2021-08-16, after the preset's 2021-07 code
    ("megatron-2022", ["--ep", "2"], "layout.ep"),
    ("deepspeed-2021", ["--ep", "2"], "layout.ep"),
]
FORK_REFUSED = [  # microsoft/Megatron-DeepSpeed@f4157bea has no such flag, or asserts against the combination
    (["--tp", "2", "--sequence-parallel", "--tp-comm-overlap"], "tp_comm_overlap=true"),
    (["--pp", "2", "--vpp", "2", "--schedule", "dualpipev"], "schedule=dualpipev"),
    (["--cp", "2"], "cp_comm=p2p"),                # only Ulysses' all-to-all context parallelism
    (["--pp", "2", "--schedule", "zb", "--tp", "2", "--sequence-parallel"], "schedule=zb"),
]


@pytest.mark.parametrize("framework, flags, field", REFUSED, ids=[f"{f}{''.join(x)}" for f, x, _ in REFUSED])
def test_a_feature_the_preset_predates_is_refused(framework, flags, field):
    r = run_cli([*BASE, "--framework", framework, *flags])
    assert_refused(r, field)
    line = r.err_lines[0]
    assert framework in line and "predates it" in line and "use framework" in line


@pytest.mark.parametrize("framework, flags, field", MOE_REFUSED, ids=[f"{f}{''.join(x)}" for f, x, _ in MOE_REFUSED])
def test_moe_and_expert_parallelism_before_the_code_had_them_are_refused(framework, flags, field):
    r = run_cli([*MOE, "--framework", framework, *flags])
    assert_refused(r, field)
    assert "predates it" in r.err_lines[0] and "use framework" in r.err_lines[0]


@pytest.mark.parametrize("flags, field", FORK_REFUSED, ids=[''.join(x) for x, _ in FORK_REFUSED])
def test_what_megatron_deepspeed_cannot_run_is_refused(flags, field):
    r = run_cli([*BASE, "--framework", "megatron-deepspeed", *flags])
    assert_refused(r, field)
    assert "Megatron-DeepSpeed" in r.err_lines[0]


@pytest.mark.parametrize("cp_comm", ["p2p", "allgather"])
def test_deepspeed_context_parallelism_is_only_ulysses(tmp_path, cp_comm):
    """DeepSpeed splits the sequence only with Ulysses' all-to-all (deepspeed/sequence/layer.py,
    DistributedAttention): ring or all-gather context parallelism is refused there, a2a runs, and cp = 1 with
    either cp_comm is no contradiction."""
    f = tmp_path / "d.yaml"
    body = "model: llama3-8b\ncluster: dgx-h100\ngpus: 16\nlayout: {{cp: {cp}}}\n" \
           "training: {{seq_len: 4096, global_batch: 32, framework: deepspeed, cp_comm: {comm}}}\n"
    f.write_text(body.format(cp=2, comm=cp_comm))
    r = run_cli(["predict", f, "--fast"])
    assert_refused(r, "training.cp_comm")
    line = r.err_lines[0]
    assert f"cp_comm={cp_comm}" in line and "framework deepspeed" in line and "Ulysses" in line
    f.write_text(body.format(cp=1, comm=cp_comm))
    assert run_cli(["predict", f, "--fast"]).code == 0
    f.write_text(body.format(cp=2, comm="a2a"))
    assert run_cli(["predict", f, "--fast"]).code == 0


def test_deepspeed_cp_flag_alone_is_refused_and_the_2021_code_predates_ulysses():
    """--cp 2 takes the default cp_comm p2p (ring attention), which DeepSpeed has not; deepspeed-2021 (2021-07)
    predates Ulysses (2023-08) altogether, so its cp > 1 is refused by date whatever cp_comm says."""
    r = run_cli([*BASE, "--framework", "deepspeed", "--cp", "2"])
    assert_refused(r, "training.cp_comm")
    assert "cp_comm=p2p" in r.err_lines[0]
    r = run_cli([*BASE, "--framework", "deepspeed-2021", "--cp", "2"])
    assert_refused(r, "layout.cp")
    assert "Ulysses" in r.err_lines[0] and "predates it" in r.err_lines[0]


def test_megatron_deepspeed_runs_what_its_code_has(tmp_path):
    """ZeRO, SP, the distributed optimizer, interleaving, ZB-H1 without SP, fp8, MoE with EP and Ulysses (cp_comm
    a2a) all run under megatron-deepspeed."""
    for flags in (["--tp", "2", "--sequence-parallel"], ["--distributed-optimizer"], ["--zero", "3"],
                  ["--pp", "2", "--vpp", "2", "--schedule", "interleaved"], ["--pp", "2", "--schedule", "zb"],
                  ["--dtype", "fp8"], ["--recompute", "selective"]):
        r = run_cli([*BASE, "--framework", "megatron-deepspeed", *flags])
        assert r.code == 0, (flags, r.err)
    assert run_cli([*MOE, "--framework", "megatron-deepspeed", "--ep", "2"]).code == 0
    f = tmp_path / "u.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\nlayout: {cp: 2}\n"
                 "training: {seq_len: 4096, global_batch: 32, framework: megatron-deepspeed, cp_comm: a2a}\n")
    assert run_cli(["predict", f, "--fast"]).code == 0


def test_the_refusal_cites_what_introduced_the_feature():
    assert "arXiv:2401.10241" in feature_refusal("megatron-2022", "schedule", "zb")
    assert "arXiv:2412.19437" in feature_refusal("megatron-2021", "schedule", "dualpipev")
    assert "Transformer Engine" in feature_refusal("megatron-2021", "dtype", "fp8")
    assert "PR #6362" in feature_refusal("megatron-2022", "tp_comm_overlap", True)
    assert "arXiv:2205.05198" in feature_refusal("deepspeed-2021", "sequence_parallel", True)
    assert "d07d29df14" in feature_refusal("megatron-2021", "distributed_optimizer", True)
    assert "4a6255a763" in feature_refusal("megatron-2021", "cp", "> 1")
    assert "arXiv:2309.14509" in feature_refusal("deepspeed-2021", "cp", "> 1")
    assert "370f3c1f4b" in feature_refusal("megatron-2022", "ep", "> 1")
    assert "f28432441" in feature_refusal("deepspeed-2021", "num_experts", "> 1")
    assert feature_refusal("megatron", "cp", "> 1") is None and feature_refusal("deepspeed", "ep", "> 1") is None


@pytest.mark.parametrize("framework, flags", [
    ("megatron", ["--dtype", "fp8"]), ("megatron", ["--pp", "2", "--schedule", "zb"]),
    ("megatron", ["--tp", "2", "--sequence-parallel", "--tp-comm-overlap"]),
    ("megatron-2022", ["--tp", "2", "--sequence-parallel"]),   # Korthikanti et al.'s own code has SP
    ("megatron-2021", ["--pp", "2", "--schedule", "interleaved", "--vpp", "2"]),  # SC21 introduced it
    ("deepspeed", ["--dtype", "fp8"]),
    ("megatron", ["--cp", "2", "--distributed-optimizer"]),
    ("megatron-2022", ["--distributed-optimizer"]),   # Megatron-LM of mid-2022 (d07d29df14, 2022-06-08)
])
def test_features_within_the_presets_era_still_run(framework, flags):
    r = run_cli([*BASE, "--framework", framework, *flags])
    assert r.code == 0, r.err


def test_a_scenario_file_and_plan_are_refused_alike(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\nlayout: {pp: 2}\n"
                 "training: {seq_len: 4096, global_batch: 32, framework: megatron-2021, schedule: zb}\n")
    assert_refused(run_cli(["predict", f, "--fast"]), "schedule=zb")
    plan = tmp_path / "p.yaml"
    plan.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\n"
                    "training: {seq_len: 4096, global_batch: 32, framework: megatron-2022}\n")
    assert_refused(run_cli(["plan", plan, "--dtype", "fp8"]), "dtype=fp8")
    assert_refused(run_cli(["plan", plan, "--schedule", "zb"]), "schedule=zb")
    assert_refused(run_cli(["plan", plan, "--cp", "2"]), "layout.cp")
    dist = tmp_path / "d.yaml"
    dist.write_text(plan.read_text().replace("megatron-2022}", "megatron-2021, distributed_optimizer: true}"))
    assert_refused(run_cli(["plan", dist]), "distributed_optimizer=true")
    moe = tmp_path / "m.yaml"
    moe.write_text(plan.read_text().replace("llama3-8b", "mixtral-8x7b"))
    assert_refused(run_cli(["plan", moe]), "model.num_experts")


def test_plan_searches_only_what_the_presets_code_had(tmp_path):
    """Unpinned, the search leaves out the schedules and the sequence parallelism a historic preset lacks, so
    its layouts are those of that code rather than none."""
    from trainsim.simulator.search_space import SearchLimits, enumerate_candidates
    from trainsim.specs import load_cluster, load_model
    lim = SearchLimits(max_micro_batch=1, fixed={"recompute": "full"}, training_extra={"framework": "megatron-2021"})
    cands = list(enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100", 16), 16, 32, 4096, lim))
    assert cands and all(c.schedule not in ("zb", "dualpipev") and not c.sequence_parallel for c in cands)
    assert any(c.tp > 1 for c in cands)
    long = SearchLimits(max_micro_batch=1, fixed={"recompute": "full"}, min_tokens_per_cp_rank=1,
                        training_extra={"framework": "megatron-2022"})
    assert all(c.cp == 1 for c in enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100", 16), 16,
                                                       32, 4096, long))
    fork = SearchLimits(max_micro_batch=1, fixed={"recompute": "full"}, min_tokens_per_cp_rank=1,
                        training_extra={"framework": "megatron-deepspeed", "cp_comm": "a2a"})
    assert any(c.cp > 1 for c in enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100", 16), 16,
                                                      32, 4096, fork))  # Ulysses: searched
    zb = SearchLimits(max_micro_batch=1, fixed={"recompute": "full", "pp": 2},
                      training_extra={"framework": "megatron-deepspeed"})
    zbs = [c for c in enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100", 16), 16, 32, 4096, zb)
           if c.schedule == "zb"]
    assert zbs and not any(c.sequence_parallel for c in zbs)  # ZB-H1 only without SP there
    moe = SearchLimits(max_micro_batch=1, fixed={"recompute": "full"}, training_extra={"framework": "deepspeed"})
    assert any(c.ep > 1 for c in enumerate_candidates(load_model("mixtral-8x7b"), load_cluster("dgx-h100", 16), 16,
                                                      32, 4096, moe))


def test_no_bundled_example_asks_a_historic_preset_for_a_later_feature():
    for path in sorted(Path(REPO, "examples").glob("*.yaml")):
        scn = build_scenario(load_scenario_file(str(path)))
        assert era_refusal(scn.training) is None, path.name
    assert set(HISTORIC_FRAMEWORKS) == {"megatron-2021", "megatron-2022", "deepspeed-2021", "deepspeed-2023"}


@pytest.mark.parametrize("name", ["sc21", "korthikanti", "zero-bubble", "llama3", "amsp"])
def test_no_bundled_validation_row_needs_a_feature_its_preset_predates(name):
    """Every row of the bundled datasets resolves without an era refusal (a refused row would be skipped with
    its reason; none is)."""
    from trainsim.validation.datasets import load_dataset
    ds = load_dataset(name)
    assert not [c.skip_reason for c in ds.cases if c.skip_reason and "predates it" in c.skip_reason]
    assert all(era_refusal(c.scenario.training) is None for c in ds.active)


def test_deepspeed_2023_refuses_what_came_after_v0_12_3():
    """DeepSpeed v0.12.3 (2023-11-11) predates DualPipe (arXiv:2412.19437): refused naming the preset's code and the
    current preset to use."""
    from trainsim.specs import SpecError
    with pytest.raises(SpecError) as e:
        build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16, "layout": {"pp": 2},
                        "training": {"seq_len": 4096, "global_batch": 64, "framework": "deepspeed-2023",
                                     "schedule": "dualpipev"}})
    msg = str(e.value)
    assert "DeepSpeed v0.12.3" in msg and "use framework deepspeed" in msg


def test_deepspeed_2023_refuses_ring_context_parallelism_and_names_a_framework_that_has_it():
    """DeepSpeed v0.12.3 splits the sequence only with Ulysses' all-to-all, like today's DeepSpeed: cp_comm p2p is
    refused in one line pointing at megatron, not at deepspeed (which lacks it too)."""
    from trainsim.specs import SpecError
    base = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16, "layout": {"cp": 2}}
    with pytest.raises(SpecError) as e:
        build_scenario({**base, "training": {"seq_len": 8192, "global_batch": 64, "framework": "deepspeed-2023",
                                             "cp_comm": "p2p"}})
    assert "no ring-attention" in str(e.value) and "use framework megatron" in str(e.value)
    ok = build_scenario({**base, "training": {"seq_len": 8192, "global_batch": 64, "framework": "deepspeed-2023",
                                              "cp_comm": "a2a"}})
    assert ok.layout.cp == 2
