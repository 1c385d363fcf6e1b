"""`trainsim execute` end to end: refusal of bad layouts before any process starts, the JSON comparison,
running inside an existing torchrun, and faults (a rank that dies or hangs ends every rank, no orphans)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from trainsim.cli.main import main

pytest.importorskip("torch")


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if anything tries to start torchrun."""
    from trainsim.kernels import launch

    def forbidden(*a, **k):
        raise AssertionError("torchrun was started for an invalid layout")
    monkeypatch.setattr(launch, "run_torchrun", forbidden)


@pytest.mark.parametrize("argv, field", [
    (["--tp", "3"], "layout.tp"),                                    # 3 does not divide 4 heads
    (["--dp", "2", "--zero", "2"], "training.zero"),                 # no torch ZeRO-2
    (["--cp", "2"], "layout.cp"),
    (["--dp", "16", "--global-batch", "16"], "layout"),                                    # more processes than the CPU allows
    (["--dtype", "bf16"], "training.dtype"),                         # fp32 only on CPU
    (["--pp", "2", "--global-batch", "2", "--micro-batch", "2", "--schedule", "1f1b"], "training.global_batch"),
    (["--dp", "4", "--zero", "3", "--hsdp", "3"], "hsdp"),
    (["--dp", "2", "--hsdp", "2"], "hsdp"),                          # HSDP needs zero 3
    # settings the executor's torch run does not have: predicting them would compare a run against another layout
    (["--dp", "4", "--zero", "3", "--framework", "torch", "--dp-shard", "2", "--hsdp", "1"], "layout.dp_shard"),
    (["--dp", "4", "--zero", "3", "--framework", "torch", "--dp-shard", "1", "--hsdp", "2"], "layout.dp_shard"),
    (["--dp", "2", "--dp-bucket-mb", "25"], "training.dp_bucket_mb"),
    (["--dp", "2", "--no-overlap-grad-reduce"], "training.overlap_grad_reduce"),
    (["--model", "mixtral-8x7b"], "model.num_experts"),
    (["--model", "nemotron-h-8b"], "model.hybrid_pattern"),          # Mamba layers are simulated only
    (["--steps", "0"], "steps"),
    (["--model", "mpt-125m", "--pp", "2"], "model.tie_embeddings"),
    (["--calibration", "/nonexistent/p.json"], "calibration"),
    (["--cluster", "dgx-h100", "--gpus", "1"], "cluster: --device cpu runs on host CPU ranks"),  # report refuses the pair
], ids=lambda x: "-".join(x) if isinstance(x, list) else x)
def test_bad_layouts_are_refused_before_any_process_starts(no_launch, capsys, argv, field):
    code = main(["execute", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert field in err[0]


def test_cpu_defaults_fill_what_flags_leave_out():
    import argparse

    from trainsim.cli.execute import register, scenario_for_execute
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    s = scenario_for_execute(ap.parse_args(["execute", "--tp", "2", "--pp", "2"]))
    assert (s.model.name, s.training.dtype, s.training.seq_len, s.cluster.num_gpus, s.dp) == ("tiny-gpt", "fp32", 128, 4, 1)


def _worker_pids(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker`` (our unique --timeout-s value)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "execute_worker" in cmd and marker in cmd:
            pids.append(int(pid))
    return pids


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", ["die", "hang"])
def test_a_rank_that_dies_or_hangs_ends_every_rank_within_60s(capsys, fault):
    """Rank 1 fails inside its first timed forward while rank 0 waits in a TP collective of a mesh sub-group."""
    marker = "17.25" if fault == "die" else "17.5"
    t0 = time.monotonic()
    code = main(["execute", "--tp", "2", "--seq-len", "32", "--steps", "2", "--inject-fault", fault,
                 "--timeout-s", marker, "--no-predict"])
    elapsed = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: execute: 2-process run failed") and len(err.strip().splitlines()) == 1
    assert f"injected fault: {fault}" in err
    if fault == "hang":
        assert "Timed out" in err or "no progress" in err
    assert elapsed < 60 + 15  # 60 s for the ranks + torchrun start-up on a loaded 2-core machine
    assert _worker_pids(marker) == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_execute_json_compares_measured_and_predicted(capsys, tmp_path):
    code = main(["execute", "--pp", "2", "--seq-len", "32", "--steps", "2", "--optimizer", "sgd", "--check",
                 "--json", "--profile-trace", str(tmp_path / "trace")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["reference"]["max_abs_loss_diff"] < 1e-5
    assert out["mechanism"]["pp"].endswith("Schedule1F1B")
    m, p, e = out["measured"], out["predicted"], out["error_pct"]
    assert m["step_time_s"] > 0 and m["step_time_min_s"] <= m["step_time_s"] <= m["step_time_p99_s"]
    assert len(m["step_times_s"]) == 2 and len(m["losses"]) == 3
    assert len(m["per_stage"]) == len(p["per_stage"]) == len(e["per_stage"]) == 2
    assert [r["pp_rank"] for r in m["ranks"]] == [0, 1] and all(r["params"] > 0 for r in m["ranks"])
    for stage in e["per_stage"]:
        assert abs(stage["params"]) < 1 and abs(stage["activations_per_microbatch"]) < 5
    if "step_time_s" in p:  # the engine's prediction (trainsim.simulator.predict) when present
        assert e["step_time"] == pytest.approx(100 * (p["step_time_s"] - m["step_time_s"]) / m["step_time_s"])
    traces = sorted(os.listdir(tmp_path / "trace"))
    assert traces == ["execute-rank0.json", "execute-rank1.json"]
    with open(tmp_path / "trace" / traces[0]) as f:
        assert json.load(f)["traceEvents"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_runs_inside_an_existing_torchrun():
    """`trainsim execute` started by torchrun (as Slurm would) uses that world; rank 0 prints the JSON."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "trainsim.cli.main", "execute", "--dp", "2", "--seq-len", "32", "--steps", "2",
           "--optimizer", "sgd", "--json", "--no-predict"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=200, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    start = res.stdout.index("{")
    out = json.loads(res.stdout[start:res.stdout.rindex("}") + 1])
    assert out["world_size"] == 2 and out["mechanism"]["dp"].startswith("DDP")
    assert len(out["measured"]["losses"]) == 3


def test_dp_shard_runs_the_hsdp_it_predicts(no_launch):
    """layout.dp_shard without --hsdp runs dp/S replicas of S-rank shard groups: the job and its prediction have
    the same shard group (4 ranks, S=2: 2 replicas), not full sharding over 4 beside an HSDP prediction."""
    import argparse

    from trainsim.cli.execute import register, replicas, scenario_for_execute
    from trainsim.kernels.exec_config import make_job
    from trainsim.kernels.executor import prediction_scenario
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    args = ap.parse_args(["execute", "--dp", "4", "--zero", "3", "--framework", "torch", "--dp-shard", "2"])
    s = scenario_for_execute(args)
    job = make_job(s, device="cpu", hsdp=replicas(s, args.hsdp))
    assert job.hsdp == 2 and prediction_scenario(job).dp_shard == 2
    plain = scenario_for_execute(ap.parse_args(["execute", "--dp", "4", "--zero", "3"]))
    assert replicas(plain, None) == 1


def test_a_loss_other_than_the_executors_is_refused(no_launch, tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("model: tiny-gpt\ncluster: cpu-host\ngpus: 2\n"
                 "training: {seq_len: 64, global_batch: 4, dtype: fp32, cross_entropy: fused}\n")
    assert main(["execute", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training.cross_entropy" in err[0], err
