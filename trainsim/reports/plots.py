"""matplotlib figures of the what-if report (Agg backend, no display needed). Each function returns a
Figure with a title, axis units and a legend; ``figure_png``/``figure_svg`` turn one into bytes."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

GIB = 2.0**30

# One colour per kind of work on the timeline (colour-blind-safe Tableau/Seaborn "deep" hues).
KIND_COLOURS = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "backward_w": "#A0522D",
    "recompute": "#8172B3",
    "optimizer": "#2F4F4F",
    "embedding": "#1B9E77",
    "comm_tp": "#55A868",
    "comm_cp": "#CCB974",
    "comm_ep": "#937860",
    "comm_pp": "#DA8BC3",
    "comm_dp": "#8C8C8C",
    "comm": "#B0B0B0",
    "bubble": "#F6D0CF",
}
KIND_LABELS = {
    "forward": "forward", "backward": "backward", "backward_w": "backward (weight grad, ZB)",
    "recompute": "recompute", "optimizer": "optimizer step", "embedding": "embedding / logits",
    "comm_tp": "TP collective", "comm_cp": "CP exchange", "comm_ep": "EP all-to-all", "comm_pp": "PP send/recv",
    "comm_dp": "DP grad reduce / ZeRO gather", "comm": "other communication", "bubble": "idle (bubble)",
}
MEMORY_COLOURS = {"weights": "#4C72B0", "grads": "#DD8452", "optimizer": "#55A868", "activations": "#C44E52",
                  "other": "#8C8C8C"}


@dataclass(frozen=True)
class TimelineEvent:
    """One interval of a stage's timeline: which stage, which stream row, what kind of work, when."""

    stage: int
    stream: str      # "compute" or "comm"
    kind: str        # a key of KIND_COLOURS
    start_s: float
    dur_s: float
    label: str = ""


@contextlib.contextmanager
def quiet_missing_glyphs():
    """Within: matplotlib's "Glyph N missing from font(s)" warnings muted. A model or cluster name in a script
    DejaVu Sans lacks (CJK, emoji) is drawn with boxes for those glyphs; the warning per character would otherwise
    add Python warning lines to the stderr of a report that succeeded."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font", category=UserWarning)
        yield


def _saved(fig: Figure, **kwargs) -> bytes:
    """``fig`` rendered by savefig(**kwargs), then closed."""
    buf = io.BytesIO()
    fig.savefig(buf, bbox_inches="tight", **kwargs)
    plt.close(fig)
    return buf.getvalue()


def figure_png(fig: Figure, dpi: int = 110) -> bytes:
    return _saved(fig, format="png", dpi=dpi)


def figure_svg(fig: Figure) -> bytes:
    return _saved(fig, format="svg")


def _idle_gaps(intervals: list[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float]]:
    """Gaps (start, duration) in [t0, t1] not covered by the given (start, duration) intervals."""
    gaps, cursor = [], t0
    for s, d in sorted(intervals):
        if s > cursor + 1e-12:
            gaps.append((cursor, s - cursor))
        cursor = max(cursor, s + d)
    if t1 > cursor + 1e-12:
        gaps.append((cursor, t1 - cursor))
    return gaps


def timeline_figure(events: Sequence[TimelineEvent], num_stages: int, step_time_s: float | None = None,
                    title: str = "Pipeline timeline of one step") -> Figure:
    """Stages × time: a compute row and a communication row per stage; idle compute time drawn as bubbles."""
    end_s = step_time_s or max((e.start_s + e.dur_s for e in events), default=1.0)
    scale, unit = (1e3, "ms") if end_s < 10 else (1.0, "s")
    rows = []
    for st in range(num_stages):
        rows += [(st, "compute"), (st, "comm")]
    height = min(16.0, 1.6 + 0.32 * len(rows))
    fig, ax = plt.subplots(figsize=(13, height))
    by_row: dict[tuple[int, str], dict[str, list[tuple[float, float]]]] = {}
    for e in events:
        stream = "compute" if e.stream == "compute" else "comm"
        by_row.setdefault((e.stage, stream), {}).setdefault(e.kind, []).append((e.start_s * scale, e.dur_s * scale))
    kinds_seen: list[str] = []
    min_w = end_s * scale * 0.0005
    dense = max((sum(len(v) for v in kinds.values()) for kinds in by_row.values()), default=0) > 150
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        kinds = by_row.get(row, {})
        if row[1] == "compute":
            busy = [iv for ivs in kinds.values() for iv in ivs]
            gaps = _idle_gaps(busy, 0.0, end_s * scale)
            if gaps:
                ax.broken_barh(gaps, (y - 0.4, 0.8), facecolors=KIND_COLOURS["bubble"], edgecolor="#C44E52",
                               linewidth=0.3, hatch="//")
                if "bubble" not in kinds_seen:
                    kinds_seen.append("bubble")
        for kind, ivs in kinds.items():
            colour = KIND_COLOURS.get(kind, KIND_COLOURS["comm"])
            if kind.startswith("comm") and row[1] == "comm":
                # Messages on the communication streams far shorter than the step get a minimum width so they
                # stay visible; collectives on the compute stream (exposed TP/EP) keep their true width, or
                # they would hide the compute they interrupt.
                ivs = [(s, max(d, min_w)) for s, d in ivs]
                ax.broken_barh(ivs, (y - 0.4, 0.8), facecolors=colour, edgecolor="none", linewidth=0)
            else:
                # Thin white separators show op boundaries, unless ops are too many to tell apart anyway.
                ax.broken_barh(ivs, (y - 0.4, 0.8), facecolors=colour, edgecolor="none" if dense else "white",
                               linewidth=0 if dense else 0.6)
            if kind not in kinds_seen:
                kinds_seen.append(kind)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"stage {s} {k}" for s, k in reversed(rows)], fontsize=7 if len(rows) > 24 else 8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(0, end_s * scale * 1.005)
    ax.set_xlabel(f"time within the step ({unit})")
    ax.set_title(title)
    order = [k for k in KIND_COLOURS if k in kinds_seen]
    handles = [Patch(facecolor=KIND_COLOURS[k], edgecolor="#C44E52" if k == "bubble" else "none",
                     hatch="//" if k == "bubble" else None, label=KIND_LABELS.get(k, k)) for k in order]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, title="work", title_fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def memory_figure(per_stage: Sequence[Mapping[str, float]], capacity_bytes: float | Sequence[float],
                  title: str = "Peak memory per GPU by pipeline stage") -> Figure:
    """Stacked bars (GiB) of weights/grads/optimizer/activations/other per stage, with the GPU capacity line; a
    sequence of capacities that differ (stages on GPU pools, simulator.pools.stage_capacity_bytes) draws each
    stage's own GPU capacity over its bar."""
    n = len(per_stage)
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 2.5 + 0.45 * n)), 4.6))
    xs = list(range(n))
    bottom = [0.0] * n
    for comp, colour in MEMORY_COLOURS.items():
        vals = [float(s.get(comp, 0.0)) / GIB for s in per_stage]
        ax.bar(xs, vals, bottom=bottom, color=colour, label=comp, width=0.7)
        bottom = [b + v for b, v in zip(bottom, vals)]
    if not isinstance(capacity_bytes, (int, float)) and len(set(capacity_bytes)) == 1:
        capacity_bytes = capacity_bytes[0]
    if isinstance(capacity_bytes, (int, float)):
        cap = capacity_bytes / GIB
        ax.axhline(cap, color="black", linestyle="--", linewidth=1.2, label=f"GPU capacity ({cap:.0f} GiB)")
    else:
        caps = [c / GIB for c in capacity_bytes]
        cap = max(caps)
        ax.hlines(caps, [x - 0.45 for x in xs], [x + 0.45 for x in xs], colors="black", linestyles="--",
                  linewidth=1.2, label="its pool's GPU capacity")
    ax.set_xticks(xs)
    ax.set_xticklabels([str(i) for i in xs], fontsize=8 if n > 16 else 9)
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_ylim(0, max(cap, max(bottom, default=0.0)) * 1.15)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def mfu_heatmap(cells: Mapping[tuple[int, int], Any], tps: Sequence[int], pps: Sequence[int],
                marked: tuple[int, int] | None = None, title: str = "MFU over (TP, PP)") -> Figure:
    """Heatmap of MFU (%) over tensor × pipeline degree; a cell may instead hold 'OOM' or 'invalid'."""

    grid = np.full((len(pps), len(tps)), np.nan)
    for (tp, pp), v in cells.items():
        if isinstance(v, (int, float)) and tp in tps and pp in pps:
            grid[pps.index(pp), tps.index(tp)] = 100.0 * v
    fig, ax = plt.subplots(figsize=(1.8 + 1.1 * len(tps), 1.5 + 0.6 * len(pps)))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#EEEEEE")
    finite = grid[np.isfinite(grid)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if vmax - vmin < 1e-9:
        vmin, vmax = vmin - 1.0, vmax + 1.0
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", origin="lower")
    for (tp, pp), v in cells.items():
        if tp not in tps or pp not in pps:
            continue
        x, y = tps.index(tp), pps.index(pp)
        if isinstance(v, (int, float)):
            txt = f"{100 * v:.1f}"
            colour = "white" if 100 * v < (vmin + vmax) / 2 else "black"
        else:
            txt, colour = str(v), "#666666"
        ax.text(x, y, txt, ha="center", va="center", fontsize=8, color=colour)
    if marked and marked[0] in tps and marked[1] in pps:
        ax.add_patch(plt.Rectangle((tps.index(marked[0]) - 0.5, pps.index(marked[1]) - 0.5), 1, 1, fill=False,
                                   edgecolor="red", linewidth=2.0, label="this scenario"))
        ax.legend(loc="upper left", bbox_to_anchor=(1.25, 1.0), fontsize=8)
    ax.set_xticks(range(len(tps)))
    ax.set_xticklabels([str(t) for t in tps])
    ax.set_yticks(range(len(pps)))
    ax.set_yticklabels([str(p) for p in pps])
    ax.set_xlabel("tensor-parallel degree (TP)")
    ax.set_ylabel("pipeline-parallel degree (PP)")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="MFU (%)")
    fig.tight_layout()
    return fig


def scaling_figure(strong: Sequence[Mapping[str, float]], weak: Sequence[Mapping[str, float]],
                   title: str = "Scaling") -> Figure:
    """Strong (fixed global batch) and weak (batch ∝ GPUs) scaling: tokens/s vs GPUs with ideal lines, and MFU."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for pts, name, colour, marker in ((strong, "strong (fixed global batch)", "#4C72B0", "o"),
                                      (weak, "weak (batch ∝ GPUs)", "#DD8452", "s")):
        pts = [p for p in pts if p.get("tokens_per_s")]
        if not pts:
            continue
        g = [p["gpus"] for p in pts]
        t = [p["tokens_per_s"] for p in pts]
        ax1.plot(g, t, marker=marker, color=colour, label=name)
        if all(p.get("tokens_per_s_band") for p in pts):
            ax1.fill_between(g, [p["tokens_per_s_band"][0] for p in pts], [p["tokens_per_s_band"][1] for p in pts],
                             color=colour, alpha=0.15, linewidth=0, label=f"80 % interval ({name.split()[0]})")
        ax1.plot(g, [t[0] * x / g[0] for x in g], linestyle=":", color=colour, label=f"ideal linear ({name.split()[0]})")
        ax2.plot(g, [100 * p["mfu"] for p in pts], marker=marker, color=colour, label=name)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:  # every scaling point may have failed (e.g. all OOM)
            ax.legend(fontsize=8)
    ax1.set_yscale("log")
    ax1.set_ylabel("throughput (tokens/s)")
    ax1.set_title(f"{title}: throughput")
    ax2.set_ylabel("MFU (%)")
    ax2.set_ylim(bottom=0)
    ax2.set_title(f"{title}: model FLOPs utilisation")
    fig.tight_layout()
    return fig


def pareto_figure(rows: Sequence[Mapping[str, Any]], front: Sequence[Mapping[str, Any]],
                  cost_label: str = "cost (GPU-hours)", cost_key: str = "gpu_hours",
                  title: str = "Time to train vs cost") -> Figure:
    """Layouts as points (colour = GPU count; filled = engine-confirmed, hollow = closed-form screen), the
    Pareto front joined by a line."""

    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    pts = [r for r in rows if r.get("time_to_train_s") and r.get(cost_key) is not None]
    counts = sorted({r["gpus"] for r in pts} | {r["gpus"] for r in front})
    colours = dict(zip(counts, plt.get_cmap("viridis")(np.linspace(0.05, 0.85, max(1, len(counts))))))
    for n in counts:
        for engine in (False, True):
            sel = [r for r in pts if r["gpus"] == n and (r.get("source") == "engine") == engine]
            if not sel:
                continue
            ax.scatter([r["time_to_train_s"] / 86400 for r in sel], [r[cost_key] for r in sel], s=30,
                       facecolors=colours[n] if engine else "none", edgecolors=colours[n], alpha=0.9 if engine else 0.6,
                       label=f"{n} GPUs" + ("" if engine else " (closed-form screen)"))
    fr = sorted([r for r in front if r.get("time_to_train_s")], key=lambda r: r["time_to_train_s"])
    if fr:
        ax.plot([r["time_to_train_s"] / 86400 for r in fr], [r[cost_key] for r in fr], "-o", color="black",
                markerfacecolor="none", markersize=11, label="Pareto front (engine)")
        for r in fr:
            ax.annotate(f"{r['gpus']}", (r["time_to_train_s"] / 86400, r[cost_key]), textcoords="offset points",
                        xytext=(6, 6), fontsize=8)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v / 1e6:.2f} M" if abs(v) >= 1e6 else f"{v:,.0f}"))
    ax.set_xlabel("time to train, with failures (days)")
    ax.set_ylabel(cost_label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def goodput_figure(curve: Sequence[tuple[float, float]], daly_s: float, young_s: float, ideal_s: float,
                   title: str = "Expected time to train vs checkpoint interval") -> Figure:
    """Expected wall time (days) as a function of the checkpoint interval (minutes), optima marked."""
    fig, ax = plt.subplots(figsize=(8, 4.4))
    xs = [t / 60 for t, _ in curve]
    ys = [w / 86400 for _, w in curve]
    ax.plot(xs, ys, color="#4C72B0", label="expected time to train (Daly's model)")
    ax.axhline(ideal_s / 86400, color="#55A868", linestyle=":", label="failure-free, no checkpoints")
    ax.axvline(daly_s / 60, color="#C44E52", linestyle="--", label=f"Daly optimum {daly_s / 60:.1f} min")
    ax.axvline(young_s / 60, color="#8172B3", linestyle="-.", label=f"Young optimum {young_s / 60:.1f} min")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (minutes of compute)")
    ax.set_ylabel("time to train (days)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def predicted_vs_measured_figure(pairs: Iterable[tuple[str, float, float]], unit: str,
                                 title: str = "Predicted vs measured") -> Figure:
    """Side-by-side bars of predicted and measured values (one pair per metric), relative error annotated."""
    pairs = list(pairs)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(pairs) + 2), 4.2))
    xs = range(len(pairs))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [p for _, p, _ in pairs], width=w, color="#4C72B0", label="predicted")
    ax.bar([x + w / 2 for x in xs], [m for _, _, m in pairs], width=w, color="#DD8452", label="measured")
    for x, (_, p, m) in zip(xs, pairs):
        if m:
            ax.text(x, max(p, m) * 1.02, f"{100 * (p - m) / m:+.0f}%", ha="center", fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([n for n, _, _ in pairs], fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=8)
    top = max([max(p, m) for _, p, m in pairs], default=1.0)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    fig.tight_layout()
    return fig
