"""ZeRO-2/3 beside pipeline parallelism: predict's validation, the planner's search space and the what-if levers
ask one rule (specs.data_parallel.zero_stage_refusal), so a stage the framework's code lacks with that pipeline is
refused by predict, not searched by plan and not suggested by explain, and one it runs is searched by default."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.simulator.levers import next_zero
from trainsim.simulator.search_space import SearchLimits, _zero_options
from trainsim.specs import Layout, SpecError, TrainingSpec, load_cluster, load_model, resolve
from trainsim.specs.data_parallel import zero_stage_refusal
from trainsim.specs.framework_behaviour import BEHAVIOURS


def _resolves(framework: str, zero: int, pp: int) -> bool:
    """Whether predict's validation takes tiny-gpt on 8 GPUs at this ZeRO stage and pipeline depth."""
    try:
        resolve(load_model("tiny-gpt"), load_cluster("dgx-h100", 8), Layout(tp=1, pp=pp),
                TrainingSpec(seq_len=256, global_batch=32, micro_batch=1, zero=zero, framework=framework))
    except SpecError as e:
        assert e.field == "training.zero", str(e)  # nothing else about this run is refused
        return False
    return True


@pytest.mark.parametrize("framework", sorted(BEHAVIOURS))
@pytest.mark.parametrize("pp", [1, 2])
def test_plan_searches_exactly_the_stages_predict_takes(framework, pp):
    lim = SearchLimits(training_extra={"framework": framework})
    taken = [z for z in (0, 1, 2, 3) if _resolves(framework, z, pp)]
    assert _zero_options(pp, lim) == taken
    assert taken == [z for z in (0, 1, 2, 3) if zero_stage_refusal(framework, z, pp) is None]


@pytest.mark.parametrize("framework, pp, runs", [
    ("megatron", 2, True),            # Megatron-FSDP composes with pipeline parallelism (Megatron-Bridge docs)
    ("torch", 2, True),               # torchtitan: FSDP2 + PP
    ("deepspeed", 2, False),          # DeepSpeed's PipelineEngine asserts ZeRO-2/3 off
    ("megatron-deepspeed", 2, False),
    ("megatron-2022", 1, False),      # Megatron-LM of 2022 has no ZeRO-2/3 at all
    ("deepspeed", 1, True),
])
def test_the_rule_per_framework(framework, pp, runs):
    assert (zero_stage_refusal(framework, 2, pp) is None) is runs
    assert (zero_stage_refusal(framework, 3, pp) is None) is runs
    assert zero_stage_refusal(framework, 1, pp) is None


def _scenario(framework: str, zero: int):
    return resolve(load_model("tiny-gpt"), load_cluster("dgx-h100", 8), Layout(tp=1, pp=2),
                   TrainingSpec(seq_len=256, global_batch=32, micro_batch=1, zero=zero, framework=framework))


def test_explain_suggests_the_next_stage_only_where_the_code_runs_it():
    v = next_zero(_scenario("megatron", 1))
    assert v.scenario is not None and v.scenario.training.zero == 2
    v = next_zero(_scenario("deepspeed", 1))
    assert v.scenario is None and "pipeline engine refuses ZeRO-2/3" in v.reason


def test_plan_finds_the_zero3_layouts_predict_accepts(capsys):
    """The review's case: with pp pinned to 2 the default search found nothing fitting while --zero 3 found 133."""
    argv = ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "32", "--global-batch", "128",
            "--seq-len", "4096", "--tp", "4", "--pp", "2", "--top", "3", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["zero"] >= 2 for r in rows)


def test_predict_refuses_zero3_under_megatron_2022(capsys):
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--framework",
            "megatron-2022", "--zero", "3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: training.zero: ZeRO-3 is not in framework megatron-2022")

