"""Shared pieces of the adversarial suite: the in-process CLI runner and the hostile-file factory."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainsim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
NCCL_H100 = REPO / "tests" / "data" / "nccl_tests" / "all_reduce_perf_8xH100.txt"
MEASURED = REPO / "tests" / "data" / "report" / "execute-tiny-gpt-cpu.json"
TINY = REPO / "examples" / "tiny-gpt-cpu.yaml"


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def run_cli(argv: list[str]) -> Run:
    """``trainsim *argv`` in this process: exit status, stdout, stderr (SystemExit caught, other exceptions not)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return Run(code, out.getvalue(), err.getvalue())


def assert_refused(r: Run, fragment: str = "") -> None:
    """Exit 2, one ``error:`` line naming ``fragment``, no traceback, nothing on stdout."""
    assert r.code == 2, f"exit {r.code}; stderr={r.err[-500:]!r}"
    assert len(r.err_lines) == 1, f"expected one stderr line, got {r.err!r}"
    line = r.err_lines[0]
    assert line.startswith("error: "), line
    assert fragment in line, f"{line!r} does not name {fragment!r}"
    assert "Traceback" not in r.err and r.out == ""


def billion_laughs(levels: int = 10) -> str:
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text


# name -> (suffix, content). Every one is hostile to any reader that takes a YAML/JSON mapping.
HOSTILE: dict[str, tuple[str, bytes | str]] = {
    "empty": (".yaml", ""),
    "binary": (".yaml", bytes(range(256)) * 4),
    "latin1": (".yaml", "name: caf\xe9\n".encode("latin-1")),
    "nul-bytes": (".yaml", "model: tiny-gpt\x00\n"),
    "deep-flow-yaml": (".yaml", "[" * 50_000 + "]" * 50_000),
    "deep-block-yaml": (".yaml", "- " * 5000 + "x\n"),
    "deep-mapping-yaml": (".yaml", "".join(" " * i + f"k{i}:\n" for i in range(300)) + " " * 300 + "v\n"),
    "deep-json": (".json", "[" * 50_000 + "]" * 50_000),
    "deep-json-objects": (".json", '{"a":' * 20_000 + "1" + "}" * 20_000),
    "alias-bomb": (".yaml", billion_laughs()),
    "alias-bomb-nested": (".yaml", "model:\n  " + billion_laughs().replace("\n", "\n  ")),
    "recursive-alias": (".yaml", "a: &a [*a]\n"),
    "python-tag": (".yaml", "model: !!python/object/apply:os.system ['echo pwned']\n"),
    "python-name-tag": (".yaml", "model: !!python/name:os.system\n"),
    "list": (".yaml", "- 1\n- 2\n"),
    "scalar": (".yaml", "just text\n"),
    "null": (".yaml", "~\n"),
    "json-list": (".json", "[1, 2]"),
    "json-nan": (".json", '{"x": NaN}'),
    "json-infinity": (".json", '{"x": -Infinity}'),
    "json-truncated": (".json", '{"x": [1, 2'),
    "json-trailing": (".json", '{"x": 1} {"y": 2}'),
    "dup-top-yaml": (".yaml", "model: tiny-gpt\ncluster: cpu-host\ngpus: 8\ngpus: 64\n"),
    "dup-nested-yaml": (".yaml", "model: tiny-gpt\ncluster: cpu-host\nlayout: {tp: 2, tp: 4}\n"),
    "dup-bool-yaml": (".yaml", "yes: 1\ntrue: 2\n"),
    "dup-top-json": (".json", '{"model": "tiny-gpt", "cluster": "cpu-host", "gpus": 8, "gpus": 64}'),
    "dup-nested-json": (".json", '{"model": "tiny-gpt",\n "layout": {"tp": 2,\n  "tp": 4}}'),
    "crlf-dup": (".yaml", "model: tiny-gpt\r\ngpus: 1\r\ngpus: 2\r\n"),
    "utf16": (".yaml", "model: tiny-gpt\n".encode("utf-16")),
    "control-chars": (".yaml", "model: \x1b[31mtiny\n"),
    # past CPython's 4300-digit int-string limit: int() raised a bare ValueError (a traceback, exit 1)
    "bigint-yaml": (".yaml", "model: tiny-gpt\ngpus: " + "1" * 5000 + "\n"),
    "bigint-json": (".json", '{"model": "tiny-gpt", "gpus": ' + "1" * 5000 + "}"),
}


@pytest.fixture(scope="session")
def hostile_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    for name, (suffix, content) in HOSTILE.items():
        p = d / f"{name}{suffix}"
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    (d / "a-directory.yaml").mkdir()
    with open(d / "huge.yaml", "wb") as fh:  # sparse: past every reader's limit, no disk used
        fh.truncate(80 * 2**20)
    shutil.copy(d / "huge.yaml", d / "huge.json")
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "fifo.yaml")
    return d


def hostile_names() -> list[str]:
    names = [f"{n}{s}" for n, (s, _) in HOSTILE.items()]
    names += ["a-directory.yaml", "huge.yaml", "missing.yaml"]
    if hasattr(os, "mkfifo"):
        names.append("fifo.yaml")
    return names
