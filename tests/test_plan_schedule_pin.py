"""A pinned pipeline schedule holds in every row of a plan: one stage has no pipeline to schedule (predict refuses
zb, gpipe or interleaved at pp=1), so the pin implies pp > 1 and a space with only one stage is refused."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.simulator.search_space import SearchLimits, enumerate_candidates
from trainsim.specs import load_cluster, load_model

L8 = ["--model", "llama3-8b", "--cluster", "dgx-h100"]


@pytest.mark.parametrize("schedule", ["zb", "gpipe", "interleaved", "1f1b"])
def test_every_candidate_runs_the_pinned_schedule(schedule):
    lim = SearchLimits(max_micro_batch=4, fixed={"schedule": schedule})
    cands = list(enumerate_candidates(load_model("tiny-gpt"), load_cluster("dgx-h100", 8), 8, 32, 256, lim))
    assert cands and {c.schedule for c in cands} == {schedule}
    assert (min(c.pp for c in cands) == 1) is (schedule == "1f1b")  # only 1f1b stands for one stage


def test_plan_rows_hold_the_pinned_schedule(capsys):
    """The review's case: --schedule zb on 16 GPUs returned pp=1 rows running 1f1b, which predict --schedule zb
    --pp 1 refuses."""
    argv = ["plan", "--json", *L8, "--gpus", "16", "--global-batch", "64", "--seq-len", "4096", "--schedule", "zb",
            "--top", "30"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["schedule"] == "zb" and r["pp"] > 1 for r in rows)


def test_a_pinned_schedule_with_only_one_stage_is_refused(capsys):
    argv = ["plan", *L8, "--gpus", "1", "--global-batch", "64", "--seq-len", "4096", "--schedule", "gpipe"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: training.schedule: gpipe needs pp > 1")
