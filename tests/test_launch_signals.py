"""A launch interrupted by SIGTERM takes its torchrun group with it: the ranks run in a session of their own
(kernels/launch.run_torchrun), so without the cleanup they would outlive the CLI that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

MARKER = "time.sleep(120.0123)"  # unique in the rank's command line


def _ranks_alive() -> list[int]:
    """PIDs whose command line holds MARKER (the rank; torchrun's own line does not)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if MARKER in cmd and "run_torchrun" not in cmd:
                out.append(int(d.name))
    return out


@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the ranks")
def test_sigterm_kills_the_launched_ranks():
    code = ("from trainsim.kernels.launch import run_torchrun; "
            f"run_torchrun('timeit', ['-n', '1', 'import time; {MARKER}'], 1, timeout_s=300)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _ranks_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _ranks_alive(), "the rank never started"
        os.kill(parent.pid, signal.SIGTERM)
        assert parent.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 15
        while _ranks_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _ranks_alive() == []
    finally:
        parent.kill()
        for pid in _ranks_alive():
            os.kill(pid, signal.SIGKILL)
