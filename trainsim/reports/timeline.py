"""Turn the engine's recorded step (``simulate(table, record=True).trace``) into timeline events for the
report's pipeline figure: per stage, compute-stream work split into recompute / forward / backward /
exposed in-op communication, and the pipeline and data-parallel streams as communication."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainsim.reports.plots import TimelineEvent

_KIND_BY_PREFIX = {"F": "forward", "BW": "backward", "B": "backward", "W": "backward_w"}


def _op_kind(name: str) -> str | None:
    head = name.split(" ", 1)[0]
    return _KIND_BY_PREFIX.get(head)


def _chunk_of(name: str) -> int:
    for part in name.split():
        if part.startswith("chunk") and part[5:].isdigit():
            return int(part[5:])
    return 0


def events_from_engine(trace: Sequence[tuple], table: Any = None) -> list[TimelineEvent]:
    """Engine trace tuples ``(stage, stream, name, start_s, dur_s, args)`` -> TimelineEvents.

    A compute op's duration holds its compute and the TP/CP/EP communication it waits for on the compute
    stream; the engine's args give each part (``compute_s``, ``tp_s``, ``cp_s``, ``ep_s``), and the cost
    table (when given) gives the recompute share of a full backward. Parts are drawn one after another in
    the op's interval: recompute, compute, then the exposed communication.
    """
    out: list[TimelineEvent] = []
    for stage, stream, name, start, dur, args in trace:
        args = args or {}
        if stream == "compute":
            if name.startswith("optimizer"):
                out.append(TimelineEvent(stage, "compute", "optimizer", start, dur, name))
                continue
            kind = _op_kind(name)
            if kind is None:
                out.append(TimelineEvent(stage, "compute", "forward", start, dur, name))
                continue
            comm = {k: float(args.get(f"{k}_s", 0.0)) for k in ("tp", "cp", "ep")}
            compute = float(args.get("compute_s", dur - sum(comm.values())))
            recompute = 0.0
            if table is not None and name.split(" ", 1)[0] in ("BW", "B"):
                try:
                    chunk = table.stages[stage].chunks[_chunk_of(name)]
                    recompute = min(compute, float(getattr(chunk, "recompute_s", 0.0)))
                except (IndexError, AttributeError):
                    recompute = 0.0
            t = start
            for k, d in (("recompute", recompute), (kind, compute - recompute),
                         ("comm_tp", comm["tp"]), ("comm_cp", comm["cp"]), ("comm_ep", comm["ep"])):
                if d > 0:
                    out.append(TimelineEvent(stage, "compute", k, t, d, name))
                    t += d
        elif stream in ("pp", "dp", "tp", "cp", "ep"):
            out.append(TimelineEvent(stage, "comm", f"comm_{stream}", start, dur, name))
        else:
            out.append(TimelineEvent(stage, "comm", "comm", start, dur, name))
    return out
