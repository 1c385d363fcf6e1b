"""`trainsim calibrate` flags given in a mode that does not read them: --no-loo in a measuring run, and the
measuring worker's flags (--quick, --reps, --dtype, --skip, --peak-preset, --fit-min-bytes) with
--import-nccl-tests or --from-runs, were accepted and ignored while the other modes' flags were refused."""

from __future__ import annotations

import pytest
from conftest import NCCL_H100, REPO, assert_refused, run_cli

MEGATRON_LOG = REPO / "tests" / "data" / "runs" / "megatron_gpt1p3b_8xa100.log"


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    from trainsim.kernels import launch

    monkeypatch.setattr(launch, "run_torchrun", lambda *a, **k: pytest.fail("launched"))


MODES = {
    "measure": ["calibrate", "--device", "cpu"],
    "import": ["calibrate", "--import-nccl-tests", NCCL_H100],
    "from_runs": ["calibrate", "--from-runs", MEGATRON_LOG, "--cluster", "dgx-a100"],
}


@pytest.mark.parametrize("mode, flags, field", [
    ("measure", ["--no-loo"], "no_loo"),
    ("import", ["--quick"], "quick"), ("import", ["--reps", "5"], "reps"), ("import", ["--dtype", "bf16"], "dtype"),
    ("import", ["--fit-min-bytes", "1024"], "fit_min_bytes"), ("import", ["--no-loo"], "no_loo"),
    ("from_runs", ["--quick"], "quick"), ("from_runs", ["--warmup", "3"], "warmup"),
    ("from_runs", ["--skip", "gemm"], "skip"), ("from_runs", ["--peak-preset", "h100-sxm"], "peak_preset"),
    ("from_runs", ["--nccl-op", "all_reduce"], "nccl_op"), ("from_runs", ["--nproc", "2"], "nproc"),
    ("import", ["--warmup", "0"], "warmup"), ("import", ["--fit-min-bytes", "0"], "fit_min_bytes"),  # 0 is given
])
def test_a_flag_the_mode_does_not_read_is_refused(tmp_path, mode, flags, field):
    r = run_cli([*MODES[mode], *flags, "--out", tmp_path / "p.json"])
    assert_refused(r, f"{field}: not used by")
    assert not (tmp_path / "p.json").exists()


def test_the_modes_own_flags_still_run(tmp_path):
    assert run_cli([*MODES["import"], "--out", tmp_path / "a.json"]).code == 0
    assert run_cli([*MODES["from_runs"], "--no-loo", "--out", tmp_path / "b.json"]).code == 0
    r = run_cli(["calibrate", "--device", "cuda", "--quick", "--reps", "3", "--emit-slurm", tmp_path / "j.sbatch",
                 "--out", tmp_path / "c.json"])
    assert r.code == 0, r.err
