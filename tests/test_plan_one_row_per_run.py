"""The planner shows one row per run: ZeRO stages that shard over a one-rank group (dp_shard x cp = 1) hold and
run what a lower stage does, so only the lower one is searched; with a group to shard over every stage stays."""

from __future__ import annotations

import pytest

from trainsim.simulator.planner import PlanRequest, plan
from trainsim.simulator.predict import predict
from trainsim.simulator.search_space import SearchLimits, enumerate_candidates
from trainsim.specs import build_scenario, load_cluster, load_model


def zeros_searched(framework: str, tp: int, **extra) -> set[int]:
    lim = SearchLimits(max_micro_batch=1, schedules=("1f1b",), fixed={"tp": tp, "pp": 1},
                       recompute=("none",), training_extra={"framework": framework, **extra})
    cands = enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100"), 8, 32, 4096, lim)
    return {c.zero for c in cands}


def step_and_peak(framework: str, zero: int) -> tuple[float, float]:
    s = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "layout": {"tp": 8},
                        "training": {"seq_len": 4096, "global_batch": 32, "micro_batch": 1, "zero": zero,
                                     "framework": framework}})
    p = predict(s, fast=True)
    return p.step_time_s, p.peak_bytes


@pytest.mark.parametrize("framework,searched,same", [
    ("megatron", {0, 3}, [(0, 1), (1, 2)]),        # the distributed optimizer over one rank is the plain one
    ("deepspeed", {0, 1, 2, 3}, []),                # stage 0 its plain optimizer; 1 and 2 copy buckets apart
    ("torch", {0, 1, 3}, [(1, 2)]),                 # FSDP's stages run fp32 shards + a bf16 copy, stage 0 DDP
    ("pytorch-fsdp", {0, 1, 2, 3}, []),          # FSDP1 stage 2 adds its flat-gradient preparation
])
def test_one_rank_group_searches_each_run_once(framework, searched, same):
    assert zeros_searched(framework, tp=8) == searched                      # dp = 1: one-rank group
    assert zeros_searched(framework, tp=1) == {0, 1, 2, 3}                 # dp = 8: every stage differs
    for lo, hi in same:  # the collapsed stage is priced as the one kept: same step, peak within state rounding
        (t_lo, m_lo), (t_hi, m_hi) = step_and_peak(framework, lo), step_and_peak(framework, hi)
        assert t_hi == pytest.approx(t_lo, rel=1e-9) and m_hi == pytest.approx(m_lo, abs=4 << 20)


def test_offload_and_the_distributed_optimizer_keep_zero_1():
    assert zeros_searched("megatron", tp=8, distributed_optimizer=True) == {1, 3}
    assert 1 in zeros_searched("deepspeed", tp=8, offload_optimizer=True)


def test_a_pinned_zero_is_searched_as_asked():
    lim = SearchLimits(max_micro_batch=1, schedules=("1f1b",), fixed={"tp": 8, "zero": 2})
    cands = list(enumerate_candidates(load_model("llama3-8b"), load_cluster("dgx-h100"), 8, 32, 4096, lim))
    assert cands and {c.zero for c in cands} == {2}


def test_plan_rows_on_one_rank_groups_are_different_runs():
    res = plan(PlanRequest(model=load_model("llama3-8b"), cluster=load_cluster("dgx-h100"), gpu_counts=(8,),
                           global_batch=32, seq_len=4096, tokens=1e11, top_k=10, memory_headroom="0",
                           limits=SearchLimits(max_micro_batch=2, fixed={"tp": 8})))
    seen = [(round(r.step_time_s, 6), round(r.peak_bytes / 2**20)) for r in res.rows]
    assert len(res.rows) >= 2 and len(seen) == len(set(seen))


def test_a_row_names_sequence_parallelism_and_predict_reproduces_it(capsys):
    """The planner turns sequence parallelism on with tp > 1; the row says so ('sp'), and predict given what the
    row shows prints the row's peak memory (without --sequence-parallel it would not: tp4 on 512 H100s for
    Llama 3 70B reads 81.8 GiB against the row's 51.7)."""
    import json

    from trainsim.cli.main import main
    from trainsim.reports.tables import layout_row
    args = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32",
            "--seq-len", "4096"]
    assert main(["plan", *args, "--tp", "2", "--pp", "1", "--max-micro-batch", "1", "--recompute", "none",
                 "--top", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["sequence_parallel"] and row["label"].startswith("tp2 sp pp1")
    assert layout_row(1, row)[2].startswith("tp2 sp pp1")
    assert main(["predict", *args, "--tp", "2", "--pp", "1", "--micro-batch", "1", "--zero", str(row["zero"]),
                 "--sequence-parallel", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["peak_bytes"] == pytest.approx(row["peak_bytes"], rel=1e-9)
