"""README's Python API example runs as printed and agrees with `trainsim predict --json`."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

from trainsim.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    section = README.read_text().split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_api_example_runs_and_matches_the_cli(tmp_path, capsys):
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(_example(), "README.md", "exec"), scope)  # the project's own README, not user input
    p = scope["p"]
    assert f"{p.step_time_s:.3f} s/step" in out.getvalue() and p.fits
    assert main(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "2",
                 "--seq-len", "8192", "--global-batch", "256", "--micro-batch", "1", "--recompute", "selective",
                 "--zero", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == p.step_time_s
