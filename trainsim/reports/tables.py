"""Number formatting and the ranked-layout table, shared by `trainsim plan` (rich/CSV) and the report."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainsim.simulator.search_space import stage_layers_label

GIB = 2.0**30


def fmt_time(s: float | None) -> str:
    """Seconds in the most readable unit (µs … days)."""
    if s is None or not math.isfinite(s):
        return "—"
    if s >= 2 * 86400:
        return f"{s / 86400:.1f} d"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def fmt_gib(b: float | None) -> str:
    return "—" if b is None else f"{b / GIB:.1f} GiB"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def fmt_si(x: float | None, unit: str = "") -> str:
    """1234567 -> '1.23 M' (SI prefixes, decimal)."""
    if x is None or not math.isfinite(x):
        return "—"
    for div, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:#.3g} {p}{unit}".replace(". ", " ")
    return f"{x:#.3g} {unit}".replace(". ", " ").rstrip().rstrip(".")


def fmt_count(x: float | None) -> str:
    """Parameter and token counts the way ML papers write them: 70.6 B, 15.0 T."""
    if x is None or not math.isfinite(x):
        return "—"
    for div, p in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:#.3g} {p}".replace(". ", " ")
    return f"{x:,.0f}"


def fmt_money(x: float | None) -> str:
    if x is None:
        return "—"
    if x >= 1e6:
        return f"${x / 1e6:.2f} M"
    if x >= 1e3:
        return f"${x / 1e3:.1f} k"
    return f"${x:.0f}"


LAYOUT_COLUMNS = ("#", "GPUs", "layout", "mb", "recomp", "ZeRO", "sched", "step", "tokens/s", "MFU",
                  "peak mem", "free", "goodput", "time to train", "GPU-h", "cost", "src")
_SHORT = {"selective": "sel", "interleaved": "intl", "closed-form": "cf"}


def layout_row(i: int, r: Mapping[str, Any]) -> list[str]:
    """One ranked-table row from a PlanRow.to_json() mapping."""
    lay = f"tp{r['tp']}{' sp' if r.get('sequence_parallel') else ''} pp{r['pp']} dp{r['dp']}"
    if r.get("dp_shard") and r["dp_shard"] < r["dp"]:
        lay += f" shard{r['dp_shard']}"
    if r.get("cp", 1) > 1:
        lay += f" cp{r['cp']}"
    if r.get("ep", 1) > 1:
        lay += f" ep{r['ep']}"
    if r.get("vpp", 1) > 1:
        lay += f" v{r['vpp']}"
    if r.get("etp") is not None and r.get("etp") != r["tp"]:
        lay += f" etp{r['etp']}"
    if r.get("stage_layers"):
        lay += f" [{stage_layers_label(r['stage_layers'])}]"
    if r.get("pools"):
        lay += f" @pools {r['pools']}"
    return [
        str(i), str(r["gpus"]), lay, str(r["micro_batch"]), _SHORT.get(r["recompute"], r["recompute"]), str(r["zero"]),
        _SHORT.get(r["schedule"], r["schedule"]),
        fmt_time(r["step_time_s"]), fmt_si(r["tokens_per_s"]), fmt_pct(r["mfu"]), fmt_gib(r["peak_bytes"]),
        fmt_gib(r["gpu_bytes"] - r["peak_bytes"]), fmt_pct(r.get("goodput")), fmt_time(r.get("time_to_train_s")),
        fmt_si(r.get("gpu_hours")), fmt_money(r.get("cost")), _SHORT.get(r["source"], r["source"]),
    ]


def layout_table(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [layout_row(i, r) for i, r in enumerate(rows, 1)]


CSV_FIELDS = ("rank", "gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero", "schedule",
              "sequence_parallel", "source", "step_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction",
              "peak_bytes", "gpu_bytes", "headroom_bytes", "fits", "goodput", "checkpoint_interval_s",
              "ideal_time_s", "time_to_train_s", "gpu_hours", "cost", "pareto",
              "stage_layers", "etp", "dp_shard", "pools")  # appended last: scripts reading the CSV by position keep their columns
