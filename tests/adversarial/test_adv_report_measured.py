"""`trainsim report SCENARIO --measured RUN.json`: an `execute --json` result of another world size or layout --
even of another model on another cluster -- was shown as this scenario's predicted-vs-measured section. The run's
world size and layout must be the scenario's; the run of the bundled example still reports."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import MEASURED, REPO, assert_refused, run_cli

TINY = REPO / "examples" / "tiny-gpt-cpu.yaml"
RUN = json.loads(MEASURED.read_text())


@pytest.mark.parametrize("scenario, edit, field", [
    (["--model", "llama3-8b", "--cluster", "dgx-h100"], None, "measured.world_size"),
    ([TINY], ("world_size", 64), "measured.world_size"),
    ([TINY], ("tp", 4), "measured.layout.tp"),
    ([TINY], ("micro_batch", 1), "measured.layout.micro_batch"),
    ([TINY], ("schedule", "gpipe"), "measured.layout.schedule"),
    ([TINY], ("sequence_parallel", 0), "measured.layout.sequence_parallel"),
    ([TINY], ("world_size", None), "measured.world_size: missing"),   # a result that cannot be matched
    ([TINY], ("layout", None), "measured.layout: missing"),
])
def test_a_run_of_another_scenario_is_refused(tmp_path, scenario, edit, field):
    doc = copy.deepcopy(RUN)
    if edit is not None:
        (doc if edit[0] in ("world_size", "layout") else doc["layout"])[edit[0]] = edit[1]
    f = tmp_path / "run.json"
    f.write_text(json.dumps(doc))
    r = run_cli(["report", *scenario, "--measured", f, "--no-plan", "--out", tmp_path / "r"])
    assert_refused(r, field)
    assert not (tmp_path / "r").exists()


def test_the_examples_own_run_reports(tmp_path):
    r = run_cli(["report", TINY, "--measured", MEASURED, "--no-plan", "--out", tmp_path / "r"])
    assert r.code == 0, r.err
