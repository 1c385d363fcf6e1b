"""`trainsim predict`: one scenario → step time, throughput, MFU/HFU, bubble, exposed comm and memory."""

from __future__ import annotations

import argparse
import json
import math
import sys

from trainsim.reports.console import styled, text_console
from trainsim.specs import SpecError, load_scenario_file
from trainsim.specs.pools import gpus_label
from trainsim.specs.safe_write import check_output_path

from .common import add_scenario_args, float_range, int_range, scenario_from_args, warn_beyond_published

GiB = 2**30


def parse_straggler(text: str) -> tuple[float, float]:
    """argparse type 'FRACTION:SLOWDOWN', e.g. '0.001:1.5' (0.1 % of GPUs run compute 1.5x slower)."""
    parts = str(text).split(":")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected FRACTION:SLOWDOWN such as 0.001:1.5, got {text!r}")
    try:
        frac, slow = float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two numbers FRACTION:SLOWDOWN, got {text!r}") from None
    if not (math.isfinite(frac) and 0 <= frac <= 1):
        raise argparse.ArgumentTypeError(f"fraction must be in [0, 1], got {parts[0]}")
    if not (math.isfinite(slow) and 1 <= slow <= 1000):
        raise argparse.ArgumentTypeError(f"slowdown must be a factor in [1, 1000], got {parts[1]}")
    return frac, slow


def register(subparsers) -> None:
    p = subparsers.add_parser("predict", help="predict one training step (discrete-event engine)",
                              description="Predict step time, throughput, MFU, bubbles, exposed communication and "
                                          "memory of one training step.")
    add_scenario_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--trace", metavar="OUT.json", help="write the simulated timeline as a Chrome trace (Perfetto)")
    p.add_argument("--fast", action="store_true", help="closed-form estimate instead of the engine (screening)")
    p.add_argument("--ideal-network", action="store_true", help="make all communication free (what-if)")
    p.add_argument("--jitter", type=float_range(0, 10), default=0.0, metavar="CV",
                   help="per-op lognormal compute noise with this coefficient of variation (Monte Carlo)")
    p.add_argument("--straggler", type=parse_straggler, metavar="FRACTION:SLOWDOWN",
                   help="each GPU slow with probability FRACTION, SLOWDOWN x slower compute (Monte Carlo)")
    p.add_argument("--samples", type=int_range(1, 10_000), default=20, help="Monte Carlo repetitions (default 20)")
    p.add_argument("--seed", type=int_range(0, 2**63 - 1), default=0, help="Monte Carlo seed (default 0)")
    p.add_argument("--coverage", type=float_range(0.5, 0.95), default=0.8,
                   help="coverage of the prediction interval (default 0.8; validation.intervals)")
    p.add_argument("--explain", action="store_true",
                   help="rank the what-if levers (ideal network, no bubble, vpp+1, TP/DP/EP overlap, recompute, "
                        "2x micro-batch, next ZeRO) by step-time gain, closed form (simulator/levers.py)")
    p.add_argument("--explain-engine", action="store_true", help="--explain with the engine for every lever")
    p.set_defaults(func=run)


def _input_files(args: argparse.Namespace) -> list:
    """The files this command reads: the scenario, the model and cluster it or a flag names, the calibration."""
    given = [getattr(args, k, None) for k in ("scenario", "model", "cluster", "calibration")]
    if getattr(args, "scenario", None):
        raw = load_scenario_file(args.scenario)
        given += [raw.get(k) for k in ("model", "cluster") if isinstance(raw.get(k), str)]
    return given


def run(args: argparse.Namespace) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.simulator.predict import predict
    from trainsim.validation.intervals import check_coverage, interval_for

    check_coverage(args.coverage)
    check_explain(args)
    if args.trace:  # the trace is no input of this command (scenario, model, cluster, calibration files)
        check_output_path(args.trace, "trace", inputs=_input_files(args))
    scenario = scenario_from_args(args)
    profile = None
    if getattr(args, "calibration", None):
        from trainsim.cost_models.profile import load_profile
        profile = load_profile(args.calibration)
    pred = predict(scenario, fast=args.fast, ideal_network=args.ideal_network, profile=profile,
                   trace_path=args.trace, jitter_cv=args.jitter, stragglers=args.straggler, seed=args.seed,
                   samples=args.samples, fixed_costs=True)
    expl = explain(args, scenario, pred, profile) if args.explain or args.explain_engine else None
    iv = interval_for(pred.step_time_s, pred.tokens_per_s, pred.mfu, scenario, profile, args.coverage,
                      breakdown=pred.breakdown_s)
    # After the prediction: a refusal (exit 2) stays one line.
    warn_beyond_published(scenario.num_gpus, scenario.training.global_batch, scenario.training.seq_len)
    if args.json:
        print(json.dumps({**pred.to_json(), **iv.to_json(), **({"explain": expl.to_json()} if expl else {})}))
    else:
        render(pred, scenario, iv)
        if expl:
            render_explain(expl)
    if args.trace:
        print(f"wrote {args.trace}: {pred.engine.get('trace_events', 0):,} trace events of one step "
              f"(Chrome trace format; open it in ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    return 0


def check_explain(args: argparse.Namespace) -> None:
    """--explain ranks deterministic steps predicted one way: refuse what contradicts that."""
    if not (args.explain or args.explain_engine):
        return
    if args.jitter > 0 or args.straggler is not None:
        raise SpecError("explain", "ranks deterministic step times; drop --jitter/--straggler")
    if args.explain_engine and args.fast:
        raise SpecError("explain_engine", "predicts every lever with the engine; drop --fast (or use --explain)")


def explain(args: argparse.Namespace, scenario, pred, profile):
    """The levers of ``scenario`` (simulator.levers); ``pred`` is their baseline when made the same way."""
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.simulator.levers import explain as explain_levers
    engine = bool(args.explain_engine)
    same = engine != bool(args.fast)
    return explain_levers(scenario, engine=engine, ideal_network=args.ideal_network, profile=profile,
                          baseline=pred if same else None)


def render_explain(expl) -> None:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from rich.table import Table

    from trainsim.simulator.levers import EXPLAIN_COLUMNS, explain_rows, explain_title
    t = Table(title=explain_title(expl))
    for i, col in enumerate(EXPLAIN_COLUMNS):
        t.add_column(col, justify="left" if i in (1, 2) else "right")
    for row in explain_rows(expl):
        t.add_row(*row)
    text_console(width=max(text_console().width, 140)).print(t)  # one row per lever, also when piped


def _dp_extras(scenario) -> str:
    """The layout line's data-parallel settings where they are not the defaults: HSDP / MiCS, bucket, overlap."""
    from trainsim.specs.mics import mics_framework
    tr, out = scenario.training, ""
    if tr.distributed_optimizer_instances > 1:
        out += f", partial DistOpt {tr.distributed_optimizer_instances} instances of {scenario.dp_shard} ranks"
    elif scenario.dp_shard < scenario.dp:
        what = "MiCS" if mics_framework(tr.framework) else "HSDP"
        out += f", {what} shard group {scenario.dp_shard} x {scenario.dp_replicas} replicas"
    if tr.dp_bucket_mb is not None:
        out += f", DP bucket {tr.dp_bucket_mb:g} MiB"
    if tr.overlap_grad_reduce is not None:
        out += f", grad-reduce overlap {'on' if tr.overlap_grad_reduce else 'off'}"
    return out


def render(pred, scenario, iv=None) -> None:
    """The readable rich table: the scenario's header line, the step's and the memory's tables, then the pools,
    host memory, memory assumptions, warnings and the interval's lines."""
    c = text_console()
    _render_header(c, pred, scenario)
    c.print(_step_table(pred, scenario, iv))
    c.print(_memory_table(pred, scenario))
    render_pools(c, pred, scenario)
    c.print(styled(f"peak {pred.peak_bytes / GiB:.1f} GiB, free {pred.free_bytes / GiB:.1f} GiB -> ",
                   ("fits", "green") if pred.fits else ("does not fit", "red"),
                   "" if pred.host_fits else " (offload needs more than the node's host memory)"))
    render_host_memory(c, pred, scenario)
    render_memory_assumptions(c, pred)
    for w in pred.warnings:
        c.print(styled(("note:", "yellow"), f" {w}"))
    if iv is not None:
        from trainsim.validation.intervals import text
        for line in text(iv):
            c.print(line, highlight=False)


def _render_header(c, pred, scenario) -> None:
    """The model, the GPUs and the layout with its training settings; the fabric's background load if shared."""
    lay = pred.layout
    gpus = gpus_label(scenario.cluster, scenario.num_gpus, times="x")
    c.print(styled((scenario.model.describe(), "bold"), f" on {gpus} ({scenario.cluster.name})"))
    tr = scenario.training
    etp = f" etp={lay['etp']}" if scenario.model.is_moe and lay["etp"] != lay["tp"] else ""
    extras = "".join((", EP all-to-all overlap" if tr.ep_comm_overlap else "",
                      f", LoRA rank {tr.lora_rank} on {'+'.join(tr.lora_target_modules)}" if tr.lora_rank else "",
                      f", stage layers {list(scenario.layout.stage_layers)}" if scenario.layout.stage_layers else "",
                      _dp_extras(scenario)))
    c.print(f"layout tp={lay['tp']} pp={lay['pp']} dp={lay['dp']} cp={lay['cp']} ep={lay['ep']}{etp} vpp={lay['vpp']}, "
            f"{tr.schedule}, micro-batch {lay['micro_batch']} x {lay['num_microbatches']}, "
            f"seq {tr.seq_len}, {tr.dtype}, recompute {tr.recompute_label}, zero {tr.effective_zero}{extras}")
    shared = scenario.cluster.scale_out.background_load.sentence()
    if shared:
        c.print(shared, highlight=False)


def _step_table(pred, scenario, iv):
    """The step's metrics: time (interval, p50/p99), throughput, MFU, bubble, the slowest GPU, host idle,
    collectives' fixed costs, exposed communication, the engine and the calibration."""
    # slow import (0.4-4 s), loaded on use
    from rich.table import Table

    t = Table(title="step", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("step time", f"{pred.step_time_s:.4g} s")
    if iv is not None:
        t.add_row(f"step time {iv.coverage:.0%} interval", f"{iv.step_time_s[0]:.4g} .. {iv.step_time_s[1]:.4g} s")
    if pred.variability:
        v = pred.variability
        t.add_row("step time p50 / p99", f"{v['step_time_p50_s']:.4g} / {v['step_time_p99_s']:.4g} s "
                  f"({v['samples']} samples)")
    t.add_row("tokens/s", f"{pred.tokens_per_s:,.0f}")
    t.add_row("MFU / HFU", f"{pred.mfu:.1%} / {pred.hfu:.1%}")
    t.add_row("TFLOP/s per GPU (model / hardware)",
              f"{pred.model_tflops_per_gpu:.1f} / {pred.hardware_tflops_per_gpu:.1f}")
    t.add_row("pipeline bubble", f"{pred.bubble_fraction:.1%}")
    slow = pred.breakdown_s.get("compute_slowest_gpu", 0.0)
    if slow > 0:
        t.add_row(f"slowest of {scenario.num_gpus} GPUs",
                  f"+{slow:.4g} s compute (+{slow / max(pred.breakdown_s['compute'], 1e-30):.1%})")
    idle = pred.breakdown_s.get("host_idle", 0.0)
    if idle > 0:
        t.add_row("GPU idle waiting for the host", f"{idle:.4g} s ({idle / max(pred.step_time_s, 1e-30):.0%})")
    fixed = pred.extra.get("collective_fixed_cost_s", 0.0)
    if fixed > 0:
        t.add_row("collectives' fixed costs", f"{fixed:.4g} s ({fixed / max(pred.step_time_s, 1e-30):.0%})")
    for d, val in pred.exposed_comm_s.items():
        t.add_row(f"exposed {d.upper()} comm", f"{val:.4g} s")
    fold = pred.engine.get("folded")
    folded = f" (folded from {fold['microbatches']:,} micro-batches)" if fold else ""
    t.add_row("engine", f"{pred.engine.get('mode')}, {pred.engine.get('events', 0)} events{folded}, "
              f"{pred.engine.get('wall_s', 0.0) * 1e3:.1f} ms")
    t.add_row("calibration", pred.calibration)
    return t


def _memory_table(pred, scenario):
    """Memory per GPU by stage against its pool's capacity (the first two, middle and last two of more than 8)."""
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from rich.table import Table

    from trainsim.simulator.pools import stage_capacity_bytes

    caps = stage_capacity_bytes(scenario, pred)
    cap_text = "each stage's pool's GPU" if len(set(caps)) > 1 else f"{pred.gpu_memory_bytes / GiB:.1f} GiB"
    m = Table(title=f"memory per GPU (GiB; capacity {cap_text})")
    for col in ("stage", "weights", "grads", "optimizer", "activations", "other", "total", "fits"):
        m.add_column(col, justify="right")
    stages = pred.per_stage_memory
    show = range(len(stages)) if len(stages) <= 8 else [0, 1, len(stages) // 2, len(stages) - 2, len(stages) - 1]
    for s in show:
        sm = stages[s]
        m.add_row(str(s), *(f"{x / GiB:.1f}" for x in (sm.weights, sm.grads, sm.optimizer, sm.activations, sm.other,
                                                       sm.total)),
                  "yes" if sm.total <= caps[s] else styled(("no", "red")))
    return m


def render_pools(c, pred, scenario) -> None:
    """Memory per GPU pool of a mixed cluster, each against its own GPU's capacity (nothing without pools)."""
    # slow import (0.4-4 s), loaded on use
    from rich.table import Table
    if not pred.pools:
        return
    how = scenario.cluster.placement
    t = Table(title=f"GPU pools (placement {how}; links between pools on the slower pool's NICs)")
    for col in ("pool", "GPU", "nodes", "stages" if how == "stages" else "replicas", "peak GiB", "capacity GiB",
                "fits"):
        t.add_column(col, justify="left" if col in ("pool", "GPU") else "right")
    for e in pred.pools:
        where = (",".join(map(str, e["stages"])) if how == "stages"
                 else f"{e['replicas']}" + (" (paces)" if e["paces"] else ""))
        t.add_row(e["name"], e["gpu"], str(e["nodes"]), where, f"{e['peak_memory_gib']:.1f}",
                  f"{e['capacity_gib']:.1f}", "yes" if e["fits"] else styled(("no", "red")))
    c.print(t)


def render_host_memory(c, pred, scenario) -> None:
    """What offload keeps in host memory (Prediction.host_bytes), per GPU and per node against the node's host
    memory (ClusterSpec.host_memory_bytes); nothing without offload."""
    if not pred.host_bytes:
        return
    c.print(styled(f"host memory (offload): {pred.host_bytes / GiB:.1f} GiB per GPU, "
                   f"{pred.host_node_bytes / GiB:.1f} GiB per node of {pred.host_capacity_bytes / GiB:.0f} GiB",
                   "" if pred.host_fits else (" -- over the node's host memory: does not fit", "red")))


def render_memory_assumptions(c, pred) -> None:
    """The model-state dtypes assumed and the named pieces of ``other`` on the peak stage."""
    a = pred.memory_assumptions
    if a:
        c.print(f"model states ({a['framework']}): {a['note']}; "
                f"{a['weights_bytes_per_param']:g} + {a['grads_bytes_per_param']:g} + "
                f"{a['optimizer_bytes_per_param']:g} bytes per parameter before sharding")
    if a.get("lora"):
        c.print(a["lora"])
    if a.get("compile"):
        c.print(f"activations: {a['compile']}")
    if a.get("optimizer_sharding"):
        c.print(f"optimizer sharding: {a['optimizer_sharding']}")
    if a.get("grads_off_peak_bytes"):
        c.print(f"gradients: {a['grads_off_peak_bytes'] / GiB:.2f} GiB of sharded gradients are freed before the "
                "forward and re-created after the activation peak (not in the peak; reserved in the reduce-scatter "
                "stream's pool)")
    if a.get("first_step_states"):  # a figure only where the replay adds reserved bytes; else just its reason
        extra = a.get("first_step_reserved_bytes") or 0.0
        size = f"{extra / GiB:.2f} GiB " if extra > 0 else ""
        c.print(f"reserved: {size}for the first step's optimizer states -- {a['first_step_states']}")
    terms = {k: v for k, v in pred.other_terms.items() if k != "stage" and v >= 0.005 * GiB}  # as printed: 0.01 GiB
    if terms:
        c.print(f"other on stage {int(pred.other_terms['stage'])}: "
                + ", ".join(f"{k.replace('_', ' ')} {v / GiB:.2f}" for k, v in terms.items()) + " GiB")
