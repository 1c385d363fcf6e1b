"""Numbers: every numeric flag of every command has a documented range that --help states and the parser
enforces; numbers in files are range-checked; values that contradict their source are refused or skipped with
a reason; inputs beyond any built system get a cited warning."""

from __future__ import annotations

import argparse
import csv
import json
import math

import pytest
from conftest import MEASURED, NCCL_H100, assert_refused, run_cli

from trainsim.cli.common import Bounded
from trainsim.cli.main import build_parser
from trainsim.specs.published_scale import WARN_GPUS

# Argument-less commands need their required flags before argparse reaches the numeric one.
REQUIRED = {"report": ["--out", "r"], "calibrate": ["--out", "p.json"], "collective": ["--cluster", "dgx-h100"]}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _numeric_flags() -> list[tuple[str, str, Bounded]]:
    return [(cmd, a.option_strings[0], a.type) for cmd, p in _commands().items() for a in p._actions
            if isinstance(a.type, Bounded)]


def _probes(b: Bounded) -> list[str]:
    below = (b.lo if b.lo_open else b.lo - 1) if b.kind is int else (b.lo if b.lo_open else b.lo - 1e-3)
    probes = [repr(below) if b.kind is float else str(int(below)), "abc" if b.kind is float else "1.5"]
    if math.isfinite(b.hi):
        probes.append(str(int(b.hi) + 1) if b.kind is int else repr(b.hi * 2))
    else:
        probes.append("1e400")
    if b.kind is float:
        probes.append("nan")
    return probes


CASES = [(cmd, flag, v) for cmd, flag, b in _numeric_flags() for v in _probes(b)]


def test_every_numeric_flag_has_a_documented_range():
    """No int/float flag escapes the Bounded type (choices are a range too), and --help states each range."""
    for cmd, p in _commands().items():
        for a in p._actions:
            if a.type in (int, float) and a.choices is None:
                pytest.fail(f"{cmd} {a.option_strings}: numeric flag without a documented range")
            if isinstance(a.type, Bounded):
                assert a.type.describe() in (a.help or ""), (cmd, a.option_strings, a.help)
    assert len(_numeric_flags()) >= 60


@pytest.mark.parametrize("cmd, flag, value", CASES, ids=[f"{c}{f}={v}" for c, f, v in CASES])
def test_out_of_range_flag_is_refused(cmd, flag, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli([cmd, *REQUIRED.get(cmd, []), f"{flag}={value}"])
    assert_refused(r, flag)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("yaml_text, field", [
    ("gpus: 100000000000000000000000000000", "gpus"),
    ("gpus: -8", "gpus"),
    ("gpus: .inf", "gpus"),
    ("gpus: 8.5", "gpus"),
    ("gpus: 12", "num_gpus"),
    ("training: {global_batch: 0}", "training.global_batch"),
    ("training: {global_batch: -512}", "training.global_batch"),
    ("training: {seq_len: 1e400}", "training.seq_len"),
    ("training: {micro_batch: .nan}", "training.micro_batch"),
    ("training: {seq_len: true}", "training.seq_len"),
    ("layout: {tp: 0}", "layout.tp"),
    ("layout: {pp: -1}", "layout.pp"),
    ("layout: {tp: 99999999999999999999}", "layout.tp"),
    ("layout: {tp: [2]}", "layout.tp"),
])
def test_numbers_in_scenario_files_are_range_checked(yaml_text, field, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\ncluster: dgx-h100\n" + ("gpus: 8\n" if not yaml_text.startswith("gpus") else "")
                 + yaml_text + "\n")
    assert_refused(run_cli(["predict", "--fast", str(f)]), field)


@pytest.mark.parametrize("yaml_text, field, got", [
    ('model: {preset: llama3-8b, final_softcap: "inf"}', "model.final_softcap", "'inf'"),
    ('model: {preset: llama3-8b, final_softcap: "1e400"}', "model.final_softcap", "'1e400'"),  # overflows to inf
    ('model: {preset: llama3-8b, attn_softcap: "Infinity"}', "model.attn_softcap", "'Infinity'"),
    ('model: {preset: llama3-8b, published_params: "+inf"}', "model.published_params", "'+inf'"),
    ('model: {preset: llama3-8b, published_active_params: "1e999"}', "model.published_active_params", "'1e999'"),
    ('model: {preset: llama3-8b, final_softcap: 1e400}', "model.final_softcap", "'1e400'"),  # YAML 1.1: text
])
def test_a_non_finite_number_written_as_text_is_refused(yaml_text, field, got, tmp_path):
    """pydantic reads a float field's text as a float, "inf" and "1e400" included; check_finite saw only floats,
    so an infinite logit cap or parameter count was accepted (exit 0)."""
    f = tmp_path / "s.yaml"
    f.write_text(yaml_text + "\ncluster: dgx-h100\ngpus: 8\n")
    assert_refused(run_cli(["predict", "--fast", str(f)]), f"error: {field}: must be a finite number, got {got}")


def test_every_spec_model_refuses_non_finite_floats():
    """One setting for every pydantic model of the specs and the profile (specs/spec_config.SPEC_CONFIG)."""
    from pydantic import BaseModel

    import trainsim.cost_models.profile
    import trainsim.cost_models.run_factors
    import trainsim.specs  # noqa: F401

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    models = {c for c in subclasses(BaseModel) if c.__module__.startswith("trainsim.")}
    assert len(models) >= 10
    assert [c.__name__ for c in models if c.model_config.get("allow_inf_nan") is not False] == []


# --- values that contradict their source --------------------------------------------------------------------------

@pytest.mark.parametrize("flags, field", [
    (["--nccl-nodes", "3"], "nccl_nodes"),
    (["--nccl-nodes", "2"], "nccl_nodes"),
    (["--nccl-group-size", "4"], "nccl_group_size"),
    (["--nccl-group-size", "16"], "nccl_group_size"),
])
def test_nccl_flags_contradicting_the_file_are_refused(flags, field, tmp_path):
    r = run_cli(["calibrate", "--import-nccl-tests", str(NCCL_H100), "--out", str(tmp_path / "p.json"), *flags])
    assert_refused(r, f"{field}: ")
    assert "contradicts" in r.err and not (tmp_path / "p.json").exists()


def test_nccl_flags_agreeing_with_the_file_are_accepted(tmp_path):
    r = run_cli(["calibrate", "--import-nccl-tests", str(NCCL_H100), "--out", str(tmp_path / "p.json"),
                 "--nccl-nodes", "1", "--nccl-group-size", "8", "--json"])
    assert r.code == 0, r.err
    assert {(c["group_size"], c["nodes"]) for c in json.loads(r.out)["collectives"]} == {(8, 1)}


def _nccl_dataset(tmp_path, busbw: str):
    """The first three measured rows of the bundled nccl-tests dataset, the first one's busbw replaced."""
    from trainsim.data import validation_path

    rows = list(csv.DictReader(open(validation_path("nccl_busbw.csv"), encoding="utf-8")))
    rows = [r for r in rows if r.get("record_type") == "measured_curve"][:3]
    target = rows[0]
    target["busbw_GBps"] = busbw
    f = tmp_path / "nccl.csv"
    with open(f, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return f, target["row_id"]


@pytest.mark.parametrize("busbw", ["-200", "nan", "inf", "0"])
def test_bad_busbw_row_is_skipped_with_a_reason(busbw, tmp_path):
    f, rid = _nccl_dataset(tmp_path, busbw)
    r = run_cli(["validate", "--dataset", str(f), "--json"])
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    skipped = {s["row_id"]: s["reason"] for s in doc["skipped"]}
    assert "busbw_GBps" in skipped[rid], skipped.get(rid)
    assert rid not in {row["row_id"] for row in doc.get("rows", []) if row.get("error_pct") is not None}


@pytest.mark.parametrize("column, value", [("step_time_s", "-3.1"), ("num_gpus", "-64"), ("tflops_per_gpu", "nan"),
                                           ("seq_len", "-2048"), ("global_batch_seqs", "inf")])
def test_bad_cell_of_a_run_dataset_is_skipped_with_a_reason(column, value, tmp_path):
    from trainsim.data import validation_path

    rows = list(csv.DictReader(open(validation_path("megatron_sc21_table1.csv"), encoding="utf-8")))[:2]
    rows[0][column] = value
    f = tmp_path / "runs.csv"
    with open(f, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    from trainsim.validation.datasets import load_dataset

    case = next(c for c in load_dataset(str(f)).cases if c.row_id == rows[0]["row_id"])
    assert case.skip_reason and column in case.skip_reason, case.skip_reason


@pytest.mark.parametrize("path, value", [
    (("measured", "step_time_s"), -0.5), (("measured", "step_time_s"), float("nan")),
    (("measured", "step_time_min_s"), 0), (("predicted", "step_time_s"), -1.0),
    (("measured", "per_stage", 0, "params"), -5), (("predicted", "per_stage", 1, "activations_peak"), float("inf")),
    (("measured", "step_time_s"), "fast"), (("measured", "step_time_s"), True),
])
def test_report_measured_with_impossible_numbers_is_refused(path, value, tmp_path):
    doc = json.loads(MEASURED.read_text())
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    f = tmp_path / "m.json"
    f.write_text(json.dumps(doc).replace("NaN", "1e999").replace("Infinity", "1e999"))  # JSON has no NaN
    if isinstance(value, float) and math.isnan(value):
        f.write_text(json.dumps(doc, allow_nan=True).replace("NaN", '"NaN"'))
    r = run_cli(["report", "--model", "tiny-gpt", "--cluster", "cpu-host", "--measured", str(f),
                 "--out", str(tmp_path / "r")])
    assert_refused(r, "measured." + ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path)
                   .replace(".[", "["))
    assert not (tmp_path / "r").exists()


def test_execute_timeout_zero_is_refused_before_launch(monkeypatch):
    import trainsim.kernels.executor as executor

    monkeypatch.setattr(executor, "run_jobs", lambda *a, **k: pytest.fail("launched"))
    assert_refused(run_cli(["execute", "--timeout-s", "0"]), "--timeout-s")


# --- beyond any built system ----------------------------------------------------------------------------------------

def test_beyond_published_cluster_warns_and_cites():
    gpus = 2 * WARN_GPUS
    r = run_cli(["predict", "--model", "tiny-gpt", "--cluster", "dgx-h100", "--gpus", str(gpus), "--seq-len", "128",
                 "--global-batch", str(gpus), "--fast", "--json"])
    assert r.code == 0, r.err
    warnings = [ln for ln in r.err_lines if ln.startswith("warning: ")]
    assert any("24,576 GPUs" in w and "arXiv:2407.21783" in w for w in warnings), r.err
    assert any("65,536" in w and "arXiv:1904.00962" in w for w in warnings), r.err
    assert json.loads(r.out)["step_time_s"] > 0


def test_batch_in_tokens_beyond_deepseek_v3_warns():
    r = run_cli(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--seq-len", "8192",
                 "--global-batch", "16384", "--fast", "--json"])
    assert r.code == 0, r.err
    assert any("62,914,560" in ln and "arXiv:2412.19437" in ln for ln in r.err_lines), r.err


def test_published_sizes_do_not_warn():
    """Llama 3 405B's own run (16,384 GPUs, 2,048 x 8,192 tokens) is within the record: no warning."""
    r = run_cli(["predict", "--model", "llama3-405b", "--cluster", "dgx-h100", "--gpus", "16384", "--tp", "8",
                 "--pp", "16", "--seq-len", "8192", "--global-batch", "2048", "--fast", "--json"])
    assert r.code == 0, r.err
    assert not [ln for ln in r.err_lines if ln.startswith("warning: ")]


# --- data-parallel knobs, GPU pools, the loss: every bad value is one line naming its field ------------------------

POOLED = ["predict", "--fast", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "16",
          "--seq-len", "4096", "--tp", "8", "--pp", "2"]


@pytest.mark.parametrize("flags, field", [
    (["--pool", "dgx-h100:0"], "--pool"),
    (["--pool", "dgx-h100:-1"], "--pool"),
    (["--pool", "dgx-h100:nan"], "--pool"),
    (["--pool", "dgx-h100:1e400"], "--pool"),
    (["--pool", "dgx-h100:1.5"], "--pool"),
    (["--pool", "dgx-h100:99999999999999999999999"], "--pool"),
    (["--pool", "dgx-h100"], "--pool"),
    (["--pool", ":2"], "--pool"),
    (["--pool", "nosuch:2"], "cluster.pools[0].gpu"),
    (["--pool", "dgx-h100:1", "--pool", "dgx-h100:1"], "cluster.pools[1].name"),
    (["--pool", "dgx-h100:1", "--pool", "dgx-a100:2"], "gpus"),                 # 24 GPUs: not whole tp*pp = 16
    (["--pool", "dgx-h100:2", "--pool", "dgx-a100:2", "--gpus", "16"], "cluster.pools"),
    (["--pool", "dgx-h100:1", "--pool", "dgx-a100:1", "--placement", "bogus"], "--placement"),
    (["--placement", "dp", "--gpus", "16"], "cluster.placement"),
    (["--pool", "h200:1"] * 17, "cluster.pools: must be a list of 1 to 16 pools, got 17 pools"),
    (["--dp-shard", "2", "--gpus", "64"], "layout.dp_shard"),                 # zero 1, megatron: no HSDP
])
def test_bad_pool_and_dp_flags_are_refused(flags, field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_refused(run_cli(POOLED + flags), field)


@pytest.mark.parametrize("yaml_text, field", [
    ("layout: {tp: 2, dp_shard: 0}", "layout.dp_shard"),
    ("layout: {tp: 2, dp_shard: .nan}", "layout.dp_shard"),
    ("layout: {tp: 2, dp_shard: 2.5}", "layout.dp_shard"),
    ("layout: {tp: 2, dp_shard: 3}", "layout.dp_shard"),
    ("layout: {tp: 2, dp_shard: 99999999999}", "layout.dp_shard"),
    ("training: {dp_bucket_mb: 0}", "training.dp_bucket_mb"),
    ("training: {dp_bucket_mb: -25}", "training.dp_bucket_mb"),
    ("training: {dp_bucket_mb: .nan}", "training.dp_bucket_mb"),
    ("training: {dp_bucket_mb: .inf}", "training.dp_bucket_mb"),
    ("training: {dp_bucket_mb: true}", "training.dp_bucket_mb"),
    ("training: {overlap_grad_reduce: 3}", "training.overlap_grad_reduce"),
    ("training: {cross_entropy: softmax}", "training.cross_entropy"),
    ("training: {cross_entropy: [fused]}", "training.cross_entropy"),
    ("training: {cuda_context_bytes: -1}", "training.cuda_context_bytes"),
    ("training: {cuda_context_bytes: .nan}", "training.cuda_context_bytes"),
    ("training: {cuda_context_bytes: 1.0e+30}", "training.cuda_context_bytes"),
    ("cluster: {preset: dgx-h100, pools: []}", "cluster.pools"),
    ("cluster: {preset: dgx-h100, pools: dgx-a100}", "cluster.pools"),
    ("cluster: {preset: dgx-h100, pools: [{node: dgx-a100, nodes: .nan}, {node: dgx-h100, nodes: 1}]}",
     "cluster.pools[0].nodes"),
    ("cluster: {preset: dgx-h100, pools: [{node: dgx-a100, nodes: 1}, {node: dgx-h100, nodes: 1, extra: 1}]}",
     "cluster.pools[1].extra"),
    ("cluster: {preset: dgx-h100, pools: [{node: dgx-a100, nodes: 1, name: a}, {node: dgx-h100, nodes: 1, "
     "name: a}]}", "cluster.pools[1].name"),
    ("cluster: {preset: dgx-h100, placement: ring, pools: [{node: dgx-a100, nodes: 1}, {node: dgx-h100, nodes: 1}]}",
     "cluster.placement"),
])
def test_bad_dp_pool_and_loss_keys_are_refused(yaml_text, field, tmp_path):
    f = tmp_path / "s.yaml"
    body = "model: llama3-8b\ngpus: 16\ntraining: {seq_len: 4096, global_batch: 16}\n"
    key = yaml_text.split(":")[0]
    if key != "cluster":
        body = "model: llama3-8b\ncluster: dgx-h100\ngpus: 16\n"
        if key == "layout":
            body += "training: {framework: pytorch-fsdp, zero: 3, seq_len: 4096, global_batch: 16}\n"
    else:
        body = "model: llama3-8b\ntraining: {seq_len: 4096, global_batch: 16}\n"
    f.write_text(body + yaml_text + "\n")
    assert_refused(run_cli(["predict", "--fast", str(f)]), field)


def _predict_and_plan(path, plan_pins: list[str], field: str, refused: str | None) -> dict:
    """predict and plan (pinned by ``plan_pins``, top 1) on the file at ``path``, both --json: both refuse it naming
    ``field`` with ``refused`` in the line, or both accept it; the runs by command."""
    runs = {"predict": run_cli(["predict", path, "--json"]),
            "plan": run_cli(["plan", path, *plan_pins, "--top", "1", "--json"])}
    for cmd, r in runs.items():
        if refused:
            assert_refused(r, field)
            assert refused in r.err, (cmd, r.err)
        else:
            assert r.code == 0, (cmd, r.err)
    return runs


@pytest.mark.parametrize("value, refused", [('"4096"', None), ("4096.0", None), ("true", "must be a number"),
                                            ('"4096.5"', "valid integer"), ("0", "greater than 0")])
def test_plan_and_predict_read_a_files_sequence_length_alike(tmp_path, value, refused):
    """The scenario file's seq_len goes through TrainingSpec's field rules in both commands: a quoted "4096" is
    4096 (pydantic's lax int, which the presets' YAML 1.1 numbers rely on), true and 4096.5 are refused."""
    path = tmp_path / "s.yaml"
    path.write_text(f"model: llama3-8b\ncluster: dgx-h100\ngpus: 8\ntraining:\n  seq_len: {value}\n"
                    "  global_batch: 8\n")
    runs = _predict_and_plan(path, ["--tp", "1", "--pp", "1", "--micro-batch", "1"], "training.seq_len", refused)
    if not refused:
        predicted = json.loads(runs["predict"].out)
        planned = json.loads(runs["plan"].out)
        assert planned["request"]["seq_len"] == 4096
        assert predicted["tokens_per_s"] * predicted["step_time_s"] == pytest.approx(8 * 4096)


@pytest.mark.parametrize("key, value", [("recompute", "half"), ("schedule", "zz"), ("zero", 5),
                                        ("micro_batch", 0), ("sequence_parallel", "maybe")])
def test_plan_refuses_a_searched_training_value_predict_refuses(tmp_path, key, value):
    """A training setting plan searches (so does not use) is still checked as predict checks it: a misspelt
    recompute or schedule is refused, not silently replaced by the search."""
    path = tmp_path / "s.yaml"
    path.write_text(f"model: llama3-8b\ncluster: dgx-h100\ngpus: 8\ntraining:\n  seq_len: 4096\n"
                    f"  global_batch: 8\n  {key}: {value}\n")
    for cmd in ("predict", "plan"):
        assert_refused(run_cli([cmd, path]), f"training.{key}")


def test_an_integer_written_with_an_exponent_is_refused_saying_why(tmp_path):
    """PyYAML (YAML 1.1) reads ``1e3`` as the text '1e3', which no integer field takes: the refusal says so."""
    path = tmp_path / "s.yaml"
    path.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\ntraining: {global_batch: 1e3, seq_len: 4096}\n")
    for cmd in ("predict", "plan"):
        r = run_cli([cmd, path])
        assert_refused(r, "training.global_batch")
        assert "got '1e3' (YAML 1.1" in r.err
    path.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 1e3\ntraining: {global_batch: 64, seq_len: 4096}\n")
    for cmd in ("predict", "plan"):
        r = run_cli([cmd, path])
        assert_refused(r, "gpus")
        assert "got '1e3' (YAML 1.1" in r.err


@pytest.mark.parametrize("value, refused", [("'16'", None), ("16.0", None), ("16.5", "got 16.5"),
                                            ("true", "got true"), ("sixteen", "got 'sixteen'")])
def test_predict_and_plan_read_a_files_gpu_count_alike(tmp_path, value, refused):
    """A scenario file's gpus is an integer as the spec fields read one (a quoted "16" or 16.0 is 16) in both
    commands; a fraction, a boolean or a word is refused naming the field."""
    path = tmp_path / "s.yaml"
    path.write_text(f"model: llama3-8b\ncluster: dgx-h100\ngpus: {value}\n"
                    "training: {global_batch: 64, seq_len: 4096}\n")
    runs = _predict_and_plan(path, ["--tp", "2", "--pp", "1"], "gpus", refused)
    if not refused:
        assert json.loads(runs["predict"].out)["layout"]["dp"] == 16
        assert {row["gpus"] for row in json.loads(runs["plan"].out)["rows"]} == {16}


@pytest.mark.parametrize("gpus_line", ["gpus: null\n", "gpus: ~\n", ""])
def test_predict_and_plan_take_the_clusters_size_when_the_file_gives_no_gpu_count(tmp_path, gpus_line):
    """A file whose gpus is null or absent runs on its cluster's GPUs in both commands (here the mapping's
    num_gpus: 16); plan says so on stderr."""
    path = tmp_path / "s.yaml"
    path.write_text(f"model: llama3-8b\ncluster: {{preset: dgx-h100, num_gpus: 16}}\n{gpus_line}"
                    "training: {global_batch: 64, seq_len: 4096}\n")
    runs = _predict_and_plan(path, ["--tp", "2", "--pp", "1"], "gpus", None)
    assert json.loads(runs["predict"].out)["layout"]["dp"] == 16  # tp 1, pp 1 by default
    assert {row["gpus"] for row in json.loads(runs["plan"].out)["rows"]} == {16}
    assert "no GPU count given: plan searches the cluster's 16 GPUs" in runs["plan"].err


def test_plan_checks_a_searched_setting_with_the_files_framework(tmp_path):
    """A searched setting is checked with the file's framework, as predict checks it: selective recompute on
    megatron-2021 (which predates it) is refused by both, naming the field."""
    path = tmp_path / "s.yaml"
    path.write_text("model: gpt-1.7b\ncluster: dgx-a100\ngpus: 16\ntraining: {global_batch: 64, seq_len: 2048, "
                    "framework: megatron-2021, recompute: selective}\n")
    for cmd in ("predict", "plan"):
        assert_refused(run_cli([cmd, path]), "training.recompute")


def test_plan_keeps_a_files_stated_zero_beside_float8_all_gather(tmp_path):
    """float8_all_gather pins ZeRO 3 only where the file states no stage; a stated zero 2 is refused by plan as by
    predict, not replaced."""
    path = tmp_path / "s.yaml"
    path.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\ntraining: {global_batch: 64, seq_len: 4096, "
                    "framework: torch, dtype: fp8, float8_all_gather: true, zero: 2}\n")
    for cmd in ("predict", "plan"):
        r = run_cli([cmd, path])
        assert_refused(r, "training.float8_all_gather")
        assert "got zero 2" in r.err


def test_plan_pins_a_files_quoted_zero_3_beside_float8_all_gather(tmp_path):
    """A stated zero "3" (quoted: pydantic's lax int) beside float8_all_gather is ZeRO 3 for plan, as for predict."""
    path = tmp_path / "s.yaml"
    path.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 16\ntraining: {global_batch: 64, seq_len: 4096, "
                    "framework: torch, dtype: fp8, float8_all_gather: true, zero: \"3\"}\n")
    runs = _predict_and_plan(path, ["--tp", "1", "--pp", "1"], "", None)
    assert {row["zero"] for row in json.loads(runs["plan"].out)["rows"]} == {3}


@pytest.mark.parametrize("value", ["1_6", "\uff11,2", "1,,2", "-1,2", "a,b"])
def test_stage_layers_are_ascii_digits_only(value):
    """--stage-layers takes comma-separated ASCII integers: Python's int() would read 1_6 as 16 and full-width
    digits as numbers, neither a layer count a user means; spaces around the commas are fine."""
    import argparse

    from trainsim.cli.common import int_list

    with pytest.raises(argparse.ArgumentTypeError):
        int_list(value)
    assert int_list(" 3, 4") == (3, 4)


@pytest.mark.parametrize("argv, field", [(["predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                                           "--tp", "1_6", "--fast"], "--tp"),
                                          (["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "1_6"],
                                           "gpus"),
                                          (["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8:1_6"],
                                           "gpus")])
def test_every_integer_flag_takes_ascii_digits_only(argv, field):
    """Integer flags and plan's --gpus read as --stage-layers does (cli.common.ascii_int): 1_6 is no 16."""
    assert_refused(run_cli(argv), field)


@pytest.mark.parametrize("text, want", [("2,048", 2048.0), ("2048.0", 2048.0), (".5", 0.5), ("-3", -3.0),
                                        ("1_6", None), ("\uff12\uff10\uff14\uff18", None), ("inf", None)])
def test_a_run_table_cell_is_a_plain_ascii_number(text, want):
    """Run-table cells are numbers as tables write them (cells.num): Python's float() would take '1_6', full-width
    digits and 'inf' too."""
    from trainsim.validation.cells import num

    assert num(text) == want


@pytest.mark.parametrize("text, value", [("1,048,576", 1048576.0), ("-1,000.5", -1000.5), ("3,5", None),
                                         ("23,04", None), ("1,0000", None), (",5", None), ("12.5", 12.5)])
def test_a_table_cell_takes_commas_only_between_thousands(text, value):
    """A comma separates groups of three digits; '3,5' (a decimal comma) or '23,04' are no number, not 35 or 2304
    (10-1000x too large as published figures)."""
    from trainsim.validation.cells import num
    assert num(text) == value
