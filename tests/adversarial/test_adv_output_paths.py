"""Every file the tool writes: a directory, a missing parent, a parent that is a file, an empty name or no
permission is refused in one line before any work, and nothing is left behind; a write that fails half-way
leaves the old file (or nothing), never half a file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import NCCL_H100, TINY, assert_refused, run_cli

from trainsim.specs import SpecError, safe_write

PREDICT = ["predict", "--model", "tiny-gpt", "--cluster", "cpu-host", "--seq-len", "128", "--global-batch", "8"]

# (writer id, argv with {p} for the output path, field named)
WRITERS = [
    ("trace", PREDICT + ["--trace", "{p}"], "trace"),
    ("baseline", ["regress", "--update", "--suite", str(TINY), "--baseline", "{p}"], "baseline"),
    ("profile", ["calibrate", "--import-nccl-tests", str(NCCL_H100), "--out", "{p}"], "out"),
    ("sbatch", ["calibrate", "--device", "cuda", "--out", "prof.json", "--emit-slurm", "{p}"], "emit_slurm"),
    ("sbatch-out", ["calibrate", "--device", "cuda", "--out", "{p}", "--emit-slurm", "{tmp}/job.sbatch"], "out"),
    ("measure-out", ["calibrate", "--device", "cpu", "--out", "{p}"], "out"),
]


def _targets(tmp: Path) -> dict[str, tuple[str, str]]:
    """target id -> (path, words the refusal must contain)."""
    (tmp / "a-dir").mkdir()
    (tmp / "a-file").write_text("x")
    return {
        "directory": (str(tmp / "a-dir"), "is a directory"),
        "missing-parent": (str(tmp / "no" / "such" / "f.json"), "directory does not exist"),
        "parent-is-file": (str(tmp / "a-file" / "f.json"), "not a directory"),
        "dot": (str(tmp / "."), "not a file name"),
        "empty": ("", "not a file name"),
    }


TARGET_IDS = ["directory", "missing-parent", "parent-is-file", "dot", "empty"]


@pytest.mark.parametrize("writer, argv, field", WRITERS, ids=[w[0] for w in WRITERS])
@pytest.mark.parametrize("target", TARGET_IDS)
def test_bad_output_path_is_refused_up_front(writer, argv, field, target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, words = _targets(tmp_path)[target]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = run_cli([a.format(p=path, tmp=tmp_path) for a in argv])
    assert_refused(r, f"{field}: ")
    assert words in r.err or (target == "dot" and "is a directory" in r.err), r.err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("writer, argv, field", WRITERS, ids=[w[0] for w in WRITERS])
def test_no_permission_is_refused(writer, argv, field, tmp_path, monkeypatch):
    """Refused when the directory is not writable (os.access is what the check asks; as root every directory
    is writable, so the refusal is exercised by making os.access say no)."""
    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(safe_write.os, "access", lambda p, mode: False if Path(p) == locked else real(p, mode))
    r = run_cli([a.format(p=locked / "f.json", tmp=tmp_path) for a in argv])
    assert_refused(r, f"{field}: no permission to write in")
    assert list(locked.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root writes anywhere")
def test_really_unwritable_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert_refused(run_cli(PREDICT + ["--trace", str(locked / "t.json")]), "no permission")
    finally:
        locked.chmod(stat.S_IRWXU)


@pytest.mark.parametrize("target", ["a-file", "missing-parent"])
def test_report_out_dir(target, tmp_path):
    (tmp_path / "a-file").write_text("x")
    out = tmp_path / "a-file" if target == "a-file" else tmp_path / "no" / "r"
    r = run_cli(["report", "--model", "tiny-gpt", "--cluster", "cpu-host", "--no-plan", "--out", str(out)])
    assert_refused(r, "out: ")
    assert not (tmp_path / "no").exists()


def test_execute_profile_trace_onto_a_file_is_refused_before_launch(tmp_path):
    (tmp_path / "f").write_text("x")
    assert_refused(run_cli(["execute", "--profile-trace", str(tmp_path / "f")]), "profile_trace: ")


def test_trace_is_written_whole(tmp_path):
    out = tmp_path / "t.json"
    r = run_cli(PREDICT + ["--trace", str(out)])
    assert r.code == 0, r.err
    doc = json.loads(out.read_text())
    assert doc["traceEvents"] and [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temp file left


def test_failed_rename_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "baseline.json"
    target.write_text("old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_write.os, "replace", boom)
    with pytest.raises(SpecError, match="baseline: cannot write .*No space left on device"):
        safe_write.write_atomic(target, "new" * 1000, "baseline")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["baseline.json"]


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(safe_write.os, "fsync", boom)
    with pytest.raises(SpecError, match="cannot write"):
        safe_write.write_atomic(tmp_path / "p.json", "{}", "out")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_keeps_umask_permissions(tmp_path):
    p = safe_write.write_atomic(tmp_path / "a.txt", "x", "out")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask
    p = safe_write.write_atomic(tmp_path / "b.sh", "x", "out", mode=0o755)
    assert stat.S_IMODE(p.stat().st_mode) == 0o755


def test_regress_update_onto_a_directory_does_no_work(tmp_path, monkeypatch):
    """The baseline path is checked before a single prediction."""
    import trainsim.validation.regress as regress

    monkeypatch.setattr(regress, "snapshot", lambda *a, **k: pytest.fail("predicted before checking --baseline"))
    assert_refused(run_cli(["regress", "--update", "--suite", str(TINY), "--baseline", str(tmp_path)]),
                   "baseline: ")
