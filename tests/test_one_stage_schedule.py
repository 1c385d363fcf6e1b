"""A pipeline schedule on one stage is refused, as interleaved and dualpipev are: with pp = 1 there is nothing to
schedule, yet GPipe would be costed holding every micro-batch's activations and ZB splitting the backward."""

from __future__ import annotations

import pytest

from trainsim.cli.main import main
from trainsim.simulator.search_space import SearchLimits, enumerate_candidates
from trainsim.specs import SpecError, build_scenario, load_cluster, load_model


def scenario(schedule: str, pp: int):
    return build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"tp": 1, "pp": pp},
                           "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1,
                                        "schedule": schedule}})


@pytest.mark.parametrize("schedule", ["gpipe", "zb"])
def test_pipeline_schedule_on_one_stage_is_refused(schedule):
    with pytest.raises(SpecError) as ei:
        scenario(schedule, 1)
    assert ei.value.field == "training.schedule" and "pp > 1" in str(ei.value)
    assert scenario(schedule, 2).training.schedule == schedule  # with a pipeline it stands


def test_the_refusal_is_one_line_exit_2(capsys):
    argv = ["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32",
            "--seq-len", "4096", "--schedule", "zb"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.schedule" in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("pinned", ["gpipe", "zb"])
def test_plan_with_a_pinned_schedule_searches_pipelines_only(pinned):
    """A pinned pipeline schedule holds in every row: one-stage layouts (which run 1f1b) are not searched under it."""
    lim = SearchLimits(max_micro_batch=1, fixed={"tp": 1, "schedule": pinned})
    cands = list(enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100"), 8, 32, 4096, lim))
    assert cands and all(c.pp > 1 for c in cands)
    assert {c.schedule for c in cands} == {pinned}
