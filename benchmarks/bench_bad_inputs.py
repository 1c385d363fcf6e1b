"""How long refusing a hostile file takes: every input is refused by the one reader (specs/safe_read.py).

Run: python benchmarks/bench_bad_inputs.py        (pins itself to one core; prints figures, asserts nothing)

Each figure is the median of REPEATS in-process `trainsim predict` calls that must end in exit 2; the file is
the scenario (or the --model file). Before the reader, the 50 000-deep '[' YAML and the model-file alias bomb
ran for minutes and the deep JSON ended in a RecursionError traceback.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import one_core

from trainsim.cli.main import main

REPEATS = 5


def bomb(levels: int = 10) -> str:
    text = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text


FILES = {
    "alias bomb (9^10 nodes), --model": ("model", ".yaml", bomb()),
    "50 000-deep [ (YAML)": ("scenario", ".yaml", "[" * 50_000 + "]" * 50_000),
    "50 000-deep [ (JSON), --model": ("model", ".json", "[" * 50_000 + "]" * 50_000),
    "5 000-deep block sequence": ("scenario", ".yaml", "- " * 5000 + "x\n"),
    "recursive alias": ("scenario", ".yaml", "a: &a [*a]\n"),
    "duplicate key": ("scenario", ".yaml", "model: tiny-gpt\ngpus: 8\ngpus: 64\n"),
    # Near the 4 MiB limit: the cost of PyYAML's pure-Python scanner itself (the limit bounds it).
    "3.9 MiB of comments + dup key": ("scenario", ".yaml", ("#" + "x" * 1023 + "\n") * 3900 + "gpus: 1\ngpus: 2\n"),
}


def time_refusal(argv: list[str]) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        times.append(time.perf_counter() - t0)
        if code != 2:
            raise SystemExit(f"{argv}: exit {code}, expected 2")
    return statistics.median(times)


def run() -> None:
    one_core()
    time_refusal(["predict", "--model", "nope"])  # imports out of the way
    with tempfile.TemporaryDirectory() as d:
        print(f"{'hostile input':<36} {'refused in':>12}")
        for label, (role, suffix, text) in FILES.items():
            f = Path(d) / f"input{suffix}"
            f.write_text(text)
            argv = (["predict", str(f)] if role == "scenario"
                    else ["predict", "--model", str(f), "--cluster", "dgx-h100"])
            print(f"{label:<36} {time_refusal(argv) * 1e3:>9.1f} ms")


if __name__ == "__main__":
    run()
