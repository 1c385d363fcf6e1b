"""`trainsim plan`: search every valid layout for a model on a cluster and print the ranked plan."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import re
import sys
from collections.abc import Iterator
from typing import Any, get_args

from trainsim.simulator import goodput as gp
from trainsim.simulator.planner import DEFAULT_MEMORY_HEADROOM, MAX_TOKENS, headroom_bytes, parse_headroom
from trainsim.simulator.search_space import SearchLimits, check_training_extra, training_extra
from trainsim.specs import (
    SpecError,
    load_cluster,
    load_layout,
    load_model,
    load_scenario_file,
    load_training,
)
from trainsim.specs.data_parallel import hsdp_refusal
from trainsim.specs.errors import yaml11_hint
from trainsim.specs.framework_behaviour import FRAMEWORKS
from trainsim.specs.framework_era import layout_refusal
from trainsim.specs.hardware import dtype_refusal
from trainsim.specs.loaders import gpu_count, with_background_load
from trainsim.specs.training import Schedule, default_cp_comm, zero_conflict

from .common import (
    LORA_FLAGS,
    add_background_arg,
    add_data_parallel_args,
    add_lora_args,
    add_optimizer_arg,
    add_pool_args,
    add_precision_args,
    ascii_int,
    event_seconds,
    float_range,
    int_range,
    nonneg_float,
    positive_int,
    warn_beyond_published,
)

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}


def tokens_arg(text: str) -> float:
    """``parse_tokens`` as an argparse type: its reason in argparse's one error line."""
    try:
        return parse_tokens(text)
    except SpecError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("tokens: ")) from None


def parse_tokens(text: str) -> float:
    """'15T', '2.5e12', '300B' -> tokens."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)\s*", text or "")
    if not m:
        raise SpecError("tokens", f"must be a number such as 15e12 or 15T, got {text!r}")
    value = float(m.group(1)) * _SUFFIX.get(m.group(2).lower(), 1.0)
    if not math.isfinite(value) or value <= 0 or value > MAX_TOKENS:
        raise SpecError("tokens", f"must be in the range > 0, <= {MAX_TOKENS:g}, got {text!r}")
    return value


def parse_gpus(text: str, gpus_per_node: int, from_file: bool = False) -> tuple[int, ...]:
    """'1024' -> (1024,); 'A:B' -> powers of two times whole nodes in [A, B] plus A and B; 'a,b,c' -> list.
    ``from_file``: the text is a scenario file's value (a refusal explains YAML 1.1's reading of ``1e3``)."""
    text = str(text).strip()
    try:
        if ":" in text:
            lo_s, hi_s = text.split(":", 1)
            lo, hi = ascii_int(lo_s), ascii_int(hi_s)
            if lo <= 0 or hi < lo:
                raise SpecError("gpus", f"range {text!r} must be A:B with 0 < A <= B")
            out = {lo, hi}
            n = 1
            while n <= hi:
                if n >= lo and (n % gpus_per_node == 0 or n < gpus_per_node):
                    out.add(n)
                n *= 2
            counts = tuple(sorted(out))
        else:
            counts = tuple(sorted({ascii_int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        hint = yaml11_hint(text) if from_file else ""
        raise SpecError("gpus", f"must be N, A:B or a comma list of integers, got {text!r}{hint}") from None
    if not counts or any(c <= 0 for c in counts):
        raise SpecError("gpus", f"must be positive, got {text!r}")
    if len(counts) > 64:
        raise SpecError("gpus", f"{len(counts)} GPU counts is too many (at most 64)")
    for c in counts:
        if c > 10_000_000:
            raise SpecError("gpus", f"{c} is implausibly large")
        if c > gpus_per_node and c % gpus_per_node:
            raise SpecError("gpus", f"{c} GPUs is not a whole number of {gpus_per_node}-GPU nodes")
    return counts


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="search layouts and rank them (time to train, cost, goodput)",
                       description="Enumerate every valid layout, drop what does not fit, screen with the closed "
                                   "form, confirm the top K with the discrete-event engine, and rank.")
    p.add_argument("scenario", nargs="?", help="scenario YAML/JSON giving model, cluster, gpus, batch, seq (flags override)")
    p.add_argument("--model", help="preset name, YAML/JSON file, or Hugging Face config.json")
    p.add_argument("--cluster", help="preset name or YAML file")
    p.add_argument("--gpus", help="N, a range A:B (powers of two in between), or a list a,b,c")
    p.add_argument("--global-batch", type=positive_int, help="sequences per optimizer step (not tokens)")
    p.add_argument("--seq-len", type=positive_int, help="sequence length in tokens")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp8", "nvfp4", "fp32"),
                   help="compute precision of the GEMMs (nvfp4: Transformer Engine's NVFP4 recipe, Blackwell only)")
    p.add_argument("--tokens", type=tokens_arg,
                   help="tokens to train on (e.g. 15T; range > 0, <= 1e16); default 20 per parameter")
    p.add_argument("--price-per-gpu-hour", type=nonneg_float, help="cost per GPU-hour")
    p.add_argument("--top", type=int_range(1, 10_000), default=10,
                   help="layouts shown, each engine-confirmed (at least the best 10 are)")
    p.add_argument("--objective", choices=("time", "cost"), default="time", help="rank by time to train or by cost")
    p.add_argument("--rank-by", choices=("p50", "p90"), default="p50",
                   help="step-time quantile the ranking uses: the prediction (p50) or the upper end of its 80 %% "
                        "interval (p90, validation.plan_bands)")
    p.add_argument("--memory-headroom", default=DEFAULT_MEMORY_HEADROOM, metavar="GiB|PCT",
                   help="memory every recommended layout leaves free, in GiB (6) or percent of GPU memory (10%%); "
                        f"default {DEFAULT_MEMORY_HEADROOM.replace('%', '%%')}: the caching allocator's fragmentation "
                        "(GMLake, ASPLOS 2024: 9.2 GB average on 80 GB)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object")
    out.add_argument("--csv", action="store_true", help="print the ranked layouts as CSV")
    p.add_argument("--workers", type=int_range(1, 1024), default=1, help="processes for the sweep")
    p.add_argument("--dask-scheduler", metavar="ADDRESS", help="run the sweep on a dask.distributed cluster")
    p.add_argument("--calibration", help="calibration profile JSON (from `trainsim calibrate`)")
    add_precision_args(p)
    add_lora_args(p)
    add_optimizer_arg(p)
    add_data_parallel_args(p, layout=False)
    add_background_arg(p)
    add_pool_args(p)
    g = p.add_argument_group("constraints (pin a dimension of the search)")
    for dim in ("tp", "pp", "cp", "ep", "vpp"):
        g.add_argument(f"--{dim}", type=positive_int, help=f"search only {dim} = N")
    g.add_argument("--etp", type=positive_int, help="expert tensor parallelism of MoE layouts with tp > 1 (default: "
                                                    "both etp = tp and etp = 1 are searched)")
    g.add_argument("--micro-batch", type=positive_int, help="search only this micro-batch (sequences)")
    g.add_argument("--recompute", choices=("none", "selective", "full"), help="search only this recompute level")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="search only this ZeRO stage")
    g.add_argument("--dp-shard", type=int_range(1, 10_000_000), metavar="S",
                   help="search only ZeRO-3 shard groups of S ranks (1..dp, dividing dp; zero 3 with framework "
                        "pytorch-fsdp/torch: HSDP, deepspeed/deepspeed-2023: MiCS, its layouts without tp/pp/cp); by "
                        "default the FSDP frameworks' ZeRO-3 layouts try full sharding and every power of two from 2 "
                        "below dp, DeepSpeed's full sharding only")
    g.add_argument("--schedule", choices=get_args(Schedule), help="search only this pipeline schedule")
    g.add_argument("--max-tp", type=positive_int, help="largest TP searched (default: GPUs per node)")
    g.add_argument("--max-micro-batch", type=positive_int, default=16, help="largest micro-batch searched (default 16)")
    g.add_argument("--exhaustive", action="store_true",
                   help="also screen heavier recompute when a lighter one fits the same layout")
    f = p.add_argument_group("goodput (failures and checkpoints)")
    f.add_argument("--failure-rate-per-gpu-hour", type=float_range(0, 1),
                   default=gp.DEFAULT_FAILURE_RATE_PER_GPU_HOUR,
                   help="job-killing failures per GPU-hour (default: Llama 3's 419 in 54 days on 16,384 GPUs)")
    f.add_argument("--checkpoint-write-s", type=event_seconds,
                   help="seconds to write one checkpoint (default: full state / storage bandwidth)")
    f.add_argument("--storage-write-gbps", type=float_range(0, 1e9, lo_open=True), default=gp.DEFAULT_STORAGE_WRITE_BPS / 1e9,
                   help="aggregate checkpoint write bandwidth, GB/s (default 2000, Llama 3's Tectonic)")
    f.add_argument("--restart-s", type=event_seconds, default=gp.DEFAULT_RESTART_S,
                   help="seconds to restart after a failure (default 600)")
    p.set_defaults(func=run)


def _pin_dp_shard(fixed: dict[str, Any], extra: dict[str, Any], layout: dict[str, Any]) -> None:
    """The scenario file's HSDP / MiCS shard group pins the search as --dp-shard does; a pinned shard group needs
    what HSDP or MiCS needs (specs.data_parallel): ZeRO-3 (then pinned) with an FSDP or DeepSpeed framework."""
    if layout.get("dp_shard") is not None and "dp_shard" not in fixed:
        fixed["dp_shard"] = load_layout({"dp_shard": layout["dp_shard"]}).dp_shard
    if fixed.get("dp_shard") is None:
        return
    why = hsdp_refusal(fixed["dp_shard"], fixed.setdefault("zero", 3), extra.get("framework", "megatron"))
    if why is not None:
        raise SpecError("layout.dp_shard", why)


def _check_framework_code(fixed: dict[str, Any], extra: dict[str, Any], model) -> None:
    """Context / expert parallelism and MoE models the framework preset's code lacks (specs.framework_era):
    refused here, naming the field, rather than left to drop every candidate."""
    fw = extra.get("framework", "megatron")
    if fw not in FRAMEWORKS:
        return  # TrainingSpec refuses the name itself, listing the frameworks
    why = layout_refusal(fw, cp=fixed.get("cp", 1), ep=fixed.get("ep", 1), moe=model.is_moe,
                         cp_comm=extra.get("cp_comm") or default_cp_comm(fw))
    if why:
        raise SpecError(*why)


def _required(field: str, value, message: str):
    """``value``, or a SpecError naming ``field`` (``message`` says which flag gives it) where neither the flag nor
    the scenario file does."""
    if value is None:
        raise SpecError(field, message)
    return value


def _training_with_flags(args: argparse.Namespace, raw: dict) -> dict:
    """The scenario file's ``training`` mapping with the precision, LoRA and optimizer flags given on the command line."""
    training = raw.get("training") or {}
    if not isinstance(training, dict):
        raise SpecError("training", "must be a mapping")
    precision = {k: getattr(args, k, None) for k in ("grad_dtype", "master_weights", "dp_bucket_mb",
                                                     "overlap_grad_reduce", "mics_hierarchical_gather",
                                                     "distributed_optimizer_instances", *LORA_FLAGS)}
    precision["optimizer"] = getattr(args, "train_optimizer", None)
    return {**training, **{k: v for k, v in precision.items() if v is not None}}


def _batch_and_seq(args: argparse.Namespace, training: dict) -> tuple[int, int]:
    """(global batch, sequence length) from the flags, else the scenario file: positive integers."""
    global_batch = _required("training.global_batch", args.global_batch or training.get("global_batch"),
                             "no global batch given (use --global-batch N)")
    seq_len = _required("training.seq_len", args.seq_len or training.get("seq_len"),
                        "no sequence length given (use --seq-len N)")
    # read by TrainingSpec's own field rules, as predict reads them (a quoted "4096" is 4096; true is refused)
    spec = load_training({"global_batch": global_batch, "seq_len": seq_len})
    return spec.global_batch, spec.seq_len


def _pinned_dims(args: argparse.Namespace) -> dict[str, Any]:
    """The search dimensions the flags pin; a pinned vpp > 1 pins the interleaved schedule unless one is given."""
    fixed: dict[str, Any] = {}
    for dim in ("tp", "pp", "cp", "ep", "vpp", "etp", "micro_batch", "recompute", "zero", "schedule", "dp_shard"):
        v = getattr(args, dim, None)
        if v is not None:
            fixed[dim] = v
    if fixed.get("vpp", 1) > 1 and "schedule" not in fixed:
        fixed["schedule"] = "interleaved"
    return fixed


def _layout_pins(raw: dict, fixed: dict[str, Any], model) -> tuple[dict, Any, int | None]:
    """(the scenario file's layout mapping, its placement, its etp): the layout settings every candidate keeps;
    the mapping is checked as predict checks it (a negative or boolean pp is refused, not ignored) and an etp
    (file or --etp) on a dense model is refused."""
    layout = raw.get("layout") or {}
    if not isinstance(layout, dict):
        raise SpecError("layout", "must be a mapping")
    # Every value checked on its own, the searched dimensions included (not left unread); stage_layers, which
    # plan does not use, only against the file's own pp and vpp, so it is left to predict.
    checked = {k: load_layout({k: v}) for k, v in layout.items() if k != "stage_layers"}
    placement = checked["placement"].placement if layout.get("placement") is not None else None
    etp = checked["etp"].etp if layout.get("etp") is not None else None
    if etp is not None and not model.is_moe:
        raise SpecError("layout.etp", f"etp={etp} but {model.name} is a dense model (num_experts=1)")
    if "etp" in fixed and not model.is_moe:
        raise SpecError("etp", f"--etp {fixed['etp']} but {model.name} is a dense model (num_experts=1)")
    return layout, placement, etp


def _searched_training(training: dict) -> dict[str, Any]:
    """The scenario file's training settings plan searches (micro_batch, recompute, sequence_parallel, zero,
    schedule), each read as predict reads it with the file's framework and dtype (a misspelt value is refused,
    not silently replaced by the search)."""
    stack = {k: training[k] for k in ("framework", "dtype") if training.get(k) is not None}
    return {key: getattr(load_training({**stack, key: training[key]}), key)
            for key in ("micro_batch", "recompute", "sequence_parallel", "zero", "schedule")
            if training.get(key) is not None}


def _note_searched(layout: dict, training: dict, fixed: dict[str, Any]) -> None:
    """A ``note:`` on stderr naming the scenario file's layout and training settings that plan searches instead
    of keeping (a flag pins one; dp follows from the GPU count and the other degrees)."""
    pins = {"micro_batch": "--micro-batch", "sequence_parallel": None, "dp": None}
    given = [("layout", k, layout.get(k)) for k in ("tp", "pp", "dp", "cp", "ep", "vpp")] + \
            [("training", k, training.get(k)) for k in ("micro_batch", "recompute", "zero", "schedule",
                                                         "sequence_parallel")]
    # plan runs sequence parallelism wherever tp > 1: only a file's `false` is not kept; dp is kept where the
    # flags pin tp, pp and cp (the GPU count then decides it)
    dp_fixed = all(k in fixed for k in ("tp", "pp", "cp"))
    searched = [(part, k, v) for part, k, v in given
                if v is not None and k not in fixed and not (k == "sequence_parallel" and v)
                and not (k == "dp" and dp_fixed)]
    if not searched:
        return
    names = ", ".join(f"{part}.{k}={str(v).lower() if isinstance(v, bool) else v}" for part, k, v in searched)
    flags = " ".join(f"{pins.get(k, '--' + k)} {v}" for _, k, v in searched if pins.get(k, "") is not None)
    print(f"note: plan searches {names} of the scenario file instead of keeping "
          f"{'it' if len(searched) == 1 else 'them'}" + (f" (pin with {flags})" if flags else ""), file=sys.stderr)


def request_from_args(args: argparse.Namespace):
    """A PlanRequest from the flags (and the scenario file, if given)."""
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.simulator.planner import PlanRequest

    raw = load_scenario_file(args.scenario) if args.scenario else {}
    training = _training_with_flags(args, raw)
    model_in = _required("model", args.model or raw.get("model"),
                         "no model given (use --model NAME|PATH or a scenario file)")
    model = load_model(model_in)  # before the cluster, as predict does: `--model x` alone lists the presets
    cluster_in = _required("cluster", args.cluster or raw.get("cluster"),
                           "no cluster given (use --cluster NAME|PATH or a scenario file)")
    cluster = _plan_cluster(args, cluster_in)
    gpus_text = args.gpus if args.gpus is not None else raw.get("gpus")
    if gpus_text is None:  # as predict reads a scenario without gpus: the cluster's own size
        gpus_text = cluster.num_gpus
        if cluster.pools is None:
            print(f"note: no GPU count given: plan searches the cluster's {cluster.num_gpus} GPUs "
                  "(--gpus N or --gpus A:B searches others)", file=sys.stderr)
    if isinstance(gpus_text, (bool, int, float)):  # a file's number, read as predict reads it (16.0 is 16)
        gpus_text = gpu_count(gpus_text)
    counts = parse_gpus(str(gpus_text), cluster.gpus_per_node, from_file=args.gpus is None)
    check_pool_plan(cluster, counts, args.placement)
    global_batch, seq_len = _batch_and_seq(args, training)
    fixed = _pinned_dims(args)
    dtype = _plan_dtype(args, training, cluster)
    # Every training setting of the scenario file the search does not decide (framework, flash attention,
    # dropout, offload, optimizer bytes, TP overlap, CP exchange, ...) applies to each candidate as given.
    extra = training_extra(training)
    searched = _searched_training(training)
    if (extra.get("offload_params") or extra.get("float8_all_gather")) and "zero" not in fixed:
        # parameters must be sharded to be offloaded, or gathered in float8 by FSDP: ZeRO 3, unless the file
        # states its stage (then checked as given, as predict checks it)
        fixed["zero"] = searched.get("zero", 3)
    # --zero with the distributed optimizer is checked as given (zero 0 contradicts it: refused).
    why = zero_conflict(fixed.get("zero", training.get("zero")), training)
    if why:
        raise SpecError("training.zero", why)
    zero = fixed.get("zero", 1 if extra.get("distributed_optimizer") else 0)
    _check_framework_code(fixed, extra, model)
    check_training_extra(extra, seq_len=seq_len, global_batch=global_batch, zero=zero, dtype=dtype,
                         **{k: fixed[k] for k in ("schedule", "recompute") if k in fixed})  # pinned ones checked too
    layout, placement, etp = _layout_pins(raw, fixed, model)
    _pin_dp_shard(fixed, extra, layout)
    if layout.get("stage_layers") is not None:
        print("note: layout.stage_layers is not searched: plan splits each candidate's layers itself (evenly, or "
              "Megatron-Core's balanced first/last split where none divides); `trainsim predict` costs the file's "
              "split", file=sys.stderr)
    _note_searched(layout, training, fixed)
    limits = SearchLimits(max_tp=args.max_tp, max_micro_batch=args.max_micro_batch, dtype=dtype, fixed=fixed,
                          training_extra=extra, placement=placement, etp=etp, pool_placement=args.placement)
    if args.storage_write_gbps <= 0:
        raise SpecError("storage_write_gbps", "must be positive")
    return PlanRequest(
        model=model, cluster=cluster, gpu_counts=counts, global_batch=global_batch, seq_len=seq_len,
        tokens=args.tokens, price_per_gpu_hour=args.price_per_gpu_hour, top_k=args.top, limits=limits,
        objective=args.objective, prune_dominated=not args.exhaustive,
        failure_rate_per_gpu_hour=args.failure_rate_per_gpu_hour, checkpoint_write_s=args.checkpoint_write_s,
        storage_write_Bps=args.storage_write_gbps * 1e9, restart_s=args.restart_s, profile_path=args.calibration,
        memory_headroom=_checked_headroom(args.memory_headroom, min(
            [cluster.gpu.memory_bytes] + [p.gpu.memory_bytes for p in (cluster.pools or ()) if p.gpu is not None])),
    )


def _plan_dtype(args: argparse.Namespace, training: dict, cluster) -> str:
    """The plan's dtype (--dtype, else the scenario file's, else bf16); fp8 needs FP8 tensor cores."""
    dtype = args.dtype or training.get("dtype", "bf16")
    if (why := dtype_refusal(cluster.gpu, dtype)) is not None:
        raise SpecError("training.dtype", why)
    return dtype


def _plan_cluster(args: argparse.Namespace, cluster_in):
    """The cluster to plan on: the preset or file, with --pool's pools and --background-load's traffic."""
    cluster = load_cluster(cluster_in)
    if args.pool:
        cluster = load_cluster({**cluster.model_dump(), "pools": args.pool})
    if args.background_load is not None:
        cluster = with_background_load(cluster, args.background_load)
    return cluster


def check_pool_plan(cluster, counts: tuple[int, ...], placement: str | None) -> None:
    """A plan on GPU pools runs on exactly the pools' GPUs; --placement needs pools."""
    if cluster.pools is None:
        if placement is not None:
            raise SpecError("cluster.placement", f"--placement {placement} places work on pools; give --pool")
        return
    if counts != (cluster.num_gpus,):
        raise SpecError("gpus", f"the pools hold {cluster.num_gpus} GPUs; a plan on them uses exactly that many, "
                                f"got {', '.join(map(str, counts))}")


def _checked_headroom(text: str, gpu_bytes: float) -> str:
    """The --memory-headroom text, validated while the request is built (SpecError naming the field), so that a
    bad value -- or one that leaves no memory on the cluster's smallest GPU -- is refused before the search starts."""
    parse_headroom(text)
    if headroom_bytes(str(text), gpu_bytes) >= gpu_bytes:
        raise SpecError("memory_headroom", f"{text} leaves no memory on a {gpu_bytes / 2**30:.1f} GiB GPU")
    return str(text)


@contextlib.contextmanager
def make_executor(workers: int, dask_scheduler: str | None) -> Iterator[Any]:
    """None (inline), a process pool, or a dask.distributed client's concurrent.futures executor."""
    if dask_scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise SpecError("dask_scheduler", "dask.distributed is not installed (pip install 'trainsim[dask]')") from None
        try:
            client = Client(dask_scheduler, timeout=15)
        except (OSError, TimeoutError, ValueError) as e:
            raise SpecError("dask_scheduler", f"cannot connect to {dask_scheduler}: {type(e).__name__}: {e}") from None
        try:
            yield client.get_executor()
        finally:
            client.close()
    elif workers > 1:
        import multiprocessing as mp  # on use: every trainsim command imports this module to build its parser
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
            yield ex
    else:
        yield None


@contextlib.contextmanager
def rich_progress(enabled: bool) -> Iterator[Any]:
    """A progress callback drawing rich bars on stderr (None when disabled or when stderr is not a terminal)."""
    if not enabled:
        yield None
        return
    # slow import (0.4-4 s), loaded on use
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from trainsim.reports.console import text_console

    console = text_console(stderr=True)
    if not console.is_terminal:  # bars are for a person watching; a log or a pipe gets the result alone
        yield None
        return
    labels = {"screen": "screening layouts (closed form, chunks)", "engine": "confirming top layouts (engine)"}
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as prog:
        tasks: dict[str, int] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = prog.add_task(labels.get(phase, phase), total=total)
            prog.update(tasks[phase], completed=done, total=total)

        try:
            yield update
        except BaseException:
            prog.live.transient = True  # a refusal's one line stands alone on stderr: the bars are erased
            raise


def print_table(result, file=None) -> None:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from rich.table import Table

    from trainsim.reports.console import styled, text_console
    from trainsim.reports.tables import LAYOUT_COLUMNS, fmt_count, fmt_money, fmt_si, fmt_time, layout_table

    req = result.request
    file = file or sys.stdout
    probe = text_console(file=file)
    console = text_console(file=file, width=probe.width if probe.is_terminal else 200)
    c = result.counts
    console.print(styled(
        (req.model.name, "bold"), f" on {req.cluster.name}, GPUs {', '.join(map(str, req.gpu_counts))}; "
        f"global batch {req.global_batch} x {req.seq_len} tokens; training on {fmt_count(req.train_tokens)} tokens"))
    shared = req.cluster.scale_out.background_load.sentence()
    if shared:
        console.print(shared, highlight=False)
    if req.cluster.pools:
        console.print("pools: " + "; ".join(f"{i} = {p.name} ({p.nodes} nodes of {p.gpu.name})"
                                            for i, p in enumerate(req.cluster.pools))
                      + " -- '@pools stages I,J' puts pipeline stages on the pools in that order, '@pools dp' whole "
                        "replicas on each; peak and free memory are the pool's with the least left",
                      highlight=False)
    console.print(
        f"layouts: {c['enumerated']} enumerated, {c['invalid']} invalid, {c['oom']} out of memory"
        + (f" ({c['host_oom']} of them offload beyond a node's host memory, "
           f"{req.cluster.host_memory_bytes / 1e9:.0f} GB)" if c.get("host_oom") else "") + ", "
        f"{c.get('over_headroom', 0)} within memory but over the {req.memory_headroom} headroom "
        f"(limit {req.memory_limit_bytes / 2**30:.1f} GiB), "
        f"{c['dominated']} dominated (heavier recompute than needed), {c['screened']} screened, "
        f"{c['confirmed']} confirmed by the engine; {result.wall_s:.1f} s")
    rows = [r.to_json() for r in result.rows if r.fits]
    if not rows:
        why = (f"fits in memory with {req.memory_headroom} headroom" if c["oom"] or c.get("over_headroom")
               else "is valid for these constraints")
        console.print(f"no layout {why}", style="red")
        if result.refused:
            r = result.refused
            console.print(f"{c['invalid']} layouts refused; the most common reason ({r['layouts']} of them, the "
                          f"first {r['first']}): {r['field']}: {r['reason']}")
        return
    t = Table(title=f"Top {len(rows)} layouts (ranked by {'cost' if req.objective == 'cost' else 'time to train'})",
              caption="sp: sequence parallelism (--sequence-parallel); recomp: activation recompute; sched: pipeline "
                      "schedule (intl = interleaved); free: memory headroom; src: engine = discrete-event engine, "
                      "cf = closed form", padding=(0, 1))
    for col in LAYOUT_COLUMNS:
        t.add_column(col, justify="left" if col in ("layout", "recomp", "sched", "src") else "right",
                     no_wrap=col == "layout")
    for row in layout_table(rows):
        t.add_row(*row)
    console.print(t)
    notes: dict[str, list[int]] = {}
    for i, r in enumerate(rows, 1):
        for w in r.get("warnings") or ():
            notes.setdefault(w, []).append(i)
    for w, ranks in notes.items():
        console.print(f"note ({', '.join(f'#{i}' for i in ranks)}): {w}")
    pt = Table(title="Pareto front: GPUs vs time to train vs cost")
    for col in ("GPUs", "layout", "tokens/s", "MFU", "time to train", "GPU-hours", "cost"):
        pt.add_column(col, justify="left" if col == "layout" else "right")
    for r in result.pareto:
        d = r.to_json()
        pt.add_row(str(d["gpus"]), r.candidate.label(), fmt_si(d["tokens_per_s"]), f"{100 * d['mfu']:.1f}%",
                   fmt_time(d["time_to_train_s"]), fmt_si(d["gpu_hours"]), fmt_money(d["cost"]))
    console.print(pt)
    best = result.rows[0]
    mtbf = gp.job_mtbf_s(best.candidate.gpus, req.failure_rate_per_gpu_hour)
    console.print(f"best layout on {best.candidate.gpus} GPUs: a failure every {fmt_time(mtbf)} on average; checkpoint "
                  f"every {fmt_time(best.checkpoint_interval_s)} of compute (Daly's optimum; write time "
                  f"{fmt_time(result.checkpoint_s)}), goodput {100 * best.goodput:.1f}%, "
                  f"{fmt_time(best.ideal_time_s)} failure-free -> {fmt_time(best.time_to_train_s)} expected.")
    console.print(f"time to train includes failures ({gp.FAILURE_RATE_SOURCE}; "
                  f"{req.failure_rate_per_gpu_hour:.3g}/GPU-hour), checkpoint write and restart "
                  f"({req.restart_s:.0f} s) with Daly's optimal checkpoint interval.", style="dim")


def write_csv(result, file=None) -> None:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.reports.tables import CSV_FIELDS

    file = file or sys.stdout
    pareto = {r.candidate.key() for r in result.pareto}
    w = csv.DictWriter(file, fieldnames=list(CSV_FIELDS), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for i, r in enumerate(result.rows, 1):
        d = r.to_json()
        d["rank"] = i
        d["pareto"] = r.candidate.key() in pareto
        d["stage_layers"] = " ".join(map(str, d["stage_layers"])) if d.get("stage_layers") else ""
        w.writerow(d)


def run(args: argparse.Namespace) -> int:
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.simulator.planner import plan

    req = request_from_args(args)
    quiet = args.json or args.csv
    with make_executor(args.workers, args.dask_scheduler) as ex, rich_progress(not quiet) as progress:
        result = plan(req, executor=ex, progress=progress)
    # the engine loads on use: `trainsim` imports every subcommand's module to build its parser
    from trainsim.simulator.planner import plan_profile
    from trainsim.validation import plan_bands
    ivs = plan_bands.rank(result, args.rank_by, plan_profile(req.profile_path))  # the plan's (same memo scope)
    warn_beyond_published(max(req.gpu_counts), req.global_batch, req.seq_len)  # after any refusal
    if args.json:
        out = result.to_json()
        out["rank_by"] = args.rank_by
        out["rows"] = [plan_bands.row_json(d, ivs.get(r.candidate.key())) for d, r in zip(out["rows"], result.rows)]
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.csv:
        write_csv(result)
    else:
        print_table(result)
        best = result.rows[0] if result.rows else None
        iv = ivs.get(best.candidate.key()) if best is not None else None
        if iv is not None:
            print(f"ranked by {args.rank_by}; best layout's step time {best.step_time_s:.4g} s, 80 % interval "
                  f"{iv.step_time_s[0]:.4g} .. {iv.step_time_s[1]:.4g} s ({iv.basis})")
            for why in iv.reasons:
                print(f"  note: {why}")
    return 0
