"""Calibration profile format: round trip, schema/corruption errors, queries against closed forms."""

from __future__ import annotations

import csv
import json
import math

import pytest

from trainsim.cost_models.kernel_work import attention_flops, gemm_bytes
from trainsim.cost_models.profile import (
    PROFILE_SCHEMA_VERSION,
    AttentionPoint,
    BandwidthPoint,
    CalibrationProfile,
    CollectiveFit,
    CollectivePoint,
    Fingerprint,
    GemmPoint,
    LinearFit,
    Stats,
    ThreeTermFit,
    busbw_factor,
    canonical_op,
    describe,
    load_profile,
    merge_collectives,
    save_profile,
)
from trainsim.data import validation_path
from trainsim.specs import SpecError


def st(t: float, reps: int = 5) -> Stats:
    return Stats(min_s=t * 0.9, median_s=t, p99_s=t * 1.2, reps=reps)


def full_profile() -> CalibrationProfile:
    """A profile with every section filled (numbers are arbitrary but consistent)."""
    return CalibrationProfile(
        fingerprint=Fingerprint(device="cpu", device_name="Test CPU", device_count=2, world_size=2, backend="gloo",
                                torch_version="2.13.0+cpu", hostname="h1", date="2026-01-01T00:00:00+00:00",
                                env={"OMP_NUM_THREADS": "1"}),
        reference_peak_flops={"fp32": 200e9},
        reference_preset="cpu",
        gemm_points=[GemmPoint(m=64, n=64, k=64, dtype="fp32", label="x", stats=st(1e-5), achieved_flops=5e10)],
        gemm_fits={"fp32": ThreeTermFit(overhead_s=2e-6, flops_per_s=160e9, bytes_per_s=20e9, rms_rel_error=0.05,
                                        n_points=10)},
        attention_points=[AttentionPoint(batch=1, heads=2, seq_q=128, seq_kv=128, dhead=64, dtype="fp32",
                                         pass_="fwd", stats=st(1e-4), achieved_flops=4e10)],
        attention_fits={"fp32/fwd": ThreeTermFit(overhead_s=0.0, flops_per_s=80e9, rms_rel_error=0.1, n_points=5)},
        memory_points=[BandwidthPoint(op="gelu", nbytes=1e4, stats=st(2e-6), bw_Bps=5e9),
                       BandwidthPoint(op="gelu", nbytes=1e6, stats=st(50e-6), bw_Bps=2e10),
                       BandwidthPoint(op="add", nbytes=1e4, stats=st(1e-6), bw_Bps=1e10),
                       BandwidthPoint(op="add", nbytes=1e6, stats=st(20e-6), bw_Bps=5e10),
                       BandwidthPoint(op="gelu_bwd", nbytes=1e4, stats=st(4e-6), bw_Bps=2.5e9),
                       BandwidthPoint(op="gelu_bwd", nbytes=1e6, stats=st(100e-6), bw_Bps=1e10)],
        memory_fits={"all": LinearFit(alpha_s=1e-6, bw_Bps=3e10, rms_rel_error=0.2, n_points=4)},
        dispatch_overhead=st(3e-6, 50),
        collective_points=[CollectivePoint(op="all_reduce", group_size=2, size_bytes=1 << 20, stats=st(1e-3),
                                           algbw_Bps=1.05e9, busbw_Bps=1.05e9)],
        collective_fits=[CollectiveFit(op="all_reduce", group_size=2, alpha_s=100e-6, beta_s_per_byte=1e-9,
                                       busbw_Bps=1e9, rms_rel_error=0.1, n_points=5),
                         CollectiveFit(op="all_gather", group_size=8, nodes=2, alpha_s=30e-6, beta_s_per_byte=2e-11,
                                       busbw_Bps=0.875 / 2e-11, rms_rel_error=0.1, n_points=5)],
        notes=["test"],
    )


def test_round_trip_is_exact(tmp_path):
    p = full_profile()
    path = save_profile(p, tmp_path / "p.json")
    q = load_profile(path)
    assert q.source_path == str(path)
    assert q.model_copy(update={"source_path": None}) == p
    assert "source_path" not in json.loads(path.read_text())
    # Saving what was loaded gives the same bytes.
    save_profile(q, tmp_path / "q.json")
    assert (tmp_path / "q.json").read_text() == path.read_text()


def test_describe_names_path_and_fingerprint(tmp_path):
    path = save_profile(full_profile(), tmp_path / "p.json")
    text = load_profile(path).describe()
    assert str(path) in text and "Test CPU" in text and "gloo" in text and "2 ranks" in text
    assert describe(None) == "defaults"


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d.update(schema_version=PROFILE_SCHEMA_VERSION + 1), "schema_version"),
    (lambda d: d.pop("schema_version"), "schema_version"),
    (lambda d: d.update(kind="something-else"), "not a trainsim calibration profile"),
    (lambda d: d["gemm_fits"]["fp32"].update(flops_per_s=-1.0), "gemm_fits"),
    (lambda d: d.update(unexpected_field=1), "unexpected_field"),
    (lambda d: d["collective_fits"][0].pop("alpha_s"), "alpha_s"),
])
def test_bad_profiles_are_spec_errors(tmp_path, mutate, fragment):
    data = json.loads(save_profile(full_profile(), tmp_path / "p.json").read_text())
    mutate(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(SpecError) as e:
        load_profile(bad)
    assert e.value.field.startswith("calibration")
    assert fragment in str(e.value)


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"kind": "trainsim-calibration-profile", "schema_version": 1, "reference_peak_flops": {"fp32": NaN}}',
     "non-finite"),
    ('{"kind": "trainsim-calibration-profile", "schema_version": 1, "reference_peak_flops": {"fp32": Infinity}}',
     "non-finite"),
    ("", "not valid JSON"),
])
def test_corrupt_files_are_spec_errors(tmp_path, text, fragment):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(SpecError) as e:
        load_profile(bad)
    assert e.value.field == "calibration" and fragment in str(e.value)


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_profile(tmp_path / "nope.json")
    b = tmp_path / "bin.json"
    b.write_bytes(b"\x80\x81\xfe\xff" * 10)
    with pytest.raises(SpecError, match="cannot read"):
        load_profile(b)


def test_gemm_queries_follow_the_three_term_model():
    p = full_profile()
    m, n, k = 512, 1024, 256
    flops = 2.0 * m * n * k
    expect = 2e-6 + flops / 160e9 + gemm_bytes(m, n, k, "fp32") / 20e9
    assert gemm_bytes(m, n, k, "fp32") == 4 * (m * k + k * n + m * n)
    assert p.gemm_time_s(m, n, k, "fp32") == pytest.approx(expect, rel=1e-12)
    assert p.gemm_efficiency(m, n, k, "fp32") == pytest.approx(flops / expect / 200e9, rel=1e-12)
    # Relative to another peak (the caller's GPUSpec): same achieved rate, other denominator.
    assert p.gemm_efficiency(m, n, k, "fp32", peak_flops=100e9) == pytest.approx(flops / expect / 100e9)
    # Efficiency rises with size towards e_max = 160/200.
    effs = [p.gemm_efficiency(s, s, s, "fp32") for s in (64, 256, 1024, 8192, 65536)]
    assert effs == sorted(effs) and effs[-1] < 0.8 and effs[-1] > 0.75
    assert p.gemm_time_s(m, n, k, "bf16") is None and p.gemm_efficiency(m, n, k, "bf16") is None


def test_attention_queries():
    p = full_profile()
    fl = attention_flops(2, 8, 512, 512, 64, causal=True, pass_="fwd")
    assert fl == 4 * 2 * 8 * 512 * 512 * 64 * 0.5
    assert attention_flops(2, 8, 512, 512, 64, causal=True, pass_="bwd") == 2.5 * fl
    t = p.attention_time_s(2, 8, 512, 512, 64, "fp32", causal=True, pass_="fwd")
    assert t == pytest.approx(fl / 80e9)
    assert p.attention_efficiency(2, 8, 512, 512, 64, "fp32") == pytest.approx(80e9 / 200e9)
    assert p.attention_time_s(2, 8, 512, 512, 64, "fp32", pass_="bwd") is None


def test_memory_interpolation_floor_and_extrapolation():
    p = full_profile()
    # Log-log midpoint between (1e4, 2e-6) and (1e6, 50e-6) is sqrt of the product.
    assert p.memory_time_s(1e5, "gelu") == pytest.approx(math.sqrt(2e-6 * 50e-6), rel=1e-12)
    assert p.memory_time_s(10.0, "gelu") == pytest.approx(2e-6)      # dispatch floor below the range
    assert p.memory_time_s(4e6, "gelu") == pytest.approx(4 * 50e-6)  # largest point's bandwidth above
    # Backward kernel measured separately; 'add' has no backward, so its forward curve is used.
    assert p.memory_time_s(1e6, "gelu", "bwd") == pytest.approx(100e-6)
    assert p.memory_time_s(1e6, "add", "bwd") == pytest.approx(20e-6)
    # Families: "elementwise" is the median of gelu/add/copy that were measured (here gelu, add).
    assert p.memory_time_s(1e6, "elementwise") == pytest.approx(0.5 * (50e-6 + 20e-6))
    assert p.memory_bw_Bps("gelu") == pytest.approx(1e6 / 50e-6)
    assert p.kernel_overhead_s() == pytest.approx(3e-6)
    assert CalibrationProfile().memory_time_s(1e6) is None
    assert CalibrationProfile().kernel_overhead_s() is None


def test_collective_queries_and_aliases():
    p = full_profile()
    assert p.collective("allreduce", 2) == (100e-6, 1e-9)
    assert p.collective("all_reduce", 4) is None
    assert p.collective("all_gather_into_tensor", 8, 2) == (30e-6, 2e-11)
    assert p.collective("all_gather", 8, 1) is None
    assert p.collective_fit("all_gather", 16, 2, nearest=True).group_size == 8
    assert p.collective_time_s("all_reduce", 1e6, 2) == pytest.approx(100e-6 + 1e-3)
    with pytest.raises(SpecError):
        canonical_op("gatherv")


def test_busbw_factors_match_nccl_tests_definitions():
    """nccl_busbw.csv definition rows (def_AllReduce, def_AllGather, ...) give nccl-tests' factors."""
    with open(validation_path("nccl_busbw.csv"), newline="") as f:
        rows = {r["row_id"]: r for r in csv.DictReader(f)}
    formulas = {"2*(n-1)/n": lambda n: 2 * (n - 1) / n, "(n-1)/n": lambda n: (n - 1) / n, "1": lambda n: 1.0}
    for row_id, op in (("def_AllReduce", "all_reduce"), ("def_AllGather", "all_gather"),
                       ("def_ReduceScatter", "reduce_scatter"), ("def_AlltoAll", "all_to_all"),
                       ("def_Broadcast", "broadcast")):
        f = formulas[rows[row_id]["busbw_factor"].strip()]
        for n in (2, 3, 8, 64):
            assert busbw_factor(op, n) == pytest.approx(f(n)), (row_id, n)
    assert busbw_factor("send_recv", 2) == 1.0


def test_merge_replaces_only_same_group_shape():
    p = full_profile()
    new = CollectiveFit(op="all_reduce", group_size=2, alpha_s=5e-6, beta_s_per_byte=2e-12, busbw_Bps=5e11,
                        rms_rel_error=0.0, n_points=3, source="nccl-tests")
    q = merge_collectives(p, [], [new], note="merged")
    assert q.collective("all_reduce", 2) == (5e-6, 2e-12)
    assert q.collective("all_gather", 8, 2) == (30e-6, 2e-11)
    assert q.collective_points == []  # the old all_reduce/2 points went with their fit
    assert q.notes[-1] == "merged" and q.gemm_fits == p.gemm_fits
