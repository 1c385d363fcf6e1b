"""Regression tests for bugs found by tests/test_fuzz_predict.py (one test per bug, named after it)."""

from __future__ import annotations

from trainsim.reports.cli import main


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_collective_on_one_gpu_is_an_error_not_infinite_bandwidth(capsys):
    # Bug: `trainsim collective --gpus 1` priced the no-op at 0 s and printed algbw Infinity (invalid JSON).
    assert main(["collective", "--cluster", "dgx-h100", "--gpus", "1", "--sizes", "1M", "--json"]) == 2
    assert "gpus" in one_error_line(capsys)
