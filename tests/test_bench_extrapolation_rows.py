"""benchmarks/bench_extrapolation.py --rows FILE refuses a malformed cache, or one of another kind or version,
with one line naming the file and the reason (exit 2), and reads back the rows it wrote."""

from __future__ import annotations

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


def cache(rows, kind="trainsim-residual-rows", version=1) -> str:
    return json.dumps({"kind": kind, "schema_version": version, "rows": rows})


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
