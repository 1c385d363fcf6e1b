"""Invariants of `trainsim predict --json` a user adds up by hand (docs/design.md, JSON outputs)."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main

BASE = ["predict", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64", "--global-batch", "64",
        "--seq-len", "4096", "--tp", "8", "--pp", "4", "--distributed-optimizer", "--json"]


@pytest.mark.parametrize("extra", [["--recompute", "full"], ["--recompute", "selective"], ["--recompute", "none"],
                                   ["--recompute", "full", "--fast"]])
def test_other_terms_sum_to_the_peak_stages_other(extra, capsys):
    """memory.other_terms are "the named parts of `other`": without the stage key they add up to the `other`
    column of the stage they name, recompute's backward working set included (the engine holds it beside
    the saved activations while a block is recomputed)."""
    assert main([*BASE, *extra]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    terms = dict(mem["other_terms"])
    stage = int(terms.pop("stage"))
    assert sum(terms.values()) == pytest.approx(mem["per_stage"][stage]["other"], rel=1e-9)
    for s in mem["per_stage"]:
        assert s["weights"] + s["grads"] + s["optimizer"] + s["activations"] + s["other"] == pytest.approx(s["total"])
    assert ("recompute_working" in terms) == (extra[1] != "none")
