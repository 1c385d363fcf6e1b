"""Regenerate the `trainsim validate` tables pasted in docs/validation.md.

Run: python benchmarks/regen_validation_docs.py [--check] [--jobs N] [--validation-dir DIR] [--doc PATH]

Every table in the document follows a marker line

    <!-- validate: --dataset sc21 --hide-skipped -->
    <!-- validate: --dataset mosaic --hide-skipped | summary -->

whose text is the exact argument list of `python -m trainsim.cli.main validate` (a first argument without a
leading dash is read as the dataset: `sc21 --hide-skipped`), optionally followed by `| FILTER`:

    full     everything validate prints (the default)
    table    the row table and the summary lines, without the assumptions and source
    summary  the summary line, the per-category lines and the source-basis MAPE line only

The fenced block after each marker is replaced by the command line and its filtered output (a fence is
inserted when the marker has none). MosaicML and NeMo read tables that trainsim does not bundle: they are
found through TRAINSIM_VALIDATION_DIR (`--validation-dir`, else the environment, else shared/validation beside
the checkout, as the tests do). A marker whose dataset is unavailable keeps its old block and is listed as
skipped; one whose run fails or whose output has an unknown shape keeps its old block too and makes the exit
status 1.
`--check` writes nothing and exits 1 when the document is not current. Identical argument lists run once.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "validation.md"
ENV_VAR = "TRAINSIM_VALIDATION_DIR"
FILTERS = ("full", "table", "summary")
CLI_MODULES = ("trainsim.cli.main", "trainsim.cli")  # the first one that exists runs
MARKER = re.compile(r"^<!--\s*validate:\s*(?P<args>.*?)\s*(?:\|\s*(?P<filter>[\w-]+)\s*)?-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})")
SUMMARY_LINE = re.compile(r"^[^\s│┃┏┡└┌├].*: (\d+ rows, MAPE|no rows compared)")
SECTION_END = re.compile(r"^(assumptions:|skipped \d+ rows:|source: |structure \()")
UNAVAILABLE = re.compile(r"TRAINSIM_VALIDATION_DIR|not found|No such file|does not exist", re.IGNORECASE)


@dataclass(frozen=True)
class Marker:
    """One `<!-- validate: ARGS | FILTER -->` line of the document (line index 0-based)."""

    line: int
    args: tuple[str, ...]
    filter: str

    @property
    def dataset(self) -> str:
        for i, a in enumerate(self.args):
            if a.startswith("--dataset="):
                return a.split("=", 1)[1]
            if a == "--dataset" and i + 1 < len(self.args):
                return self.args[i + 1]
        return "sc21"  # validate's default

    @property
    def label(self) -> str:
        return f"line {self.line + 1}: validate {' '.join(self.args)}" + (
            f" | {self.filter}" if self.filter != "full" else "")


@dataclass(frozen=True)
class Outcome:
    """What one run of validate gave: rc, stdout, stderr."""

    rc: int
    stdout: str
    stderr: str


class MarkerError(ValueError):
    """A marker that cannot be read (unknown filter, unbalanced quotes)."""


def normalise_args(text: str) -> tuple[str, ...]:
    """The marker's argument list; `NAME ...` (no leading dash) means `--dataset NAME ...`."""
    args = shlex.split(text)
    if args and args[0] == "validate":
        args = args[1:]
    if args and not args[0].startswith("-"):
        args = ["--dataset", *args]
    return tuple(args)


def parse_markers(lines: list[str]) -> list[Marker]:
    """Every marker of the document, in order."""
    found = []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        filt = m.group("filter") or "full"
        if filt not in FILTERS:
            raise MarkerError(f"line {i + 1}: unknown filter {filt!r} (one of {', '.join(FILTERS)})")
        try:
            found.append(Marker(i, normalise_args(m.group("args")), filt))
        except ValueError as e:
            raise MarkerError(f"line {i + 1}: {e}") from None
    return found


def apply_filter(output: str, filt: str) -> list[str]:
    """The lines of validate's output that a filter keeps (trailing spaces stripped); ValueError if the
    output has no summary line to anchor on."""
    lines = [ln.rstrip() for ln in output.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if filt == "full":
        return lines
    start = next((i for i, ln in enumerate(lines) if SUMMARY_LINE.match(ln)), None)
    if start is None:
        raise ValueError("no summary line ('NAME: N rows, MAPE ...') in validate's output")
    end = next((i for i in range(start + 1, len(lines)) if SECTION_END.match(lines[i])), len(lines))
    return lines[start:end] if filt == "summary" else lines[:end]


def command_line(marker: Marker) -> str:
    """The command shown as the block's first line."""
    shown = "$ trainsim validate " + " ".join(shlex.quote(a) for a in marker.args)
    return shown + ("   # summary lines" if marker.filter == "summary" else "")


def block_span(lines: list[str], marker: Marker) -> tuple[int, int] | None:
    """(first, last) line index of the fenced block right after the marker (blank lines allowed between),
    or None when the next non-blank line is not a fence."""
    i = marker.line + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not (m := FENCE.match(lines[i])):
        return None
    fence = m.group(1)
    for j in range(i + 1, len(lines)):
        if lines[j].strip() == fence:
            return i, j
    raise MarkerError(f"line {i + 1}: fence opened after the marker is never closed")


def cli_module() -> str:
    """The module that provides the `trainsim` command in this checkout."""
    sys.path.insert(0, str(ROOT))
    try:
        for name in CLI_MODULES:
            try:
                if importlib.util.find_spec(name) is not None:
                    return name
            except ModuleNotFoundError:
                continue
    finally:
        sys.path.remove(str(ROOT))
    raise SystemExit(f"error: none of {', '.join(CLI_MODULES)} is importable from {ROOT}")


def run_validate(args: tuple[str, ...], *, module: str, env: dict[str, str], timeout: float) -> Outcome:
    """One `python -m <cli> validate ARGS` in the repository root."""
    try:
        p = subprocess.run([sys.executable, "-m", module, "validate", *args], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(124, "", f"timed out after {timeout:g} s")
    return Outcome(p.returncode, p.stdout, p.stderr)


def validation_env(validation_dir: str | None) -> dict[str, str]:
    """The environment of the runs: this checkout first on PYTHONPATH, the unbundled tables' directory set."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"  # summary lines unwrapped (rich wraps at the terminal's width, 80 without one)
    shared = ROOT.parent / "shared" / "validation"
    if validation_dir:
        env[ENV_VAR] = validation_dir
    elif not env.get(ENV_VAR) and shared.is_dir():
        env[ENV_VAR] = str(shared)
    return env


def regenerate(text: str, runner: Callable[[tuple[str, ...]], Outcome], *, jobs: int = 1,
               log: Callable[[str], None] = print) -> tuple[str, dict[str, list[str]]]:
    """The document with every marker's block replaced by fresh output, and per outcome the markers' labels
    ('updated', 'unchanged', 'skipped', 'failed')."""
    lines = text.split("\n")
    markers = parse_markers(lines)
    unique = list(dict.fromkeys(m.args for m in markers))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = dict(zip(unique, pool.map(runner, unique)))
    report: dict[str, list[str]] = {"updated": [], "unchanged": [], "skipped": [], "failed": []}
    for marker in reversed(markers):  # bottom-up, so earlier line numbers stay valid
        kind, detail = _replace_one(lines, marker, outcomes[marker.args])
        report[kind].insert(0, marker.label + (f" ({detail})" if detail else ""))
    for kind in ("skipped", "failed"):
        for label in report[kind]:
            log(f"{kind}: {label}")
    return "\n".join(lines), report


def _replace_one(lines: list[str], marker: Marker, out: Outcome) -> tuple[str, str]:
    """Replace one marker's block in place; returns (outcome kind, detail)."""
    reason = (out.stderr.strip().splitlines() or [f"exit status {out.rc}"])[-1]
    if out.rc != 0:
        return ("skipped" if out.rc == 2 and UNAVAILABLE.search(out.stderr) else "failed"), reason
    try:
        body = [command_line(marker), *apply_filter(out.stdout, marker.filter)]
    except ValueError as e:
        return "failed", str(e)
    span = block_span(lines, marker)
    if span is None:
        lines[marker.line + 1:marker.line + 1] = ["```", *body, "```"]
        return "updated", "fence inserted"
    first, last = span
    if lines[first + 1:last] == body:
        return "unchanged", ""
    lines[first + 1:last] = body
    return "updated", ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--doc", type=Path, default=DOC,
                    help="markdown file to regenerate (default docs/validation.md)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the document is not current")
    ap.add_argument("--jobs", type=int, default=1, help="validate runs in parallel (default 1)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per validate run")
    ap.add_argument("--validation-dir", help=f"directory of the unbundled tables (sets {ENV_VAR})")
    a = ap.parse_args(argv)
    module, env = cli_module(), validation_env(a.validation_dir)
    print(f"{ENV_VAR}={env.get(ENV_VAR, '(unset)')}; running python -m {module} validate ...",
          file=sys.stderr)
    text = a.doc.read_text(encoding="utf-8")
    try:
        def runner(args: tuple[str, ...]) -> Outcome:
            return run_validate(args, module=module, env=env, timeout=a.timeout)
        new, report = regenerate(text, runner, jobs=a.jobs, log=lambda s: print(s, file=sys.stderr))
    except MarkerError as e:
        print(f"error: {a.doc}: {e}", file=sys.stderr)
        return 2
    print(", ".join(f"{len(v)} {k}" for k, v in report.items()) + f" ({a.doc})")
    if a.check:
        return 1 if new != text or report["failed"] else 0
    if new != text:
        a.doc.write_text(new, encoding="utf-8")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
