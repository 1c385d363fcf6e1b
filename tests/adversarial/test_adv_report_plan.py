"""`trainsim report --plan PLAN.json`: a layout row or request value of another type than `plan --json` writes
was read leniently -- tp true as 1, tp "2" as 2, a global batch of 8.7 as 8 -- and reported as the planned layout.
Each is refused naming the row's or the request's field; the planner's own output still reports."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

PLAN = ["plan", "--model", "tiny-gpt", "--cluster", "cpu-host", "--gpus", "2", "--global-batch", "8", "--seq-len",
        "128", "--json", "--top", "2"]


@pytest.fixture(scope="module")
def plan_doc() -> dict:
    r = run_cli(PLAN)
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.mark.parametrize("where, key, value", [
    ("row", "tp", True), ("row", "tp", "2"), ("row", "micro_batch", 4.0), ("row", "sequence_parallel", 0),
    ("row", "recompute", 1), ("row", "dp_shard", "2"), ("request", "global_batch", 8.7),
    ("request", "seq_len", True), ("request", "seq_len", "128"),
    ("request", "tokens", "abc"), ("request", "tokens", -5), ("request", "tokens", True),
    ("request", "price_per_gpu_hour", "x"), ("request", "price_per_gpu_hour", -3),
])
def test_a_plan_value_of_the_wrong_type_is_refused(tmp_path, plan_doc, where, key, value):
    doc = json.loads(json.dumps(plan_doc))
    (doc["rows"][0] if where == "row" else doc["request"])[key] = value
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(doc))
    r = run_cli(["report", "--plan", f, "--out", tmp_path / "r"])
    field = f"plan.rows[1].{key}" if where == "row" else f"plan.request.{key}"
    assert r.code == 2 and len(r.err_lines) == 1 and field in r.err, r.err
    assert not (tmp_path / "r").exists()


def test_the_planners_own_plan_reports(tmp_path, plan_doc):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan_doc))
    for rank in ("1", "2"):
        r = run_cli(["report", "--plan", f, "--rank", rank, "--out", tmp_path / f"r{rank}"])
        assert r.code == 0, r.err
