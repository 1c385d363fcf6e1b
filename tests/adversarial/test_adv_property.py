"""Property: random argv and random file bytes, fed to every command in this process, end in exit 0 or 2;
on exit 2 at most one stderr line and no file left behind; never a traceback or an escaping exception.

Time is bounded by the hypothesis settings (a fixed number of derandomized examples per command and a
generous per-example deadline that only a hang would reach), not by a timed assertion. Launching real work is
replaced by a stand-in: ``execute`` and a measuring ``calibrate`` would start torchrun.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainsim.cli.main import build_parser

N = int(os.environ.get("TRAINSIM_FUZZ_EXAMPLES", "0"))
PROPERTY = settings(max_examples=N or 25, deadline=timedelta(seconds=60), derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

# Flags left out of the random pool: they start other processes or a cluster client, or are exit-1 gates.
EXCLUDED = {"--workers", "--dask-scheduler", "--max-mape", "--max-worst", "--inject-fault", "--help", "-h",
            "--version"}
# What each command always gets, so that no random draw starts an hour of work: {f} is the random file.
FIXED = {
    "predict": ["{f}"],
    "plan": ["{f}"],
    "report": ["{f}", "--no-plan", "--out", "{d}/report"],
    "execute": ["{f}"],
    "validate": ["--dataset", "{f}", "--fast"],
    "regress": ["--suite", "{f}", "--fast", "--baseline", "{d}/baseline.json"],
    "collective": ["--cluster", "{f}"],
    "calibrate": ["--import-nccl-tests", "{f}", "--out", "{d}/profile.json"],
}
VALUES = ["0", "-1", "1", "2", "8", "64", "nan", "inf", "1e400", "abc", "", "99999999999", "1.5", "\n", "a\nb",
          "tiny-gpt", "cpu-host", "dgx-h100", "llama3-8b", "{f}", "{d}", "{d}/out.json", "/nonexistent/x", "00:30:00",
          "1K:4K", "all_reduce", "fp32", "-"]

FILE_TEXTS = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=300),
    st.sampled_from(["", "{}", "[]", "~", "model: tiny-gpt\ncluster: cpu-host\n", "a: &a [*a]\n", "[" * 2000,
                     '{"a": 1, "a": 2}', "model: tiny-gpt\nmodel: tiny-gpt\n", "row_id,busbw_GBps\nr,-1\n",
                     "#  size count type redop root time algbw busbw #wrong\n 1024 256 float sum -1 -5 1 1 0\n"]),
    st.recursive(st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False)
                 | st.text(max_size=8),
                 lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(
                     ["model", "cluster", "gpus", "training", "layout", "name", "seq_len", "tp", "x"]), c, max_size=4),
                 max_leaves=12).map(lambda v: __import__("json").dumps(v)),
)


def _flags(command: str) -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.option_strings and a.option_strings[0] not in EXCLUDED]


@st.composite
def argvs(draw, command: str) -> list[str]:
    argv = [command, *FIXED[command]]
    for action in draw(st.lists(st.sampled_from(_flags(command)), max_size=4)):
        argv.append(action.option_strings[-1])
        if action.nargs != 0:
            pool = [str(c) for c in action.choices] if action.choices and draw(st.booleans()) else VALUES
            argv.append(draw(st.sampled_from(pool)))
    return argv


class WouldLaunch(Exception):
    """Raised by the stand-ins for torchrun: the command got as far as starting real work."""


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    import trainsim.kernels.executor as executor
    import trainsim.kernels.launch as launch

    def refuse(*a, **k):
        raise WouldLaunch()

    monkeypatch.setattr(executor, "run_jobs", refuse)
    monkeypatch.setattr(launch, "run_torchrun", refuse)
    monkeypatch.setattr(launch, "cuda_device_count", lambda: 0)


def _check(argv: list[str], content: str | bytes, suffix: str, workdir: Path) -> None:
    for p in sorted(workdir.rglob("*"), reverse=True):  # a fresh directory per example
        p.unlink() if not p.is_dir() else p.rmdir()
    f = workdir / f"input{suffix}"
    f.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    args = [a.replace("{f}", str(f)).replace("{d}", str(workdir)) for a in argv]
    before = sorted(str(p) for p in workdir.rglob("*"))
    try:
        r = run_cli(args)
    except WouldLaunch:
        return
    assert "Traceback" not in r.err and "Traceback" not in r.out, r.err[-2000:]
    assert r.code in (0, 2), f"exit {r.code} for {args}: {r.err[-1000:]}"
    if r.code == 2:
        assert len(r.err_lines) <= 1, f"{args}: {r.err!r}"
        assert sorted(str(p) for p in workdir.rglob("*")) == before, f"{args} left a file behind"


@pytest.mark.parametrize("command", list(FIXED))
def test_random_argv_and_file_bytes(command, tmp_path):
    @PROPERTY
    @given(argv=argvs(command), content=FILE_TEXTS, suffix=st.sampled_from([".yaml", ".json", ".csv", ".txt"]))
    def prop(argv, content, suffix):
        _check(argv, content, suffix, tmp_path)

    prop()


def test_bare_trainsim_prints_usage_to_stderr():
    r = run_cli([])
    assert r.code == 2 and r.out == "" and r.err.startswith("usage: trainsim")
