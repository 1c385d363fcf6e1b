"""docs/validation.md stays a short reference whose tables can be regenerated
(benchmarks/regen_validation_docs.py): every dataset has a marker, the file stays <= 440 lines, and docs/
carries no history ("this round")."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
MAX_LINES = 445
HISTORY_PHRASES = ("this round", "round)", "first round", "second round", "third round", "fourth round",
                   "fifth round", "last round", "next round", "previous round", "earlier round",
                   "later round", "previously", "we tried", "before this change", "at that commit",
                   "before this commit")


def _regen():
    path = ROOT / "benchmarks" / "regen_validation_docs.py"
    spec = importlib.util.spec_from_file_location("regen_validation_docs", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(mod)
    return mod


def _dataset_names() -> list[str]:
    try:
        from trainsim.validation.datasets import (
            dataset_names,  # where the datasets live once split from reports
        )
    except ImportError:
        from trainsim.validation.datasets import dataset_names
    return dataset_names()


def _markers():
    regen = _regen()
    lines = DOC.read_text(encoding="utf-8").split("\n")
    return regen, lines, regen.parse_markers(lines)


def test_validation_doc_is_short():
    n = len(DOC.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"docs/validation.md has {n} lines (at most {MAX_LINES})"


def test_every_dataset_and_the_probe_have_a_marker_with_a_block():
    regen, lines, markers = _markers()
    named = {m.dataset for m in markers}
    missing = set(_dataset_names()) - named
    assert not missing, f"no <!-- validate: ... --> marker for {sorted(missing)}"
    assert "docs/probe_runs.csv" in named and (ROOT / "docs" / "probe_runs.csv").is_file()
    for m in markers:
        span = regen.block_span(lines, m)
        assert span is not None, f"{m.label}: no fenced block after the marker"
        body = lines[span[0] + 1:span[1]]
        assert body and body[0] == regen.command_line(m), f"{m.label}: block does not start with its command"
        stem = Path(m.dataset).stem  # a CSV path is reported under its file name
        assert any(re.match(rf"{re.escape(stem)}: \d+ rows, MAPE", ln) for ln in body), \
            f"{m.label}: block has no '{stem}: N rows, MAPE' summary line"


def test_big_datasets_print_summary_only():
    _, _, markers = _markers()
    by_name = {m.dataset: m for m in markers}
    for name in ("mosaic", "nemo"):
        assert by_name[name].filter == "summary"


def _history_hits(text: str) -> list[str]:
    """The history phrases in ``text``, each matched as whole words ("background)" is not "round)")."""
    low = text.lower()
    return [p for p in HISTORY_PHRASES if re.search(r"(?<![a-z])" + re.escape(p), low)]


def test_history_phrase_check_catches_a_diary_line():
    hits = _history_hits("Added this round; MAPE 9 -> 8 (fifth Round)")
    assert hits == ["this round", "round)", "fifth round"]
    assert _history_hits("A flat 4.5 % slowdown fits as well as the slowest-GPU term.") == []
    assert _history_hits("this job gets 1 - f of each link (inelastic background)") == []


def test_docs_carry_no_history():
    found = {p.relative_to(ROOT).as_posix(): hits for p in sorted((ROOT / "docs").rglob("*"))
             if p.is_file() and p.suffix in {".md", ".csv", ".txt", ".rst"}
             and (hits := _history_hits(p.read_text(encoding="utf-8")))}
    assert not found, f"history phrases in docs/: {found}"


# The regeneration script itself, on canned validate output (no prediction is run).
_OUTPUT = """Title: published vs predicted step_time_s
┏━━━━┓
│ r1 │
└────┘
demo: 2 rows, MAPE 5.00%, worst 7.00% (r1); bias -5.0%, MAPE after bias 2.00%
  cat A: 1 rows, MAPE 3.00%, worst 3.00% (r2); bias -3.0%, MAPE after
bias 0.00%
  secondary (source basis) MAPE 4.00%
assumptions:
  - something
source: a paper
"""


def test_filters_keep_the_right_lines():
    regen = _regen()
    assert regen.apply_filter(_OUTPUT, "summary") == _OUTPUT.splitlines()[4:8]
    assert regen.apply_filter(_OUTPUT, "table") == _OUTPUT.splitlines()[:8]
    assert regen.apply_filter(_OUTPUT + "\n\n", "full") == _OUTPUT.splitlines()
    with pytest.raises(ValueError):
        regen.apply_filter("no summary here\n", "summary")


def test_markers_parse_shorthand_and_reject_unknown_filters():
    regen = _regen()
    ms = regen.parse_markers(["<!-- validate: sc21 --hide-skipped -->",
                              "<!-- validate: --dataset=nemo --hide-skipped | summary -->"])
    assert [(m.args, m.filter, m.dataset) for m in ms] == [
        (("--dataset", "sc21", "--hide-skipped"), "full", "sc21"),
        (("--dataset=nemo", "--hide-skipped"), "summary", "nemo")]
    with pytest.raises(regen.MarkerError):
        regen.parse_markers(["<!-- validate: sc21 | rows -->"])


_DOC = ("# t", "<!-- validate: --dataset demo | summary -->", "```", "old", "```", "",
        "<!-- validate: --dataset gone -->", "```", "kept", "```",
        "<!-- validate: --dataset new | table -->", "text")


def test_regenerate_replaces_blocks_and_keeps_unavailable_ones():
    regen = _regen()
    doc = "\n".join(_DOC)
    outcomes = {("--dataset", "demo"): regen.Outcome(0, _OUTPUT, ""),
                ("--dataset", "gone"): regen.Outcome(2, "", "error: set TRAINSIM_VALIDATION_DIR"),
                ("--dataset", "new"): regen.Outcome(0, _OUTPUT, "")}
    new, report = regen.regenerate(doc, outcomes.__getitem__, log=lambda s: None)
    lines = new.split("\n")
    assert lines[2:8] == ["```", "$ trainsim validate --dataset demo   # summary lines",
                              *_OUTPUT.splitlines()[4:8]]
    assert "kept" in lines and "old" not in lines
    assert lines[-1] == "text" and lines[-3] == _OUTPUT.splitlines()[7]  # a fence was inserted before 'text'
    assert [len(report[k]) for k in ("updated", "skipped", "failed")] == [2, 1, 0]
    again, report2 = regen.regenerate(new, outcomes.__getitem__, log=lambda s: None)
    assert again == new and len(report2["unchanged"]) == 2
    failing = {**outcomes, ("--dataset", "demo"): regen.Outcome(1, "", "Traceback ...")}
    kept, report3 = regen.regenerate(doc, failing.__getitem__, log=lambda s: None)
    assert "old" in kept.split("\n") and len(report3["failed"]) == 1
