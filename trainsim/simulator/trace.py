"""Chrome trace-event JSON of a simulated step (opens in Perfetto / chrome://tracing).

One process per pipeline stage ("stage s"), one thread per stream (compute, pp, dp, dp-gather, dp-replicate), complete events
("ph": "X") named after what ran (e.g. "F mb3 chunk1 (layers 8-15)", "reduce_scatter grads chunk 0
bucket 2"), and a counter track per stage with the simulated memory (bytes) over time. Times are in µs
as the format requires.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainsim.specs.safe_write import write_atomic

from .engine import EngineResult

STREAM_TIDS = {"compute": 0, "pp": 1, "dp": 2, "dp-gather": 3}
# Streams only some steps have (named in the trace only when used): HSDP's all-reduce across replicas.
OPTIONAL_TIDS = {"dp-replicate": 4}


def trace_events(res: EngineResult, static_bytes: list[float] | None = None) -> list[dict[str, Any]]:
    """The traceEvents list for ``res`` (which must have been simulated with record=True)."""
    if res.trace is None:
        raise ValueError("the engine result has no recorded timeline (simulate with record=True)")
    ev: list[dict[str, Any]] = []
    p = len(res.stages)
    for s in range(p):
        ev.append({"ph": "M", "name": "process_name", "pid": s, "tid": 0, "args": {"name": f"stage {s}"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": s, "tid": 0, "args": {"sort_index": s}})
        for stream, tid in STREAM_TIDS.items():
            label = {"compute": "compute stream", "pp": "pipeline send/recv", "dp": "data-parallel comm",
                     "dp-gather": "ZeRO-3 parameter all-gather"}[stream]
            ev.append({"ph": "M", "name": "thread_name", "pid": s, "tid": tid, "args": {"name": label}})
        if any(r[0] == s and r[1] in OPTIONAL_TIDS for r in res.trace):
            ev.append({"ph": "M", "name": "thread_name", "pid": s, "tid": OPTIONAL_TIDS["dp-replicate"],
                       "args": {"name": "HSDP all-reduce across replicas"}})
    tids = {**STREAM_TIDS, **OPTIONAL_TIDS}
    for stage, stream, name, start, dur, args in sorted(res.trace, key=lambda r: (r[0], tids[r[1]], r[3])):
        cat = "comm" if stream != "compute" else "compute"
        ev.append({"ph": "X", "name": name, "cat": cat, "pid": stage, "tid": tids[stream],
                   "ts": start * 1e6, "dur": max(dur, 0.0) * 1e6,
                   "args": {k: (float(v) if isinstance(v, (int, float)) else v) for k, v in args.items()}})
        # Exposed communication inside a compute op, drawn as nested slices at the op's end.
        if stream == "compute":
            t_end = start + dur
            for key, label in (("ep_s", "EP all-to-all (exposed)"), ("cp_s", "CP ring exchange (exposed)"),
                               ("tp_s", "TP collectives (exposed)")):
                d = float(args.get(key, 0.0) or 0.0)
                if d > 0:
                    t_end -= d
                    ev.append({"ph": "X", "name": label, "cat": "comm", "pid": stage, "tid": 0,
                               "ts": t_end * 1e6, "dur": d * 1e6, "args": {}})
    if res.memory_trace:
        base = static_bytes or [0.0] * p
        for stage, t, nbytes in res.memory_trace:
            ev.append({"ph": "C", "name": "memory", "pid": stage, "ts": t * 1e6,
                       "args": {"GiB": (base[stage] + nbytes) / 2**30}})
    return ev


def write_trace(res: EngineResult, path: str | Path, static_bytes: list[float] | None = None,
                metadata: dict[str, Any] | None = None) -> int:
    """Write the Chrome trace JSON object format ({"traceEvents": [...], ...}) to ``path``; returns the number
    of trace events written."""
    events = trace_events(res, static_bytes)
    doc = {"traceEvents": events, "displayTimeUnit": "ms",
           "otherData": {k: str(v) for k, v in (metadata or {}).items()}}
    write_atomic(path, json.dumps(doc), "trace")
    return len(events)
