"""Cells of a run table (`validate --dataset PATH`, `calibrate --from-runs PATH.csv`) that were replaced by a
default without a word: seq_len 'abc' or 2048.5 was costed at 2,048 tokens, vocab and ffn_hidden text at 51,200
and 4h, gpus_per_node text at the preset's node; precision 'fp7' was costed as bf16 and 'ZeRO-5' as no sharding.
Each row is now skipped naming the column (and refused by calibrate --from-runs); empty cells still take their
documented defaults."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli

SC21 = REPO / "trainsim" / "data" / "validation" / "megatron_sc21_table1.csv"


def _table(tmp_path: Path, column: str, value: str) -> tuple[Path, str]:
    rows = list(csv.DictReader(SC21.open(encoding="utf-8")))[:2]
    rows[0][column] = value
    f = tmp_path / "runs.csv"
    with f.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return f, rows[0]["row_id"]


@pytest.mark.parametrize("column, value", [
    ("seq_len", "abc"), ("seq_len", "2048.5"), ("seq_len", "2k"), ("vocab", "fifty thousand"), ("vocab", "51200.5"),
    ("ffn_hidden", "4h"), ("gpus_per_node", "eight"), ("precision", "fp7"), ("precision", "float4"),
    ("zero_or_sharding", "ZeRO-5"), ("zero_or_sharding", "ZeRO stage 12"),
])
def test_a_cell_that_states_no_usable_value_skips_its_row(tmp_path, column, value):
    f, rid = _table(tmp_path, column, value)
    r = run_cli(["validate", "--dataset", f, "--json"])
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    skipped = {s["row_id"]: s["reason"] for s in doc["skipped"]}
    assert column in skipped.get(rid, ""), skipped
    assert rid not in {row["row_id"] for row in doc["rows"]}
    r = run_cli(["calibrate", "--from-runs", f, "--no-loo", "--out", tmp_path / "p.json"])
    assert r.code == 2 and len(r.err_lines) == 1 and column in r.err, r.err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("column, value", [("seq_len", ""), ("seq_len", "not stated"), ("seq_len", "2,048"),
                                           ("seq_len", "2048.0"), ("vocab", "n/a"), ("ffn_hidden", ""),
                                           ("zero_or_sharding", "ZeRO-0"), ("precision", "FP16 mixed precision")])
def test_an_unstated_or_plainly_written_cell_is_read_as_before(tmp_path, column, value):
    """Empty or 'not stated' takes the column's default (seq_len 2,048 here, as the row states); '2,048' and
    '2048.0' are 2,048: the row predicts what the bundled row predicts."""
    base = run_cli(["validate", "--dataset", _table(tmp_path, "description", "same")[0], "--json"])
    r = run_cli(["validate", "--dataset", _table(tmp_path, column, value)[0], "--json"])
    assert r.code == base.code == 0, r.err
    assert [x["predicted"] for x in json.loads(r.out)["rows"]] == [x["predicted"] for x in json.loads(base.out)["rows"]]


@pytest.mark.parametrize("value", ["4,096", "4096.0", " 4096 "])
def test_a_sequence_length_written_with_a_separator_or_a_point_is_that_length(tmp_path, value):
    """'4,096', '4096.0' and ' 4096 ' read as 4,096 tokens -- not the 2,048 default the SC21 row would give: the
    row predicts what the same row with 4096 predicts, and not what it predicts at 2,048."""
    plain = run_cli(["validate", "--dataset", _table(tmp_path, "seq_len", "4096")[0], "--json"])
    written = run_cli(["validate", "--dataset", _table(tmp_path, "seq_len", value)[0], "--json"])
    default = run_cli(["validate", "--dataset", _table(tmp_path, "seq_len", "")[0], "--json"])
    first = [json.loads(x.out)["rows"][0]["predicted"] for x in (plain, written, default)]
    assert first[0] == first[1] != first[2]


@pytest.mark.parametrize("value, said", [("sc21_t1_2", "at row 3 repeats row 2"), ("", "empty row_id"),
                                         ("  ", "empty row_id")])
def test_a_row_id_given_twice_or_empty_is_refused(tmp_path, value, said):
    """Rows are told apart by row_id (validate's rows and skips, calibrate's fitted runs): a repeated or empty one
    was accepted, two results under one name."""
    f, _ = _table(tmp_path, "row_id", value)  # the first row takes the second row's id, or none
    for argv in (["validate", "--dataset", f], ["calibrate", "--from-runs", f, "--out", tmp_path / "p.json"]):
        r = run_cli(argv)
        assert r.code == 2 and len(r.err_lines) == 1 and said in r.err and "dataset" in r.err, r.err


def test_a_cluster_for_csv_runs_only_is_refused(tmp_path):
    """--cluster names the GPU of log files; with CSV runs only it was ignored without a word."""
    f, _ = _table(tmp_path, "description", "same")
    r = run_cli(["calibrate", "--from-runs", f, "--cluster", "dgx-h100", "--no-loo", "--out", tmp_path / "p.json"])
    assert r.code == 2 and len(r.err_lines) == 1 and r.err.startswith("error: cluster:"), r.err
    assert run_cli(["calibrate", "--from-runs", f, "--no-loo", "--out", tmp_path / "p.json"]).code == 0
