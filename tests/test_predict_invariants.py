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


def test_plans_best_layout_reproduces_with_predict_on_the_same_file(tmp_path, capsys):
    """plan's best row, predicted with the same scenario file and the row's layout flags, gives the row's step
    time, peak memory and fits. The file turns sequence parallelism on; the row is a tp = 1 layout, which runs
    without it, so predict must be able to turn the file's setting off (--no-sequence-parallel)."""
    scenario = tmp_path / "sp.yaml"
    scenario.write_text("model: llama3-8b\ncluster: dgx-h100\ngpus: 8\n"
                        "training: {seq_len: 8192, global_batch: 128, micro_batch: 1, dtype: bf16, "
                        "sequence_parallel: true, distributed_optimizer: true}\nlayout: {tp: 2}\n")
    assert main(["plan", str(scenario), "--top", "1", "--tp", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["tp"] == 1 and not row["sequence_parallel"]
    flags = ["--tp", "1", "--pp", str(row["pp"]), "--cp", str(row["cp"]), "--micro-batch", str(row["micro_batch"]),
             "--recompute", row["recompute"], "--zero", str(row["zero"]), "--schedule", row["schedule"],
             "--no-sequence-parallel", "--json"]
    assert main(["predict", str(scenario), *flags]) == 0
    pred = json.loads(capsys.readouterr().out)
    assert pred["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)
    assert pred["memory"]["peak_bytes"] == pytest.approx(row["peak_bytes"], rel=1e-9)
    assert pred["fits"] is True
    assert main(["predict", str(scenario), *flags[:-2], "--json"]) == 2  # the file's sp on tp = 1: refused
    assert "training.sequence_parallel" in capsys.readouterr().err


H200_PROFILE = "benchmarks/data/profile_h200.json"  # microbenchmarks on an NVIDIA H200 (fingerprint device_name)


@pytest.mark.parametrize("cluster, noted", [("hgx-h200", False), ("dgx-a100", True), ("dgx-h100", True)])
def test_a_profile_measured_on_another_gpu_is_named(cluster, noted, capsys):
    """A microbenchmark profile holds absolute times of the GPU it ran on; predicting another GPU's cluster with
    it uses them as measured (on A100 the H200's ~775 TFLOP/s GEMM fit gives more than the A100's 312 TFLOP/s
    bf16 peak), so the prediction says which GPU the profile measured and which the cluster has."""
    from pathlib import Path
    profile = str(Path(__file__).resolve().parents[1] / H200_PROFILE)
    assert main(["predict", "--model", "llama3-8b", "--cluster", cluster, "--gpus", "8", "--global-batch", "64",
                 "--seq-len", "4096", "--zero", "1", "--calibration", profile, "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    named = [w for w in warnings if w.startswith("calibration measured on NVIDIA H200 (preset h200)")]
    assert bool(named) == noted


def test_plans_best_layout_does_not_depend_on_how_many_rows_are_shown(capsys):
    """The screen (closed form) and the engine order near-ties differently: on this file the screen puts ZeRO-3
    (6.771 s) ahead of ZeRO-2 (6.814 s) and the engine ZeRO-2 (6.814 s) ahead of ZeRO-3 (6.821 s). The engine
    confirms at least the screen's best 10 (planner.CONFIRMED_AT_LEAST), so --top 1, 4 and 5 recommend one
    layout."""
    firsts = []
    for top in ("1", "4", "5"):
        assert main(["plan", "examples/llama3-8b-h100-64.yaml", "--top", top, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        assert sum(r["fits"] for r in rows) == int(top)
        firsts.append({k: rows[0][k] for k in ("tp", "pp", "dp", "cp", "micro_batch", "recompute", "zero")})
    assert firsts[0] == firsts[1] == firsts[2]


@pytest.mark.parametrize("seq, hfu, attention", [(131072, 1.2, True), (4096, 1.2, False), (4096, 2.0, False)])
def test_hfu_above_one_names_attention_only_where_it_can_explain_it(seq, hfu, attention):
    """HFU counts attention over the full s x s matrix while a causal kernel computes about half: that explains
    HFU above 1 only where halving the blocks' core-attention FLOPs brings it to 1 or below (at 131,072 tokens
    attention is 83 % of a Llama 3 8B block's FLOPs, at 4,096 13 %); otherwise the note points at the
    calibration or the GPU's efficiencies (an H200 profile on an A100 cluster gives HFU 1.99)."""
    from trainsim.simulator.metrics import _above_peak_note
    from trainsim.specs.loaders import build_scenario

    scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "layout": {"cp": 32},
                          "training": {"seq_len": seq, "global_batch": 32}})
    note = _above_peak_note(scn, hfu)
    assert note.startswith("MFU/HFU above 100 %")
    assert ("causal kernel computes about half" in note) == attention


def test_a_profile_across_the_cpu_gpu_divide_is_refused(tmp_path, capsys):
    """A profile measured on the host CPU (fingerprint device cpu) holds CPU times, a GPU profile GPU times: neither
    can price the other kind of device, so predict, plan and collective refuse it naming the calibration (the H200
    profile's fingerprint rewritten to a CPU run; the H200 profile itself on the CPU host)."""
    from pathlib import Path
    h200 = Path(__file__).resolve().parents[1] / H200_PROFILE
    prof = json.loads(h200.read_text())
    prof["fingerprint"].update(device="cpu", device_name="x86_64")
    prof["reference_preset"] = "cpu"  # as `trainsim calibrate --device cpu` writes it
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(prof))
    gpu_run = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "64", "--seq-len",
               "4096", "--calibration", str(cpu)]
    for argv in (["predict", *gpu_run], ["plan", *gpu_run, "--top", "1"],
                 ["validate", "--dataset", "llama3", "--fast", "--calibration", str(cpu)],
                 ["collective", "--cluster", "cpu-host", "--gpus", "2", "--sizes", "1M", "--calibration", str(h200)],
                 ["predict", "examples/tiny-gpt-cpu.yaml", "--calibration", str(h200)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: calibration: the profile was measured on"), err


def test_a_renamed_cpu_device_is_still_a_cpu(tmp_path, capsys):
    """The CPU/GPU refusal reads the device's kind, not its name: the cpu preset under another name (a cluster file
    describing one's own host) still refuses a GPU profile."""
    from pathlib import Path
    h200 = Path(__file__).resolve().parents[1] / H200_PROFILE
    cluster = tmp_path / "my-host.yaml"
    cluster.write_text("preset: cpu-host\ngpu: {preset: cpu, name: My workstation's cores}\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"model: tiny-gpt\ncluster: {cluster}\ngpus: 2\nlayout: {{pp: 2}}\n"
                        "training: {seq_len: 128, global_batch: 8, micro_batch: 2, dtype: fp32}\n")
    assert main(["predict", str(scenario), "--calibration", str(h200)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the cluster's devices are My workstation's cores" in err[0], err


def test_a_profile_from_a_device_no_preset_names_is_noted(tmp_path):
    """Measured times from a device that names no preset (an edited fingerprint, a GPU without a preset) are used as
    they are: the prediction says they are unchecked against the cluster's GPU."""
    from pathlib import Path

    from trainsim.cost_models.profile import load_profile
    from trainsim.simulator.predict import predict
    from trainsim.specs import build_scenario
    prof = json.loads((Path(__file__).resolve().parents[1] / H200_PROFILE).read_text())
    prof["fingerprint"]["device_name"] = "Tesla V100-SXM2-32GB"
    path = tmp_path / "v100.json"
    path.write_text(json.dumps(prof))
    scn = build_scenario({"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8,
                          "training": {"seq_len": 4096, "global_batch": 64}})
    notes = [w for w in predict(scn, profile=load_profile(path)).warnings if "no preset names" in w]
    assert len(notes) == 1 and "Tesla V100-SXM2-32GB" in notes[0] and "H100 SXM5 80GB" in notes[0], notes


def test_collective_names_the_device_its_measured_fits_come_from(tmp_path, capsys):
    """`collective --calibration` with an all-reduce fit measured on an H200 pricing an A100 cluster says so on
    stderr; --json keeps stdout a list of rows."""
    from pathlib import Path
    prof = json.loads((Path(__file__).resolve().parents[1] / H200_PROFILE).read_text())
    prof["collective_fits"] = [{"op": "all_reduce", "group_size": 8, "nodes": 1, "alpha_s": 1e-3,
                                "beta_s_per_byte": 1e-9, "busbw_Bps": 1.75e9, "rms_rel_error": 0.01, "n_points": 5,
                                "source": "measured", "backend": "nccl"}]
    h200 = tmp_path / "h200-fits.json"
    h200.write_text(json.dumps(prof))
    assert main(["collective", "--cluster", "dgx-a100", "--sizes", "1M", "--calibration", str(h200), "--json"]) == 0
    out, err = capsys.readouterr()
    assert isinstance(json.loads(out), list)
    assert "note: calibration measured on NVIDIA H200 (preset h200)" in err and "A100" in err, err
