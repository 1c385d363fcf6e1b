"""benchmarks/bench_extrapolation.py --rows FILE refuses a malformed cache, or one of another kind, version or
model code, with one line naming the file and the reason (exit 2), and reads back the rows it wrote."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "bench_extrapolation.py"
FEAT = {"gpu": ["H100 SXM"], "framework": ["megatron"], "parallelism": ["tp"], "family": ["llama-style"]}


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--no-extrapolation", "--rows", str(path)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO)


def _script():
    spec = importlib.util.spec_from_file_location("bench_extrapolation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KEY = _script().model_code_key()


def cache(rows, kind="trainsim-residual-rows", version=1, model_code=KEY) -> str:
    return json.dumps({"kind": kind, "schema_version": version, "model_code": model_code, "rows": rows})


@pytest.mark.parametrize("text, reason", [
    ("[1, 2", "not valid JSON"),
    (json.dumps([["a", 0.1, FEAT, "r1"]]), "not a residual-rows cache"),          # the unversioned list
    (cache([], version=0), "schema_version 0"),
    (cache([["a", "x", FEAT, "r1"]]), "row 0: residual 'x' is not a finite number"),
    (cache([["a", 0.1, {"gpu": ["H100"]}, "r1"]]), "row 0: features must map"),
    (cache([["a", 0.1, FEAT]]), "row 0 is not a"),
    ("\xff", ""),
], ids=["json", "old-list", "version", "residual", "features", "short-row", "bytes"])
def test_a_bad_rows_cache_is_one_line_naming_the_file(tmp_path, text, reason):
    f = tmp_path / "rows.json"
    if text == "\xff":
        f.write_bytes(b"\xff\xfe")
        reason = "not UTF-8"
    else:
        f.write_text(text, encoding="utf-8")
    r = run(f)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-800:]
    assert len(lines) == 1 and lines[0].startswith("error: --rows:"), r.stderr[-800:]
    assert reason in lines[0] and ("rows.json" in lines[0] or "row 0" in lines[0]), lines[0]


def test_a_good_cache_is_read_back(tmp_path):
    """Three sources of rows written in the script's format give the coverage table, exit 0."""
    rows = [[f"s{k}", 0.05 * ((i % 5) - 2), FEAT, f"s{k}-{i}"] for k in range(3) for i in range(6)]
    f = tmp_path / "rows.json"
    f.write_text(cache(rows), encoding="utf-8")
    r = run(f)
    assert r.returncode == 0, r.stderr[-800:]
    assert "18 rows, 3 sources" in r.stdout


@pytest.mark.parametrize("model_code", [None, "0.1.0+0000000000000000"], ids=["unkeyed", "other-code"])
def test_rows_of_other_model_code_are_refused_before_the_extrapolation_runs(tmp_path, model_code):
    """A cache without this code's key (written by older model code, or before keys) is refused in one line naming
    --rows, and before the extrapolation section prints anything (it is not given --no-extrapolation here)."""
    f = tmp_path / "rows.json"
    f.write_text(cache([["a", 0.1, FEAT, "r1"]], model_code=model_code), encoding="utf-8")
    r = subprocess.run([sys.executable, str(SCRIPT), "--rows", str(f)], capture_output=True, text=True, timeout=120,
                       check=False, cwd=REPO)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and r.stdout == "", (r.stdout[-400:], r.stderr[-800:])
    assert len(lines) == 1 and lines[0].startswith("error: --rows:") and "other model code" in lines[0], lines
    assert KEY in lines[0]


def test_the_model_code_key_follows_the_model_source(tmp_path, monkeypatch):
    """The key is trainsim's version plus a hash of the predicting packages' files: a copy of the package with one
    cost-model file edited gets another key, a copy with only the CLI edited the same one."""
    import shutil

    import trainsim
    src = Path(trainsim.__file__).resolve().parent
    copy = tmp_path / "trainsim"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = _script()

    def key_of(root: Path) -> str:
        monkeypatch.setattr(trainsim, "__file__", str(root / "__init__.py"))
        return module.model_code_key()
    assert key_of(copy) == KEY
    (copy / "cli" / "main.py").write_text((copy / "cli" / "main.py").read_text() + "\n# edit\n")
    assert key_of(copy) == KEY
    cm = copy / "cost_models" / "memory.py"
    target = cm if cm.exists() else next((copy / "cost_models").glob("*.py"))
    target.write_text(target.read_text() + "\n# edit\n")
    assert key_of(copy) != KEY and key_of(copy).startswith(trainsim.__version__ + "+")
