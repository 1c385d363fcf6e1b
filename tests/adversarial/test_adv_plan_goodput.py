"""plan's failure model at the edges of its documented flags: a free checkpoint (--checkpoint-write-s 0), a
restart or a checkpoint write many MTBFs long, and a failure rate whose MTBF is seconds. Each was a ValueError or
an OverflowError traceback out of Daly's formula; a free checkpoint now takes the formula's own limit and a run
that never finishes has no time to train (null in --json, empty in --csv, a dash in the table), ranked last."""

from __future__ import annotations

import json
import math

import pytest
from conftest import run_cli

from trainsim.simulator import goodput as gp

PLAN = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "32", "--seq-len", "4096",
        "--top", "1", "--gpus", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--zero", "3",
        "--recompute", "full"]


@pytest.mark.parametrize("flags, finishes", [
    (["--checkpoint-write-s", "0"], True),                                # ValueError: interval must be positive
    (["--storage-write-gbps", "1e-9"], False),                            # OverflowError in exp
    (["--restart-s", "1e7", "--failure-rate-per-gpu-hour", "1"], False),  # exp(R/M) with M = 450 s overflows
    (["--checkpoint-write-s", "0", "--restart-s", "1e7", "--failure-rate-per-gpu-hour", "1"], False),
])
def test_plan_failure_model_edges_answer_without_a_traceback(flags, finishes):
    for out in ("--json", "--csv", None):
        r = run_cli(PLAN + flags + ([out] if out else []))
        assert r.code == 0 and "Traceback" not in r.err, r.err[-800:]
    row = json.loads(run_cli(PLAN + flags + ["--json"]).out)["rows"][0]
    if finishes:
        assert row["time_to_train_s"] >= row["ideal_time_s"] > 0 and 0 < row["goodput"] <= 1
    else:
        assert row["time_to_train_s"] is None and row["gpu_hours"] is None and row["goodput"] == 0.0


@pytest.mark.parametrize("flag", ["--restart-s", "--checkpoint-write-s"])
def test_a_restart_or_checkpoint_beyond_any_run_is_refused(flag):
    """Past 10^7 s (116 days, longer than any training run) a restart or checkpoint write is a typo, not a plan."""
    r = run_cli(PLAN + [flag, "1e300"])
    assert r.code == 2 and r.err.strip().endswith("must be in the range >= 0, <= 1e+07, got 1e300"), r.err


def test_a_free_checkpoint_is_the_limit_of_dalys_formula():
    """T_w = M exp(R/M) (exp((tau + d)/M) - 1) T_s / tau with d = 0 tends to T_s exp(R/M) as tau -> 0."""
    work, restart, mtbf = 1e6, 600.0, 3600.0
    g = gp.plan_goodput(work, 1024, 0.0, restart, 3600.0 / (mtbf * 1024))
    assert g.interval_s == 0.0
    assert g.time_to_train_s == pytest.approx(work * math.exp(restart / mtbf), rel=1e-12)
    assert g.time_to_train_s == pytest.approx(gp.expected_wall_s(work, 1e-6, 0.0, restart, mtbf), rel=1e-6)


def test_a_job_whose_mtbf_is_seconds_never_finishes():
    """1 failure per GPU-hour on 8,192 GPUs: MTBF 0.44 s against a 600 s restart (exp(1365) overflows)."""
    g = gp.plan_goodput(1e6, 8192, 10.0, 600.0, 1.0)
    assert math.isinf(g.time_to_train_s) and g.goodput == 0.0
    assert g.to_json()["time_to_train_s"] is None
