"""The planner never recommends what will not run: memory headroom, free memory per row, one row per run."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.simulator.planner import (
    DEFAULT_MEMORY_HEADROOM,
    PlanRequest,
    headroom_bytes,
    parse_headroom,
    plan,
)
from trainsim.simulator.search_space import SearchLimits, enumerate_candidates
from trainsim.specs import SpecError, load_cluster, load_model

GiB = 1 << 30
LIMITS = SearchLimits(max_micro_batch=2, schedules=("1f1b",), fixed={"tp": 1})


def request(**kw) -> PlanRequest:
    base = {"model": load_model("llama3-8b"), "cluster": load_cluster("dgx-h100"), "gpu_counts": (8,),
            "global_batch": 32, "seq_len": 4096, "tokens": 1e11, "top_k": 6, "limits": LIMITS}
    return PlanRequest(**{**base, **kw})


def test_headroom_parsing():
    assert parse_headroom("6") == (6 * GiB, False) and parse_headroom("6GiB") == (6 * GiB, False)
    assert parse_headroom("10%") == (pytest.approx(0.10), True)
    assert headroom_bytes(DEFAULT_MEMORY_HEADROOM, 80 * GiB) == pytest.approx(8 * GiB)
    for bad in ("-1", "100%", "lots", "nan"):
        with pytest.raises(SpecError) as ei:
            parse_headroom(bad)
        assert ei.value.field == "memory_headroom"


def test_rows_leave_the_headroom_free_and_the_rest_are_counted():
    loose, tight = plan(request(memory_headroom="0")), plan(request(memory_headroom="40%"))
    gpu = load_cluster("dgx-h100").gpu.memory_bytes
    assert tight.counts["over_headroom"] > loose.counts["over_headroom"] == 0
    fitting = [r for r in tight.rows if r.fits]
    assert fitting and all(r.headroom_bytes >= 0.4 * gpu for r in fitting)
    assert any(r.headroom_bytes < 0.4 * gpu for r in loose.rows if r.fits)  # the headroom removed real rows
    assert tight.to_json()["request"]["memory_limit_bytes"] == pytest.approx(0.6 * gpu)


def test_distributed_optimizer_searches_one_row_per_run():
    """zero 0 beside the distributed optimizer is ZeRO-1: it is not enumerated as a second, identical row."""
    lim = SearchLimits(max_micro_batch=1, schedules=("1f1b",), fixed={"tp": 1},
                       training_extra={"distributed_optimizer": True})
    zeros = {c.zero for c in enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100"), 8, 32, 4096, lim)}
    assert 0 not in zeros and 1 in zeros
    res = plan(request(limits=lim, memory_headroom="0"))
    keys = [r.candidate.key() for r in res.rows if r.fits]
    assert len(keys) == len(set(keys))


def test_cli_shows_free_memory_and_refuses_bad_headroom(capsys):
    args = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32",
            "--seq-len", "4096", "--tp", "1", "--pp", "1", "--max-micro-batch", "1", "--recompute", "none",
            "--schedule", "1f1b", "--top", "2"]
    assert main([*args, "--json", "--memory-headroom", "12"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert all(r["headroom_bytes"] >= 12 * GiB for r in d["rows"] if r["fits"])
    assert main([*args, "--memory-headroom", "12"]) == 0
    out = capsys.readouterr().out
    assert "over the 12 headroom" in out and "free" in out
    assert main([*args, "--memory-headroom", "120%"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "memory_headroom" in err[0]


def test_settings_a_candidate_runs_without_are_stated():
    """TE's TP overlap needs sequence parallelism; the rows that run without it say so."""
    from trainsim.simulator.search_space import Candidate, dropped_settings
    lim = SearchLimits(training_extra={"tp_comm_overlap": True})
    model = load_model("llama3-8b")
    plain = Candidate(8, 1, 1, 8, 1, 1, 1, 1, "none", 1, "1f1b", False)
    assert dropped_settings(model, plain, lim) == ["tp_comm_overlap not applied: it needs sequence parallelism (tp > 1)"]
    assert dropped_settings(model, Candidate(8, 2, 1, 4, 1, 1, 1, 1, "none", 1, "1f1b", True), lim) == []
    res = plan(request(limits=SearchLimits(max_micro_batch=1, schedules=("1f1b",), fixed={"tp": 1},
                                           training_extra={"tp_comm_overlap": True}), memory_headroom="0", top_k=2))
    assert all(any(w.startswith("tp_comm_overlap not applied") for w in r.warnings) for r in res.rows)


@pytest.mark.parametrize("limits", [SearchLimits(max_micro_batch=2, schedules=("1f1b", "interleaved", "zb")),
                                    SearchLimits(max_micro_batch=1, schedules=("zb",), fixed={"tp": 1})])
def test_out_of_memory_count_does_not_depend_on_the_headroom(limits):
    """A layout out of the GPU's memory is out of memory whatever headroom is asked (the headroom only moves
    layouts that fit the GPU between "screened" and "over the headroom"): one stage over the headroom must not
    hide another stage out of memory, nor model states over the headroom send every variant to "out of memory";
    and ZB's schedule-order peak decides it for a layout over the headroom as for one within it."""
    counts = [plan(request(gpu_counts=(2,), global_batch=8, seq_len=2048, limits=limits, top_k=1,
                           memory_headroom=h)).counts for h in ("0", "5%", "10%", "20%")]
    assert len({c["oom"] for c in counts}) == 1 and counts[0]["oom"] > 0
    assert counts[0]["over_headroom"] == 0 < counts[2]["over_headroom"]
    for c in counts:
        assert c["oom"] + c["over_headroom"] + c["dominated"] + c["screened"] + c["invalid"] == c["enumerated"]
