"""nccl-tests output whose own data check failed -- a row with #wrong > 0, or the summary line 'Out of bounds values
: N FAILED' -- was fitted as a measurement of the collective. Both are refused naming the line."""

from __future__ import annotations

import pytest
from conftest import NCCL_H100, assert_refused, run_cli

TEXT = NCCL_H100.read_text()


def _row_1m(text: str) -> tuple[list[str], int]:
    lines = text.splitlines()
    return lines, next(j for j, ln in enumerate(lines) if ln.split()[:1] == ["1048576"])


@pytest.mark.parametrize("edit", ["out_of_place", "in_place", "footer"])
def test_a_run_that_failed_its_data_check_is_refused(tmp_path, edit):
    lines, j = _row_1m(TEXT)
    if edit == "footer":
        lines.append("# Out of bounds values : 3 FAILED")
    else:
        toks = lines[j].split()
        toks[8 if edit == "out_of_place" else 12] = "2"
        lines[j] = "  ".join(toks)
    f = tmp_path / "all_reduce_perf.txt"
    f.write_text("\n".join(lines) + "\n")
    r = run_cli(["calibrate", "--import-nccl-tests", f, "--out", tmp_path / "p.json"])
    assert_refused(r, "nccl-tests: ")
    assert "line" in r.err and not (tmp_path / "p.json").exists()


def test_a_passed_check_and_an_unchecked_run_import(tmp_path):
    lines, j = _row_1m(TEXT)
    toks = lines[j].split()
    toks[8] = toks[12] = "N/A"  # nccl-tests -c 0: no data check
    lines[j] = "  ".join(toks)
    f = tmp_path / "all_reduce_perf.txt"
    f.write_text("\n".join(lines) + "\n# Out of bounds values : 0 OK\n")
    assert run_cli(["calibrate", "--import-nccl-tests", f, "--out", tmp_path / "p.json"]).code == 0


def test_a_device_name_no_profile_could_hold_writes_no_profile(tmp_path):
    """A device line holding a terminal escape: the import is refused and no profile is left that no command could
    load (save_profile checks what it writes as load_profile reads it)."""
    log = tmp_path / "log.txt"
    log.write_text(NCCL_H100.read_text().replace("NVIDIA H100", "NVIDIA H100\x1b[2J", 1))
    r = run_cli(["calibrate", "--import-nccl-tests", log, "--out", tmp_path / "p.json"])
    assert r.code == 2 and len(r.err_lines) == 1 and "U+001B" in r.err, r.err
    assert not (tmp_path / "p.json").exists()
