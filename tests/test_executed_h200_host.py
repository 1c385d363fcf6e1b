"""The host's issue time on two H200 leases (benchmarks/data/executed_h200.jsonl: lease 1,
executed_h200_host.jsonl: lease 2, whose records carry ``host_phases_median_s``) against the engine's host-issue
model, and the prediction interval's host term (validation/host_band.py) against the two leases' repeated lines."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_executed_h200", ROOT / "benchmarks" / "bench_executed_h200.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# Repeated records outside the 80 % interval, with the band each is held to instead (error % of the prediction):
# - lease 1 l2048_mb1 (executed_h200.jsonl line 13): 0.156 s, below the predicted GPU work alone (0.167 s), so no
#   host speed reaches it; the Llama-style GPU time at micro-batch 1 is over-predicted (docs/execute.md).
# The GPU-bound lines (g1024_mb8, g2048_mb1, g2048_mb2_full) are inside since the device costs leave the profile's
# timed-call host floor out (CalibrationProfile.floor_is_host) and count autocast's activation casts (flops.py).
OUTSIDE = {("lease 1", "l2048_mb1"): (40.0, 60.0)}


def _records(lease: str) -> dict[str, dict]:
    return {r["sweep_name"]: r for r in bench.untraced_records(bench.LEASES[lease])}


def _host_bound(rec: dict) -> bool:
    host, dev = rec["measured"]["ranks"][0]["host_phases_median_s"], rec["measured"]["phases_s"]
    return all(host[k] >= bench.HOST_BOUND_RATIO * dev[k] for k in ("forward_s", "backward_s"))


@pytest.fixture(scope="module")
def leases():
    from trainsim.cost_models.profile import load_profile

    profile = load_profile(bench.DATA / "profile_h200.json")
    return {k: bench.rows(bench.untraced_records(p), profile) for k, p in bench.LEASES.items()}


def test_host_sigma_is_the_host_bound_repeated_lines_of_the_two_leases():
    from trainsim.validation.host_band import host_log_sigma, lease_pairs

    one, two = _records("lease 1"), _records("lease 2")
    repeated = sorted(set(one) & set(two))
    assert len(repeated) == 11
    pairs = {n: math.log(two[n]["measured"]["step_time_s"] / one[n]["measured"]["step_time_s"]) for n in repeated}
    bound = {n: r for n, r in pairs.items() if _host_bound(two[n])}
    assert sorted(bound) == ["g1024_mb1", "g1024_mb2", "g2048_mb2_full", "l2048_mb1", "l2048_mb2_full"]
    assert lease_pairs() == bound   # exact: the bundled table carries the records' own floats
    assert host_log_sigma() == pytest.approx(0.1994, abs=1e-4)
    # the GPU-bound repeated lines differ by at most 5.1 % between the leases (host_band's module doc)
    assert max(abs(r) for n, r in pairs.items() if n not in bound) < math.log(1.051)


def test_bundled_lease_table_is_the_record_files_rows():
    """trainsim/data/host_lease_pairs.csv is what benchmarks/host_lease_pairs.py writes from the two lease files,
    and each row's record reference points at that line of its file."""
    import csv

    from trainsim.validation.host_band import LEASE_COLUMNS, lease_pairs_path

    spec = importlib.util.spec_from_file_location("host_lease_pairs", ROOT / "benchmarks" / "host_lease_pairs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with lease_pairs_path().open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == LEASE_COLUMNS
        bundled = list(reader)
    assert bundled == [{k: str(v) for k, v in r.items()} for r in gen.pair_rows()]
    for row in bundled:
        for lease in ("lease1", "lease2"):
            path, line = row[f"{lease}_record"].rsplit(":", 1)
            rec = json.loads((ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1])
            assert rec["sweep_name"] == row["sweep_name"] and not rec.get("traced")
            assert float(row[f"{lease}_step_time_s"]) == rec["measured"]["step_time_s"]


def test_every_repeated_record_of_both_leases_is_inside_its_interval_or_a_stated_band(leases):
    one, two = ({r["name"]: r for r in leases[k]} for k in ("lease 1", "lease 2"))
    repeated = set(one) & set(two)
    for lease, rows in (("lease 1", one), ("lease 2", two)):
        for name in sorted(repeated):
            r = rows[name]
            lo, hi = r["interval_s"]
            if (lease, name) in OUTSIDE:
                a, b = OUTSIDE[lease, name]
                assert not lo <= r["measured_s"] <= hi and a <= r["error_pct"] <= b, (lease, name, r)
                continue
            assert lo <= r["measured_s"] <= hi, (lease, name, r["measured_s"], r["interval_s"])


def test_host_bound_lines_of_lease_2_are_inside_their_interval(leases):
    bound = [r for r in leases["lease 2"] if r["host_bound"]]
    assert len(bound) == 9
    for r in bound:
        assert r["interval_s"][0] <= r["measured_s"] <= r["interval_s"][1], r["name"]


def test_host_issue_model_on_the_host_bound_phases(leases):
    """Where the device time of a phase equals its host's (host-bound), the host's measured issue time is the
    model's quantity: forward centred (steady autocast forward from the plain one), backward over by a stated
    margin (the profile's Llama-style autocast backward, 2.07 ms a block against 0.86 ms without autocast)."""
    bound = [r for r in leases["lease 2"] if r["host_bound"]]
    err = {k: [100 * (r["host_pred"][k] / r["host_meas"][k] - 1) for r in bound] for k in ("forward_s", "backward_s")}
    assert abs(statistics.fmean(err["forward_s"])) < 10 and max(map(abs, err["forward_s"])) < 30
    assert 5 < statistics.fmean(err["backward_s"]) < 25 and -15 < min(err["backward_s"]) and max(err["backward_s"]) < 40


def test_steady_autocast_forward_is_the_plain_forward_at_the_steady_op_count():
    from trainsim.cost_models.host_issue import (
        BLOCK_OPS,
        BLOCK_OPS_AUTOCAST,
        op_seconds,
        steady_autocast_fwd_s,
    )
    from trainsim.cost_models.profile import ChunkHostIssue

    def chunk(fwd):
        return ChunkHostIssue(layers=(2, 8), block_fwd_s=fwd, block_bwd_s=0, block_bwd_full_recompute_s=0,
                              microbatch_fwd_s=0, microbatch_bwd_s=0, step_per_tensor_s=0, step_fixed_s=0, reps=1)

    d, k = op_seconds()
    style = "layernorm-gelu-learned"
    f_ops, f_k, s_ops, s_k = BLOCK_OPS_AUTOCAST[style]
    p_ops, p_k = BLOCK_OPS[style][:2]
    steady = s_ops * d + s_k * k
    plain = p_ops * d + p_k * k
    assert steady_autocast_fwd_s(style, chunk(1e-3), chunk(3e-4)) == pytest.approx(3e-4 * steady / plain)
    assert steady_autocast_fwd_s(style, chunk(1e-3), None) == pytest.approx(1e-3 * steady / (f_ops * d + f_k * k))
    assert steady_autocast_fwd_s(style, chunk(1e-4), chunk(3e-4)) == 1e-4   # never above the casting forward


def test_host_offsets_follow_the_slower_of_gpu_and_host():
    from statistics import NormalDist

    from trainsim.validation.host_band import host_offsets, widen

    z = NormalDist().inv_cdf(0.9)
    assert host_offsets(1.0, 0.0, 0.1, 0.8, sigma=0.2) == (0.0, 0.0)               # GPU-bound: the host is hidden
    lo, hi = host_offsets(1.0, 0.9, 1.0, 0.8, sigma=0.2)                             # host-bound: +- z sigma
    assert (lo, hi) == pytest.approx((-z * 0.2, z * 0.2))
    lo, hi = host_offsets(1.0, 0.1, 0.8, 0.8, sigma=0.2)                             # GPU 0.9 s, host 0.8 s
    assert lo == pytest.approx(0.0) and hi == pytest.approx(math.log(0.8 * math.exp(z * 0.2) / 0.9))
    assert widen(-0.1, 0.3, (-0.3, 0.4)) == pytest.approx((0.1 - math.hypot(0.2, 0.3), 0.1 + math.hypot(0.2, 0.4)))


def test_interval_says_why_it_is_wider_only_where_the_host_matters():
    from trainsim.cost_models.profile import load_profile
    from trainsim.simulator.predict import predict
    from trainsim.validation.intervals import interval_for

    profile = load_profile(bench.DATA / "profile_h200.json")
    recs = _records("lease 2")
    notes = {}
    for name in ("g1024_mb1", "g4096_mb1"):
        sc = bench.executed_scenario(recs[name])
        p = predict(sc, profile=profile)
        iv = interval_for(p.step_time_s, p.tokens_per_s, p.mfu, sc, profile, 0.8,
                          breakdown=p.breakdown_s)
        notes[name] = [r for r in iv.reasons if "host's issue time" in r]
    assert len(notes["g1024_mb1"]) == 1 and notes["g4096_mb1"] == []
    assert json.dumps(notes)   # plain strings, as the --json output carries them
