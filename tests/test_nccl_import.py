"""nccl-tests import: text and -J JSON fixtures (built from nccl_busbw.csv rows) into profile collectives."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from trainsim.cli.main import main
from trainsim.cost_models.nccl_tests_import import (
    import_nccl_tests,
    parse_nccl_tests_file,
    parse_text,
    run_to_points,
)
from trainsim.cost_models.profile import load_profile, save_profile
from trainsim.data import validation_path
from trainsim.specs import SpecError

DATA = Path(__file__).parent / "data" / "nccl_tests"
H100_TXT = DATA / "all_reduce_perf_8xH100.txt"
A100_JSON = DATA / "all_reduce_perf_8xA100.json"
GB200_TXT = DATA / "4xGB200_allreduce_g4.txt"


def published(prefix: str) -> dict[int, float]:
    """size -> busbw GB/s of the measured_curve rows azure_ND_*_<label> in nccl_busbw.csv."""
    out = {}
    with open(validation_path("nccl_busbw.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r["row_id"].startswith(prefix) and r["record_type"] == "measured_curve":
                out[int(float(r["msg_size_bytes"]))] = float(r["busbw_GBps"])
    return out


def test_text_table_matches_published_curve():
    """Rows azure_ND_H100_v5_1K .. azure_ND_H100_v5_8G (Azure ND H100 v5, NCCL 2.18.5)."""
    (run,) = parse_nccl_tests_file(H100_TXT)
    assert run.op == "all_reduce" and run.group_size == 8 and run.nodes == 1
    assert run.nccl_version == "2.18.5" and run.iterations == 20
    assert run.device_names[0] == "NVIDIA H100 80GB HBM3"
    pub = published("azure_ND_H100_v5_")
    assert len(run.rows) == len(pub) == 24
    for row in run.rows:
        assert row.oop is not None and row.inp is not None
        assert row.inp[2] == pytest.approx(pub[row.size_bytes], abs=0.006)
        assert row.count == row.size_bytes // 4 and row.dtype == "float" and row.redop == "sum"
    assert run.rows[-1].inp[2] == pytest.approx(478.87)  # azure_ND_H100_v5_8G


def test_json_matches_published_curve():
    """Rows azure_ND_A100_v4_1K .. azure_ND_A100_v4_8G, as nccl-tests -J (file version 2) writes them."""
    (run,) = parse_nccl_tests_file(A100_JSON)
    assert run.op == "all_reduce" and run.group_size == 8 and run.nodes == 1 and run.nccl_version == "2.18.5"
    pub = published("azure_ND_A100_v4_")
    assert {r.size_bytes for r in run.rows} == set(pub)
    for row in run.rows:
        assert row.oop[2] == pytest.approx(pub[row.size_bytes], abs=1e-6)
        # time = size / algbw, as nccl-tests computes algbw
        assert row.oop[0] * 1e-6 == pytest.approx(row.size_bytes / (row.oop[1] * 1e9), rel=1e-5)


def test_points_convert_units_and_keep_busbw():
    (run,) = parse_nccl_tests_file(H100_TXT)
    pts = run_to_points(run)
    big = max(pts, key=lambda p: p.size_bytes)
    assert big.size_bytes == 8589934592 and not big.in_place
    assert big.busbw_Bps == pytest.approx(478.87e9, rel=2e-3)  # recomputed from the parsed time
    assert big.stats.median_s == pytest.approx(31391.4e-6)
    assert all(p.group_size == 8 and p.nodes == 1 and p.source == "nccl-tests" for p in pts)


def test_fit_on_large_messages_reaches_published_peak():
    """alpha/beta fitted on >= 256 MiB: asymptotic busbw within 6% of the 8 GiB point (478.87 GB/s)."""
    prof = import_nccl_tests([H100_TXT], min_size_bytes=2 ** 28)
    (fit,) = prof.collective_fits
    assert (fit.op, fit.group_size, fit.nodes, fit.source) == ("all_reduce", 8, 1, "nccl-tests")
    assert fit.busbw_Bps == pytest.approx(478.87e9, rel=0.06)
    assert fit.alpha_s > 0
    # Whole-curve fit is still a usable model: predicted 1 MiB time within 2x of the measured 41.99 us.
    whole = import_nccl_tests([H100_TXT]).collective_fits[0]
    assert 0.5 < whole.time_s(1048576) / 41.99e-6 < 2.0


def test_program_unknown_needs_op_flag():
    """The older-format file has no program line and no program name in its file name."""
    with pytest.raises(SpecError, match="--nccl-op"):
        import_nccl_tests([GB200_TXT])
    prof = import_nccl_tests([GB200_TXT], op="allreduce")
    (fit,) = prof.collective_fits
    assert fit.group_size == 4  # one process driving 4 GPUs (-g 4): four "# Rank" lines
    pub = published("azure_ND_GB200_v6_")
    assert max(p.busbw_Bps for p in prof.collective_points) == pytest.approx(max(pub.values()) * 1e9, rel=2e-3)


def test_group_size_inferred_from_busbw_ratio(tmp_path):
    text = "\n".join(ln for ln in H100_TXT.read_text().splitlines() if "Rank" not in ln)
    f = tmp_path / "all_reduce_perf.txt"
    f.write_text(text)
    (run,) = parse_nccl_tests_file(f)
    assert run.group_size is None
    pts = run_to_points(run)
    assert {p.group_size for p in pts} == {8}


def test_wrong_group_size_is_caught():
    (run,) = parse_nccl_tests_file(H100_TXT)
    with pytest.raises(SpecError, match="contradicts .* 8 ranks"):  # the file's 8 '# Rank' lines
        run_to_points(run, group_size=4)
    run.hosts.clear()  # without rank lines, the busbw/algbw factor still catches it
    with pytest.raises(SpecError, match="factor"):
        run_to_points(run, group_size=4)


def test_nodes_contradicting_the_hosts_are_refused():
    (run,) = parse_nccl_tests_file(H100_TXT)
    assert run.nodes == 1
    with pytest.raises(SpecError, match="nccl_nodes: 3 contradicts .* 1 host"):
        run_to_points(run, nodes=3)
    assert {p.nodes for p in run_to_points(run, nodes=1)} == {1}


@pytest.mark.parametrize("text, fragment", [
    ("hello world\n", "no result rows"),
    ("        1024   256  float  sum  -1  1.0  1.0  1.0  0\n", "before the column header"),
    ("#  size  count  type  redop  root  time  algbw  busbw  #wrong\n 1024 256 float sum -1 abc 1 1 0\n",
     "expected a number"),
])
def test_bad_text_is_spec_error(text, fragment):
    with pytest.raises(SpecError) as e:
        parse_text(text, "x.txt")
    assert e.value.field == "nccl-tests" and fragment in str(e.value)


def _json_row(**oop) -> dict:
    """One nccl-tests -J result of 1 MiB on 8 ranks, consistent (algbw = size / time) unless ``oop`` says else."""
    size, time_us = 2**20, 10.0
    algbw = size / (time_us * 1e3)
    return {"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1,
            "out_of_place": {"time": time_us, "alg_bw": algbw, "bus_bw": algbw * 1.75, "nwrong": 0, **oop}}


@pytest.mark.parametrize("row, fragment", [
    ({**_json_row(nwrong=5)}, "5 wrong elements"),
    ({**_json_row(), "size": True}, "not true/false"),
    (_json_row(time=1e-30), "not its size over its time"),     # algbw as printed, time impossible
    (_json_row(time=10.0, alg_bw=1.0, bus_bw=1.75), "not its size over its time"),
    (_json_row(time=1e-6, alg_bw=2**20 / 1e-3, bus_bw=1.75 * 2**20 / 1e-3), "beyond any link"),
])
def test_json_rows_that_are_no_measurement_are_refused(tmp_path, row, fragment):
    """What the text path refuses (#wrong > 0) and what no run prints (a boolean size, an algbw that is not size
    over time, a bus bandwidth beyond any link) are refused in -J JSON too, naming the row."""
    f = tmp_path / "all_reduce_perf.json"
    f.write_text(json.dumps({"version": 2, "args": ["all_reduce_perf"], "results": [row]}))
    with pytest.raises(SpecError, match=fragment):
        (run,) = parse_nccl_tests_file(f)
        run_to_points(run, group_size=8, nodes=1)


def test_a_cpu_time_run_is_refused(tmp_path):
    """nccl-tests -C 1 prints the host's launch time in the time column (its algbw stays the GPU time's): there is
    no collective time to fit, in text or -J JSON."""
    text = (DATA / "all_reduce_perf_8xH100.txt").read_text()
    header = next(ln for ln in text.splitlines() if "busbw" in ln and ln.lstrip("# ").startswith("size"))
    f = tmp_path / "all_reduce_perf.txt"
    f.write_text(text.replace(header, header.replace("  time", "cputime")))
    with pytest.raises(SpecError, match="-C 1 run prints the CPU launch time"):
        parse_nccl_tests_file(f)
    row = _json_row()
    row["out_of_place"]["cpu_time"] = row["out_of_place"].pop("time")
    j = tmp_path / "all_reduce_perf.json"
    j.write_text(json.dumps({"version": 2, "args": ["all_reduce_perf"], "results": [row]}))
    with pytest.raises(SpecError, match="-C 1 run prints the CPU launch time"):
        parse_nccl_tests_file(j)


def test_an_op_flag_contradicting_the_files_collective_is_refused():
    """The file says all_reduce ('# Collective test starting' / its -J args): --nccl-op all_gather is refused."""
    (run,) = parse_nccl_tests_file(A100_JSON)
    with pytest.raises(SpecError, match="nccl_op: all_gather contradicts"):
        run_to_points(run, op="all_gather")


def test_bad_json_is_spec_error(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"version": 2, "results": [{"count": 3}]}))
    with pytest.raises(SpecError, match="size"):
        parse_nccl_tests_file(f)
    f.write_text("{broken")
    with pytest.raises(SpecError, match="not valid JSON"):
        parse_nccl_tests_file(f)


def test_cli_import_and_merge(tmp_path, capsys):
    out1 = tmp_path / "h100.json"
    assert main(["calibrate", "--import-nccl-tests", str(H100_TXT), "--out", str(out1)]) == 0
    p1 = load_profile(out1)
    assert p1.collective("all_reduce", 8, 1) is not None and p1.fingerprint.nccl_version == "2.18.5"
    # Merge a second op into it; the first survives.
    out2 = tmp_path / "merged.json"
    code = main(["calibrate", "--import-nccl-tests", str(GB200_TXT), "--nccl-op", "all_reduce",
                 "--out", str(out2), "--merge-into", str(out1)])
    assert code == 0
    p2 = load_profile(out2)
    assert p2.collective("all_reduce", 8, 1) == p1.collective("all_reduce", 8, 1)
    assert p2.collective("all_reduce", 4, 1) is not None
    assert "all_reduce" in capsys.readouterr().out


def test_cli_import_bad_input_exits_2(tmp_path, capsys):
    assert main(["calibrate", "--import-nccl-tests", str(tmp_path / "missing.txt"), "--out",
                 str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: nccl-tests") and "no such file" in err[0]
    assert main(["calibrate", "--import-nccl-tests", str(GB200_TXT), "--out", str(tmp_path / "o.json")]) == 2
    assert main(["calibrate", "--import-nccl-tests", str(H100_TXT), "--out", str(tmp_path / "no" / "o.json")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["calibrate", "--import-nccl-tests", str(H100_TXT), "--out", str(tmp_path / "o.json"),
                 "--merge-into", str(bad)]) == 2
    assert "calibration" in capsys.readouterr().err


def test_saved_import_round_trips(tmp_path):
    prof = import_nccl_tests([A100_JSON, H100_TXT])
    path = save_profile(prof, tmp_path / "c.json")
    assert load_profile(path).model_copy(update={"source_path": None}) == prof


def test_collective_with_a_calibration_refuses_a_forced_algorithm(tmp_path, capsys):
    """A measured fit has no NCCL algorithm or protocol: forcing one beside it is refused, not half-applied."""
    prof = tmp_path / "h100.json"
    assert main(["calibrate", "--import-nccl-tests", str(H100_TXT), "--out", str(prof)]) == 0
    capsys.readouterr()
    base = ["collective", "--op", "all_reduce", "--cluster", "dgx-h100", "--gpus", "8", "--sizes", "1M",
            "--calibration", str(prof), "--json"]
    assert main(base) == 0
    measured = json.loads(capsys.readouterr().out)
    for extra in (["--algo", "ring"], ["--protocol", "LL"]):
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: calibration:")
    assert main(base[:-3] + ["--json", "--protocol", "LL"]) == 0  # without the profile: the model, forced
    assert json.loads(capsys.readouterr().out)[0]["time_s"] != measured[0]["time_s"]


@pytest.mark.parametrize("gpus, tp, noted", [(16, 8, False), (16, 1, True), (1, 1, False)])
def test_predict_names_a_profile_whose_collectives_fit_none_of_its_groups(tmp_path, capsys, gpus, tp, noted):
    """A measured fit applies to its exact op, group size and node count: the H100 import (8 ranks on 1 node) times
    the TP group of tp 8 on 16 GPUs, but none of tp 1's groups (dp over 16 ranks on 2 nodes), where every
    collective uses the modelled links and the prediction says so; one GPU runs no collective: no note."""
    prof = tmp_path / "h100.json"
    assert main(["calibrate", "--import-nccl-tests", str(H100_TXT), "--out", str(prof)]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", str(gpus), "--tp", str(tp),
                 "--global-batch", "64", "--seq-len", "2048", "--calibration", str(prof), "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    named = [w for w in warnings if w.startswith("calibration: its collectives were measured on 8 ranks/1 node")]
    assert bool(named) == noted
