"""CI: the predictions for examples/ match tests/baselines/examples.json.

If this fails after an intended change to a cost model or the engine, look at the drift table it prints,
then run `trainsim regress --update` and commit tests/baselines/examples.json with the change.
"""

from __future__ import annotations

from pathlib import Path

from trainsim.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def test_examples_match_baseline(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(["regress", "--suite", "examples", "--baseline", "tests/baselines/examples.json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "no drift" in out
