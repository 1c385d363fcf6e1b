"""benchmarks/hardware_loop.py on CPU (gloo): execute the bundled one-rank plan, feed the measured step back
through the run calibration, write predicted vs measured."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("hardware_loop", ROOT / "benchmarks" / "hardware_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cpu_loop_closes_on_the_measured_step(tmp_path):
    mod = _module()
    result = mod.loop("cpu", mod.PLANS["cpu"], None, steps=2)
    m = result["measured"]["step_time_s"]
    assert m > 0 and len(result["measured"]["step_times_s"]) == 2
    # One measured run fits one factor; the calibrated prediction lands on the measurement within the MAP
    # shrinkage (noise sd 0.01 vs prior sd 0.15 or more: under 1 % of the starting error) plus 0.5 %.
    before, after = result["error_pct_before"], result["error_pct_after"]
    assert abs(after) <= 0.01 * abs(before) + 0.5
    assert len(result["run_calibration"]["runs"]) == 1
    (tmp_path / "loop.json").write_text(json.dumps(result))
