"""`trainsim regress`: suite loading, baseline round trip, drift detection (stand-in predictor)."""

from __future__ import annotations

import json

import pytest

from trainsim.cli.main import main
from trainsim.simulator.result import Prediction, StageMemory
from trainsim.validation import regress as R
from trainsim.validation import validate as V


def standin_predict(sc, scale: float = 1.0) -> Prediction:
    """A 6N-FLOPs roofline at 50% of peak: deterministic, scenario-dependent values for every metric."""
    n, gpus = sc.model.total_params(), sc.num_gpus
    flops = 6.0 * n * sc.tokens_per_step
    step = scale * flops / (gpus * sc.cluster.gpu.peak(sc.training.dtype) * 0.5)
    mem = StageMemory(weights=2.0 * n / (sc.layout.tp * sc.layout.pp), grads=2.0 * n / gpus,
                      optimizer=12.0 * n / gpus, activations=1e9)
    p = sc.layout.pp
    return Prediction(
        step_time_s=step, tokens_per_s=sc.tokens_per_step / step, mfu=0.5 / scale, hfu=0.5 / scale,
        model_tflops_per_gpu=flops / step / gpus / 1e12, hardware_tflops_per_gpu=flops / step / gpus / 1e12,
        bubble_fraction=(p - 1) / (sc.num_microbatches + p - 1),
        exposed_comm_s={"tp": 0.01 * step if sc.layout.tp > 1 else 0.0, "dp": 0.02 * step},
        per_stage_memory=[mem] * p, peak_bytes=mem.total, gpu_memory_bytes=sc.cluster.gpu.memory_bytes,
        layout={"tp": sc.layout.tp, "pp": p, "dp": sc.dp},
    )


SCENARIOS = {
    "a.yaml": "model: gpt3-175b\ncluster: dgx-a100\ngpus: 384\nlayout: {tp: 8, pp: 12}\n"
              "training: {global_batch: 1536, recompute: full}\n",
    "b.yaml": "model: llama3-70b\ncluster: dgx-h100\ngpus: 64\nlayout: {tp: 8, pp: 2}\n"
              "training: {global_batch: 256, seq_len: 8192}\n",
    "sub/c.yaml": "model: mpt-7b\ncluster: dgx-h100\ngpus: 8\ntraining: {global_batch: 48, micro_batch: 6, zero: 3}\n",
}


@pytest.fixture
def suite(tmp_path):
    d = tmp_path / "suite"
    for name, text in SCENARIOS.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    return d


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setattr(V, "default_predict_fn", lambda **kw: standin_predict)


def test_suite_from_directory_and_list(suite, tmp_path):
    assert [n for n, _ in R.suite_paths(suite)] == ["a.yaml", "b.yaml", "sub/c.yaml"]
    lst = tmp_path / "list.yaml"
    lst.write_text("- suite/b.yaml\n- suite/a.yaml\n")
    assert [n for n, _ in R.load_suite(lst)] == ["suite/b.yaml", "suite/a.yaml"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- suite/missing.yaml\n")
    with pytest.raises(Exception, match="no such file"):
        R.suite_paths(bad)


def test_no_drift_exits_0_and_update_round_trip(suite, tmp_path, standin, capsys):
    base = tmp_path / "baseline.json"
    assert main(["regress", "--suite", str(suite), "--baseline", str(base), "--update"]) == 0
    doc = json.loads(base.read_text())
    assert doc["kind"] == R.BASELINE_KIND and set(doc["scenarios"]) == set(SCENARIOS)
    assert set(doc["scenarios"]["a.yaml"]) == set(R.METRIC_UNITS)
    capsys.readouterr()
    assert main(["regress", "--suite", str(suite), "--baseline", str(base)]) == 0
    assert "no drift: 3 scenarios" in capsys.readouterr().out


def test_perturbed_baseline_exits_1_naming_the_metric(suite, tmp_path, standin, capsys):
    base = tmp_path / "baseline.json"
    main(["regress", "--suite", str(suite), "--baseline", str(base), "--update"])
    doc = json.loads(base.read_text())
    doc["scenarios"]["b.yaml"]["step_time_s"] *= 1.02
    doc["scenarios"]["a.yaml"]["exposed_comm_s.tp"] += 0.5
    doc["scenarios"]["sub/c.yaml"]["fits"] = not doc["scenarios"]["sub/c.yaml"]["fits"]
    base.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["regress", "--suite", str(suite), "--baseline", str(base)]) == 1
    out = capsys.readouterr().out
    assert "b.yaml" in out and "step_time_s" in out and "-1.961%" in out  # 1/1.02 - 1
    assert "exposed_comm_s.tp" in out and "fits" in out and "DRIFT: 3 metrics moved in 3 of 3" in out
    # a tolerance wider than the change hides only the small one
    assert main(["regress", "--suite", str(suite), "--baseline", str(base), "--rtol", "0.05"]) == 1
    out = capsys.readouterr().out
    assert "step_time_s" not in out and "exposed_comm_s.tp" in out


def test_added_and_removed_scenarios_fail(suite, tmp_path, standin, capsys):
    base = tmp_path / "baseline.json"
    main(["regress", "--suite", str(suite), "--baseline", str(base), "--update"])
    (suite / "b.yaml").unlink()
    (suite / "d.yaml").write_text(SCENARIOS["a.yaml"].replace("global_batch: 1536", "global_batch: 768"))
    capsys.readouterr()
    assert main(["regress", "--suite", str(suite), "--baseline", str(base)]) == 1
    out = capsys.readouterr().out
    assert "added (not in baseline): d.yaml" in out and "removed (in baseline, not in suite): b.yaml" in out


def test_compare_tolerances():
    b = {"scenarios": {"x": {"step_time_s": 1.0, "exposed_comm_s.dp": 0.0, "fits": True}}}
    c = {"scenarios": {"x": {"step_time_s": 1.0 + 1e-9, "exposed_comm_s.dp": 1e-12, "fits": True}}}
    assert R.compare(b, c, rtol=1e-6).ok  # relative noise and sub-nanosecond absolute noise ignored
    c["scenarios"]["x"]["step_time_s"] = 1.001
    cmp = R.compare(b, c, rtol=1e-6)
    assert [d.metric for d in cmp.drifts] == ["step_time_s"] and cmp.drifts[0].change_pct == pytest.approx(0.1)


@pytest.mark.parametrize("version", [2, "1", True, None])
def test_a_baseline_of_another_schema_version_exits_2(suite, tmp_path, standin, capsys, version):
    """A baseline written by a trainsim of another schema (or a hand edit) is refused naming schema_version, not
    compared metric by metric as if its metrics meant today's."""
    import json

    base = tmp_path / "baseline.json"
    main(["regress", "--suite", str(suite), "--baseline", str(base), "--update"])
    doc = json.loads(base.read_text())
    doc["schema_version"] = version
    base.write_text(json.dumps(doc))
    assert main(["regress", "--suite", str(suite), "--baseline", str(base)]) == 2
    err = capsys.readouterr().err
    assert "baseline.schema_version" in err and err.count("\n") == 1


def test_bad_baseline_and_suite_exit_2(suite, tmp_path, standin, capsys):
    assert main(["regress", "--suite", str(suite), "--baseline", str(tmp_path / "none.json")]) == 2
    assert "baseline:" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    assert main(["regress", "--suite", str(suite), "--baseline", str(junk)]) == 2
    (suite / "broken.yaml").write_text("model: gpt3-175b\ncluster: dgx-a100\ngpus: 7\nlayout: {tp: 8}\n")
    assert main(["regress", "--suite", str(suite), "--baseline", str(junk)]) == 2
    err = capsys.readouterr().err
    assert "suite[broken.yaml]" in err and err.count("\n") == 2


@pytest.mark.parametrize("where", ["scenario", "inside", "list"])
def test_update_never_writes_over_the_suite(suite, tmp_path, standin, capsys, where):
    """--update writes a baseline neither over one of the suite's scenarios or its list, nor as a .json inside the
    suite directory (every later run would read it as a scenario and fail)."""
    lst = tmp_path / "list.yaml"
    lst.write_text("- suite/a.yaml\n")
    given, target = {"scenario": (suite, suite / "a.yaml"), "inside": (suite, suite / "base.json"),
                     "list": (lst, lst)}[where]
    before = target.read_text() if target.exists() else None
    assert main(["regress", "--suite", str(given), "--baseline", str(target), "--update"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: baseline: "), err
    assert (target.read_text() if target.exists() else None) == before


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["scenarios"]["a.yaml"].update(fits=1), "baseline.scenarios.a.yaml.fits"),
    (lambda d: d["scenarios"]["a.yaml"].update(step_time_s=True), "baseline.scenarios.a.yaml.step_time_s"),
    (lambda d: d.update(options={"fast": "yes"}), "baseline.options"),
    (lambda d: d.update(options={"fast": False, "tol": 1}), "baseline.options"),
])
def test_a_hand_edited_baseline_of_other_types_is_refused(suite, tmp_path, standin, capsys, edit, field):
    """fits 1 compared equal to true, a boolean step time to 1.0, and unknown or mistyped options were ignored: each
    is refused naming the key."""
    base = tmp_path / "base.json"
    assert main(["regress", "--suite", str(suite), "--baseline", str(base), "--update"]) == 0
    doc = json.loads(base.read_text())
    edit(doc)
    base.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["regress", "--suite", str(suite), "--baseline", str(base)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}: "), err
