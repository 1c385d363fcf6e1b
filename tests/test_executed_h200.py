"""trainsim execute's one-GPU steps on two H200 leases (benchmarks/data/executed_h200*.jsonl) against today's prediction
with the profile `trainsim calibrate` measured on that machine, and the mechanisms behind it.

Tolerance per record: the structural error left (``STRUCTURAL``, stated per block style in docs/execute.md,
"One-GPU steps on an H200") plus twice the relative spread (population standard deviation over median) of the
record's timed steps, which is up to 17.3 % on the host-bound lines (a shared VM host) and about 1 % on the
GPU-bound ones.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_executed_h200", ROOT / "benchmarks" / "bench_executed_h200.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# GPT-style: the GPU-bound lines run 5-11 % under the prediction while their profiled kernel sums are matched within
# 3 % (tests/test_gpu_device_costs.py; the device phases hold gaps between kernels, docs/execute.md). Host-bound lines (micro-batch 1-2) also carry the host's own speed, which differs by up to 36 %
# between the two leases (validation/host_band.py): they are held to that band in tests/test_executed_h200_host.py,
# here only to the structural bound plus twice their timed steps' spread.
# Llama-style: the host-bound l2048_mb1 of lease 1 ran in 0.156 s, below the predicted GPU work alone (0.167 s),
# so no host speed reaches it: over-predicted by ~50 % (a known gap that must neither grow nor silently vanish;
# docs/execute.md). The same line on lease 2 (0.213 s) is within the bound.
STRUCTURAL = {"g": 0.20, "l": 0.20}
KNOWN_GAP = {("lease 1", "l2048_mb1"): (40.0, 70.0)}


@pytest.fixture(scope="module")
def leases():
    from trainsim.cost_models.profile import load_profile

    profile = load_profile(bench.DATA / "profile_h200.json")
    return {k: bench.rows(bench.untraced_records(p), profile) for k, p in bench.LEASES.items()}


@pytest.fixture(scope="module")
def rows(leases):
    return leases["lease 1"]


def test_every_untraced_record_is_predicted_within_noise_and_stated_structure(leases):
    assert [len(v) for v in leases.values()] == [11, 15]
    for lease, rs in leases.items():
        for r in rs:
            if (lease, r["name"]) in KNOWN_GAP:
                lo, hi = KNOWN_GAP[lease, r["name"]]
                assert lo <= r["error_pct"] <= hi, (lease, r["name"], r["error_pct"])
                continue
            tol = STRUCTURAL[r["name"][0]] + 2 * r["spread"]
            assert abs(r["error_pct"]) / 100 <= tol, (lease, r["name"], r["error_pct"], tol)


def test_gpt_lines_mape(leases):
    # 18 GPT records of both leases: 9.8 % (10.7 % with the steady autocast forward scaled from the casting one by
    # op counts: host_issue.steady_autocast_fwd_s)
    gpt = [abs(r["error_pct"]) for rs in leases.values() for r in rs if r["name"].startswith("g")]
    assert len(gpt) == 18
    assert statistics.fmean(gpt) < 10.5


def test_optimizer_phase_matches_measured_foreach_adam(rows):
    # torch.optim.Adam foreach: 76 B/param of _foreach passes; the measured phase (GPU events) on the GPU-bound
    # sizes, where the host's per-tensor loop hides behind the kernels.
    for r in rows:
        if r["name"] in ("g2048_mb1", "g2048_mb4", "g4096_mb1", "l2048_mb4"):
            assert r["optimizer_s"] == pytest.approx(r["measured_optimizer_s"], rel=0.10)


def test_queued_idle_is_the_largest_host_lead_of_the_recurrence():
    from trainsim.cost_models.host_issue import queued_idle_s

    for hf, hb, gf, gb, n in [(5, 10, 2, 12, 4), (9, 15, 1, 3, 4), (1, 2, 5, 5, 3), (4, 1, 1, 9, 8), (3, 3, 3, 3, 2)]:
        end = clock = 0.0
        for _ in range(n):   # E_p = max(E_{p-1} + g_p, H_p)
            for h, g in ((hf, gf), (hb, gb)):
                clock += h
                end = max(end + g, clock)
        assert queued_idle_s(hf, hb, gf, gb, n) == pytest.approx(end - n * (gf + gb))


def test_autocast_block_counts_match_the_counter():
    from trainsim.cost_models.host_issue import BLOCK_OPS_AUTOCAST
    from trainsim.kernels.op_count import STYLE_ARCH, count_block_ops_autocast, style_spec

    for style in STYLE_ARCH:
        assert count_block_ops_autocast(style_spec(style)) == BLOCK_OPS_AUTOCAST[style]


def test_chunk_fit_recovers_a_linear_host_model():
    from trainsim.kernels.host_issue_bench import LAYERS, chunk_issue_from_runs

    runs = {}
    for rc, per_b in (("none", 3e-3), ("full", 5e-3)):
        for n in LAYERS:
            runs[f"s|bf16|{rc}|{n}"] = {"tensors": 16 * n + 5, "fwd": [1e-3 + 2e-3 * n] * 3,
                                        "bwd": [4e-3 + per_b * n] * 3, "step": [5e-4 + 1e-5 * (16 * n + 5)] * 3}
    m = chunk_issue_from_runs(runs)["s+autocast-bf16"]
    assert (m.block_fwd_s, m.microbatch_fwd_s) == pytest.approx((2e-3, 1e-3))
    assert (m.block_bwd_s, m.microbatch_bwd_s, m.block_bwd_full_recompute_s) == pytest.approx((3e-3, 4e-3, 5e-3))
    assert (m.step_per_tensor_s, m.step_fixed_s) == pytest.approx((1e-5, 5e-4))


def test_profile_chunk_entries_come_from_the_raw_h200_timings():
    from trainsim.cost_models.profile import load_profile
    from trainsim.kernels.host_issue_bench import chunk_issue_from_runs

    raw = json.loads((bench.DATA / "host_issue_chunk_h200_raw.json").read_text())
    prof = load_profile(bench.DATA / "profile_h200.json")
    assert raw["device"] == "NVIDIA H200"
    assert chunk_issue_from_runs(raw["runs"]) == prof.host_issue_chunk


def test_eager_cross_entropy_bytes_are_its_kernels():
    from trainsim.cost_models import framework

    # .float() 2+4, log_softmax 4+4 | nll fill 4, log_softmax_backward 12, cast back 4+2
    assert framework.cross_entropy_bytes(False, 2, eager=True) == (14.0, 22.0)
    assert framework.eager_ce_cast_bytes(2) == (6.0, 6.0)
