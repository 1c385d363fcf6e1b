"""Read nccl-tests results (text tables or ``-J`` JSON) into the collective part of a calibration profile.

A cluster that already ran ``all_reduce_perf`` & co. needs no new measurement: each table row becomes a
CollectivePoint (size, time, algbw, busbw) and each (op, group size, nodes) an alpha/beta fit.

Which collective: the ``# Collective test starting: <prog>`` line (nccl-tests >= 2.14), the program in
the JSON ``args``, or the file name (``all_gather_perf...``); else the caller must say (``op=``).
Group size and nodes: the ``#  Rank .. on <host> device ..`` lines (JSON ``config.devices``); if they are
missing, the group size is recovered from the printed busbw/algbw ratio, which is nccl-tests' factor.
Times are microseconds and bandwidths GB/s (1e9 B/s) in nccl-tests; here seconds and bytes/s.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from trainsim.cost_models.profile import (
    CalibrationProfile,
    CollectivePoint,
    Fingerprint,
    Stats,
    busbw_factor,
    canonical_op,
    merge_collectives,
)
from trainsim.cost_models.profile_fit import collective_point, fit_all_collectives
from trainsim.specs.errors import SpecError, from_validation_error
from trainsim.specs.safe_read import parse_json as decode_json
from trainsim.specs.safe_read import read_text

MAX_NCCL_FILE_BYTES = 32 * 1024 * 1024

# nccl-tests program name -> canonical op (reduce, gather, scatter, hypercube have no trainsim use).
_PROGRAMS = {
    "all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather", "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all", "broadcast_perf": "broadcast", "sendrecv_perf": "send_recv",
}
_UNSUPPORTED = ("reduce_perf", "gather_perf", "scatter_perf", "hypercube_perf", "alltoallv_perf")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$")


@dataclass
class NcclRow:
    """One table row: out-of-place and in-place results (None when not printed)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    oop: tuple[float, float, float] | None  # (time_us, algbw_GBps, busbw_GBps)
    inp: tuple[float, float, float] | None


@dataclass
class NcclRun:
    """One nccl-tests run (one program invocation) as parsed."""

    op: str | None
    rows: list[NcclRow] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)   # one entry per rank, in rank order
    device_names: list[str] = field(default_factory=list)
    nccl_version: str | None = None
    iterations: int | None = None
    source: str = ""
    op_stated: bool = False  # the file's content names the collective (not only its name)

    @property
    def group_size(self) -> int | None:
        return len(self.hosts) or None

    @property
    def nodes(self) -> int | None:
        return len(set(self.hosts)) or None


def _op_from_program(text: str) -> str | None:
    base = Path(text.strip()).name.lower()
    for prog, op in _PROGRAMS.items():
        if prog in base:
            return op
    for prog in _UNSUPPORTED:
        if base.startswith(prog):
            raise SpecError("nccl-tests", f"{prog} has no counterpart in trainsim's collectives "
                            f"(supported: {', '.join(_PROGRAMS)})")
    return None


def _nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE (e.g. 21805 or 2.x style 2708) as 'major.minor.patch'."""
    if code >= 10000:
        return f"{code // 10000}.{(code // 100) % 100}.{code % 100}"
    return f"{code // 1000}.{(code // 100) % 10}.{code % 100}"


def _num(tok: str, where: str) -> float:
    try:
        v = float(tok)
    except ValueError:
        raise SpecError("nccl-tests", f"{where}: expected a number, got {tok!r}") from None
    if not math.isfinite(v) or v < 0:
        raise SpecError("nccl-tests", f"{where}: bad value {tok!r}")
    return v


# nccl-tests -C 1 prints the host's launch time where the collective's GPU time goes (src/common.cu: timeUsec =
# report_cputime ? cputimeSec : deltaSec), while algbw stays the GPU time's: no collective time to fit.
CPU_TIME_REFUSAL = ("a -C 1 run prints the CPU launch time in its time column, not the collective's time: rerun "
                    "nccl-tests without -C")


def parse_text(text: str, source: str = "") -> list[NcclRun]:
    """Parse nccl-tests' stdout. Several runs concatenated in one file give several NcclRuns."""
    runs: list[NcclRun] = []
    run: NcclRun | None = None
    columns: list[str] | None = None

    def new_run() -> NcclRun:
        r = NcclRun(op=None, source=source)
        runs.append(r)
        return r

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        s = line.strip()
        if not s:
            continue
        where = f"{source or 'input'} line {lineno}"
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            if body.startswith("nccl-tests version"):
                run = new_run()
                m = re.search(r"nccl-library=(\d+)", body)
                if m:
                    run.nccl_version = _nccl_version(int(m.group(1)))
            elif body.startswith("Collective test starting:"):
                if run is None or run.rows or run.op:
                    run = new_run()
                run.op = _op_from_program(body.split(":", 1)[1])
            elif body.startswith("nThread"):
                if run is None or run.rows:
                    run = new_run()
                m = re.search(r"iters:\s*(\d+)\s+agg", body) or re.search(r"\biters:\s*(\d+)", body.replace("warmup iters", "warmup_iters"))
                if m:
                    run.iterations = int(m.group(1))
            elif body.startswith("Rank") and _RANK_LINE.match(s):
                if run is None:
                    run = new_run()
                m = _RANK_LINE.match(s)
                assert m is not None
                run.hosts.append(m.group(4))
                run.device_names.append(m.group(7).strip())
            elif body.startswith("size") and "busbw" in body:
                columns = body.split()
                if "cputime" in columns:
                    raise SpecError("nccl-tests", f"{where}: {CPU_TIME_REFUSAL}")
            elif body.startswith("Out of bounds values") and "FAILED" in body:
                # nccl-tests' summary of its data check (-c 1): results outside the tolerance
                raise SpecError("nccl-tests", f"{where}: {body!r}: the run's data check failed; a failed run is no "
                                              "measurement")
            continue
        # A data row.
        toks = s.split()
        if not (toks[0].isascii() and toks[0].isdigit()):
            continue  # e.g. NCCL INFO lines, warnings
        if columns is None:
            raise SpecError("nccl-tests", f"{where}: data row before the column header "
                            "('#  size  count  type  redop  root  time  algbw  busbw ...')")
        if run is None:
            run = new_run()
        run.rows.append(_row_from_tokens(toks, columns, where))
    runs = [r for r in runs if r.rows]
    if not runs:
        raise SpecError("nccl-tests", f"{source or 'input'}: no result rows found (is this nccl-tests output?)")
    return runs


def _row_from_tokens(toks: list[str], columns: list[str], where: str) -> NcclRow:
    time_name = "cputime" if "cputime" in columns else "time"
    idx_time = [i for i, c in enumerate(columns) if c == time_name]
    idx_alg = [i for i, c in enumerate(columns) if c == "algbw"]
    idx_bus = [i for i, c in enumerate(columns) if c == "busbw"]
    if not idx_time or len(idx_time) != len(idx_alg) or len(idx_alg) != len(idx_bus):
        raise SpecError("nccl-tests", f"{where}: unrecognised column header {' '.join(columns)!r}")
    if len(toks) < len(columns) - 1:  # trailing timestamp column may be empty
        raise SpecError("nccl-tests", f"{where}: {len(toks)} fields, header has {len(columns)}")

    def col(name: str, default: str = "-1") -> str:
        return toks[columns.index(name)] if name in columns else default

    for i, c in enumerate(columns):  # nccl-tests' per-row data check (N/A when it ran with -c 0)
        if c == "#wrong" and i < len(toks) and toks[i] != "N/A" and not (toks[i].isascii() and toks[i].isdigit()):
            raise SpecError("nccl-tests", f"{where}: #wrong {toks[i]!r}: expected a count of wrong elements or N/A")
        if c == "#wrong" and i < len(toks) and toks[i].isdigit() and int(toks[i]) > 0:
            raise SpecError("nccl-tests", f"{where}: #wrong {toks[i]}: the collective delivered wrong data in this "
                                          "row; a failed run is no measurement")
    triples = []
    for it, ia, ib in zip(idx_time, idx_alg, idx_bus):
        triples.append((_num(toks[it], where), _num(toks[ia], where), _num(toks[ib], where)))
    oop = triples[0] if len(triples) >= 1 else None
    inp = triples[1] if len(triples) >= 2 else None
    size = int(_num(col("size"), where))
    count = int(_num(col("count", "0"), where))
    root_tok = col("root")
    root = int(root_tok) if re.fullmatch(r"-?\d+", root_tok) else -1
    return NcclRow(size, count, col("type", "float"), col("redop", "none"), root, oop, inp)


def parse_json(data: object, source: str = "") -> list[NcclRun]:
    """Parse nccl-tests' ``-J`` JSON (file version 2: config.devices, results[] with out_of_place/in_place)."""
    if not isinstance(data, dict) or "results" not in data:
        raise SpecError("nccl-tests", f"{source or 'input'}: JSON without a 'results' list is not nccl-tests -J output")
    run = NcclRun(op=None, source=source)
    args = data.get("args") or []
    if isinstance(args, list) and args and isinstance(args[0], str):
        run.op = _op_from_program(args[0])
    if isinstance(data.get("nccl_version"), int):
        run.nccl_version = _nccl_version(data["nccl_version"])
    config = data.get("config") or {}
    if isinstance(config, dict):
        if isinstance(config.get("iterations"), int):
            run.iterations = config["iterations"]
        for dev in config.get("devices") or []:
            if isinstance(dev, dict) and isinstance(dev.get("hostname"), str):
                run.hosts.append(dev["hostname"])
                run.device_names.append(str(dev.get("device_info", "")))
    results = data["results"]
    if not isinstance(results, list):
        raise SpecError("nccl-tests", f"{source}: 'results' must be a list")
    for i, r in enumerate(results):
        where = f"{source or 'input'} results[{i}]"
        if not isinstance(r, dict):
            raise SpecError("nccl-tests", f"{where}: must be an object")

        def triple(key: str, r: dict = r, where: str = where) -> tuple[float, float, float] | None:
            v = r.get(key)
            if v is None:
                return None
            if not isinstance(v, dict):
                raise SpecError("nccl-tests", f"{where}.{key}: must be an object")
            wrong = v.get("nwrong", v.get("wrong"))
            if isinstance(wrong, (int, float)) and not isinstance(wrong, bool) and wrong > 0:
                raise SpecError("nccl-tests", f"{where}.{key}: {wrong} wrong elements: a failed run is no measurement")
            if "time" not in v and "cpu_time" in v:
                raise SpecError("nccl-tests", f"{where}.{key}: {CPU_TIME_REFUSAL}")
            t = v.get("time")
            return (_num(str(t), f"{where}.{key}.time"), _num(str(v.get("alg_bw")), f"{where}.{key}.alg_bw"),
                    _num(str(v.get("bus_bw")), f"{where}.{key}.bus_bw"))

        if isinstance(r.get("size"), bool) or isinstance(r.get("count"), bool):
            raise SpecError("nccl-tests", f"{where}: 'size' and 'count' must be whole numbers, not true/false")
        try:
            size = int(r["size"])
            count = int(r.get("count", 0))
        except (KeyError, TypeError, ValueError):
            raise SpecError("nccl-tests", f"{where}: missing or bad 'size'") from None
        root_raw = str(r.get("root", "-1")).strip()
        root = int(root_raw) if re.fullmatch(r"-?\d+", root_raw) else -1
        run.rows.append(NcclRow(size, count, str(r.get("type", "float")), str(r.get("redop", "none")), root,
                                triple("out_of_place"), triple("in_place")))
    if not run.rows:
        raise SpecError("nccl-tests", f"{source or 'input'}: no result rows")
    return [run]


def parse_nccl_tests_file(path: str | Path) -> list[NcclRun]:
    """Parse one nccl-tests output file (text or ``-J`` JSON, detected from its content)."""
    p = Path(path)
    text = read_text(p, "nccl-tests", MAX_NCCL_FILE_BYTES)
    if text.lstrip().startswith("{"):
        runs = parse_json(decode_json(text, "nccl-tests", str(p)), p.name)
    else:
        runs = parse_text(text, p.name)
    for r in runs:
        r.op_stated = r.op is not None
        if r.op is None:
            r.op = _op_from_program(p.name)
    return runs


def _infer_group_size(op: str, rows: list[NcclRow]) -> int | None:
    """Invert nccl-tests' busbw factor from the row with the largest algbw (least rounding)."""
    best = max((r.oop or r.inp for r in rows if (r.oop or r.inp)), key=lambda t: t[1], default=None)
    if best is None or best[1] <= 0:
        return None
    f = best[2] / best[1]
    if op == "all_reduce" and f < 2:
        n = 2.0 / (2.0 - f)
    elif op in ("all_gather", "reduce_scatter", "all_to_all") and f < 1:
        n = 1.0 / (1.0 - f)
    else:
        return None
    return max(2, round(n))


def _refuse_contradiction(run: NcclRun, group_size: int | None, nodes: int | None) -> None:
    """A flag that contradicts the file's own '# Rank ... on <host>' lines is refused: the file records where
    its ranks ran, and a profile keyed by the wrong (ranks, nodes) would be used for the wrong collectives."""
    if group_size is not None and run.group_size is not None and group_size != run.group_size:
        raise SpecError("nccl_group_size", f"{group_size} contradicts {run.source}, whose '# Rank' lines list "
                                           f"{run.group_size} ranks")
    if nodes is not None and run.nodes is not None and nodes != run.nodes:
        hosts = sorted(set(run.hosts))
        shown = ", ".join(hosts[:3]) + (", ..." if len(hosts) > 3 else "")
        raise SpecError("nccl_nodes", f"{nodes} contradicts {run.source}, whose {run.group_size} ranks ran on "
                                      f"{run.nodes} host(s) ({shown})")


def _point(run: NcclRun, op: str, n: int, k: int, row: NcclRow, time_s: float, in_place: bool) -> CollectivePoint:
    """One row's CollectivePoint; a size or time no measurement has (profile_limits) is refused naming the row."""
    try:
        stats = Stats(min_s=time_s, median_s=time_s, p99_s=time_s, reps=max(1, run.iterations or 1))
        return collective_point(op, n, k, row.size_bytes, stats, dtype=row.dtype, in_place=in_place,
                                source="nccl-tests")
    except ValidationError as e:
        err = from_validation_error(e)
        raise SpecError("nccl-tests", f"{run.source}: row of {row.size_bytes:g} B: {err}") from None


# No link moves more: GB200's NVLink 5 carries 1.8 TB/s per GPU (both directions); ten times that bounds any bus
# bandwidth a measurement can show.
MAX_BUSBW_GBPS = 18_000.0


def _check_row_rates(run: NcclRun, size: float, time_us: float, algbw: float, busbw: float) -> None:
    """A row whose printed algbw is not its size over its time (nccl-tests prints algbw = size / time, GB/s, two
    decimals), or whose busbw no link reaches, is no measurement: SpecError naming the row."""
    implied = size / (time_us * 1e3)
    if algbw >= 1.0 and abs(implied / algbw - 1) > 0.05 + 0.01 / algbw:
        raise SpecError("nccl-tests", f"{run.source}: row of {size:g} B: algbw {algbw:g} GB/s is not its size over "
                                      f"its time ({implied:.4g} GB/s)")
    if max(busbw, implied) > MAX_BUSBW_GBPS:
        raise SpecError("nccl-tests", f"{run.source}: row of {size:g} B: {max(busbw, implied):.4g} GB/s is beyond "
                                      f"any link ({MAX_BUSBW_GBPS:g} GB/s)")


def run_to_points(run: NcclRun, op: str | None = None, group_size: int | None = None, nodes: int | None = None,
                  prefer: str = "out_of_place") -> list[CollectivePoint]:
    """CollectivePoints of one run; flags override what the file says. Checks busbw against our factor."""
    _refuse_contradiction(run, group_size, nodes)
    if op and run.op_stated and canonical_op(op) != run.op:
        raise SpecError("nccl_op", f"{canonical_op(op)} contradicts {run.source}, which ran {run.op}")
    op = canonical_op(op) if op else run.op
    if op is None:
        raise SpecError("nccl-tests", f"{run.source}: cannot tell which collective this is; pass --nccl-op")
    n = group_size or run.group_size or _infer_group_size(op, run.rows)
    if not n:
        raise SpecError("nccl-tests", f"{run.source}: no '# Rank' lines; pass --nccl-group-size")
    k = nodes or run.nodes or 1
    if k > n:
        raise SpecError("nccl-tests", f"{run.source}: {k} nodes but only {n} ranks")
    factor = busbw_factor(op, n)
    points = []
    for row in run.rows:
        for key, t in (("out_of_place", row.oop), ("in_place", row.inp)):
            if t is None or t[0] <= 0 or row.size_bytes <= 0:
                continue
            time_us, algbw, busbw = t
            _check_row_rates(run, row.size_bytes, time_us, algbw, busbw)
            if algbw >= 1.0 and busbw > 0 and abs(busbw / algbw - factor) > 0.02 * max(factor, 1e-9) + 0.01:
                raise SpecError("nccl-tests", f"{run.source}: busbw/algbw = {busbw / algbw:.3f} at {row.size_bytes} B "
                                f"but {op} on {n} ranks has factor {factor:.3f}; wrong --nccl-group-size or --nccl-op?")
            points.append(_point(run, op, n, k, row, time_us * 1e-6, key == "in_place"))
    if prefer in ("out_of_place", "in_place"):
        chosen = [p for p in points if p.in_place == (prefer == "in_place")]
        points = chosen or points
    if not points:
        raise SpecError("nccl-tests", f"{run.source}: no usable rows (all times zero?)")
    return points


def import_nccl_tests(paths: list[str | Path], op: str | None = None, group_size: int | None = None,
                      nodes: int | None = None, merge_into: CalibrationProfile | None = None,
                      min_size_bytes: float = 0.0, prefer: str = "out_of_place") -> CalibrationProfile:
    """A profile whose collective part comes from these nccl-tests outputs (merged into ``merge_into`` if given)."""
    points: list[CollectivePoint] = []
    runs: list[NcclRun] = []
    for path in paths:
        for run in parse_nccl_tests_file(path):
            runs.append(run)
            points.extend(run_to_points(run, op, group_size, nodes, prefer))
    fits = fit_all_collectives(points, min_size_bytes=min_size_bytes, backend="nccl")
    fits = [f.model_copy(update={"source": "nccl-tests"}) for f in fits]
    names = sorted({Path(p).name for p in paths})
    note = f"collectives imported from nccl-tests output: {', '.join(names)}"
    if merge_into is not None:
        return merge_collectives(merge_into, points, fits, note)
    first = runs[0]
    hosts = sorted({h for r in runs for h in r.hosts})
    fp = Fingerprint(device="imported", device_name=(first.device_names[0] if first.device_names else "unknown"),
                     device_count=max((r.group_size or 0) for r in runs) or (group_size or 1),
                     world_size=max(p.group_size for p in points), nodes=max(p.nodes for p in points),
                     backend="nccl", nccl_version=first.nccl_version, hostname=",".join(hosts[:4]),
                     command="nccl-tests import")
    return CalibrationProfile(fingerprint=fp, collective_points=points, collective_fits=fits, notes=[note])
